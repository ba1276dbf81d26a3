// SPDX-License-Identifier: Apache-2.0
// The priority policy's stages (policies/priority/stages.h), each asked alone: the gate a closed
// GPU mask makes, which GPUs close for whom, and the reprieves' cooldown.
#include <gtest/gtest.h>

#include <vector>

#include "gpuos/abi.h"
#include "policies/priority/stages.h"

namespace gpuos::policies::priority {
namespace {

constexpr uint64_t kMs = 1'000'000;

PriorityTenant tenant(uint32_t id, uint32_t cls, int32_t prio, uint64_t gpus, bool busy = true) {
  PriorityTenant t;
  t.id = id;
  t.tenant_class = cls;
  t.priority = prio;
  t.gpus = gpus;
  t.busy = busy;
  return t;
}
PriorityTenant guaranteed(uint32_t id, int32_t prio, uint64_t gpus, bool busy = true) {
  return tenant(id, GPUOS_CLASS_GUARANTEED, prio, gpus, busy);
}
PriorityTenant best_effort(uint32_t id, uint64_t gpus, bool busy = true) {
  return tenant(id, GPUOS_CLASS_BEST_EFFORT, 0, gpus, busy);
}

TEST(PriorityStages, GateOfAClosedMask) {
  const GateDecision none = gate_of(best_effort(1, 0b11), 0);
  EXPECT_EQ(none.gate, GPUOS_GATE_OPEN);
  EXPECT_EQ(none.closed_gpus, 0u);
  const GateDecision some = gate_of(best_effort(1, 0b11), 0b01);
  EXPECT_EQ(some.gate, GPUOS_GATE_OPEN) << "open on the GPU no guaranteed tenant works on";
  EXPECT_EQ(some.closed_gpus, 0b01u);
  EXPECT_EQ(gate_of(best_effort(1, 0b11), 0b11).gate, GPUOS_GATE_CLOSED) << "all of its GPUs";
  EXPECT_EQ(gate_of(best_effort(1, 0), 0b01).gate, GPUOS_GATE_CLOSED) << "its GPUs not known yet";
}

TEST(PriorityStages, ClosedWhereAGuaranteedTenantItWouldSlowWorks) {
  const std::vector<PriorityTenant> ts = {guaranteed(1, 5, 0b01), guaranteed(2, 0, 0b11), guaranteed(3, 5, 0b10),
                                          best_effort(4, 0b110)};
  const GuaranteedActive g = active_guaranteed(ts);
  ASSERT_TRUE(g.any);
  EXPECT_EQ(g.top, 5);
  EXPECT_EQ(closed_gpus(ts[0], ts, g, {}), 0u) << "the top priority";
  EXPECT_EQ(closed_gpus(ts[2], ts, g, {}), 0u) << "equal priorities share";
  EXPECT_EQ(closed_gpus(ts[1], ts, g, {}), 0b11u) << "below both, on its GPUs";
  EXPECT_EQ(closed_gpus(ts[3], ts, g, {}), 0b010u) << "a best-effort tenant: only where one works";
}

TEST(PriorityStages, SpatialTenantsNeverCloseEachOther) {
  std::vector<PriorityTenant> ts = {guaranteed(1, 0, 0b1), best_effort(2, 0b1), guaranteed(3, 0, 0b1, false)};
  ts[0].domain = ts[1].domain = "d";
  const GuaranteedActive g = active_guaranteed(ts);
  EXPECT_EQ(closed_gpus(ts[1], ts, g, {}), 0u);
  ts[0].domain = "";
  EXPECT_EQ(closed_gpus(ts[1], ts, active_guaranteed(ts), {}), 0b1u) << "time-shared guaranteed tenant";
}

TEST(PriorityStages, AnotherTenantsSliceClosesAllOfItsGpus) {
  const std::vector<PriorityTenant> ts = {best_effort(1, 0b01), best_effort(2, 0b11, false)};
  std::map<uint64_t, BeRotation> rotations;
  rotations[0b01].owner = 1;
  const GuaranteedActive g = active_guaranteed(ts);
  EXPECT_FALSE(g.any);
  EXPECT_EQ(closed_gpus(ts[0], ts, g, rotations), 0u) << "its own slice";
  EXPECT_EQ(closed_gpus(ts[1], ts, g, rotations), 0b11u) << "idle, it would take the GPU from the owner";
  rotations[0b01].paused = true;
  EXPECT_EQ(closed_gpus(ts[1], ts, g, rotations), 0u) << "a paused slice holds nothing";
}

TEST(PriorityStages, RunnableBestEffortInIdOrder) {
  std::vector<PriorityTenant> ts = {best_effort(5, 1), best_effort(2, 1, false), best_effort(3, 1),
                                    guaranteed(1, 0, 1), best_effort(4, 1)};
  ts[1].waiting = true;     // waiting counts
  ts[4].domain = "d";       // spatial: not in the rotation
  std::vector<uint32_t> ids;
  for (const PriorityTenant* t : runnable_best_effort(ts)) ids.push_back(t->id);
  EXPECT_EQ(ids, (std::vector<uint32_t>{2, 3, 5}));
}

TEST(PriorityStages, OneReprievePerCooldown) {
  PriorityParams p;
  p.signal_grace_ms = 1000;
  EXPECT_EQ(reprieve_cooldown_ns(p), 20'000 * kMs) << "20 graces";
  p.signal_grace_ms = 100;
  EXPECT_EQ(reprieve_cooldown_ns(p), 10'000 * kMs) << "at least 10 s";

  std::vector<PriorityTenant> ts = {best_effort(1, 1, false)};
  ts[0].waiting = ts[0].signalled = true;
  PriorityState st;
  EXPECT_EQ(update_reprieves(ts, p, &st, 0), 100 * kMs);
  EXPECT_EQ(st.reprieve_until_ns.count(1), 1u);
  EXPECT_EQ(update_reprieves(ts, p, &st, 100 * kMs), 0u) << "run out, and none again within the cooldown";
  EXPECT_EQ(st.reprieve_until_ns.count(1), 0u);
  EXPECT_EQ(update_reprieves(ts, p, &st, 10'000 * kMs), 10'100 * kMs) << "the cooldown passed";
  EXPECT_EQ(update_reprieves({}, p, &st, 10'001 * kMs), 0u) << "gone: its reprieve ends";
  EXPECT_EQ(st.reprieve_granted_ns.count("tenant 1"), 1u) << "kept for the cooldown, for a tenant that reconnects";
}

// Issue #62 item 3: the cooldown was per tenant, so ten processes of one user, signalled in turn,
// had ten reprieves per cooldown: a best-effort gate open beside a guaranteed tenant end to end. It
// is per owner (a user, a claim): its tenants signalled at once share one reprieve (Ctrl-C to a
// process group), later ones wait for the cooldown; another owner's tenant has its own.
TEST(PriorityStages, OneReprievePerOwnerPerCooldown) {
  PriorityParams p;
  p.signal_grace_ms = 1000;
  std::vector<PriorityTenant> ts;
  for (uint32_t id = 1; id <= 10; ++id) {
    ts.push_back(best_effort(id, 1, false));
    ts.back().owner = "uid 65534";
  }
  ts.push_back(best_effort(11, 1, false));
  ts.back().owner = "claim 11111111-2222-4333-8444-555555555555";
  auto signal = [&](uint32_t id) { ts[id - 1].waiting = ts[id - 1].signalled = true; };
  PriorityState st;
  signal(1);
  signal(2);
  EXPECT_EQ(update_reprieves(ts, p, &st, 0), 1000 * kMs);
  EXPECT_EQ(st.reprieve_until_ns.size(), 2u) << "signalled together: one reprieve, shared";
  signal(3);
  EXPECT_EQ(update_reprieves(ts, p, &st, 500 * kMs), 1000 * kMs);
  EXPECT_EQ(st.reprieve_until_ns.at(3), 1000 * kMs) << "joins the running one, and ends with it";
  for (uint32_t id = 4; id <= 10; ++id) {  // the others, one a second: each waits for the cooldown
    signal(id);
    update_reprieves(ts, p, &st, (id - 2) * 1000 * kMs);
    EXPECT_EQ(st.reprieve_until_ns.count(id), 0u) << "tenant " << id;
  }
  signal(11);  // another owner's
  update_reprieves(ts, p, &st, 9000 * kMs);
  EXPECT_EQ(st.reprieve_until_ns.count(11), 1u);
  EXPECT_EQ(update_reprieves(ts, p, &st, 20'000 * kMs), 21'000 * kMs) << "the cooldown passed";
  EXPECT_EQ(st.reprieve_until_ns.size(), 10u) << "its ten, still signalled: one reprieve, shared";
}

}  // namespace
}  // namespace gpuos::policies::priority
