// SPDX-License-Identifier: Apache-2.0
// The priority policy's decision function, table-driven, and its hooks against a table of tenants.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "policies/priority/priority.h"
#include "policies/registry.h"
#include "gate_table.h"

namespace gpuos::policies {
namespace {

constexpr uint32_t O = GPUOS_GATE_OPEN;
constexpr uint32_t C = GPUOS_GATE_CLOSED;
constexpr uint64_t kMs = 1000000;

PriorityTenant G(uint32_t id, int32_t prio, bool busy = false, bool waiting = false) {
  return PriorityTenant{id, GPUOS_CLASS_GUARANTEED, prio, 100, busy, waiting, false, ""};
}
PriorityTenant B(uint32_t id, uint32_t weight, bool busy = false, bool waiting = false) {
  return PriorityTenant{id, GPUOS_CLASS_BEST_EFFORT, 0, weight, busy, waiting, false, ""};
}
// The same tenant in spatial domain `d`.
PriorityTenant in(const char* d, PriorityTenant t) {
  t.domain = d;
  return t;
}
// The same tenant working on GPUs `mask` (bit i = GPU i).
PriorityTenant on(uint64_t mask, PriorityTenant t) {
  t.gpus = mask;
  return t;
}
PriorityTenant pinned(PriorityTenant t) {
  t.pinned = true;
  return t;
}

std::map<uint32_t, uint32_t> gates_of(const PriorityDecision& d) {
  std::map<uint32_t, uint32_t> m;
  for (const GateDecision& g : d.gates) m[g.id] = g.gate;
  return m;
}

// The GPUs each open gate is closed on all the same (GateAction::closed_gpus); none listed: 0.
std::map<uint32_t, uint64_t> closed_gpus_of(const PriorityDecision& d) {
  std::map<uint32_t, uint64_t> m;
  for (const GateDecision& g : d.gates) {
    if (g.closed_gpus != 0) m[g.id] = g.closed_gpus;
  }
  return m;
}

PriorityParams params(uint32_t slice_ms = 50) { return PriorityParams{2, 200, slice_ms}; }

// One decision from a fresh state.
struct Case {
  const char* name;
  std::vector<PriorityTenant> tenants;
  std::map<uint32_t, uint32_t> want;
  bool timer = false;  // a slice timer is expected
  friend std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }
};

class OneDecision : public ::testing::TestWithParam<Case> {};

TEST_P(OneDecision, Gates) {
  const Case& c = GetParam();
  PriorityState st;
  PriorityDecision d = decide_priority(c.tenants, params(), &st, 1000 * kMs);
  EXPECT_EQ(gates_of(d), c.want);
  ASSERT_EQ(d.gates.size(), c.tenants.size());
  for (std::size_t i = 0; i < d.gates.size(); ++i) EXPECT_EQ(d.gates[i].id, c.tenants[i].id) << "input order";
  EXPECT_EQ(d.next_tick_ns != 0, c.timer);
}

// Mixed mode: tenants of one spatial domain share in space and never gate each other; a guaranteed
// tenant still gates everything outside its domain in time.
TEST(PriorityDomains, OneDomainSharesInSpaceOthersAreGatedInTime) {
  PriorityState st;
  auto d = gates_of(decide_priority({in("a", G(1, 0, true)), in("a", B(2, 100, true)), B(3, 100, true),
                                     in("b", B(4, 100, true))},
                                    params(), &st, 1000 * kMs));
  EXPECT_EQ(d, (std::map<uint32_t, uint32_t>{{1, O}, {2, O}, {3, C}, {4, C}}));
}

TEST(PriorityDomains, GuaranteedOfOneDomainDoNotGateEachOther) {
  PriorityState st;
  auto d = gates_of(decide_priority({in("a", G(1, 5, true)), in("a", G(2, 0, true)), G(3, 0, true)}, params(), &st,
                                    1000 * kMs));
  EXPECT_EQ(d, (std::map<uint32_t, uint32_t>{{1, O}, {2, O}, {3, C}}));
}

TEST(PriorityDomains, DomainBestEffortTakesNoPartInTheRotation) {
  PriorityState st;
  auto d = decide_priority({in("a", B(1, 100, true)), B(2, 100, true)}, params(), &st, 1000 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, O}}));  // one runnable BE outside: no slices
  EXPECT_EQ(d.next_tick_ns, 0u);
}

