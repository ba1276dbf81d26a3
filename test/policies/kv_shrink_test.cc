// SPDX-License-Identifier: Apache-2.0
// KV pools: which donors shrink, and down to what, under each rule (plan_kv_shrink).
#include "policies/kv/shrink_rules.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace gpuos::policies::kv {
namespace {

constexpr uint64_t GiB = 1ull << 30;

// A resident tenant on GPU 0 whose KV pools hold `kv` of its `resident` bytes; no quota.
SwapTenant kv_tenant(uint32_t id, uint64_t kv, uint64_t resident = 0, bool guaranteed = false) {
  SwapTenant t;
  t.id = id;
  t.guaranteed = guaranteed;
  t.kv_bytes = kv;
  t.resident_bytes = resident != 0 ? resident : kv;
  t.movable_bytes = t.resident_bytes;
  return t;
}

SwapTenant requester(uint32_t id, bool guaranteed = false) { return kv_tenant(id, 0, 10 * GiB, guaranteed); }

uint64_t given(const std::vector<SwapTenant>& tenants, const std::vector<KvTarget>& targets) {
  uint64_t sum = 0;
  for (const KvTarget& k : targets) {
    for (const SwapTenant& t : tenants) {
      if (t.id == k.tenant_id) sum += t.kv_bytes - k.target_bytes;
    }
  }
  return sum;
}

TEST(KvRule, NamesParseAndFormat) {
  for (KvRule r : {KvRule::kFair, KvRule::kPriority, KvRule::kQueue}) EXPECT_EQ(parse_kv_rule(kv_rule_name(r)), r);
  EXPECT_STREQ(kv_rule_name(KvRule::kFair), "fair");
  EXPECT_STREQ(kv_rule_name(KvRule::kPriority), "priority");
  EXPECT_STREQ(kv_rule_name(KvRule::kQueue), "queue");
  EXPECT_EQ(parse_kv_rule("Fair"), std::nullopt);
  EXPECT_EQ(parse_kv_rule(""), std::nullopt);
  EXPECT_EQ(parse_kv_rule("lifo"), std::nullopt);
}

TEST(KvShrink, FairLevelsTheLargestPoolsDown) {
  const std::vector<SwapTenant> ts = {kv_tenant(1, 40 * GiB), kv_tenant(2, 20 * GiB), kv_tenant(3, 10 * GiB),
                                      requester(4)};
  // 10 GiB: only the largest gives, down to 30.
  EXPECT_EQ(plan_kv_shrink(ts, ts[3], 10 * GiB, KvRule::kFair), (std::vector<KvTarget>{{1, 30 * GiB}}));
  // 30 GiB: the two largest come down to one level, 15 each; the smallest keeps its 10.
  EXPECT_EQ(plan_kv_shrink(ts, ts[3], 30 * GiB, KvRule::kFair),
            (std::vector<KvTarget>{{1, 15 * GiB}, {2, 15 * GiB}}));
  // An amount that does not divide evenly: together exactly what is needed, levels a byte apart.
  auto odd = plan_kv_shrink(ts, ts[3], 30 * GiB + 1, KvRule::kFair);
  ASSERT_EQ(odd.size(), 2u);
  EXPECT_EQ(given(ts, odd), 30 * GiB + 1);
  EXPECT_LE(std::max(odd[0].target_bytes, odd[1].target_bytes) - std::min(odd[0].target_bytes, odd[1].target_bytes), 1u);
  // More than all of it: everyone gives everything.
  EXPECT_EQ(plan_kv_shrink(ts, ts[3], 100 * GiB, KvRule::kFair),
            (std::vector<KvTarget>{{1, 0}, {2, 0}, {3, 0}}));
  EXPECT_TRUE(plan_kv_shrink(ts, ts[3], 0, KvRule::kFair).empty());
}

TEST(KvShrink, FairStopsEachDonorAtItsGuarantee) {
  // Tenant 1 holds 50 GiB on a 45 GiB guarantee: only 5 of its 40 KV GiB are borrowed, it stops at 35.
  SwapTenant a = kv_tenant(1, 40 * GiB, 50 * GiB);
  a.guaranteed_bytes = 45 * GiB;
  const std::vector<SwapTenant> ts = {a, kv_tenant(2, 20 * GiB), requester(3)};
  EXPECT_EQ(plan_kv_shrink(ts, ts[2], 15 * GiB, KvRule::kFair),
            (std::vector<KvTarget>{{1, 35 * GiB}, {2, 10 * GiB}}));
}

TEST(KvShrink, MemoryWithinTheGuaranteeIsNeverTaken) {
  SwapTenant a = kv_tenant(1, 40 * GiB, 50 * GiB);
  a.guaranteed_bytes = 50 * GiB;  // all of it guaranteed
  EXPECT_EQ(kv_givable_bytes(a), 0u);
  a.guaranteed_bytes = 60 * GiB;  // below its guarantee
  EXPECT_EQ(kv_givable_bytes(a), 0u);
  a.guaranteed_bytes = 0;  // no quota: all its pools
  EXPECT_EQ(kv_givable_bytes(a), 40 * GiB);
  a.guaranteed_bytes = 5 * GiB;  // 45 borrowed, but only 40 of them are KV
  EXPECT_EQ(kv_givable_bytes(a), 40 * GiB);
  a.guaranteed_bytes = 50 * GiB;
  for (KvRule rule : {KvRule::kFair, KvRule::kPriority, KvRule::kQueue}) {
    EXPECT_TRUE(plan_kv_shrink({a, requester(2)}, requester(2), 10 * GiB, rule).empty()) << kv_rule_name(rule);
  }
}

TEST(KvShrink, OnlyDonorsThatMayGiveToTheRequester) {
  const SwapTenant be = requester(9);
  const SwapTenant hp = requester(9, /*guaranteed=*/true);
  SwapTenant g = kv_tenant(1, 40 * GiB, 0, /*guaranteed=*/true);
  for (KvRule rule : {KvRule::kFair, KvRule::kPriority, KvRule::kQueue}) {
    // A guaranteed tenant never gives to a best-effort one, but does to a guaranteed one.
    EXPECT_TRUE(plan_kv_shrink({g, be}, be, 10 * GiB, rule).empty());
    EXPECT_EQ(plan_kv_shrink({g, hp}, hp, 10 * GiB, rule), (std::vector<KvTarget>{{1, 30 * GiB}}));
    SwapTenant d = kv_tenant(2, 40 * GiB);
    d.device = 1;  // another GPU: its memory does not help
    EXPECT_TRUE(plan_kv_shrink({d, be}, be, 10 * GiB, rule).empty());
    d.device = 0;
    d.command_pending = true;
    EXPECT_TRUE(plan_kv_shrink({d, be}, be, 10 * GiB, rule).empty());
    d.command_pending = false;
    d.resident = false;
    EXPECT_TRUE(plan_kv_shrink({d, be}, be, 10 * GiB, rule).empty());
    // The requester does not give to itself.
    SwapTenant self = kv_tenant(9, 40 * GiB);
    EXPECT_TRUE(plan_kv_shrink({self}, self, 10 * GiB, rule).empty());
  }
}

TEST(KvShrink, PriorityTakesBestEffortThenLowPriorityThenLargePools) {
  SwapTenant be_high = kv_tenant(1, 10 * GiB);
  be_high.priority = 5;
  SwapTenant be_small = kv_tenant(2, 10 * GiB);
  SwapTenant be_large = kv_tenant(3, 30 * GiB);
  SwapTenant g = kv_tenant(4, 50 * GiB, 0, /*guaranteed=*/true);
  g.priority = -10;  // lowest priority, but guaranteed: after every best-effort donor
  const SwapTenant r = requester(5, /*guaranteed=*/true);
  const std::vector<SwapTenant> ts = {be_high, be_small, be_large, g, r};
  EXPECT_EQ(plan_kv_shrink(ts, r, 45 * GiB, KvRule::kPriority),
            (std::vector<KvTarget>{{3, 0}, {2, 0}, {1, 5 * GiB}}));
  EXPECT_EQ(plan_kv_shrink(ts, r, 55 * GiB, KvRule::kPriority),
            (std::vector<KvTarget>{{3, 0}, {2, 0}, {1, 0}, {4, 45 * GiB}}));
}

TEST(KvShrink, QueueTakesFromTheShortestQueuePerGiBFirst) {
  SwapTenant busy = kv_tenant(1, 40 * GiB);
  busy.kv_queue_depth = 8;  // 0.2 waiting per GiB
  SwapTenant light = kv_tenant(2, 10 * GiB);
  light.kv_queue_depth = 1;  // 0.1 per GiB
  SwapTenant idle_small = kv_tenant(3, 20 * GiB);
  SwapTenant idle_large = kv_tenant(4, 30 * GiB);  // idle too: the larger pool first
  const SwapTenant r = requester(5);
  const std::vector<SwapTenant> ts = {busy, light, idle_small, idle_large, r};
  EXPECT_EQ(plan_kv_shrink(ts, r, 55 * GiB, KvRule::kQueue),
            (std::vector<KvTarget>{{4, 0}, {3, 0}, {2, 5 * GiB}}));
  // Equal queues per GiB: the larger pool gives first.
  SwapTenant same_rate = kv_tenant(6, 20 * GiB);
  same_rate.kv_queue_depth = 4;  // 0.2 per GiB, as `busy`
  EXPECT_EQ(plan_kv_shrink({same_rate, busy, r}, r, 10 * GiB, KvRule::kQueue),
            (std::vector<KvTarget>{{1, 30 * GiB}}));
}

}  // namespace
}  // namespace gpuos::policies::kv
