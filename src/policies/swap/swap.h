// SPDX-License-Identifier: Apache-2.0
// The `swap` memory policy (memory oversubscription by swapping to host): planner.h's rules.
#pragma once

#include <cstdint>
#include <string>

#include "policies/registry.h"
#include "policies/swap/planner.h"

namespace gpuos::policies {

// [policy.swap]: how KV pools (include/gpuos/kv.h) give memory back before anyone is swapped.
struct SwapSettings {
  kv::KvRule kv_rule = kv::KvRule::kFair;  // kv_rule: "fair" | "priority" | "queue"
  uint32_t kv_deadline_ms = 1000;          // a donor's time to meet its target (10..600000)
  uint32_t kv_hold_ms = 5000;              // a target stays this long before it rises (0..3600000)
};
// False with *error (file, line, table, key) for a bad or unknown key; *out untouched then.
bool parse_swap_settings(const ConfigSection& section, SwapSettings* out, std::string* error);

class SwapPolicy final : public slots::MemoryPolicy {
 public:
  SwapPolicy() = default;
  explicit SwapPolicy(const SwapSettings& settings) : settings_(settings) {}
  const char* name() const override { return "swap"; }
  slots::MemoryActions decide(const slots::MemoryView& view) override {
    // The hold is this policy's setting, not the core's: it overrides the view's.
    slots::SwapParams params = view.params;
    params.kv_hold_ns = uint64_t{settings_.kv_hold_ms} * 1'000'000;
    return {swap::plan_swaps(view.tenants, params, view.now_ns, {settings_.kv_rule, settings_.kv_deadline_ms})};
  }
  // The deadline the daemon gives a donor (also in every kSetKvTarget action).
  uint32_t kv_deadline_ms() const { return settings_.kv_deadline_ms; }
  const SwapSettings& settings() const { return settings_; }

 private:
  SwapSettings settings_;
};

extern const PolicyEntry kSwapPolicy;

}  // namespace gpuos::policies