// Several GPUs: a guaranteed tenant gates the tenants of its own GPUs only; one whose GPUs are not
// known yet counts as on every GPU, both ways.
TEST(PriorityGpus, AGuaranteedTenantGatesOnlyTheTenantsOfItsGpus) {
  PriorityState st;
  auto d = gates_of(decide_priority({on(0b01, G(1, 0, true)), on(0b01, B(2, 100, true)), on(0b10, B(3, 100, true)),
                                     on(0b11, B(4, 100, true)), B(5, 100, true), on(0b10, G(6, -1, true)),
                                     on(0b01, G(7, -5, true))},
                                    params(), &st, 1000 * kMs));
  // 2 (GPU 0) and 4 (GPUs 0 and 1) share GPU 0 with 1; 5 is on no known GPU: every one. 3 (GPU 1)
  // shares with 6, a guaranteed tenant too. 6 (GPU 1) has no higher guaranteed tenant on its GPU;
  // 7 (GPU 0) has 1 above it.
  EXPECT_EQ(d, (std::map<uint32_t, uint32_t>{{1, O}, {2, C}, {3, C}, {4, C}, {5, C}, {6, O}, {7, C}}));
  st = PriorityState{};
  d = gates_of(decide_priority({on(0b01, G(1, 0, true)), on(0b10, B(3, 100, true))}, params(), &st, 1000 * kMs));
  EXPECT_EQ(d, (std::map<uint32_t, uint32_t>{{1, O}, {3, O}}));
  st = PriorityState{};
  d = gates_of(decide_priority({G(1, 0, true), on(0b10, B(3, 100, true))}, params(), &st, 1000 * kMs));
  EXPECT_EQ(d, (std::map<uint32_t, uint32_t>{{1, O}, {3, C}}));  // (1's GPUs not known yet: all)
}

TEST(PriorityGpus, ATenantOnSeveralGpusIsClosedOnlyWhereAGuaranteedTenantWorks) {
  using Gpus = std::map<uint32_t, uint64_t>;
  PriorityState st;
  // 2 drives GPUs 0 and 1; the guaranteed tenant works on GPU 0: 2 may go on launching on GPU 1.
  auto d = decide_priority({on(0b01, G(1, 0, true)), on(0b11, B(2, 100, true))}, params(), &st, 1000 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, O}}));
  EXPECT_EQ(closed_gpus_of(d), (Gpus{{2, 0b01}}));
  // Idle: open everywhere.
  d = decide_priority({on(0b01, G(1, 0)), on(0b11, B(2, 100, true))}, params(), &st, 1001 * kMs);
  EXPECT_EQ(closed_gpus_of(d), Gpus{});
  // Its GPUs not known yet, or all of them the guaranteed tenant's: the whole gate.
  st = PriorityState{};
  d = decide_priority({on(0b01, G(1, 0, true)), B(2, 100, true), on(0b01, B(3, 100, true))}, params(), &st, 1000 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, C}, {3, C}}));
  EXPECT_EQ(closed_gpus_of(d), Gpus{});
  // A lower-priority guaranteed tenant, and a best-effort one of a spatial domain the guaranteed
  // tenant is not in, likewise.
  st = PriorityState{};
  d = decide_priority({on(0b01, G(1, 0, true)), on(0b11, G(3, -1, true)), in("d", on(0b110, B(4, 100, true)))}, params(),
                      &st, 1000 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {3, O}, {4, O}}));
  EXPECT_EQ(closed_gpus_of(d), (Gpus{{3, 0b01}, {4, 0b010}}));
  // Woken by a signal at its gate: open on every GPU for the grace.
  st = PriorityState{};
  PriorityTenant sig = on(0b11, B(2, 100, true, true));
  sig.signalled = true;
  d = decide_priority({on(0b01, G(1, 0, true)), sig}, params(), &st, 1000 * kMs);
  EXPECT_EQ(closed_gpus_of(d), Gpus{});
  // Best-effort rotation: a slice holds all of its owner's group's GPUs; paused for the guaranteed
  // tenant, each runs where no guaranteed tenant works (2 and 5 share GPU 1 meanwhile).
  st = PriorityState{};
  std::vector<PriorityTenant> t = {on(0b01, G(1, 0)), on(0b11, B(2, 100, true)), on(0b10, B(5, 100, true))};
  d = decide_priority(t, params(), &st, 0);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, O}, {5, C}}));
  t[0] = on(0b01, G(1, 0, true));
  d = decide_priority(t, params(), &st, 10 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, O}, {5, O}}));
  EXPECT_EQ(closed_gpus_of(d), (Gpus{{2, 0b01}}));
}

