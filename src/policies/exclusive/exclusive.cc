// SPDX-License-Identifier: Apache-2.0
#include "policies/exclusive/exclusive.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "policies/gpu_groups.h"

namespace gpuos::policies {
namespace {

bool active(const slots::GateTenant& t) { return (t.busy || t.waiting) && !t.pinned; }
uint64_t gpus_of(const slots::GateTenant& t) { return gpus_or_all(t.gpus); }

}  // namespace

void ExclusivePolicy::on_exit(uint32_t tenant_id) {
  for (Turn& turn : turns_) {
    if (turn.holder != tenant_id) continue;
    turn.last_holder = tenant_id;
    turn.holder = 0;
  }
}

slots::GateActions ExclusivePolicy::decide(const slots::GateView& view) {
  const auto& ts = view.tenants;  // in id order
  // The active tenants in groups that share a GPU, directly or through others.
  std::vector<const slots::GateTenant*> active_tenants;
  for (const slots::GateTenant& t : ts) {
    if (active(t)) active_tenants.push_back(&t);
  }
  const auto groups = gpu_groups(active_tenants);
  // Each group goes on with the turn its holder had (groups merge and split as tenants come and go),
  // or after the holder of a turn on its GPUs that went idle.
  std::vector<Turn> turns;
  uint64_t next_tick = 0;
  for (const auto& [gpus, members] : groups) {
    Turn turn;
    turn.last_holder = last_holder_;
    bool found = false;
    for (const Turn& old : turns_) {  // (groups that merged: the first one's turn goes on)
      if (!found && std::any_of(members.begin(), members.end(), [&](auto* m) { return m->id == old.holder; })) {
        turn = old;
        found = true;
      }
    }
    for (const Turn& old : turns_) {
      if (found || (old.gpus & gpus) == 0) continue;
      turn.last_holder = old.holder != 0 ? old.holder : old.last_holder;
      found = true;
    }
    turn.gpus = gpus;
    if (turn.holder != 0 && members.size() > 1 && view.now_ns >= turn.hold_until_ns) {
      turn.last_holder = turn.holder;
      turn.holder = 0;
    }
    if (turn.holder == 0) {
      // The next active tenant after the last holder, wrapping.
      auto next = std::find_if(members.begin(), members.end(), [&](auto* m) { return m->id > turn.last_holder; });
      turn.holder = (next != members.end() ? *next : members.front())->id;
      turn.hold_until_ns = view.now_ns + max_hold_ns_;
    }
    if (members.size() > 1) next_tick = next_tick == 0 ? turn.hold_until_ns : std::min(next_tick, turn.hold_until_ns);
    turns.push_back(turn);
  }
  for (const Turn& old : turns_) {  // a group gone idle: the next turn starts after its holder
    if (std::none_of(turns.begin(), turns.end(), [&](const Turn& t) { return (t.gpus & old.gpus) != 0; })) {
      last_holder_ = old.holder != 0 ? old.holder : old.last_holder;
    }
  }
  turns_ = std::move(turns);
  slots::GateActions out;
  for (const slots::GateTenant& t : ts) {
    const bool held = std::any_of(turns_.begin(), turns_.end(), [&](const Turn& turn) {
      return turn.holder != t.id && (turn.gpus & gpus_of(t)) != 0;
    });
    const uint32_t gate = held ? GPUOS_GATE_CLOSED : GPUOS_GATE_OPEN;
    if (gate != t.gate) out.gates.push_back({t.id, gate, 0, {}});
  }
  out.next_tick_ns = next_tick;
  return out;
}

namespace {
// Its one setting, [policy.exclusive] max_hold_ms.
bool parse_max_hold_ms(const ConfigSection& section, uint32_t* ms, std::string* error) {
  *ms = 100;
  return section.get_uint("max_hold_ms", 1, 60000, ms, error) && section.all_read(error);
}

std::unique_ptr<slots::TimeGate> make_exclusive(const PolicyContext& ctx, std::string* error) {
  uint32_t ms = 0;
  if (!parse_max_hold_ms(ctx.section, &ms, error)) return nullptr;
  return std::make_unique<ExclusivePolicy>(uint64_t{ms} * 1'000'000);
}

constexpr KeyDoc kExclusiveKeys[] = {
    {"max_hold_ms", "The holder passes the GPU on after this long while others are active (1..60000 ms)"},
};

std::string exclusive_settings(const ConfigSection& section) {
  uint32_t ms = 0;
  std::string unused;
  parse_max_hold_ms(section, &ms, &unused);
  return "max_hold_ms = " + std::to_string(ms) + "\n";
}
}  // namespace

const PolicyEntry kExclusivePolicy{"exclusive", SlotKind::kTimeGate,
                                   "one tenant at a time has the GPU, in turn (the example policy)", &make_exclusive,
                                   nullptr, nullptr, &exclusive_settings, kExclusiveKeys};

}  // namespace gpuos::policies
