// SPDX-License-Identifier: Apache-2.0
#include "policies/registry.h"

#include <iterator>
#include <type_traits>

#include "policies/budget/budget.h"
#include "policies/builtin/builtin.h"
#include "policies/exclusive/exclusive.h"
#include "policies/partition/partition.h"
#include "policies/priority/priority.h"
#include "policies/swap/swap.h"

namespace gpuos::policies {
namespace {

// The one list of the policies gpuos has.
constexpr const PolicyEntry* kPolicies[] = {
    &kOpenPolicy,      &kPriorityPolicy, &kBudgetPolicy, &kExclusivePolicy,  // time gate
    &kPartitionPolicy, &kUnconfinedPolicy,                    // space
    &kSwapPolicy,      &kResidentPolicy,                      // memory
};

template <typename P>
bool build(const Config& config, const std::string& chosen, SlotKind slot, std::unique_ptr<P>* out,
           std::string* error) {
  const PolicyEntry* e = find_policy(chosen);
  const char* table = slot == SlotKind::kTimeGate ? "scheduler" : slot == SlotKind::kSpace ? "spatial" : "memory";
  if (e == nullptr || e->slot != slot) {
    *error = (config.source.empty() ? std::string("config") : config.source) + ": [" + table + "] policy: \"" +
             chosen + "\" is not a " + slot_name(slot) + " policy (known: " + policy_names(slot) + ")";
    return false;
  }
  ConfigSection empty;
  empty.name = e->name;
  const ConfigSection* sec = config.section(e->name);
  PolicyContext ctx{sec != nullptr ? *sec : empty};
  if constexpr (std::is_same_v<P, slots::TimeGate>) {
    *out = e->make_time_gate(ctx, error);
  } else if constexpr (std::is_same_v<P, slots::SpacePolicy>) {
    *out = e->make_space(ctx, error);
  } else {
    *out = e->make_memory(ctx, error);
  }
  return *out != nullptr;
}

// Every section's policy exists, and its section is right (built and dropped).
bool check_sections(const Config& config, std::string* error) {
  for (const ConfigSection& sec : config.policy_sections) {
    const PolicyEntry* e = find_policy(sec.name);
    if (e == nullptr) {
      const std::string where = sec.entries.empty() ? config.source : sec.entries.front().second.where;
      *error = where + ": [policy." + sec.name + "]: no such policy (known: " + policy_names(SlotKind::kTimeGate) +
               ", " + policy_names(SlotKind::kSpace) + ", " + policy_names(SlotKind::kMemory) + ")";
      return false;
    }
    PolicyContext ctx{sec};
    bool ok = e->make_time_gate ? e->make_time_gate(ctx, error) != nullptr
              : e->make_space   ? e->make_space(ctx, error) != nullptr
                                : e->make_memory(ctx, error) != nullptr;
    if (!ok) return false;
  }
  return true;
}

}  // namespace

const char* slot_name(SlotKind slot) {
  switch (slot) {
    case SlotKind::kTimeGate: return "time gate";
    case SlotKind::kSpace: return "space";
    case SlotKind::kMemory: return "memory";
  }
  return "?";
}

std::span<const PolicyEntry* const> all_policies() { return kPolicies; }

const PolicyEntry* find_policy(std::string_view name) {
  for (const PolicyEntry* e : kPolicies) {
    if (name == e->name) return e;
  }
  return nullptr;
}

std::string policy_names(SlotKind slot) {
  std::string out;
  for (const PolicyEntry* e : kPolicies) {
    if (e->slot == slot) out += (out.empty() ? "" : ", ") + std::string(e->name);
  }
  return out;
}

std::string not_a_policy(SlotKind slot, std::string_view name) {
  const PolicyEntry* e = find_policy(name);
  if (e != nullptr && e->slot == slot) return "";
  return "\"" + std::string(name) + "\" is not a " + slot_name(slot) + " policy (known: " + policy_names(slot) + ")";
}

bool make_policies(const Config& config, PolicySet* out, std::string* error) {
  PolicySet set;
  if (!check_sections(config, error) ||
      !build(config, config.policies.time_gate, SlotKind::kTimeGate, &set.time_gate, error) ||
      !build(config, config.policies.space, SlotKind::kSpace, &set.space, error) ||
      !build(config, config.policies.memory, SlotKind::kMemory, &set.memory, error)) {
    return false;
  }
  *out = std::move(set);
  return true;
}

std::string format_policy_settings(const Config& config) {
  std::string out;
  for (const PolicyEntry* e : kPolicies) {
    if (e->settings == nullptr) continue;
    ConfigSection empty;
    empty.name = e->name;
    const ConfigSection* sec = config.section(e->name);
    out += "[policy." + std::string(e->name) + "]\n" + e->settings(sec != nullptr ? *sec : empty);
  }
  return out;
}

bool check_policy_config(const Config& config, std::string* error) {
  PolicySet unused;
  return make_policies(config, &unused, error);
}

bool check_startup_config(const Config& config, HostConfig* host, PolicySet* policies, std::string* error) {
  return resolve_host_config(config, host, error) && make_policies(config, policies, error);
}

}  // namespace gpuos::policies