TEST(PriorityGpus, AGuaranteedTenantOnOneGpuLeavesTheRotationOfAnotherAlone) {
  PriorityState st;
  // Two BE on GPU 1 rotate.
  auto d = decide_priority({on(0b01, G(1, 0)), on(0b10, B(2, 100, true)), on(0b10, B(3, 100, true))}, params(), &st,
                           1000 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, O}, {3, C}}));
  // The guaranteed tenant on GPU 0 gets busy: GPU 1's rotation goes on, its slice ends on time.
  d = decide_priority({on(0b01, G(1, 0, true)), on(0b10, B(2, 100, true)), on(0b10, B(3, 100, true))}, params(), &st,
                      1010 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, O}, {3, C}}));
  ASSERT_NE(st.rotation_of(2), nullptr);
  EXPECT_FALSE(st.rotation_of(2)->paused);
  EXPECT_EQ(d.next_tick_ns, 1050 * kMs);
  d = decide_priority({on(0b01, G(1, 0, true)), on(0b10, B(2, 100, true)), on(0b10, B(3, 100, true))}, params(), &st,
                      1050 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, C}, {3, O}}));
}

TEST(PriorityGpus, BestEffortOfDifferentGpusRotateApartAndNeverWaitForEachOther) {
  // The ranks of a job, one per GPU (2 on GPU 0, 3 on GPU 1), and another job's BE on each GPU:
  // each GPU rotates its own two; a rank never waits for the other GPU's slices.
  PriorityState st;
  std::vector<PriorityTenant> t = {on(0b01, B(2, 100, true)), on(0b10, B(3, 100, true)), on(0b01, B(4, 100, true, true)),
                                   on(0b10, B(5, 100, true, true))};
  auto d = decide_priority(t, params(), &st, 0);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{2, O}, {3, O}, {4, C}, {5, C}}));
  EXPECT_EQ(st.rotations.size(), 2u);
  d = decide_priority(t, params(), &st, 50 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{2, C}, {3, C}, {4, O}, {5, O}}));
  // Alone on its GPUs, a BE is not part of any rotation: open.
  PriorityState st2;
  d = decide_priority({on(0b01, B(2, 100, true)), on(0b10, B(3, 100, true))}, params(), &st2, 0);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{2, O}, {3, O}}));
  EXPECT_EQ(d.next_tick_ns, 0u);
  // One on both GPUs joins the two into one rotation; one whose GPUs are unknown too.
  PriorityState st3;
  d = decide_priority({on(0b01, B(2, 100, true)), on(0b10, B(3, 100, true)), on(0b11, B(4, 100, true))}, params(),
                      &st3, 0);
  EXPECT_EQ(st3.rotations.size(), 1u);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{2, O}, {3, C}, {4, C}}));
  PriorityState st4;
  d = decide_priority({on(0b01, B(2, 100, true)), on(0b10, B(3, 100, true)), B(4, 100, true)}, params(), &st4, 0);
  EXPECT_EQ(st4.rotations.size(), 1u);
}

TEST(PriorityGpus, AGuaranteedTenantPausesOnlyTheRotationOfItsGpu) {
  PriorityState st;
  std::vector<PriorityTenant> t = {on(0b01, G(1, 0)), on(0b01, B(2, 100, true)), on(0b01, B(3, 100, true)),
                                   on(0b10, B(4, 100, true)), on(0b10, B(5, 100, true))};
  decide_priority(t, params(), &st, 0);
  t[0] = on(0b01, G(1, 0, true));
  auto d = decide_priority(t, params(), &st, 20 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, C}, {3, C}, {4, O}, {5, C}}));
  EXPECT_TRUE(st.rotation_of(2)->paused);
  EXPECT_FALSE(st.rotation_of(4)->paused);
  EXPECT_EQ(d.next_tick_ns, 50 * kMs);  // GPU 1's slice still ends on time
  t[0] = on(0b01, G(1, 0));
  d = decide_priority(t, params(), &st, 500 * kMs);
  EXPECT_EQ(gates_of(d)[2], O);  // GPU 0's interrupted slice resumes with the 30 ms it had left
  EXPECT_EQ(st.rotation_of(2)->slice_end_ns, 530 * kMs);
}

