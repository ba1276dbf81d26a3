#include "policies/exclusive/exclusive.h"

#include <algorithm>
#include <memory>
#include <string>

namespace gpuos::policies {
namespace {

bool active(const slots::GateTenant& t) { return (t.busy || t.waiting) && !t.pinned; }

}  // namespace

void ExclusivePolicy::on_exit(uint32_t tenant_id) {
  if (holder_ == tenant_id) holder_ = 0;
}

slots::GateActions ExclusivePolicy::decide(const slots::GateView& view) {
  const auto& ts = view.tenants;  // in id order
  auto is_active = [&](uint32_t id) {
    return std::any_of(ts.begin(), ts.end(), [&](const slots::GateTenant& t) { return t.id == id && active(t); });
  };
  const std::size_t n_active = static_cast<std::size_t>(std::count_if(ts.begin(), ts.end(), active));
  if (holder_ != 0 && (!is_active(holder_) || (n_active > 1 && view.now_ns >= hold_until_ns_))) {
    last_holder_ = holder_;
    holder_ = 0;
  }
  if (holder_ == 0 && n_active > 0) {
    // The next active tenant after the last holder, wrapping.
    auto next = std::find_if(ts.begin(), ts.end(), [&](const slots::GateTenant& t) { return t.id > last_holder_ && active(t); });
    if (next == ts.end()) next = std::find_if(ts.begin(), ts.end(), active);
    holder_ = next->id;
    hold_until_ns_ = view.now_ns + max_hold_ns_;
  }
  slots::GateActions out;
  for (const slots::GateTenant& t : ts) {
    const uint32_t gate = holder_ == 0 || t.id == holder_ ? GPUOS_GATE_OPEN : GPUOS_GATE_CLOSED;
    if (gate != t.gate) out.gates.push_back({t.id, gate, {}});
  }
  if (holder_ != 0 && n_active > 1) out.next_tick_ns = hold_until_ns_;
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

std::string exclusive_settings(const ConfigSection& section) {
  uint32_t ms = 0;
  std::string unused;
  parse_max_hold_ms(section, &ms, &unused);
  return "max_hold_ms = " + std::to_string(ms) + "\n";
}
}  // namespace

const PolicyEntry kExclusivePolicy{"exclusive", SlotKind::kTimeGate,
                                   "one tenant at a time has the GPU, in turn (the example policy)", &make_exclusive,
                                   nullptr, nullptr, &exclusive_settings};

}  // namespace gpuos::policies
