// SPDX-License-Identifier: Apache-2.0
#include "policies/swap/swap.h"

#include <memory>

namespace gpuos::policies {

bool parse_swap_settings(const ConfigSection& sec, SwapSettings* out, std::string* error) {
  // Its other settings are [memory]'s (swap_quantum_ms, swap_headroom).
  SwapSettings s;
  std::string rule = kv::kv_rule_name(s.kv_rule);
  if (!sec.get_string("kv_rule", &rule, error) || !sec.get_uint("kv_deadline_ms", 10, 600000, &s.kv_deadline_ms, error) ||
      !sec.get_uint("kv_hold_ms", 0, 3600000, &s.kv_hold_ms, error) || !sec.all_read(error)) {
    return false;
  }
  if (auto r = kv::parse_kv_rule(rule)) {
    s.kv_rule = *r;
  } else {
    *error = ConfigSection::error_at("kv_rule", *sec.find("kv_rule"),
                                     "\"" + rule + "\" is not a rule (known: fair, priority, queue)");
    return false;
  }
  *out = s;
  return true;
}

namespace {

std::unique_ptr<slots::MemoryPolicy> make_swap(const PolicyContext& ctx, std::string* error) {
  SwapSettings s;
  if (!parse_swap_settings(ctx.section, &s, error)) return nullptr;
  return std::make_unique<SwapPolicy>(s);
}

// What parse_swap_settings reads, in its order.
constexpr KeyDoc kSwapKeys[] = {
    {"kv_rule", "Which KV pools shrink first: \"fair\" (largest), \"priority\" (best-effort) or \"queue\""},
    {"kv_deadline_ms", "An engine's time to meet its target; then the rest is swapped out (10..600000)"},
    {"kv_hold_ms", "A target stays this long before it rises again or is lifted (0..3600000)"},
};

std::string swap_settings(const ConfigSection& section) {
  SwapSettings s;
  std::string unused;
  parse_swap_settings(section, &s, &unused);
  return std::string("kv_rule = \"") + kv::kv_rule_name(s.kv_rule) + "\"\nkv_deadline_ms = " +
         std::to_string(s.kv_deadline_ms) + "\nkv_hold_ms = " + std::to_string(s.kv_hold_ms) + "\n";
}

}  // namespace

const PolicyEntry kSwapPolicy{"swap", SlotKind::kMemory,
                              "idle or best-effort tenants swap out to host memory to make room for others; KV "
                              "pools shrink to targets first",
                              nullptr, nullptr, &make_swap, &swap_settings, kSwapKeys};

}  // namespace gpuos::policies