INSTANTIATE_TEST_SUITE_P(
    Table, OneDecision,
    ::testing::Values(
        Case{"nobody", {}, {}},
        Case{"hp_busy_closes_every_be", {G(1, 0, true), B(2, 100, true), B(3, 100), B(4, 50, false, true)},
             {{1, O}, {2, C}, {3, C}, {4, C}}},
        Case{"hp_waiting_counts_as_busy", {G(1, 0, false, true), B(2, 100, true)}, {{1, O}, {2, C}}},
        Case{"hp_idle_opens_every_be", {G(1, 0), B(2, 100, true), B(3, 100)}, {{1, O}, {2, O}, {3, O}}},
        Case{"equal_priorities_share", {G(1, 5, true), G(2, 5, true), B(3, 100, true)}, {{1, O}, {2, O}, {3, C}}},
        Case{"higher_priority_gates_lower", {G(1, 1, true), G(2, 9, true), G(3, 9), B(4, 100)},
             {{1, C}, {2, O}, {3, O}, {4, C}}},
        Case{"lower_priority_busy_does_not_gate_higher_idle", {G(1, 9), G(2, 1, true)}, {{1, O}, {2, O}}},
        Case{"negative_priorities", {G(1, -5, true), G(2, -1, true)}, {{1, C}, {2, O}}},
        Case{"be_never_gates_guaranteed", {B(1, 10000, true, true), G(2, 0)}, {{1, O}, {2, O}}},
        Case{"one_runnable_be_all_open", {B(1, 100, true), B(2, 100), B(3, 100)}, {{1, O}, {2, O}, {3, O}}},
        Case{"two_runnable_be_one_owner", {B(1, 100, false, true), B(2, 100, true, true), B(3, 100)},
             {{1, O}, {2, C}, {3, C}}, true},
        Case{"rotation_starts_with_the_running_be", {B(1, 100, false, true), B(2, 100, true, false)},
             {{1, C}, {2, O}}, true},
        Case{"pinned_be_is_not_runnable", {pinned(B(1, 100, false, true)), B(2, 100, true)}, {{1, O}, {2, O}}},
        Case{"pinned_waiting_hp_does_not_hold_be", {pinned(G(1, 0, false, true)), B(2, 100, true)},
             {{1, O}, {2, O}}},
        Case{"pinned_busy_hp_still_holds_be", {pinned(G(1, 0, true, false)), B(2, 100, true)}, {{1, O}, {2, C}}}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(Priority, SliceLengthFollowsWeight) {
  EXPECT_EQ(be_slice_ns(params(50), 100), 50 * kMs);
  EXPECT_EQ(be_slice_ns(params(50), 300), 150 * kMs);
  EXPECT_EQ(be_slice_ns(params(50), 1), 1 * kMs);  // at least 1 ms
  EXPECT_EQ(be_slice_ns(params(10000), 10000), 1000000ull * kMs);
}

TEST(Priority, TwoBestEffortRotateByTimerWithWeightedSlices) {
  PriorityParams p = params(10);
  PriorityState st;
  std::vector<PriorityTenant> t = {B(1, 100, false, true), B(2, 300, false, true)};
  uint64_t now = 0;
  PriorityDecision d = decide_priority(t, p, &st, now);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, C}}));
  EXPECT_EQ(d.next_tick_ns, 10 * kMs);
  // Before the slice ends nothing changes.
  d = decide_priority(t, p, &st, 9 * kMs);
  EXPECT_EQ(st.owner(), 1u);
  EXPECT_EQ(d.next_tick_ns, 10 * kMs);
  d = decide_priority(t, p, &st, 10 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, C}, {2, O}}));
  EXPECT_EQ(d.next_tick_ns, 40 * kMs);  // weight 300: 30 ms
  d = decide_priority(t, p, &st, 40 * kMs);
  EXPECT_EQ(st.owner(), 1u);
  // Over many rounds driven only by the timer, granted time follows the weights (1:3).
  now = 40 * kMs;
  for (int i = 0; i < 200; ++i) {
    now = d.next_tick_ns;
    d = decide_priority(t, p, &st, now);
  }
  double a = static_cast<double>(st.granted_ns[1]);
  double b = static_cast<double>(st.granted_ns[2]);
  EXPECT_NEAR(b / a, 3.0, 0.05);
  EXPECT_NEAR(a + b, static_cast<double>(now), 1e-3 * static_cast<double>(now));
}

