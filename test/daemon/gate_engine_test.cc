// SPDX-License-Identifier: Apache-2.0
// GateEngine without a Core: the time gate's view, the slot's contract and carrying out its answer.
#include "daemon/core/gate_engine.h"

#include <gtest/gtest.h>

#include "engine_tenants.h"
#include "gpuos/kv.h"

namespace gpuos::daemon {
namespace {

// A policy's decision for one tenant.
slots::GateAction gate(uint32_t id, uint32_t state, slots::Pacing pacing = {}) {
  slots::GateAction a;
  a.id = id;
  a.gate = state;
  a.pacing = pacing;
  return a;
}

struct GateFixture : ::testing::Test {
  std::vector<GpuInfo> info{GpuInfo{0, "g0", "", 132, 80ull << 30, {}, 0}};
  GpuMap gpus{info};
  SpaceEngine space{gpus, info, 8};
  GateEngine engine{gpus, info.size(), space};
  EngineTenants live;
};

TEST_F(GateFixture, TheViewHasEveryLiveTenantAsGpuosdSetIt) {
  live.add(1, GPUOS_CLASS_GUARANTEED);
  live.add(2).gate.pinned = true;
  slots::GateView view;
  ASSERT_TRUE(engine.make_view(live.tenants, slots::Event::kActivity, 2, 7, &view));
  EXPECT_EQ(view.event, slots::Event::kActivity);
  EXPECT_EQ(view.tenant_id, 2u);
  EXPECT_EQ(view.now_ns, 7u);
  ASSERT_EQ(view.tenants.size(), 2u);
  EXPECT_EQ(view.tenants[0].tenant_class, GPUOS_CLASS_GUARANTEED);
  EXPECT_EQ(view.tenants[1].gate, GPUOS_GATE_CLOSED);  // the pin, not the word
  EXPECT_TRUE(view.tenants[1].pinned);
  EXPECT_FALSE(view.tenants[0].admitting);
  // Whom its limits per user count against: its uid, or its claim when it came by one (pods all run
  // as root).
  live.tenants.at(1).uid = 65534;
  live.tenants.at(2).kube.claim_uid = "11111111-2222-4333-8444-555555555555";
  ASSERT_TRUE(engine.make_view(live.tenants, slots::Event::kActivity, 2, 7, &view));
  EXPECT_EQ(view.tenants[0].owner, "uid 65534");
  EXPECT_EQ(view.tenants[1].owner, "claim 11111111-2222-4333-8444-555555555555");
  // Its engine's phase (gpuos_kv_report_phase): admitting only for the one value that says so.
  for (const uint32_t phase : {GPUOS_KV_PHASE_ADMISSION, GPUOS_KV_PHASE_STEP, 77u}) {
    live.tenants.at(1).cb->engine_phase = phase;
    ASSERT_TRUE(engine.make_view(live.tenants, slots::Event::kActivity, 1, 8, &view));
    EXPECT_EQ(view.tenants[0].admitting, phase == GPUOS_KV_PHASE_ADMISSION) << phase;
  }
  // A long launch by its own timings (interpose/launch_phase.h): only while it is busy with it, and
  // only for the one value that says so.
  for (const uint32_t phase : {GPUOS_LAUNCH_PHASE_LONG, GPUOS_LAUNCH_PHASE_STEPS, 9u}) {
    for (const uint32_t busy : {1u, 0u}) {
      live.tenants.at(1).cb->launch_phase = phase;
      live.tenants.at(1).cb->busy = busy;
      ASSERT_TRUE(engine.make_view(live.tenants, slots::Event::kActivity, 1, 9, &view));
      EXPECT_EQ(view.tenants[0].long_launch, phase == GPUOS_LAUNCH_PHASE_LONG && busy == 1) << phase << " " << busy;
    }
  }
}

TEST_F(GateFixture, TheContractRefusesGatesAndPacingItCannotCarryOut) {
  live.add(1, GPUOS_CLASS_GUARANTEED);
  live.add(2);
  slots::GateView view;
  engine.make_view(live.tenants, slots::Event::kTick, 0, 1, &view);
  std::string why;
  slots::GateActions a;
  a.gates.push_back(gate(9, GPUOS_GATE_CLOSED));
  EXPECT_FALSE(engine.check(view, a, &why));
  EXPECT_NE(why.find("not live"), std::string::npos) << why;
  a.gates = {gate(2, 7)};
  EXPECT_FALSE(engine.check(view, a, &why));
  a.gates = {{2, GPUOS_GATE_OPEN, 0, slots::Pacing{1001}}};
  EXPECT_FALSE(engine.check(view, a, &why));
  a.gates = {{1, GPUOS_GATE_OPEN, 0, slots::Pacing{500}}};
  EXPECT_FALSE(engine.check(view, a, &why));
  EXPECT_NE(why.find("guaranteed"), std::string::npos) << why;
  a.gates = {{2, GPUOS_GATE_OPEN, 0, slots::Pacing{500}}};
  a.budgets = {{9, 1100, 100}};
  EXPECT_FALSE(engine.check(view, a, &why));
  a.budgets = {{1, 1100, 100}};
  EXPECT_TRUE(engine.check(view, a, &why)) << why;
}

TEST_F(GateFixture, ApplyWritesGatesAndPacingButAPinOutranksThePolicy) {
  Tenant& be = live.add(1);
  Tenant& pinned = live.add(2);
  live.add(3, GPUOS_CLASS_GUARANTEED);
  pinned.gate.pinned = true;
  slots::GateView view;
  engine.make_view(live.tenants, slots::Event::kTick, 0, 1000, &view);
  slots::GateActions a;
  a.gates = {gate(1, GPUOS_GATE_OPEN, slots::Pacing{.permille = 250}), gate(2, GPUOS_GATE_OPEN)};
  a.budgets = {{3, 1150, 200}};
  a.next_tick_ns = 5000;
  engine.apply(live.tenants, view, a, 1000);
  EXPECT_EQ(load(be.grants->pace_permille), 250u);
  EXPECT_EQ(be.granted.pacing.permille, 250u);
  EXPECT_EQ(be.verify.pace_since_ns, 1000u);  // the usage check's ledger of the pacing
  EXPECT_EQ(pinned.gate.policy_gate, GPUOS_GATE_OPEN);
  EXPECT_EQ(live.tenants.at(3).budget.slowdown_permille, 1150u);
  EXPECT_EQ(engine.next_ns(), 5000u);

  a = {};
  a.gates = {gate(1, GPUOS_GATE_CLOSED), gate(2, GPUOS_GATE_OPEN)};
  pinned.gate.policy_gate = GPUOS_GATE_CLOSED;
  engine.apply(live.tenants, view, a, 2000);
  EXPECT_EQ(load(be.grants->gate), GPUOS_GATE_CLOSED);
  EXPECT_EQ(load(be.grants->pace_permille), 0u);  // a closed gate is not paced
  EXPECT_EQ(pinned.gate.policy_gate, GPUOS_GATE_CLOSED);  // the pin kept it from the policy
  EXPECT_EQ(engine.next_ns(), 0u);
}

TEST_F(GateFixture, ResetOpensEveryGateAndDropsAdmissionSettings) {
  Tenant& t = live.add(1);
  t.granted.max_inflight = 4;
  slots::GateView view;
  engine.make_view(live.tenants, slots::Event::kTick, 0, 1, &view);
  slots::GateActions a;
  a.gates = {gate(1, GPUOS_GATE_CLOSED)};
  a.next_tick_ns = 99;
  engine.apply(live.tenants, view, a, 1);
  ASSERT_EQ(load(t.grants->gate), GPUOS_GATE_CLOSED);
  engine.reset(live.tenants, 2);
  EXPECT_EQ(load(t.grants->gate), GPUOS_GATE_OPEN);
  EXPECT_EQ(t.granted.max_inflight, 0u);
  EXPECT_EQ(engine.next_ns(), 0u);
}

}  // namespace
}  // namespace gpuos::daemon
