// SPDX-License-Identifier: Apache-2.0
// The swap policy (plan_swaps), decision by decision.
#include "policies/swap/planner.h"

#include <gtest/gtest.h>

namespace gpuos::policies::swap {
namespace {

constexpr uint64_t GiB = 1ull << 30;
constexpr uint64_t kSec = 1'000'000'000ull;
using K = SwapAction::Kind;

SwapTenant resident(uint32_t id, uint64_t bytes, bool guaranteed = false) {
  SwapTenant t;
  t.id = id;
  t.guaranteed = guaranteed;
  t.swappable = true;
  t.movable_bytes = bytes;
  t.resident_bytes = bytes;
  t.pool_largest_free = 100 * GiB;
  return t;
}

SwapTenant out(uint32_t id, uint64_t bytes, uint64_t out_since, bool waiting = true) {
  SwapTenant t = resident(id, 0);
  t.resident = false;
  t.swapped_out = true;
  t.swapped_bytes = bytes;
  t.out_since_ns = out_since;
  t.waiting = waiting;
  return t;
}

SwapParams params() {
  SwapParams p;
  p.capacity = {138 * GiB};
  p.quantum_ns = 4 * kSec;
  p.margin_bytes = 2 * GiB;
  return p;
}

TEST(SwapPlanner, RequestForRoomEvictsWhatTheRequesterStillMayAllocate) {
  SwapTenant a = resident(1, 80 * GiB);
  SwapTenant b = resident(2, 56 * GiB);
  b.wants_room = true;
  b.wanted_bytes = 1 * GiB;
  b.quota_left_bytes = 28 * GiB;
  auto acts = plan_swaps({a, b}, params(), 10 * kSec);
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, K::kSwapOut);
  EXPECT_EQ(acts[0].tenant_id, 1u);
  // 138 - 136 = 2 GiB look free: the rest of what b may allocate, less those, plus the margin.
  EXPECT_EQ(acts[0].bytes, 28 * GiB - 2 * GiB + 2 * GiB);
  // When the estimate claims room the driver just denied, it is wrong: all of it plus the margin.
  b.resident_bytes = b.movable_bytes = 10 * GiB;
  acts = plan_swaps({a, b}, params(), 10 * kSec);
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].bytes, 28 * GiB + 2 * GiB);
}

TEST(SwapPlanner, RoomMadeIsAnsweredRetryAndNoVictimIsRefused) {
  SwapTenant b = resident(2, 56 * GiB);
  b.wants_room = true;
  b.wanted_bytes = GiB;
  b.room_made = true;
  EXPECT_EQ(plan_swaps({b}, params(), 0), (std::vector<SwapAction>{{K::kAnswerRetry, 2}}));
  b.room_made = false;
  SwapTenant fixed = resident(1, 80 * GiB);
  fixed.swappable = false;  // cannot move: nobody can make room
  fixed.movable_bytes = 0;
  b.wanted_bytes = 4 * GiB;
  b.resident_bytes = 60 * GiB;  // 56 held + the 4 reserved for the waiting allocation; 80 + 60 > 138
  EXPECT_EQ(plan_swaps({fixed, b}, params(), 0), (std::vector<SwapAction>{{K::kAnswerRefused, 2}}));
  b.resident_bytes = 57 * GiB;  // it fits beside the 80 that cannot move once they are freed: wait
  EXPECT_TRUE(plan_swaps({fixed, b}, params(), 0).empty());
}

TEST(SwapPlanner, BestEffortNeverDisplacesGuaranteedButGuaranteedDisplacesAtOnce) {
  SwapTenant hp = resident(1, 80 * GiB, /*guaranteed=*/true);
  hp.resident_since_ns = 9 * kSec;  // within its quantum: irrelevant, a BE may never displace it
  SwapTenant be = resident(2, 56 * GiB);
  be.wants_room = true;
  be.wanted_bytes = GiB;
  // The BE waits (no answer): the guaranteed tenant's memory could move if it exits or frees.
  EXPECT_TRUE(plan_swaps({hp, be}, params(), 10 * kSec).empty());
  // The other way round: the BE goes out even though it just came in.
  hp.wants_room = true;
  hp.wanted_bytes = 8 * GiB;
  be.wants_room = false;
  be.resident_since_ns = 9 * kSec;
  auto acts = plan_swaps({hp, be}, params(), 10 * kSec);
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, K::kSwapOut);
  EXPECT_EQ(acts[0].tenant_id, 2u);
}