TEST(Priority, OwnerGoingIdleHandsOverAtOnce) {
  PriorityState st;
  std::vector<PriorityTenant> t = {B(1, 100, true, true), B(2, 100, false, true), B(3, 100, false, true)};
  decide_priority(t, params(), &st, 0);
  ASSERT_EQ(st.owner(), 1u);
  t[0] = B(1, 100);  // idle long before its slice ends
  PriorityDecision d = decide_priority(t, params(), &st, 5 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, C}, {2, O}, {3, C}}));
  EXPECT_EQ(d.next_tick_ns, 55 * kMs);
  EXPECT_EQ(st.granted_ns[1], 5 * kMs);
  // The next owner gone idle too: one runnable left, every BE gate opens and the timer stops.
  t[1] = B(2, 100);
  d = decide_priority(t, params(), &st, 6 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, O}, {3, O}}));
  EXPECT_EQ(d.next_tick_ns, 0u);
  EXPECT_EQ(st.owner(), 0u);
}

TEST(Priority, ASignalledBestEffortGetsAGraceToActOnIt) {
  // HP busy all along; BE 2 waits at its closed gate. A signal wakes its thread (SIGTERM): its gate
  // opens for signal_grace_ms (1 s), then closes again; BE 3, not signalled, stays closed.
  PriorityState st;
  std::vector<PriorityTenant> t = {G(1, 0, true), B(2, 100, false, true), B(3, 100, false, true)};
  PriorityDecision d = decide_priority(t, params(), &st, 0);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, C}, {3, C}}));
  t[1].signalled = true;
  d = decide_priority(t, params(), &st, 10 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, O}, {3, C}}));
  EXPECT_EQ(d.next_tick_ns, 1010 * kMs);  // the grace's end
  t[1] = B(2, 100, true, false);  // through its gate: running, no longer signalled
  d = decide_priority(t, params(), &st, 500 * kMs);
  EXPECT_EQ(gates_of(d)[2], O) << "the grace lasts, for what its handler does next";
  d = decide_priority(t, params(), &st, 1010 * kMs);
  EXPECT_EQ(gates_of(d)[2], C);
  EXPECT_EQ(d.next_tick_ns, 0u);
  // A tenant that keeps saying "signalled" (the word is its own) gets one grace per 20 graces
  // (20 s here), not graces end to end beside the guaranteed tenant.
  t[1] = B(2, 100, false, true);
  t[1].signalled = true;
  d = decide_priority(t, params(), &st, 1020 * kMs);
  EXPECT_EQ(gates_of(d)[2], C);
  d = decide_priority(t, params(), &st, 19000 * kMs);
  EXPECT_EQ(gates_of(d)[2], C);
  d = decide_priority(t, params(), &st, 20020 * kMs);
  EXPECT_EQ(gates_of(d)[2], O) << "the cooldown is over";
  // Off (0), or pinned by an admin: no grace.
  PriorityState st2;
  t[1] = B(2, 100, false, true);
  t[1].signalled = true;
  PriorityParams off = params();
  off.signal_grace_ms = 0;
  EXPECT_EQ(gates_of(decide_priority(t, off, &st2, 0))[2], C);
  PriorityState st3;
  EXPECT_EQ(gates_of(decide_priority({t[0], pinned(t[1])}, params(), &st3, 0))[2], C);
}

TEST(Priority, GuaranteedPausesTheSliceAndResumesWhatIsLeft) {
  PriorityState st;
  std::vector<PriorityTenant> t = {G(1, 0), B(2, 100, true, true), B(3, 100, false, true)};
  decide_priority(t, params(), &st, 0);
  ASSERT_EQ(st.owner(), 2u);
  t[0] = G(1, 0, true);
  PriorityDecision d = decide_priority(t, params(), &st, 20 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, C}, {3, C}}));
  EXPECT_EQ(d.next_tick_ns, 0u);
  t[0] = G(1, 0);
  d = decide_priority(t, params(), &st, 500 * kMs);
  EXPECT_EQ(gates_of(d), (std::map<uint32_t, uint32_t>{{1, O}, {2, O}, {3, C}}));
  EXPECT_EQ(d.next_tick_ns, 530 * kMs);  // 30 ms were left of tenant 2's slice
  EXPECT_EQ(st.granted_ns[2], 20 * kMs);  // the guaranteed time is not charged to it
}

