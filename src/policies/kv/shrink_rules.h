// SPDX-License-Identifier: Apache-2.0
// KV pools (include/gpuos/kv.h): which tenants give memory back by shrinking their KV pools, and
// down to what, when another tenant on their GPU needs room. Pure decision code: the swap policy
// (swap/planner.h) turns the result into targets (SwapAction::kSetKvTarget), before any swap.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "slots/memory.h"

namespace gpuos::policies::kv {

using slots::SwapTenant;

// How the bytes a requester needs are spread over the donors ([policy.swap] kv_rule).
enum class KvRule {
  kFair,      // "fair": max-min; the largest pools shrink first, levelled down toward equal sizes
  kPriority,  // "priority": best-effort donors first, then lower --priority, then larger pools
  kQueue,     // "queue": pages go where they cut queueing most: the donors with the shortest
              // engine queue per GiB of pool give first (idle ones first), then larger pools
};

// "fair", "priority", "queue".
const char* kv_rule_name(KvRule rule);
// The rule of that name; nullopt for anything else (case matters, as everywhere in the config).
std::optional<KvRule> parse_kv_rule(std::string_view name);

// A donor's new target: its pools' resident bytes should come down to target_bytes.
struct KvTarget {
  uint32_t tenant_id = 0;
  uint64_t target_bytes = 0;
  bool operator==(const KvTarget&) const = default;
};

// What `t` can give back from its KV pools: memory within a tenant's guarantee is never taken, so
// with a quota (guaranteed_bytes > 0) only its KV bytes beyond that guarantee, min(kv_bytes,
// resident_bytes - guaranteed_bytes) (0 when it holds no more than its guarantee); with no quota,
// all its kv_bytes.
uint64_t kv_givable_bytes(const SwapTenant& t);

// Could `d` give KV memory to `for_whom`? Not itself, the same GPU, KV bytes it can give, no swap
// command pending, resident; and a guaranteed tenant never gives to a best-effort one.
bool kv_can_give(const SwapTenant& d, const SwapTenant& for_whom);

// The donors that should shrink so that `for_whom` gets `need_bytes`, and their targets: together
// they give need_bytes if they can, else all they can. A target is never below kv_bytes - what the
// donor can give, and only donors that give something are listed (in the order the rule took
// them). Targets are bytes; the engine rounds to its pages and chunks.
std::vector<KvTarget> plan_kv_shrink(const std::vector<SwapTenant>& tenants, const SwapTenant& for_whom,
                                     uint64_t need_bytes, KvRule rule);

}  // namespace gpuos::policies::kv