TEST(SwapPlanner, PeersKeepTheirMemoryForAQuantumAndOnlyTheDifferenceMoves) {
  SwapTenant a = resident(1, 130 * GiB);
  a.resident_since_ns = 8 * kSec;
  SwapTenant b = out(2, 26 * GiB, 5 * kSec);
  EXPECT_TRUE(plan_swaps({a, b}, params(), 10 * kSec).empty());  // a's quantum ends at 12 s
  auto acts = plan_swaps({a, b}, params(), 12 * kSec);
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, K::kSwapOut);
  EXPECT_EQ(acts[0].tenant_id, 1u);
  EXPECT_EQ(acts[0].bytes, 26 * GiB - 8 * GiB + 2 * GiB);  // b's 26 GiB less the 8 free, + margin
  a.resident_bytes = a.movable_bytes = 80 * GiB;  // 58 GiB free: b simply comes back
  EXPECT_EQ(plan_swaps({a, b}, params(), 10 * kSec), (std::vector<SwapAction>{{K::kSwapIn, 2}}));
}

TEST(SwapPlanner, ASignalledTenantGoesFirstAndIsNotHeldBackByAPeersQuantum) {
  // b, swapped out for a, got SIGTERM (its thread at the gate was woken by the handler): a's
  // quantum (until 12 s) does not keep b waiting; b is not the one out longest, and goes first.
  SwapTenant a = resident(1, 130 * GiB);
  a.resident_since_ns = 8 * kSec;
  SwapTenant b = out(2, 26 * GiB, 5 * kSec);
  SwapTenant c = out(3, 26 * GiB, 1 * kSec);
  EXPECT_TRUE(plan_swaps({a, b, c}, params(), 10 * kSec).empty());
  b.signalled = true;
  auto acts = plan_swaps({a, b, c}, params(), 10 * kSec);
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, K::kSwapOut);
  EXPECT_EQ(acts[0].tenant_id, 1u);
  a.resident_bytes = a.movable_bytes = 100 * GiB;  // room for one of them: b, not c
  EXPECT_EQ(plan_swaps({a, b, c}, params(), 10 * kSec), (std::vector<SwapAction>{{K::kSwapIn, 2}}));
  // A best-effort tenant's signal still displaces no guaranteed tenant.
  SwapTenant hp = resident(4, 130 * GiB, /*guaranteed=*/true);
  EXPECT_TRUE(plan_swaps({hp, b}, params(), 100 * kSec).empty());
}

TEST(SwapPlanner, ASignalledTenantIsNoVictimEvenWhenItBorrows) {
  // a borrowed, was swapped out for b, got SIGTERM and came back (its signal still pending): b,
  // out for it and waiting, must not swap it out again before it acted (they would take turns).
  SwapTenant a = resident(1, 100 * GiB);
  a.borrowed_bytes = 40 * GiB;
  a.signalled = true;
  SwapTenant b = out(2, 60 * GiB, 5 * kSec);
  EXPECT_TRUE(plan_swaps({a, b}, params(), 10 * kSec).empty());
  a.signalled = false;  // it acted (or had no signal): a borrower gives way at once
  EXPECT_EQ(plan_swaps({a, b}, params(), 10 * kSec), (std::vector<SwapAction>{{K::kSwapOut, 1, 22 * GiB + 2 * GiB}}));
}

TEST(SwapPlanner, SwapsInWhenItFitsTheOneOutLongestFirst) {
  SwapTenant a = out(1, 20 * GiB, 7 * kSec);
  SwapTenant b = out(2, 20 * GiB, 3 * kSec);  // out longer: it goes first
  EXPECT_EQ(plan_swaps({a, b}, params(), 10 * kSec), (std::vector<SwapAction>{{K::kSwapIn, 2}}));
  b.waiting = false;  // idle tenants stay out
  EXPECT_EQ(plan_swaps({a, b}, params(), 10 * kSec), (std::vector<SwapAction>{{K::kSwapIn, 1}}));
  a.swap_in_failed = true;  // no room after all and no victim: wait (the core retries later)
  EXPECT_TRUE(plan_swaps({a, b}, params(), 10 * kSec).empty());
}