using testing::GateTable;
using slots::Event;

TEST(PriorityPolicy, AdmissionAndReactions) {
  PriorityPolicy pol(PriorityParams{3, 250, 50});
  GateTable g;
  slots::GateTenant hp;
  hp.id = 1;
  hp.tenant_class = GPUOS_CLASS_GUARANTEED;
  slots::Admission a;
  pol.admit(hp, &a);
  EXPECT_EQ(a.max_inflight, 0u);
  EXPECT_EQ(a.idle_grace_us, 250u);
  EXPECT_EQ(a.initial_gate, O);
  g.add(1, GPUOS_CLASS_GUARANTEED);
  g.run(pol, 0, Event::kAdmitted, 1);

  slots::GateTenant be;
  be.id = 2;
  be.tenant_class = GPUOS_CLASS_BEST_EFFORT;
  a = slots::Admission{};
  pol.admit(be, &a);
  EXPECT_EQ(a.max_inflight, 3u);
  EXPECT_EQ(a.idle_grace_us, 250u);
  EXPECT_EQ(a.initial_gate, O);  // nobody busy
  g.add(2, GPUOS_CLASS_BEST_EFFORT);
  g.run(pol, 0, Event::kAdmitted, 2);
  EXPECT_EQ(g.gate(2), O);

  // HP busy -> ACTIVITY -> the BE closes.
  g.live[1].busy = true;
  g.run(pol, 1 * kMs, Event::kActivity, 1);
  EXPECT_EQ(g.gate(2), C);
  EXPECT_EQ(g.gate(1), O);

  // A BE registering while HP is busy starts closed, and stays closed once admitted.
  slots::GateTenant be2;
  be2.id = 3;
  be2.tenant_class = GPUOS_CLASS_BEST_EFFORT;
  a = slots::Admission{};
  pol.admit(be2, &a);
  EXPECT_EQ(a.initial_gate, C);
  g.add(3, GPUOS_CLASS_BEST_EFFORT, 0, 100, a.initial_gate);
  g.run(pol, 1 * kMs, Event::kAdmitted, 3);
  EXPECT_EQ(g.gate(3), C);

  // The busy HP exits: the BEs are released at once.
  g.live.erase(1);
  pol.on_exit(1);
  g.run(pol, 2 * kMs, Event::kExit, 1);
  EXPECT_EQ(g.gate(2), O);
  EXPECT_EQ(g.gate(3), O);
  EXPECT_EQ(g.next_tick_ns, 0u);

  // Two BEs waiting: one owner; the tick at the slice end hands over.
  g.live[2].waiting = true;
  g.live[3].waiting = true;
  g.run(pol, 3 * kMs, Event::kActivity, 3);
  EXPECT_EQ(g.gate(2), O);
  EXPECT_EQ(g.gate(3), C);
  EXPECT_EQ(g.next_tick_ns, 53 * kMs);
  g.run(pol, 53 * kMs);
  EXPECT_EQ(g.gate(2), C);
  EXPECT_EQ(g.gate(3), O);

  // Unchanged decisions ask for nothing.
  EXPECT_TRUE(pol.decide(g.view(54 * kMs, Event::kTick)).gates.empty());
}

