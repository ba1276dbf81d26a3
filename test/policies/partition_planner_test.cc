// SPDX-License-Identifier: Apache-2.0
// The partition policy's planner (plan_space): who gets which SM groups, per GPU and domain.
#include "policies/partition/planner.h"

#include "common/sm_split.h"

#include <gtest/gtest.h>

#include <bit>

namespace gpuos::policies::partition {
namespace {

const std::vector<SpaceGpu> kH200 = {{0, 132, {}}};

PlanTenant tenant(uint32_t id, uint32_t cls, const char* domain = "serve", bool busy = true) {
  PlanTenant t;
  t.id = id;
  t.tenant_class = cls;
  t.domain = domain;
  t.busy = busy;
  return t;
}
PlanTenant hp(uint32_t id, bool busy = true) {
  PlanTenant t = tenant(id, GPUOS_CLASS_GUARANTEED, "serve", busy);
  if (!busy) t.idle_ns = 1'000'000'000;  // idle long enough to lend
  return t;
}
PlanTenant be(uint32_t id, uint64_t kernel_ns = 100'000) {  // 100 us kernels: may borrow
  PlanTenant t = tenant(id, GPUOS_CLASS_BEST_EFFORT);
  t.kernel_ns = kernel_ns;
  return t;
}

uint64_t groups(uint32_t first, uint32_t n) { return ((n == 64 ? ~0ull : (1ull << n) - 1)) << first; }

TEST(SpacePlanner, GroupsAndTheirSms) {
  const SpaceGpu g{0, 132, {}};
  EXPECT_EQ(space_groups(g, 8), 16u);
  EXPECT_EQ(space_groups(g, 0), 0u);
  EXPECT_EQ(space_groups(SpaceGpu{0, 4096, {}}, 8), 64u);  // one mask word at most
  EXPECT_EQ(space_mask_sms(groups(0, 16), g, 8), 132u);
  EXPECT_EQ(space_mask_sms(groups(14, 2), g, 8), 20u);  // the last group takes the remainder
  EXPECT_EQ(space_mask_sms(groups(0, 14), g, 8), 112u);
  EXPECT_EQ(space_mask_sms(0, g, 8), 0u);
}

TEST(SpacePlanner, TheDriversSplitDecidesTheGroups) {
  // The H200's driver: 15 groups of 8 and a remainder of 12 (the last group has 20).
  SpaceGpu h200{0, 132, std::vector<uint32_t>(15, 8)};
  h200.group_sizes.back() += 12;
  EXPECT_EQ(space_groups(h200, 8), 15u);
  EXPECT_EQ(space_mask_sms(groups(0, 15), h200, 8), 132u);
  EXPECT_EQ(space_mask_sms(groups(13, 2), h200, 8), 28u);
  auto plan = plan_space({h200}, {hp(1), be(2)}, SpaceParams{});
  EXPECT_EQ(plan[1][0], groups(0, 13));  // 104 SMs
  EXPECT_EQ(plan[2][0], groups(13, 2));  // 28 SMs
  plan = plan_space({h200}, {hp(1, false), be(2)}, SpaceParams{});
  EXPECT_EQ(plan[2][0], groups(0, 15));  // everything lent
}

TEST(SpacePlanner, AloneIsUnconfined) {
  auto plan = plan_space(kH200, {hp(1)}, SpaceParams{});
  EXPECT_EQ(plan[1][0], 0u);
}

TEST(SpacePlanner, TenantsOutsideADomainAreNeverConfined) {
  auto plan = plan_space(kH200, {tenant(1, GPUOS_CLASS_GUARANTEED, ""), tenant(2, GPUOS_CLASS_BEST_EFFORT, "")},
                         SpaceParams{});
  EXPECT_EQ(plan[1][0], 0u);
  EXPECT_EQ(plan[2][0], 0u);
}

TEST(SpacePlanner, DifferentDomainsDoNotShareInSpace) {
  auto plan = plan_space(kH200, {tenant(1, GPUOS_CLASS_GUARANTEED, "a"), tenant(2, GPUOS_CLASS_BEST_EFFORT, "b")},
                         SpaceParams{});
  EXPECT_EQ(plan[1][0], 0u);  // each is alone in its domain
  EXPECT_EQ(plan[2][0], 0u);
}

TEST(SpacePlanner, BusyGuaranteedKeepsAllButTheReserve) {
  auto plan = plan_space(kH200, {hp(1), be(2)}, SpaceParams{});
  EXPECT_EQ(plan[1][0], groups(0, 14));
  EXPECT_EQ(plan[2][0], groups(14, 2));
  EXPECT_EQ(plan[1][0] & plan[2][0], 0u);  // disjoint
}

TEST(SpacePlanner, IdleGuaranteedLendsItsGroupsButKeepsThem) {
  auto plan = plan_space(kH200, {hp(1, /*busy=*/false), be(2)}, SpaceParams{});
  EXPECT_EQ(plan[1][0], groups(0, 14));  // its next kernel starts there at once
  EXPECT_EQ(plan[2][0], groups(0, 16));  // lent while it is idle
}

TEST(SpacePlanner, AWholeGpuGuaranteedTenantRunsEverywhereAndLeavesBestEffortEveryOtherGroup) {
  PlanTenant h = hp(1);
  h.whole_gpu = true;
  PlanTenant sized = hp(3);
  sized.want_sms = 32;
  auto plan = plan_space(kH200, {h, sized, be(2)}, SpaceParams{});
  EXPECT_EQ(plan[1][0], 0u);              // unconfined: every SM, best-effort's included
  EXPECT_EQ(plan[3][0], groups(1, 4));    // after the one group h holds (served first, by id)
  EXPECT_EQ(plan[2][0], groups(5, 11));   // the rest: the budget sizes how many it uses
  // Alone beside best-effort work: one group for it, all others for best-effort.
  plan = plan_space(kH200, {h, be(2)}, SpaceParams{});
  EXPECT_EQ(plan[1][0], 0u);
  EXPECT_EQ(plan[2][0], groups(1, 15));
  h.busy = false;
  h.idle_ns = 1'000'000'000;
  plan = plan_space(kH200, {h, sized, be(2)}, SpaceParams{});
  EXPECT_EQ(plan[1][0], 0u);
  EXPECT_EQ(plan[2][0], groups(0, 1) | groups(5, 11));  // what it holds is lent while it is idle
}

TEST(SpacePlanner, ShortGapsAreNotLent) {
  PlanTenant h = hp(1, /*busy=*/false);
  h.idle_ns = 5'000'000;  // 5 ms idle, lend_after 20 ms
  SpaceParams p;
  auto plan = plan_space(kH200, {h, be(2)}, p);
  EXPECT_EQ(plan[2][0], groups(14, 2));
  EXPECT_EQ(space_next_lend_ns({h, be(2)}, p), 15'000'000u);  // replan when lending starts
  h.idle_ns = 20'000'000;
  plan = plan_space(kH200, {h, be(2)}, p);
  EXPECT_EQ(plan[2][0], groups(0, 16));
  EXPECT_EQ(space_next_lend_ns({h, be(2)}, p), 0u);
  EXPECT_EQ(space_next_lend_ns({hp(1), be(2)}, p), 0u);  // busy: nothing to wait for
}

TEST(SpacePlanner, OnlyTenantsWhoseKernelsEndSoonBorrow) {
  // Taking lent groups back waits for the kernels running there: lend only to a tenant whose
  // kernels are known to end within lend_max_kernel_ns.
  SpaceParams p;
  p.lend_max_kernel_ns = 2'000'000;
  auto plan = plan_space(kH200, {hp(1, false), be(2, 1'500'000), be(3, 28'000'000), be(4, 0)}, p);
  EXPECT_EQ(plan[2][0] & groups(0, 14), groups(0, 14));  // 1.5 ms kernels: borrows
  EXPECT_EQ(plan[3][0] & groups(0, 14), 0u);             // 28 ms kernels: its own groups only
  EXPECT_EQ(plan[4][0] & groups(0, 14), 0u);             // not measured yet: its own only
  EXPECT_NE(plan[3][0], 0u);
  // Sharing all of the best-effort groups (more tenants than groups) follows the same rule.
  plan = plan_space(kH200, {hp(1, false), be(2, 1'000'000), be(3, 28'000'000), be(5, 28'000'000)}, p);
  EXPECT_EQ(plan[2][0], groups(0, 16));
  EXPECT_EQ(plan[3][0], groups(14, 2));
  EXPECT_EQ(plan[5][0], groups(14, 2));
}

TEST(SpacePlanner, SizedGuaranteedGetsWholeGroupsOfWhatItAsked) {
  PlanTenant h = hp(1);
  h.want_sms = 60;  // 7.5 groups -> 8
  auto plan = plan_space(kH200, {h, be(2)}, SpaceParams{});
  EXPECT_EQ(plan[1][0], groups(0, 8));
  EXPECT_EQ(plan[2][0], groups(8, 8));
}

TEST(SpacePlanner, GuaranteedNeverTakesTheBestEffortReserve) {
  PlanTenant h = hp(1);
  h.want_sms = 1000;
  SpaceParams p;
  p.be_reserve_groups = 3;
  auto plan = plan_space(kH200, {h, be(2)}, p);
  EXPECT_EQ(plan[1][0], groups(0, 13));
  EXPECT_EQ(plan[2][0], groups(13, 3));
}

TEST(SpacePlanner, TwoGuaranteedByPriorityThenBestEffortByWeight) {
  PlanTenant a = hp(1), b = hp(2);
  a.want_sms = 32;
  b.want_sms = 32;
  b.priority = 5;  // served first: the low groups
  PlanTenant x = be(3), y = be(4);
  x.weight = 100;
  y.weight = 300;
  auto plan = plan_space(kH200, {a, b, x, y}, SpaceParams{});
  EXPECT_EQ(plan[2][0], groups(0, 4));
  EXPECT_EQ(plan[1][0], groups(4, 4));
  EXPECT_EQ(plan[3][0], groups(8, 2));  // 8 groups left, weights 1:3
  EXPECT_EQ(plan[4][0], groups(10, 6));
}

TEST(SpacePlanner, UnsizedGuaranteedSplitWhatIsLeft) {
  auto plan = plan_space(kH200, {hp(1), hp(2), be(3)}, SpaceParams{});
  EXPECT_EQ(std::popcount(plan[1][0]) + std::popcount(plan[2][0]), 14);
  EXPECT_EQ(plan[1][0] & plan[2][0], 0u);
  EXPECT_EQ(plan[3][0], groups(14, 2));
}

TEST(SpacePlanner, MoreBestEffortThanGroupsShareThem) {
  std::vector<PlanTenant> ts = {hp(1)};
  for (uint32_t i = 2; i < 6; ++i) ts.push_back(be(i));
  auto plan = plan_space(kH200, ts, SpaceParams{});
  for (uint32_t i = 2; i < 6; ++i) EXPECT_EQ(plan[i][0], groups(14, 2)) << i;
}

TEST(SpacePlanner, OnlyBestEffortSplitTheWholeGpu) {
  auto plan = plan_space(kH200, {be(1), be(2)}, SpaceParams{});
  EXPECT_EQ(plan[1][0], groups(0, 8));
  EXPECT_EQ(plan[2][0], groups(8, 8));
}

TEST(SpacePlanner, PerGpuByWhereTheMemoryIs) {
  std::vector<SpaceGpu> two = {{0, 132, {}}, {1, 132, {}}};
  PlanTenant h = hp(1), b = be(2);
  h.gpus = 0b01;
  b.gpus = 0b10;  // on different GPUs: each is alone on its own
  auto plan = plan_space(two, {h, b}, SpaceParams{});
  EXPECT_EQ(plan[1][0], 0u);
  EXPECT_EQ(plan[2][1], 0u);
  b.gpus = 0b11;
  plan = plan_space(two, {h, b}, SpaceParams{});
  EXPECT_EQ(plan[1][0], groups(0, 14));
  EXPECT_EQ(plan[2][0], groups(14, 2));
  EXPECT_EQ(plan[2][1], 0u);  // alone on GPU 1
}

TEST(SpacePlanner, TinyGpusAreNotSplit) {
  auto plan = plan_space({{0, 12, {}}}, {hp(1), be(2)}, SpaceParams{});
  EXPECT_EQ(plan[1][0], 0u);
  EXPECT_EQ(plan[2][0], 0u);
}

}  // namespace
// What the interposer makes ahead of a change of size (common/sm_split.h): the masks one step away
// from the ones the planner gives.
TEST(SpacePlanner, NeighbourPartitionsAreOneGroupAwayAtTheMovingEnd) {
  using V = std::vector<uint64_t>;
  EXPECT_EQ(neighbour_partitions(0x00FF, 16), (V{0x01FF, 0x007F}));  // guaranteed: groups 0..7
  EXPECT_EQ(neighbour_partitions(0x0001, 16), (V{0x0003}));          // one group: can only grow
  EXPECT_EQ(neighbour_partitions(0x7FFF, 16), (V{0x3FFF}));          // all but the last: shrink
  EXPECT_EQ(neighbour_partitions(0xFF00, 16), (V{0xFF80, 0xFE00}));  // best-effort: groups 8..15
  EXPECT_EQ(neighbour_partitions(0x8000, 16), (V{0xC000}));          // the last group alone: grow
  EXPECT_TRUE(neighbour_partitions(0xFFFF, 16).empty());  // everything (lent): nothing next
  EXPECT_TRUE(neighbour_partitions(0x0F0F, 16).empty());  // two runs: not a planner's mask
  EXPECT_TRUE(neighbour_partitions(0x0FF0, 16).empty());  // touches neither end
  EXPECT_TRUE(neighbour_partitions(0x1FFFF, 16).empty()); // beyond the device's groups
  EXPECT_TRUE(neighbour_partitions(0, 16).empty());
  EXPECT_EQ(neighbour_partitions(~0ull >> 1, 64), (V{~0ull >> 2}));
}

}  // namespace gpuos::policies::partition