TEST(SwapPlanner, OneSwapAtATime) {
  SwapTenant a = resident(1, 80 * GiB);
  a.command_pending = true;
  SwapTenant b = out(2, 20 * GiB, 0);
  EXPECT_TRUE(plan_swaps({a, b}, params(), 100 * kSec).empty());
}

TEST(SwapPlanner, VictimsAreIdleFirstAndLimitedByTheirPool) {
  SwapTenant busy = resident(1, 60 * GiB);
  busy.busy = true;
  SwapTenant idle = resident(2, 60 * GiB);
  idle.pool_largest_free = 4 * GiB;
  SwapTenant w = out(3, 30 * GiB, 0);
  auto acts = plan_swaps({busy, idle, w}, params(), 100 * kSec);
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].tenant_id, 2u);
  EXPECT_EQ(acts[0].bytes, 4 * GiB);  // what its pool can take; the next round finds more
  idle.pool_largest_free = 0;
  acts = plan_swaps({busy, idle, w}, params(), 100 * kSec);
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].tenant_id, 1u);
}

TEST(SwapPlanner, BorrowersGiveBackFirstEvenWithinTheirQuantum) {
  SwapTenant lender = resident(1, 60 * GiB);
  lender.resident_since_ns = 9 * kSec;
  SwapTenant borrower = resident(2, 70 * GiB);
  borrower.resident_since_ns = 9 * kSec;  // just came in: a plain peer would keep its memory
  borrower.borrowed_bytes = 10 * GiB;
  SwapTenant w = out(3, 20 * GiB, 0);
  auto acts = plan_swaps({lender, borrower, w}, params(), 10 * kSec);
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, K::kSwapOut);
  EXPECT_EQ(acts[0].tenant_id, 2u);
}

TEST(SwapPlanner, EveryDecisionIsPerGpu) {
  SwapParams p = params();
  p.capacity = {138 * GiB, 138 * GiB};
  SwapTenant on0 = resident(1, 130 * GiB);
  SwapTenant on1 = resident(2, 130 * GiB);
  on1.device = 1;
  SwapTenant w = out(3, 20 * GiB, 0);  // out of GPU 1
  w.device = 1;
  auto acts = plan_swaps({on0, on1, w}, p, 100 * kSec);
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].tenant_id, 2u);  // the tenant on GPU 1 makes room, not the one on GPU 0
  on1.device = 0;                    // now nobody holds GPU 1: w simply comes back
  EXPECT_EQ(plan_swaps({on0, on1, w}, p, 100 * kSec), (std::vector<SwapAction>{{K::kSwapIn, 3}}));
  w.device = 2;  // a GPU gpuosd does not know: no capacity, nothing fits, nobody there to move
  EXPECT_TRUE(plan_swaps({on0, on1, w}, p, 100 * kSec).empty());
}

// KV pools: a swappable tenant on GPU 0 holding `resident` bytes, `kv` of them in its KV pools.
SwapTenant with_kv(uint32_t id, uint64_t resident_bytes, uint64_t kv) {
  SwapTenant t = resident(id, resident_bytes);
  t.kv_bytes = kv;
  return t;
}

SwapTenant asking(uint32_t id, uint64_t bytes, uint64_t quota_left) {
  SwapTenant t = resident(id, bytes);
  t.wants_room = true;
  t.wanted_bytes = GiB;
  t.quota_left_bytes = quota_left;
  return t;
}

TEST(SwapPlannerKv, DonorsShrinkToTargetsBeforeAnyoneIsSwapped) {
  SwapTenant a = with_kv(1, 80 * GiB, 60 * GiB);  // a perfect victim too: it is not swapped
  SwapTenant b = asking(2, 56 * GiB, 28 * GiB);
  // As a swap would free: 28 GiB b may still allocate, less the 2 free, plus the 2 GiB margin.
  EXPECT_EQ(plan_swaps({a, b}, params(), 10 * kSec),
            (std::vector<SwapAction>{{K::kSetKvTarget, 1, 32 * GiB, 1000}}));
  // The rule and the deadline are the policy's.
  SwapTenant c = with_kv(3, 2 * GiB, 2 * GiB);
  c.priority = -1;
  a.resident_bytes = a.movable_bytes = 78 * GiB;
  auto acts = plan_swaps({a, b, c}, params(), 10 * kSec, {kv::KvRule::kPriority, 250});
  EXPECT_EQ(acts, (std::vector<SwapAction>{{K::kSetKvTarget, 3, 0, 250}, {K::kSetKvTarget, 1, 34 * GiB, 250}}));
}