TEST(PriorityPolicy, LongBestEffortLaunchesWaitUntilTheGuaranteedTenantHasBeenIdleAWhile) {
  PriorityParams params;
  params.be_max_kernel_us = 2000;
  PriorityPolicy pol(params);
  slots::GateTenant be;
  be.id = 2;
  be.tenant_class = GPUOS_CLASS_BEST_EFFORT;
  slots::Admission a;
  pol.admit(be, &a);
  EXPECT_EQ(a.sample_period, kLongLaunchSamplePeriod) << "pacing needs its launches' durations";
  GateTable g;
  g.add(1, GPUOS_CLASS_GUARANTEED);
  g.add(2, GPUOS_CLASS_BEST_EFFORT);
  g.live[2].busy = true;
  g.run(pol, 0, Event::kAdmitted, 2);
  EXPECT_EQ(g.gate(2), O);
  EXPECT_EQ(g.pacing[2].permille, 0u) << "a guaranteed tenant never seen busy holds nothing";
  g.live[1].busy = true;
  g.run(pol, 1 * kMs, Event::kActivity, 1);
  EXPECT_EQ(g.gate(2), C);
  // A pause between its steps: the gate opens (work conserving), at the full share, with launches
  // longer than 2 ms held until it has been idle 20 ms.
  g.live[1].busy = false;
  g.run(pol, 5 * kMs, Event::kActivity, 1);
  EXPECT_EQ(g.gate(2), O);
  EXPECT_EQ(g.pacing[2].permille, 1000u);
  EXPECT_EQ(g.pacing[2].max_kernel_us, 2000u);
  EXPECT_EQ(g.next_tick_ns, 25 * kMs);
  g.run(pol, 15 * kMs);
  EXPECT_EQ(g.pacing[2].permille, 1000u) << "still within the hold";
  g.run(pol, 25 * kMs);
  EXPECT_EQ(g.gate(2), O);
  EXPECT_EQ(g.pacing[2].permille, 0u) << "idle 20 ms: anything goes";
  EXPECT_EQ(g.next_tick_ns, 0u);
  EXPECT_TRUE(pol.decide(g.view(26 * kMs, Event::kTick)).gates.empty()) << "unchanged: nothing asked";
  // Off (the default): no pacing, no timing.
  PriorityPolicy off(PriorityParams{});
  a = slots::Admission{};
  off.admit(be, &a);
  EXPECT_EQ(a.sample_period, 0u);
  GateTable h;
  h.add(1, GPUOS_CLASS_GUARANTEED).busy = true;
  h.add(2, GPUOS_CLASS_BEST_EFFORT).busy = true;
  h.run(off, 1 * kMs, Event::kActivity, 1);
  h.live[1].busy = false;
  h.run(off, 5 * kMs, Event::kActivity, 1);
  EXPECT_EQ(h.gate(2), O);
  EXPECT_EQ(h.pacing[2].permille, 0u);
}

TEST(PriorityPolicy, PinnedTenantsAreLeftAlone) {
  PriorityPolicy pol(PriorityParams{});
  GateTable g;
  g.add(1, GPUOS_CLASS_GUARANTEED);
  g.add(2, GPUOS_CLASS_BEST_EFFORT);
  g.live[1].busy = true;
  g.live[2].pinned = true;  // admin left it OPEN and pinned (not reachable through the core, but the
                            // policy must not even ask)
  EXPECT_TRUE(pol.decide(g.view(0, Event::kActivity, 1)).gates.empty());
}

// The priority policy gpuosd makes from a config's text; null (and why) if it makes none.
std::unique_ptr<slots::TimeGate> priority_from(const char* text, std::string* why) {
  ConfigResult r = parse_config(text, "t.toml");
  if (!r) {
    *why = r.error;
    return nullptr;
  }
  PolicySet set;
  if (!make_policies(*r.config, &set, why)) return nullptr;
  return std::move(set.time_gate);
}

TEST(PriorityPolicy, ItsSectionAndItsKeysOfBeforeTheSlots) {
  std::string why;
  // [policy.priority] and the [scheduler] keys of before both reach the policy.
  for (const char* text : {"[scheduler]\npolicy = \"priority\"\n[policy.priority]\nbe_max_inflight = 7\n",
                           "[scheduler]\npolicy = \"priority\"\nbe_max_inflight = 7\n"}) {
    const auto gate = priority_from(text, &why);
    auto* p = dynamic_cast<const PriorityPolicy*>(gate.get());
    ASSERT_NE(p, nullptr) << why;
    EXPECT_EQ(p->params().be_max_inflight, 7u);
    EXPECT_EQ(p->params().be_slice_ms, 50u);  // untouched keys keep their defaults
  }
  // The long-launch keys are priority's own: the budget policy bounds long launches by its budgets.
  const auto gate = priority_from("[scheduler]\npolicy = \"priority\"\n[policy.priority]\nbe_max_kernel_us = 3000\n"
                                  "be_idle_hold_ms = 50\n", &why);
  auto* p = dynamic_cast<const PriorityPolicy*>(gate.get());
  ASSERT_NE(p, nullptr) << why;
  EXPECT_EQ(p->params().be_max_kernel_us, 3000u);
  EXPECT_EQ(p->params().be_idle_hold_ms, 50u);
  EXPECT_EQ(priority_from("[scheduler]\npolicy = \"budget\"\n[policy.budget]\nbe_max_kernel_us = 3000\n", &why), nullptr);
  EXPECT_NE(why.find("be_max_kernel_us"), std::string::npos) << why;
}

}  // namespace
}  // namespace gpuos::policies
