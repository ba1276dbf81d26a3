// SPDX-License-Identifier: Apache-2.0
// VerifyEngine without a Core: a made-up NVML sample against the tenants' grants.
#include "daemon/core/verify_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>

#include "engine_tenants.h"

namespace gpuos::daemon {
namespace {

constexpr uint64_t MiB = 1ull << 20;

struct CountingEnforcer final : Enforcer {
  int kills = 0;
  bool freeze(pid_t, uid_t, unsigned long long, const std::set<pid_t>&, std::string*) override { return false; }
  bool kill(pid_t, unsigned long long, std::string* why) override {
    ++kills;
    *why = "killed";
    return true;
  }
};

struct VerifyFixture : ::testing::Test {
  std::vector<GpuInfo> info{GpuInfo{0, "g0", "", 132, 80ull << 30, {}, 0}};
  GpuMap gpus{info};
  EngineTenants live;
  UsageSample sample;
  CountingEnforcer enforcer;
  VerifyOptions options() {
    VerifyOptions o;
    o.sample = [this] { return sample; };
    o.check.memory_slack_bytes = 0;
    o.enforce = EnforceParams{EnforceMode::kKill, 2};
    o.enforcer = &enforcer;
    o.rejoin_grace_ns = 0;
    return o;
  }
  void holds(pid_t pid, uint64_t bytes) {
    ObservedProcess p;
    p.pid = pid;
    p.mem_known = true;
    p.mem_bytes = bytes;
    p.listed = true;
    sample.processes.push_back(p);
  }
};

TEST_F(VerifyFixture, OffWithoutASampler) {
  VerifyEngine off(VerifyOptions{}, gpus, [](pid_t) { return uint64_t{0}; }, 0);
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.next_ns(), 0u);
  VerifyStats stats;
  off.tick(live.tenants, 5, &stats);
  EXPECT_EQ(stats.usage_rounds, 0u);
}

TEST_F(VerifyFixture, RoundsFollowTheInterval) {
  VerifyEngine e(options(), gpus, [](pid_t) { return uint64_t{0}; }, 0);
  VerifyStats stats;
  EXPECT_EQ(e.next_ns(), 1u);  // at once
  e.tick(live.tenants, 10, &stats);
  EXPECT_EQ(stats.usage_rounds, 1u);
  EXPECT_EQ(e.next_ns(), 10 + e.options().interval_ns);
  e.tick(live.tenants, 11, &stats);  // not due
  EXPECT_EQ(stats.usage_rounds, 1u);
}

TEST_F(VerifyFixture, OverQuotaIsFoundCountedAndEnforcedAfterGraceRounds) {
  Tenant& t = live.add(1, GPUOS_CLASS_BEST_EFFORT, 64 * MiB);
  holds(t.pid, 512 * MiB);
  VerifyEngine e(options(), gpus, [](pid_t) { return uint64_t{42}; }, 0);
  VerifyStats stats;
  VerifyEngine::View view;
  e.make_view(live.tenants, 1'000'000'000, &view, &stats);
  ASSERT_EQ(view.grants.size(), 1u);
  EXPECT_EQ(view.grants[0].limit_bytes, 64 * MiB);
  EXPECT_EQ(t.verify.mem_bytes, 512 * MiB);
  std::vector<RoundFigures> figures;
  const std::vector<Finding> findings = e.check(view, &figures);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].kind, FindingKind::kOverQuota);
  e.apply(live.tenants, view, findings, figures, &stats);
  EXPECT_EQ(t.verify.usage.findings_in_a_row, 1u);
  EXPECT_EQ(enforcer.kills, 0);  // one round can be a measurement's edge
  e.tick(live.tenants, 3'000'000'000, &stats);
  EXPECT_EQ(t.verify.usage.findings_in_a_row, 2u);
  EXPECT_EQ(enforcer.kills, 1);
  EXPECT_TRUE(t.verify.usage.enforced);
  EXPECT_EQ(stats.enforcements, 1u);
  EXPECT_EQ(stats.violations, 2u);
}

// Issue #62: a process on a governed GPU that is no tenant meets the enforcement as a tenant does,
// after grace_rounds rounds in a row; one that just exited as a tenant is none (exit grace).
TEST_F(VerifyFixture, AProcessThatIsNoTenantIsFoundAndEnforcedUnlessItJustExited) {
  holds(4242, 100 * MiB);
  VerifyEngine e(options(), gpus, [](pid_t) { return uint64_t{42}; }, 0);
  VerifyStats stats;
  e.tenant_exited(4242, 0);
  e.tick(live.tenants, 1, &stats);
  EXPECT_EQ(stats.unregistered_processes, 0u);  // within the exit grace
  const uint64_t past = e.options().exit_grace_ns + e.options().interval_ns;
  e.tick(live.tenants, past, &stats);
  EXPECT_EQ(stats.unregistered_processes, 1u);
  EXPECT_EQ(enforcer.kills, 0);  // one round can be a measurement's edge
  e.tick(live.tenants, past + e.options().interval_ns, &stats);
  EXPECT_EQ(enforcer.kills, 1);
  EXPECT_EQ(stats.enforcements, 1u);
  e.tick(live.tenants, past + 2 * e.options().interval_ns, &stats);
  EXPECT_EQ(enforcer.kills, 1);  // once
}

// Under "report" it is only reported.
TEST_F(VerifyFixture, UnderReportAProcessThatIsNoTenantIsOnlyReported) {
  holds(4242, 100 * MiB);
  VerifyOptions o = options();
  o.enforce.mode = EnforceMode::kReport;
  VerifyEngine e(o, gpus, [](pid_t) { return uint64_t{42}; }, 0);
  VerifyStats stats;
  for (uint64_t r = 1; r <= 5; ++r) e.tick(live.tenants, r * e.options().interval_ns, &stats);
  EXPECT_EQ(stats.unregistered_findings, 5u);
  EXPECT_EQ(enforcer.kills, 0);
}

TEST(Enforce, ActsOnlyOnPersistentFindings) {
  EnforceParams p{EnforceMode::kKill, 2};
  EXPECT_EQ(decide_enforcement(p, 1), EnforceAction::kReport);
  EXPECT_EQ(decide_enforcement(p, 2), EnforceAction::kKill);
  p.mode = EnforceMode::kFreeze;
  EXPECT_EQ(decide_enforcement(p, 3), EnforceAction::kFreeze);
  p.mode = EnforceMode::kReport;
  EXPECT_EQ(decide_enforcement(p, 9), EnforceAction::kReport);
  EnforceMode m;
  EXPECT_TRUE(parse_enforce_mode("freeze", &m));
  EXPECT_FALSE(parse_enforce_mode("nuke", &m));
}

// Issue #42 on an H100: an honest tenant's NVML memory grew from its 64 MiB and a small context
// to 584 MiB when its first kernel started (the context's local memory), with no allocation call;
// a context sized before that flagged it as under-reporting. Sized from the round after one that
// saw it launch, the growth is its context's, and memory hidden after that is still found.
TEST_F(VerifyFixture, AContextIsSizedOnlyAfterTheTenantsFirstLaunch) {
  Tenant& t = live.add(1, GPUOS_CLASS_BEST_EFFORT);
  std::atomic_ref<uint64_t>(t.cb->mem_used_bytes).store(64 * MiB);
  VerifyEngine e(options(), gpus, [](pid_t) { return uint64_t{42}; }, 0);
  VerifyStats stats;
  auto round = [&](uint64_t nvml_bytes, uint64_t at_ns) {
    sample = UsageSample{};
    sample.ok = true;
    holds(t.pid, nvml_bytes);
    VerifyEngine::View view;
    e.make_view(live.tenants, at_ns, &view, &stats);
    std::vector<RoundFigures> figures;
    std::vector<Finding> found = e.check(view, &figures);
    std::erase_if(found, [](const Finding& f) { return f.kind != FindingKind::kUnderReported; });
    return found.size();
  };
  EXPECT_EQ(round(94 * MiB, 1'000'000'000), 0u);  // registered, allocated, nothing launched yet
  std::atomic_ref<uint64_t>(t.cb->launches).store(1);
  EXPECT_EQ(round(584 * MiB, 2'000'000'000), 0u);  // its first kernel runs: the context grew
  EXPECT_EQ(round(584 * MiB, 3'000'000'000), 0u);  // sized now: 520 MiB of context
  EXPECT_EQ(t.verify.context_bytes, 520 * MiB);
  EXPECT_EQ(round(584 * MiB + 512 * MiB, 4'000'000'000), 1u) << "512 MiB more, not in its report";
}

}  // namespace
}  // namespace gpuos::daemon
