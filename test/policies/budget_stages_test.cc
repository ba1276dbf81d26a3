// SPDX-License-Identifier: Apache-2.0
// The budget policy's stages (policies/budget/stages.h), each asked alone against a view and a
// state made for it: what each one decides, apart from the others.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpuos/abi.h"
#include "policies/budget/stages.h"

namespace gpuos::policies::budget {
namespace {

constexpr uint64_t kMs = 1'000'000;

slots::GateTenant guaranteed(uint32_t id, uint32_t budget_permille, bool busy) {
  slots::GateTenant t;
  t.id = id;
  t.tenant_class = GPUOS_CLASS_GUARANTEED;
  t.max_slowdown_permille = budget_permille;
  t.busy = busy;
  return t;
}
slots::GateTenant best_effort(uint32_t id, bool busy, uint32_t gate = GPUOS_GATE_OPEN) {
  slots::GateTenant t;
  t.id = id;
  t.tenant_class = GPUOS_CLASS_BEST_EFFORT;
  t.weight = 100;
  t.busy = busy;
  t.gate = gate;
  return t;
}
slots::GateView view_of(uint64_t now_ms, std::vector<slots::GateTenant> tenants) {
  slots::GateView v;
  v.now_ns = now_ms * kMs;
  v.tenants = std::move(tenants);
  return v;
}
// A meter that knows shape 1's solo time (1 ms) and, with `slowed`, holds launches of it `ratio`
// slower in the last `n` ms before now_ms.
TenantBudget with_solo(const BudgetParams& p, uint64_t now_ms, double ratio = 1.0, int n = 0) {
  TenantBudget b{SlowdownMeter(p.meter)};
  for (int i = 0; i < 10; ++i) b.meter.add(1, kMs, true, (1 + i) * kMs);
  for (int i = 0; i < n; ++i) b.meter.add(1, static_cast<uint64_t>(ratio * kMs), false, (now_ms - n + i) * kMs);
  return b;
}

TEST(BudgetStages, SoloOnlyOnceTheBestEffortGatesSettledAndDrained) {
  BudgetParams p;
  const slots::GateTenant g = guaranteed(1, 1500, true);
  TenantBudget b{SlowdownMeter(p.meter)};
  {
    const slots::GateView v = view_of(100, {g});
    EXPECT_TRUE(solo_now(Scene(v, p), g, b)) << "nobody beside it";
  }
  const slots::GateView v = view_of(100, {g, best_effort(2, false, GPUOS_GATE_CLOSED)});
  b.be_quiet_since_ns = 0;
  EXPECT_FALSE(solo_now(Scene(v, p), g, b)) << "a gate is open";
  b.be_quiet_since_ns = 100 * kMs - p.settle_ns / 2;
  EXPECT_FALSE(solo_now(Scene(v, p), g, b)) << "closed, not settled";
  b.be_quiet_since_ns = 100 * kMs - p.settle_ns;
  EXPECT_TRUE(solo_now(Scene(v, p), g, b));
  const slots::GateView busy = view_of(100, {g, best_effort(2, true, GPUOS_GATE_CLOSED)});
  EXPECT_FALSE(solo_now(Scene(busy, p), g, b)) << "its queued work still runs";
  slots::GateTenant elsewhere = best_effort(2, true, GPUOS_GATE_CLOSED);
  slots::GateTenant on_gpu0 = g;
  on_gpu0.gpus = 1;
  elsewhere.gpus = 3;  // busy may be on GPU 1: the settle time alone counts
  const slots::GateView two = view_of(100, {on_gpu0, elsewhere});
  EXPECT_TRUE(solo_now(Scene(two, p), on_gpu0, b));
}

TEST(BudgetStages, AnIntervalIsJudgedOnceAndNotWhenItBeganBeforeTheLastCut) {
  BudgetParams p;
  p.meter.interval_ns = 100 * kMs;
  TenantBudget b = with_solo(p, 1000, 1.6, 50);
  double reading = 0;
  std::size_t n = 0;
  ASSERT_TRUE(reading_to_judge(p, &b, 1010 * kMs, &reading, &n));
  EXPECT_GT(n, 0u);
  EXPECT_NEAR(reading, 1.6, 0.01);
  EXPECT_FALSE(reading_to_judge(p, &b, 1020 * kMs, &reading, &n)) << "the same interval";
  b.last_react_ns = 1050 * kMs;
  EXPECT_FALSE(reading_to_judge(p, &b, 1110 * kMs, &reading, &n)) << "began before the cut";
  EXPECT_TRUE(reading_to_judge(p, &b, 1210 * kMs, &reading, &n));
}

TEST(BudgetStages, ACutHalvesTheShareInWholeGroupsAndDropsCrumbs) {
  BudgetParams p;
  TenantBudget b{SlowdownMeter(p.meter)};
  b.share = 10.0 / 14;
  b.lent = 7;
  cut_share(p, &b, 14, 500 * kMs);
  EXPECT_NEAR(b.share, 5.0 / 14, 1e-9);
  EXPECT_EQ(b.lent, 0u);
  EXPECT_EQ(b.moves.cuts, 1u);
  EXPECT_EQ(b.last_react_ns, 500 * kMs);
  b.share = p.controller.increase / 3;
  cut_share(p, &b, 0, 600 * kMs);
  EXPECT_EQ(b.share, 0) << "too little to keep";
}

TEST(BudgetStages, GrowthIsOneUnlessSteeredAndIsClamped) {
  BudgetParams p;
  TenantBudget b = with_solo(p, 1000);
  for (int i = 0; i < 20; ++i) b.meter.add(2, 3 * kMs, true, (20 + i) * kMs);  // a larger shape, once alone
  for (int i = 0; i < 20; ++i) b.meter.add(2, 3 * kMs, false, (980 + i) * kMs);
  EXPECT_EQ(judged_growth(p, b, 1000 * kMs), 1.0);
  p.steer_load_growth = true;
  EXPECT_GE(judged_growth(p, b, 1000 * kMs), 1.0);
  EXPECT_LE(judged_growth(p, b, 1000 * kMs), kMaxLoadGrowth);
}

TEST(BudgetStages, GrowthByTheMedianIgnoresHowManyShortKernelsWereTimed) {
  // Alone: 20 decode graphs of 15 ms and 200 kernels of 0.3 ms; beside best-effort work the same
  // graphs, and only 20 of the kernels. The mean alone time grew 4.7x; no step is larger.
  BudgetParams p;
  p.steer_load_growth = true;
  TenantBudget b{SlowdownMeter(p.meter)};
  for (int i = 0; i < 200; ++i) b.meter.add(2, 300'000, true, (10 + i) * kMs);
  for (int i = 0; i < 20; ++i) b.meter.add(1, 15 * kMs, true, (300 + 16 * i) * kMs);
  for (int i = 0; i < 20; ++i) {
    b.meter.add(1, 15 * kMs, false, (4500 + 16 * i) * kMs);
    b.meter.add(2, 300'000, false, (4501 + 16 * i) * kMs);
  }
  EXPECT_EQ(judged_growth(p, b, 5000 * kMs), kMaxLoadGrowth) << "the mean, clamped";
  p.growth_by = BudgetParams::Growth::kMedian;
  EXPECT_NEAR(judged_growth(p, b, 5000 * kMs), 1.0, 1e-9);
  p.growth_by = BudgetParams::Growth::kStepMean;
  EXPECT_NEAR(judged_growth(p, b, 5000 * kMs), 1.0, 1e-9) << "only step-sized launches count";
}

// A decode batch that moves up a graph bucket: the step's shape changes, each as fast as alone.
// The median stays on the bucket most of the time is in; the mean over step-sized launches moves
// by the larger bucket's time (the 1B server at 10% load, issue #56).
TEST(BudgetStages, GrowthByTheStepMeanSeesABatchMoveUpABucket) {
  BudgetParams p;
  p.steer_load_growth = true;
  TenantBudget b{SlowdownMeter(p.meter)};
  // Alone: buckets of 3 ms (most steps) and 4 ms. Beside BE: 60% of the steps at 3 ms, 40% at 4 ms.
  for (int i = 0; i < 100; ++i) b.meter.add(i % 10 == 0 ? 2 : 1, i % 10 == 0 ? 4 * kMs : 3 * kMs, true, (10 + 5 * i) * kMs);
  for (int i = 0; i < 100; ++i) {
    b.meter.add(i % 5 < 2 ? 2 : 1, i % 5 < 2 ? 4 * kMs : 3 * kMs, false, (4000 + 5 * i) * kMs);
  }
  const uint64_t now = 4600 * kMs;
  p.growth_by = BudgetParams::Growth::kMedian;
  EXPECT_NEAR(judged_growth(p, b, now), 1.0, 1e-9) << "the median step is still the 3 ms bucket";
  p.growth_by = BudgetParams::Growth::kStepMean;
  // Every launch here is step-sized: the plain mean's, (0.6 x 3 + 0.4 x 4) = 3.4 ms over the
  // reference's (about 3.1 ms, of the solo launches it keeps).
  EXPECT_NEAR(judged_growth(p, b, now), b.meter.load_growth(now, p.meter.window_ns), 1e-9);
  EXPECT_GT(judged_growth(p, b, now), 1.08);
}

TEST(BudgetStages, ItLendsWithAShareUnlessProbingHeldForAPhaseOrBesideAStrictTenant) {
  BudgetParams p;
  BudgetState st;
  st.tenants.emplace(1, with_solo(p, 1000));
  st.tenants.at(1).share = 0.3;
  slots::GateTenant g = guaranteed(1, 1500, true);
  auto lends = [&](std::vector<slots::GateTenant> ts) {
    const slots::GateView v = view_of(1000, std::move(ts));
    return lends_now(decide_lending(Scene(v, p), &st), 1);
  };
  EXPECT_TRUE(lends({g, best_effort(2, true)}));
  EXPECT_TRUE(st.tenants.at(1).lending);
  g.admitting = true;
  EXPECT_FALSE(lends({g, best_effort(2, true)})) << "a phase";
  EXPECT_EQ(st.tenants.at(1).moves.phase_held, 1u);
  EXPECT_NE(st.tenants.at(1).phase_held_since_ns, 0u);
  g.admitting = false;
  EXPECT_FALSE(lends({g, guaranteed(3, 0, true), best_effort(2, true)})) << "a guaranteed tenant without a budget";
  EXPECT_EQ(st.tenants.at(1).phase_held_since_ns, 0u) << "the hold ended";
  st.probe_end_ns = 1100 * kMs;
  EXPECT_FALSE(lends({g, best_effort(2, true)})) << "probing";
  st.probe_end_ns = 0;
  st.tenants.at(1).share = 0;
  EXPECT_FALSE(lends({g, best_effort(2, true)})) << "no share";
}

TEST(BudgetStages, TimeSharedPacingIsCappedByTheBudgetAndBoundsLongKernels) {
  BudgetParams p;
  BudgetState st;
  st.tenants.emplace(1, with_solo(p, 1000));
  TenantBudget& b = st.tenants.at(1);
  b.share = 0.9;
  b.lending = true;
  const slots::GateTenant g = guaranteed(1, 1500, true);
  const slots::GateTenant v = best_effort(2, true);
  const slots::GateView view = view_of(1000, {g, v});
  bool beside = false, lent = false;
  const slots::Pacing pacing = pacing_of(Scene(view, p), &st, v, &beside, &lent);
  EXPECT_TRUE(beside);
  EXPECT_TRUE(lent);
  EXPECT_EQ(pacing.permille, 333u) << "1 - 1/1.5 of the time at most";
  EXPECT_EQ(pacing.max_kernel_us, 500u) << "(1.5 - 1) x its 1 ms launch";
  b.lending = false;
  const slots::Pacing none = pacing_of(Scene(view, p), &st, v, &beside, &lent);
  EXPECT_FALSE(lent);
  EXPECT_EQ(none.permille, 0u);
}

TEST(BudgetStages, BesideAServerOnTheWholeGpuTheShareBuysSmGroups) {
  BudgetParams p;
  BudgetState st;
  st.tenants.emplace(1, with_solo(p, 1000));
  st.tenants.at(1).share = 0.5;
  st.tenants.at(1).lending = true;
  slots::GateTenant g = guaranteed(1, 1500, true);
  slots::GateTenant v = best_effort(2, true);
  g.space_domain = v.space_domain = "serve";
  v.space_groups = 14;
  const slots::GateView view = view_of(1000, {g, v});
  bool beside = false, lent = false;
  const slots::Pacing pacing = pacing_of(Scene(view, p), &st, v, &beside, &lent);
  EXPECT_EQ(pacing.groups, 7u);
  EXPECT_EQ(pacing.permille, 1000u) << "unpaced in time on its groups";
  EXPECT_EQ(pacing.max_kernel_us, 0u) << "SMs of its own: no bound on its launches";
}

// gpuosd's report names what held a budget unspent (issue #56), in the order budget_limit checks.
TEST(BudgetStages, TheReportNamesWhatHeldTheBudgetUnspent) {
  BudgetParams p;
  const slots::GateTenant g = guaranteed(1, 1500, true);
  const slots::GateView alone = view_of(1000, {g});
  const slots::GateView beside = view_of(1000, {g, best_effort(2, true)});
  const uint64_t period = 5000 * kMs;
  TenantBudget fresh{SlowdownMeter(p.meter)};
  EXPECT_EQ(budget_limit(Scene(beside, p), g, fresh, {}, 0, period), GPUOS_BUDGET_LIMIT_NO_SOLO);
  TenantBudget b = with_solo(p, 1000);
  b.share = 0.2;
  EXPECT_EQ(budget_limit(Scene(beside, p), g, b, {}, 1.36, period), GPUOS_BUDGET_LIMIT_SPENT) << "72% of 0.5";
  EXPECT_EQ(budget_limit(Scene(alone, p), g, b, {}, 1.10, period), GPUOS_BUDGET_LIMIT_NO_BE);
  EXPECT_EQ(budget_limit(Scene(beside, p), g, b, {}, 1.10, period), GPUOS_BUDGET_LIMIT_CONTROL);
  ShareMoves m;
  m.note(0.1);
  m.note(1.0 / 3);  // time-shared at B = 1.5 the most is 1 - 1/1.5
  EXPECT_EQ(budget_limit(Scene(beside, p), g, b, m, 1.10, period), GPUOS_BUDGET_LIMIT_SHARE_CAP);
  m.cuts = 3;
  m.cuts_by_growth = 2;
  EXPECT_EQ(budget_limit(Scene(beside, p), g, b, m, 1.10, period), GPUOS_BUDGET_LIMIT_GROWTH);
  m.cuts_by_growth = 1;
  EXPECT_EQ(budget_limit(Scene(beside, p), g, b, m, 1.10, period), GPUOS_BUDGET_LIMIT_OVER);
  ShareMoves held;
  held.phase_held_ns = period / 2;
  EXPECT_EQ(budget_limit(Scene(beside, p), g, b, held, 1.10, period), GPUOS_BUDGET_LIMIT_PHASES);
  // In a spatial domain MPS's cost comes off the budget first: at 40% of a 1.5 budget's excess
  // ... the meter may use 1.5/1.2 - 1 = 0.25, and 1.19 is 76% of that.
  slots::GateTenant s = g;
  slots::GateTenant v = best_effort(2, true);
  s.space_domain = v.space_domain = "serve";
  p.mps_cost_fixed = 0.2;
  const slots::GateView domain = view_of(1000, {s, v});
  EXPECT_EQ(budget_limit(Scene(domain, p), s, b, {}, 1.19, period), GPUOS_BUDGET_LIMIT_SPENT);
  p.mps_cost_fixed = 0.45;
  EXPECT_EQ(budget_limit(Scene(domain, p), s, b, {}, 1.01, period), GPUOS_BUDGET_LIMIT_MPS);
}

TEST(BudgetStages, GatesHideALendingTenantFromPriorityAndPaceItsNeighbours) {
  BudgetParams p;
  BudgetState st;
  st.tenants.emplace(1, with_solo(p, 1000));
  st.tenants.at(1).share = 0.2;
  st.tenants.at(1).lending = true;
  const slots::GateView view = view_of(1000, {guaranteed(1, 1500, true), best_effort(2, true)});
  const Scene s(view, p);
  uint64_t tick = 0;
  const slots::GateActions lent = gate_tenants(s, Lending{{1, true}}, &st, &tick);
  ASSERT_EQ(lent.gates.size(), 2u);
  EXPECT_EQ(lent.gates[1].gate, GPUOS_GATE_OPEN);
  EXPECT_EQ(lent.gates[1].pacing.permille, 200u);
  EXPECT_NEAR(st.share, 0.2, 1e-9);
  st.tenants.at(1).lending = false;
  const slots::GateActions held = gate_tenants(s, Lending{{1, false}}, &st, &tick);
  EXPECT_EQ(held.gates[1].gate, GPUOS_GATE_CLOSED) << "priority's rules while it lends nothing";
  EXPECT_EQ(st.share, 0);
}

TEST(BudgetStages, TheNextTickIsTheSoonestThingToLookAt) {
  BudgetParams p;
  BudgetState st;
  st.tenants.emplace(1, with_solo(p, 1000));
  st.next_control_ns = 1100 * kMs;
  st.next_probe_ns = 1050 * kMs;
  const slots::GateView view = view_of(1000, {guaranteed(1, 1500, true)});
  const Scene s(view, p);
  st.tenants.at(1).be_quiet_since_ns = 0;
  EXPECT_EQ(next_tick(s, st, 0, false), 1100 * kMs) << "the control period";
  EXPECT_EQ(next_tick(s, st, 0, true), 1050 * kMs) << "a probe, while it lends";
  EXPECT_EQ(next_tick(s, st, 1010 * kMs, true), 1010 * kMs) << "priority's own";
  st.tenants.at(1).be_quiet_since_ns = 995 * kMs;
  EXPECT_EQ(next_tick(s, st, 0, true), 995 * kMs + p.settle_ns) << "when its timings turn solo";
}

}  // namespace
}  // namespace gpuos::policies::budget