TEST(SwapPlannerKv, ARequestWaitsForATargetNotMetYet) {
  SwapTenant a = with_kv(1, 80 * GiB, 60 * GiB);
  a.kv_target_on = true;
  a.kv_target_bytes = 32 * GiB;
  a.kv_target_since_ns = 9 * kSec;
  SwapTenant b = asking(2, 56 * GiB, 28 * GiB);
  SwapTenant w = out(3, 10 * GiB, 0);  // nothing else either, not even a swap-in
  w.device = 0;
  EXPECT_TRUE(plan_swaps({a, b, w}, params(), 10 * kSec).empty());
  // Met (its pools came down): no waiting; the memory it freed answers b (the core marks room made).
  a.kv_bytes = 32 * GiB;
  a.resident_bytes = a.movable_bytes = 52 * GiB;
  b.room_made = true;
  EXPECT_EQ(plan_swaps({a, b}, params(), 10 * kSec), (std::vector<SwapAction>{{K::kAnswerRetry, 2}}));
  // Met, and still no room: b is served again rather than kept waiting.
  b.room_made = false;
  EXPECT_FALSE(plan_swaps({a, b}, params(), 10 * kSec).empty());
  // A target on another GPU does not hold b.
  SwapParams p = params();
  p.capacity = {138 * GiB, 138 * GiB};
  a.kv_bytes = 60 * GiB;
  a.device = 1;
  SwapTenant v = resident(4, 80 * GiB);
  EXPECT_EQ(plan_swaps({a, b, v}, p, 10 * kSec), (std::vector<SwapAction>{{K::kSwapOut, 4, 28 * GiB}}));
}

TEST(SwapPlannerKv, PastTheDeadlineTheRestIsSwappedOut) {
  SwapTenant a = with_kv(1, 80 * GiB, 60 * GiB);
  a.kv_target_on = true;
  a.kv_target_bytes = 32 * GiB;
  a.kv_target_overdue = true;
  a.resident_since_ns = 9 * kSec;  // within its quantum: the deadline counts, not the quantum
  SwapTenant b = asking(2, 56 * GiB, 28 * GiB);
  b.resident_since_ns = 9 * kSec;
  EXPECT_EQ(plan_swaps({a, b}, params(), 10 * kSec),
            (std::vector<SwapAction>{{K::kSwapOut, 1, 60 * GiB - 32 * GiB + 2 * GiB}}));
  a.pool_largest_free = 4 * GiB;  // as far as its swap pool takes it
  EXPECT_EQ(plan_swaps({a, b}, params(), 10 * kSec), (std::vector<SwapAction>{{K::kSwapOut, 1, 4 * GiB}}));
  // One that cannot be swapped out is not waited for, nor asked again: the others give.
  a.swappable = false;
  SwapTenant c = with_kv(3, 20 * GiB, 20 * GiB);
  EXPECT_EQ(plan_swaps({a, b, c}, params(), 10 * kSec), (std::vector<SwapAction>{{K::kSetKvTarget, 3, 0, 1000}}));
  // Nor is a guaranteed one swapped out for a best-effort requester.
  a.swappable = true;
  a.guaranteed = true;
  EXPECT_EQ(plan_swaps({a, b, c}, params(), 10 * kSec), (std::vector<SwapAction>{{K::kSetKvTarget, 3, 0, 1000}}));
}

TEST(SwapPlannerKv, WithoutADonorTheSwapPathServes) {
  SwapTenant a = with_kv(1, 80 * GiB, 60 * GiB);
  a.guaranteed_bytes = 80 * GiB;  // its pools are all within its guarantee
  SwapTenant b = asking(2, 56 * GiB, 28 * GiB);
  EXPECT_EQ(plan_swaps({a, b}, params(), 10 * kSec), (std::vector<SwapAction>{{K::kSwapOut, 1, 28 * GiB}}));
}

