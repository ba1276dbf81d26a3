// SPDX-License-Identifier: Apache-2.0
// Latency budgets through the core, without sockets: a budget declared at registration (or the
// config's default) reaches the time gate and LIST; the tenant's timed launches (its timing_ring)
// reach the policy, checked; the budget policy's pacing lands in the best-effort tenant's grant
// block; bad budgets are refused.
#include <gtest/gtest.h>

#include <atomic>

#include "common/ipc.h"
#include "daemon/core/core.h"
#include "policies/budget/budget.h"
#include "tenant_side.h"

namespace gpuos::daemon {
namespace {

using tenant_side::GiB;
using tenant_side::put;
using tenant_side::TenantSide;

constexpr uint64_t kMs = 1'000'000;

uint32_t word(const uint32_t& w) { return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(w)).load(); }

struct BudgetFixture : ::testing::Test {
  std::unique_ptr<Core> core;
  uint64_t mono = 1'000 * kMs;
  std::vector<TenantSide> tenants;
  slots::GateView last_view;

  void make_core(uint32_t default_budget = 0, policies::budget::BudgetParams params = {}) {
    CoreOptions o;
    o.gpus.push_back(GpuInfo{0, "Sim", "GPU-0", 132, 4 * GiB, {}, 0});
    o.mono_ns = [this] { return mono; };
    o.space_admit = [](const std::string& d, const Peer&) { return d == "serve" ? std::string() : "no"; };
    o.default_max_slowdown_permille = default_budget;
    o.time_gate = std::make_unique<policies::budget::BudgetPolicy>(params);
    core = std::make_unique<Core>(std::move(o));
  }
  void TearDown() override {
    for (TenantSide& t : tenants) tenant_side::unmap(t);
  }
  Outcome try_add(uint32_t cls, uint32_t budget, const char* domain = "") {
    TenantSide t;
    t.conn.id = tenants.size() + 1;
    t.conn.peer.pid = 100 + static_cast<pid_t>(tenants.size());
    t.conn.peer.uid = 1000;
    gpuos_msg_register m = tenant_side::registration(t.conn.peer.pid, cls);
    m.max_slowdown_permille = budget;
    copy_name(m.space_domain, sizeof(m.space_domain), domain);
    Outcome o = core->handle_message(t.conn, &m, sizeof(m));
    if (o.registered != 0) {
      tenant_side::adopt(t, o);
      tenants.push_back(t);
    }
    return o;
  }
  std::size_t add(uint32_t cls, uint32_t budget = 0, const char* domain = "") {
    EXPECT_NE(try_add(cls, budget, domain).registered, 0u);
    return tenants.size() - 1;
  }
  void busy(std::size_t i) {
    put(tenants[i].cb->busy, 1u);
    gpuos_msg_activity m{};
    init_header(&m.hdr, GPUOS_MSG_ACTIVITY, sizeof(m), 2);
    m.busy = 1;
    core->handle_message(tenants[i].conn, &m, sizeof(m));
  }
  void timed(std::size_t i, uint64_t key, uint64_t ns) { tenant_side::timed_launch(tenants[i].cb, key, ns); }
  gpuos_msg_tenant_info info(std::size_t i) {
    for (const TenantStat& s : core->tenant_stats(mono)) {
      if (s.info.pid == tenants[i].conn.peer.pid) return s.info;
    }
    ADD_FAILURE() << "no tenant " << i;
    return {};
  }
};

TEST_F(BudgetFixture, TheBudgetIsGrantedToGuaranteedTenantsOnlyAndShown) {
  make_core(/*default_budget=*/1500);
  const std::size_t hp = add(GPUOS_CLASS_GUARANTEED, 1250);
  const std::size_t dflt = add(GPUOS_CLASS_GUARANTEED);
  const std::size_t be = add(GPUOS_CLASS_BEST_EFFORT, 1250);
  EXPECT_EQ(info(hp).max_slowdown_permille, 1250u);
  EXPECT_EQ(info(dflt).max_slowdown_permille, 1500u) << "the config's default";
  EXPECT_EQ(info(be).max_slowdown_permille, 0u) << "a best-effort tenant is guaranteed nothing";
  // The budget policy times budgeted and best-effort tenants.
  EXPECT_EQ(word(tenants[hp].grants->sample_period), 2u);
  EXPECT_EQ(word(tenants[be].grants->sample_period), 8u);
}

TEST_F(BudgetFixture, AnOutOfRangeBudgetIsRefusedWithAReason) {
  make_core();
  for (uint32_t bad : {1u, 1000u, 100001u, 0xffffffffu}) {
    Outcome o = try_add(GPUOS_CLASS_GUARANTEED, bad);
    EXPECT_EQ(o.registered, 0u) << bad;
    ASSERT_EQ(o.replies.size(), 1u);
    gpuos_msg_register_reply r{};
    std::memcpy(&r, o.replies[0].bytes.data(), sizeof(r));
    EXPECT_EQ(r.status, GPUOS_ERR_BAD_MESSAGE);
    EXPECT_NE(std::string(r.text).find("max_slowdown_permille"), std::string::npos) << r.text;
  }
}

TEST_F(BudgetFixture, InASpatialDomainBestEffortIsPacedInTheGrantBlock) {
  make_core();
  const std::size_t hp = add(GPUOS_CLASS_GUARANTEED, 1250, "serve");
  const std::size_t be = add(GPUOS_CLASS_BEST_EFFORT, 0, "serve");
  const std::size_t apart = add(GPUOS_CLASS_BEST_EFFORT);  // time-shared beside the budget
  busy(be);
  busy(apart);
  busy(hp);
  bool paced = false;
  for (int step = 0; step < 300; ++step) {
    mono += 10 * kMs;
    for (int k = 0; k < 4; ++k) timed(hp, 42, 1'000'000);
    put(tenants[hp].cb->busy, 1u);
    for (std::size_t i : {be, apart}) {
      const bool open = word(tenants[i].grants->gate) == GPUOS_GATE_OPEN;
      put(tenants[i].cb->busy, open ? 1u : 0u);
      if (open && word(tenants[i].grants->pace_permille) != 0) {
        EXPECT_EQ(word(tenants[i].grants->pace_reserved), 0u) << step;
        paced = paced || i == be;
      }
    }
    core->tick(mono);
  }
  EXPECT_TRUE(paced) << "the domain's best-effort tenant was never paced";
}

TEST_F(BudgetFixture, TimedLaunchesReachThePolicyAndBestEffortIsPacedInItsGrantBlock) {
  make_core();
  const std::size_t hp = add(GPUOS_CLASS_GUARANTEED, 1250);
  const std::size_t be = add(GPUOS_CLASS_BEST_EFFORT);
  busy(be);
  busy(hp);
  // Alone for long enough, then the budget is met: the best-effort tenant gets a paced, open gate.
  for (int step = 0; step < 300; ++step) {
    mono += 10 * kMs;
    for (int k = 0; k < 4; ++k) timed(hp, 42, 1'000'000);
    put(tenants[hp].cb->busy, 1u);
    // Best-effort's work drains while its gate is closed (max_inflight): busy only while open.
    put(tenants[be].cb->busy, word(tenants[be].grants->gate) == GPUOS_GATE_OPEN ? 1u : 0u);
    core->tick(mono);
  }
  const gpuos_msg_tenant_info i = info(hp);
  EXPECT_GT(i.slowdown_permille, 900u);
  EXPECT_LT(i.slowdown_permille, 1100u);
  const uint32_t pace = word(tenants[be].grants->pace_permille);
  if (word(tenants[be].grants->gate) == GPUOS_GATE_OPEN) {  // (unless a probe runs right now)
    EXPECT_GT(pace, 0u);
    EXPECT_LE(pace, 200u);
    EXPECT_EQ(info(hp).be_share_permille, pace);
    EXPECT_EQ(info(be).pace_permille, pace) << "what its grant block says, as ps shows it";
    EXPECT_EQ(info(be).pace_max_kernel_us, word(tenants[be].grants->pace_max_kernel_us));
  }
  // Beside best-effort work its launches now take twice as long (alone, as long as before): the
  // share collapses, and best-effort work runs only in the controller's small trials after.
  const uint32_t lent_pace = pace;
  int open_steps = 0;
  bool over_seen = false;
  for (int step = 0; step < 300; ++step) {
    mono += 10 * kMs;
    const bool lent = word(tenants[be].grants->gate) == GPUOS_GATE_OPEN;
    for (int k = 0; k < 4; ++k) timed(hp, 42, lent ? 2'000'000 : 1'000'000);
    core->tick(mono);
    over_seen = over_seen || info(hp).slowdown_permille > 1250;
    if (step >= 30 && word(tenants[be].grants->gate) == GPUOS_GATE_OPEN) {
      ++open_steps;
      EXPECT_LT(word(tenants[be].grants->pace_permille), std::max<uint32_t>(lent_pace / 2, 10)) << step;
    }
  }
  EXPECT_TRUE(over_seen);
  EXPECT_LT(open_steps, 135) << "best-effort ran most of the time at twice the guaranteed tenant's time";
}

TEST_F(BudgetFixture, ATenantsTimingRingIsReadAsUntrustedInput) {
  make_core();
  const std::size_t hp = add(GPUOS_CLASS_GUARANTEED, 1250);
  busy(hp);
  gpuos_control_block* cb = tenants[hp].cb;
  // A head far ahead (a lapped ring), then moved back, and nonsense durations: read without harm.
  std::atomic_ref<uint64_t>(cb->timing_head).store(~uint64_t{0} - 3);
  for (auto& e : cb->timing_ring) {
    put(e.key, ~uint64_t{0});
    put(e.ns, ~uint64_t{0});
  }
  mono += 10 * kMs;
  core->tick(mono);
  std::atomic_ref<uint64_t>(cb->timing_head).store(5);
  mono += 10 * kMs;
  core->tick(mono);
  EXPECT_EQ(core->time_gate_failures(), 0u);
  EXPECT_EQ(info(hp).slowdown_permille, 0u) << "nothing judged from nonsense";
}

}  // namespace
}  // namespace gpuos::daemon
