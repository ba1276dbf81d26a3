// SPDX-License-Identifier: Apache-2.0
// The swap plan's stages (policies/swap/stages.h), each asked alone: what a request for room needs
// freed, when it can never fit, and which KV targets may rise.
#include <gtest/gtest.h>

#include <vector>

#include "policies/swap/stages.h"

namespace gpuos::policies::swap {
namespace {

constexpr uint64_t GiB = 1ull << 30;

SwapTenant holding(uint32_t id, uint64_t resident, uint64_t movable, uint32_t device = 0) {
  SwapTenant t;
  t.id = id;
  t.device = device;
  t.resident_bytes = resident;
  t.movable_bytes = movable;
  return t;
}

TEST(SwapStages, RoomNeededTrustsTheDriverOverTheEstimate) {
  SwapTenant r;
  r.wanted_bytes = 4 * GiB;
  EXPECT_EQ(room_needed(r, 1 * GiB, 2 * GiB), 5 * GiB) << "what it wants beyond what shows free, and the margin";
  EXPECT_EQ(room_needed(r, 8 * GiB, 2 * GiB), 6 * GiB) << "enough shows free: the estimate is wrong, all of it";
  r.quota_left_bytes = 10 * GiB;
  EXPECT_EQ(room_needed(r, 1 * GiB, 0), 9 * GiB) << "with a quota: what it may still allocate";
}

TEST(SwapStages, NeverFitsBesideWhatCannotMove) {
  SwapParams p;
  p.capacity = {10 * GiB, 10 * GiB};
  const std::vector<SwapTenant> ts = {holding(1, 3 * GiB, 0), holding(2, 5 * GiB, 5 * GiB), holding(3, 8 * GiB, 0, 1),
                                      holding(4, 6 * GiB, 4 * GiB)};
  EXPECT_FALSE(never_fits(ts, ts[1], p)) << "5 GiB beside 3 + 2 that cannot move: it fits once the rest moves";
  SwapTenant big = holding(5, 6 * GiB, 6 * GiB);
  EXPECT_TRUE(never_fits(ts, big, p)) << "3 + 2 GiB that cannot move leave 5 of 10";
  big.device = 1;
  EXPECT_TRUE(never_fits(ts, big, p)) << "8 fixed GiB on GPU 1";
  EXPECT_EQ(free_on(ts, p, 0), 0u);
  EXPECT_EQ(free_on(ts, p, 1), 2 * GiB);
  EXPECT_EQ(free_on(ts, p, 2), 0u) << "a GPU with no capacity given";
}

TEST(SwapStages, AKvTargetRisesOnlyAfterItsHold) {
  SwapParams p;
  p.kv_hold_ns = 1000;
  SwapTenant t;
  EXPECT_FALSE(may_rise(t, p, 5000)) << "no target";
  t.kv_target_on = true;
  t.kv_target_since_ns = 3000;
  EXPECT_FALSE(may_rise(t, p, 3999));
  EXPECT_TRUE(may_rise(t, p, 4000));
  EXPECT_FALSE(may_rise(t, p, 2000)) << "set after now (a clock read before it)";
}

}  // namespace
}  // namespace gpuos::policies::swap