TEST(SwapPlannerKv, ATargetRisesAfterItsHoldWhenNothingWantsMemory) {
  SwapParams p = params();
  p.kv_hold_ns = 5 * kSec;
  SwapTenant a = with_kv(1, 70 * GiB, 50 * GiB);
  a.kv_target_on = true;
  a.kv_target_bytes = 50 * GiB;
  a.kv_target_since_ns = 10 * kSec;
  SwapTenant b = resident(2, 40 * GiB);
  EXPECT_TRUE(plan_swaps({a, b}, p, 14 * kSec).empty());  // held 4 s of 5
  // 28 GiB free, less the margin: up to 76 GiB (its pools could not double: a target, not a lift).
  EXPECT_EQ(plan_swaps({a, b}, p, 15 * kSec), (std::vector<SwapAction>{{K::kSetKvTarget, 1, 76 * GiB, 1000}}));
  // Less than a margin above the old target: left as it is.
  a.kv_target_bytes = 75 * GiB;
  EXPECT_TRUE(plan_swaps({a, b}, p, 15 * kSec).empty());
  // Lifted when that would not limit it: its quota allows 20 GiB more, 26 are spare.
  a.kv_target_bytes = 50 * GiB;
  a.guaranteed_bytes = 60 * GiB;
  a.quota_left_bytes = 20 * GiB;
  EXPECT_EQ(plan_swaps({a, b}, p, 15 * kSec), (std::vector<SwapAction>{{K::kLiftKvTarget, 1}}));
  a.quota_left_bytes = 30 * GiB;
  EXPECT_EQ(plan_swaps({a, b}, p, 15 * kSec), (std::vector<SwapAction>{{K::kSetKvTarget, 1, 76 * GiB, 1000}}));
  // No quota: lifted when the spare memory could double its pools.
  a.guaranteed_bytes = a.quota_left_bytes = 0;
  a.kv_bytes = 20 * GiB;
  a.kv_target_bytes = 20 * GiB;
  EXPECT_EQ(plan_swaps({a, b}, p, 15 * kSec), (std::vector<SwapAction>{{K::kLiftKvTarget, 1}}));
}

TEST(SwapPlannerKv, TargetsStayWhileMemoryIsWantedOrASwapRuns) {
  SwapParams p = params();
  p.capacity = {138 * GiB, 138 * GiB};
  p.kv_hold_ns = 5 * kSec;
  SwapTenant a = with_kv(1, 70 * GiB, 50 * GiB);
  a.kv_target_on = true;
  a.kv_target_bytes = 50 * GiB;
  SwapTenant b = asking(2, 40 * GiB, 0);
  b.room_made = true;  // answered this round; no raise beside it
  EXPECT_EQ(plan_swaps({a, b}, p, 100 * kSec), (std::vector<SwapAction>{{K::kAnswerRetry, 2}}));
  // A swapped-out tenant waiting to come back (no room, no victim) wants the memory too.
  a.swappable = false;
  SwapTenant w = out(3, 80 * GiB, 0);  // 68 GiB free
  EXPECT_TRUE(plan_swaps({a, w}, p, 100 * kSec).empty());
  // A swap pending anywhere, even on another GPU: one action at a time.
  SwapTenant other = resident(4, 10 * GiB);
  other.device = 1;
  other.command_pending = true;
  EXPECT_TRUE(plan_swaps({a, other}, p, 100 * kSec).empty());
  other.command_pending = false;
  EXPECT_EQ(plan_swaps({a, other}, p, 100 * kSec), (std::vector<SwapAction>{{K::kLiftKvTarget, 1}}));
}

TEST(SwapPlannerKv, TargetsRaisedTogetherShareTheFreeMemory) {
  SwapParams p = params();
  SwapTenant a = with_kv(1, 50 * GiB, 40 * GiB);
  SwapTenant c = with_kv(2, 50 * GiB, 40 * GiB);
  for (SwapTenant* t : {&a, &c}) {
    t->kv_target_on = true;
    t->kv_target_bytes = 40 * GiB;
  }
  // 38 GiB free, 36 spare: 18 each.
  EXPECT_EQ(plan_swaps({a, c}, p, 100 * kSec),
            (std::vector<SwapAction>{{K::kSetKvTarget, 1, 58 * GiB, 1000}, {K::kSetKvTarget, 2, 58 * GiB, 1000}}));
}

}  // namespace
}  // namespace gpuos::policies::swap
