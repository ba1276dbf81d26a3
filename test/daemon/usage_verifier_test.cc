// SPDX-License-Identifier: Apache-2.0
// The usage check (issue #22, "trust but verify"): NVML's view of each process against what gpuosd
// granted, the enforce policy, the freezer's safety rules, and the core acting on findings. NVML is
// faked here through its table; test/e2e runs it on the driver double's NVML stand-in.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/ipc.h"
#include "daemon/core/core.h"
#include "daemon/core/enforcer.h"
#include "daemon/core/usage_verifier.h"
#include "daemon/core/enforce.h"
#include "policies/priority/priority.h"
#include "tenant_side.h"

namespace gpuos::daemon {
namespace {

constexpr uint64_t GiB = 1ull << 30;

ObservedProcess proc(pid_t pid, uint64_t mem, int32_t util = -1, uint32_t gpu = 0) {
  ObservedProcess p;
  p.pid = pid;
  p.gpu = gpu;
  p.mem_known = true;
  p.mem_bytes = mem;
  p.sm_util = util;
  return p;
}

TEST(CheckUsage, OverQuotaBeyondTheSlackGatedLaunchesAndUnregisteredProcesses) {
  UsageSample s;
  s.ok = true;
  s.processes = {proc(10, 3 * GiB / 2), proc(11, 4 * GiB, -1, 0), proc(11, 1 * GiB, -1, 1),  // 11: 5 GiB on 2 GPUs
                 proc(12, GiB, 90), proc(13, GiB, 90), proc(14, GiB, 90, 0), proc(14, GiB, 90, 1),
                 proc(99, 2 * GiB), proc(1, GiB)};
  const std::vector<TenantGrant> tenants = {
      {1, 10, 1 * GiB, 0},       // 1.5 GiB of 1 GiB: within the 1 GiB slack (the context)
      {2, 11, 2 * GiB, 0},       // 5 GiB of 2 GiB: over
      {3, 12, 0, ~0ull},         // gated the whole round, 90% of the SMs
      {4, 13, 0, 0},             // 90% but not gated: fine
      {5, 14, 0, 1u << 1},       // gated on GPU 1 only: its 90% on GPU 0 is fine, on GPU 1 not
  };
  CheckParams p;  // 1 GiB slack, 20%
  const std::vector<Finding> f = check_usage(s, tenants, p, {1});  // pid 1: ignored (gpuosd)
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].kind, FindingKind::kOverQuota);
  EXPECT_EQ(f[0].tenant_id, 2u);
  EXPECT_EQ(f[0].measured, 5 * GiB);
  EXPECT_EQ(f[0].limit, 3 * GiB);
  EXPECT_EQ(f[1].kind, FindingKind::kLaunchedWhileGated);
  EXPECT_EQ(f[1].tenant_id, 3u);
  EXPECT_EQ(f[1].measured, 90u);
  EXPECT_EQ(f[2].kind, FindingKind::kLaunchedWhileGated);
  EXPECT_EQ(f[2].tenant_id, 5u);
  EXPECT_EQ(f[2].gpu, 1u);
  EXPECT_EQ(f[3].kind, FindingKind::kUnregistered);
  EXPECT_EQ(f[3].pid, 99);
  EXPECT_EQ(f[3].tenant_id, 0u);
  EXPECT_EQ(f[3].measured, 2 * GiB);
}

// One round of the check for tenants whose windows the test keeps as gpuosd does (the earlier
// rounds, at most window_rounds - 1).
struct Rounds {
  CheckParams p;
  std::vector<UsageWindow> windows = std::vector<UsageWindow>(8);
  std::vector<Finding> round(const UsageSample& s, std::vector<TenantGrant> tenants) {
    for (std::size_t i = 0; i < tenants.size(); ++i) tenants[i].window = &windows.at(i);
    std::vector<RoundFigures> figures;
    std::vector<Finding> f = check_usage(s, tenants, p, {}, &figures);
    EXPECT_EQ(figures.size(), tenants.size());
    for (std::size_t i = 0; i < figures.size(); ++i) {
      windows.at(i).push_back(figures[i]);
      while (windows.at(i).size() >= p.window_rounds) windows.at(i).pop_front();
    }
    return f;
  }
};

// Issue #42 item 7: a bypass kept under the one-round threshold (1 ms kernel, 6 ms sleep: 14% of
// the SMs) adds up over the window: found in the 4th round gated (56% > 50%), and in every round
// after. Use while not gated, the first round of a closed gate (its samples may reach back to the
// launches it drained), and no use at all are never counted.
TEST(CheckUsage, LowDutyUseWhileGatedAddsUpOverTheWindow) {
  Rounds r;  // 10 rounds, 50%
  UsageSample s;
  s.ok = true;
  s.processes = {proc(10, GiB, 14), proc(11, GiB, 90), proc(12, GiB, 14), proc(13, GiB, -1), proc(14, GiB, 0)};
  auto tenants = [](bool settled) {
    const uint64_t s = settled ? ~0ull : 0;
    return std::vector<TenantGrant>{
        {1, 10, 0, ~0ull, s},  // gated, 14% a round: the low-duty bypass
        {2, 11, 0, 0, 0},      // open, 90%: fine
        {3, 12, 0, ~0ull, 0},  // gated, but always the first round of its closed gate
        {4, 13, 0, ~0ull, s},  // gated, not sampled (idle)
        {5, 14, 0, ~0ull, s},  // gated, 0%
    };
  };
  for (int round = 1; round <= 3; ++round) {
    EXPECT_TRUE(r.round(s, tenants(true)).empty()) << "round " << round;  // 14, 28, 42
  }
  std::vector<Finding> f = r.round(s, tenants(true));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, FindingKind::kLaunchedWhileGated);
  EXPECT_EQ(f[0].tenant_id, 1u);
  EXPECT_TRUE(f[0].window);
  EXPECT_EQ(f[0].measured, 56u);
  EXPECT_EQ(f[0].limit, 50u);
  EXPECT_EQ(f[0].rounds, 4u);
  EXPECT_EQ(r.round(s, tenants(true)).size(), 1u);  // and again: rounds in a row for enforce
  // A round without use adds nothing and finds nothing; over 10 quiet rounds the window empties.
  s.processes = {proc(10, GiB, -1)};
  for (int round = 0; round < 9; ++round) EXPECT_TRUE(r.round(s, tenants(true)).empty());
  s.processes = {proc(10, GiB, 14)};
  EXPECT_TRUE(r.round(s, tenants(true)).empty());
  // A round found by the one-round threshold is not found twice.
  s.processes = {proc(10, GiB, 60)};
  f = r.round(s, tenants(true));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_FALSE(f[0].window);
  EXPECT_EQ(f[0].measured, 60u);
}

// Issue #42 item 7: a paced best-effort tenant whose SM use exceeds its granted share (a quarter
// and 10 points of margin) over the window's paced rounds it ran in, at least 3 of them, ignores
// its pacing. Its use where it is not paced, and rounds not paced throughout, are its own.
TEST(CheckUsage, APacedTenantThatUsesMoreThanItsShareIsFound) {
  Rounds r;
  EXPECT_EQ(pace_bound_percent(200, r.p), 35u);
  EXPECT_EQ(pace_bound_percent(1000, r.p), 135u);
  auto at = [](pid_t pid, int32_t mean, uint32_t gpu = 0) {
    ObservedProcess o = proc(pid, GiB, mean, gpu);
    o.sm_util_mean = mean;
    return o;
  };
  UsageSample s;
  s.ok = true;
  // 20: ignores its 20% (80%); 21: honest, 32% beside the guaranteed tenant's kernels; 22: paced
  // on GPU 1 only, 90% on GPU 0; 23: 90%, not paced throughout (no paced GPUs).
  s.processes = {at(20, 80), at(21, 32), at(22, 90, 0), at(22, 20, 1), at(23, 90)};
  const std::vector<TenantGrant> tenants = {
      {1, 20, 0, 0, 0, ~0ull, 200},
      {2, 21, 0, 0, 0, ~0ull, 200},
      {3, 22, 0, 0, 0, 1u << 1, 200},
      {4, 23, 0, 0, 0, 0, 200},
  };
  EXPECT_TRUE(r.round(s, tenants).empty());
  EXPECT_TRUE(r.round(s, tenants).empty());
  std::vector<Finding> f = r.round(s, tenants);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, FindingKind::kOverPace);
  EXPECT_EQ(f[0].tenant_id, 1u);
  EXPECT_EQ(f[0].measured, 80u);
  EXPECT_EQ(f[0].limit, 35u);
  EXPECT_EQ(f[0].rounds, 3u);
  EXPECT_STREQ(finding_name(f[0].kind), "over_pace");
  // Rounds without a sample (it was idle) neither count nor excuse; a round within the bound finds
  // nothing even when the window is over it (a finding is a round of excess).
  s.processes = {at(20, 30)};
  EXPECT_TRUE(r.round(s, tenants).empty());
  // The window's mean: one burst of 100% among rounds of 10% at a share of 50% (bound 73%) is no excess.
  Rounds b;
  const std::vector<TenantGrant> half = {{1, 20, 0, 0, 0, ~0ull, 500}};
  s.processes = {at(20, 10)};
  for (int round = 0; round < 5; ++round) EXPECT_TRUE(b.round(s, half).empty());
  s.processes = {at(20, 100)};
  EXPECT_TRUE(b.round(s, half).empty());
}

// A fake NVML: two devices (the second is not one of gpuosd's), a process list that needs the
// array to grow, memory NVML cannot tell, utilization samples.
struct FakeNvml {
  static inline int process_calls = 0;
  // The entry points every test reads through (utilization and energy: each test's own).
  static GpuosNvmlTable table() {
    GpuosNvmlTable t{};
    t.nvmlInit_v2 = &init;
    t.nvmlDeviceGetCount_v2 = &count;
    t.nvmlDeviceGetHandleByIndex_v2 = &handle;
    t.nvmlDeviceGetUUID = &uuid;
    t.nvmlDeviceGetComputeRunningProcesses_v3 = &procs;
    return t;
  }
  static nvmlReturn_t init() { return NVML_SUCCESS; }
  static nvmlReturn_t count(unsigned* n) {
    *n = 2;
    return NVML_SUCCESS;
  }
  static nvmlReturn_t handle(unsigned i, nvmlDevice_t* d) {
    *d = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(i) + 1);
    return NVML_SUCCESS;
  }
  static nvmlReturn_t uuid(nvmlDevice_t d, char* out, unsigned len) {
    std::snprintf(out, len, "%s", reinterpret_cast<uintptr_t>(d) == 1 ? "GPU-other" : "GPU-ours");
    return NVML_SUCCESS;
  }
  static nvmlReturn_t procs(nvmlDevice_t, unsigned* n, nvmlProcessInfo_t* infos) {
    ++process_calls;
    const unsigned want = 70;  // more than the reader's first array
    if (*n < want) {
      *n = want;
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < want; ++i) {
      infos[i] = nvmlProcessInfo_t{1000 + i, i == 0 ? GPUOS_NVML_VALUE_NOT_AVAILABLE : (1ull << 20) * i, 0, 0};
    }
    *n = want;
    return NVML_SUCCESS;
  }
  static nvmlReturn_t util(nvmlDevice_t, nvmlProcessUtilizationSample_t* s, unsigned* n, unsigned long long) {
    if (*n < 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    s[0] = nvmlProcessUtilizationSample_t{1005, 123456, 77, 0, 0, 0};
    *n = 1;
    return NVML_SUCCESS;
  }
  static nvmlReturn_t energy(nvmlDevice_t, unsigned long long* mj) {
    *mj = 4242;
    return NVML_SUCCESS;
  }
  static nvmlReturn_t no_energy(nvmlDevice_t, unsigned long long*) { return NVML_ERROR_NOT_SUPPORTED; }
};

// Issue #42 (2): a tenant zeroed its mem_used_bytes after each allocation. NVML's measure beyond
// its report plus its contexts' memory (the least seen beyond it) and a small margin (64 MiB, at
// most a quarter of its quota; 256 MiB with no quota) is a finding; within it, or not measured yet,
// none.
TEST(CheckUsage, AReportBelowWhatNvmlMeasuresIsAFinding) {
  constexpr uint64_t MiB = 1ull << 20;
  EXPECT_EQ(report_margin(0), 256 * MiB);  // no quota
  EXPECT_EQ(report_margin(64 * MiB), 16 * MiB);
  EXPECT_EQ(report_margin(8 * GiB), 64 * MiB);
  UsageSample s;
  s.ok = true;
  s.processes = {proc(10, 500 * MiB + 64 * MiB), proc(11, 500 * MiB + 262 * MiB), proc(12, 2 * GiB), proc(13, GiB),
                 proc(14, 500 * MiB + 300 * MiB)};
  std::vector<TenantGrant> tenants(5);
  // 10: a 64 MiB quota, reports 0, its context 500 MiB: hides its 64 MiB.
  tenants[0] = TenantGrant{.id = 1, .pid = 10, .limit_bytes = 64 * MiB, .reported_bytes = 0, .context_bytes = 500 * MiB};
  // 11: no quota, reports 6 MiB, its context 500: 256 MiB beyond, at the margin: fine.
  tenants[1] = TenantGrant{.id = 2, .pid = 11, .reported_bytes = 6 * MiB, .context_bytes = 500 * MiB};
  // 12: reports 1.9 GiB: fine. 13: not measured before (no context known): nothing to compare.
  tenants[2] = TenantGrant{.id = 3, .pid = 12, .reported_bytes = 2 * GiB - 100 * MiB, .context_bytes = 100 * MiB};
  tenants[3] = TenantGrant{.id = 4, .pid = 13};
  // 14: no quota, reports 0, its context 500: 300 MiB beyond the margin's 256.
  tenants[4] = TenantGrant{.id = 5, .pid = 14, .reported_bytes = 0, .context_bytes = 500 * MiB};
  const std::vector<Finding> f = check_usage(s, tenants, CheckParams{}, {});
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[1].tenant_id, 5u);
  EXPECT_EQ(f[1].limit, 756 * MiB);
  EXPECT_EQ(f[0].kind, FindingKind::kUnderReported);
  EXPECT_EQ(f[0].tenant_id, 1u);
  EXPECT_EQ(f[0].measured, 564 * MiB);
  EXPECT_EQ(f[0].limit, 516 * MiB);
  EXPECT_STREQ(finding_name(f[0].kind), "under_reported");
}

TEST(NvmlReader, MatchesGpusByUuidAndReadsEveryProcess) {
  GpuosNvmlTable t = FakeNvml::table();
  t.nvmlDeviceGetProcessUtilization = &FakeNvml::util;
  std::vector<GpuInfo> gpus{GpuInfo{3, "Sim", "GPU-ours", 132, 4 * GiB, {}, 0}};
  NvmlReader r(t, gpus);
  ASSERT_TRUE(r.available()) << r.why_not();
  const UsageSample s = r.read();
  EXPECT_TRUE(s.ok);
  ASSERT_EQ(s.processes.size(), 70u);  // one GPU matched; the array grew to hold all
  for (const ObservedProcess& p : s.processes) EXPECT_EQ(p.gpu, 3u);
  EXPECT_FALSE(s.processes[0].mem_known);  // NVML could not say
  EXPECT_EQ(measured_bytes(s, 1003), 3ull << 20);
  EXPECT_EQ(s.processes[5].sm_util, 77);
  EXPECT_EQ(s.processes[6].sm_util, -1);
  std::vector<GpuInfo> none{GpuInfo{0, "Sim", "GPU-nowhere", 132, 4 * GiB, {}, 0}};
  EXPECT_FALSE(NvmlReader(t, none).available());
}

// Chargeback: the GPU's energy counter is read with each sample; a missing entry point or an error
// is no energy (and still an ok sample), never a failure of the usage check.
TEST(NvmlReader, ReadsEachGpusEnergyCounterWhenNvmlHasOne) {
  GpuosNvmlTable t = FakeNvml::table();
  std::vector<GpuInfo> gpus{GpuInfo{3, "Sim", "GPU-ours", 132, 4 * GiB, {}, 0}};
  {
    NvmlReader r(t, gpus);  // no nvmlDeviceGetTotalEnergyConsumption
    const UsageSample s = r.read();
    EXPECT_TRUE(s.ok);
    EXPECT_TRUE(s.energy.empty());
  }
  t.nvmlDeviceGetTotalEnergyConsumption = &FakeNvml::no_energy;
  {
    NvmlReader r(t, gpus);
    const UsageSample s = r.read();
    EXPECT_TRUE(s.ok);
    EXPECT_TRUE(s.energy.empty());
  }
  t.nvmlDeviceGetTotalEnergyConsumption = &FakeNvml::energy;
  NvmlReader r(t, gpus);
  const UsageSample s = r.read();
  EXPECT_TRUE(s.ok);
  ASSERT_EQ(s.energy.size(), 1u);
  EXPECT_EQ(s.energy[0].gpu, 3u);
  EXPECT_EQ(s.energy[0].mj, 4242u);
}

ObservedProcess running(pid_t pid, int32_t mean, uint32_t gpu = 0) {
  ObservedProcess p = proc(pid, GiB, mean, gpu);
  p.sm_util_mean = mean;
  return p;
}

// Issue #43 item 9: a round's GPU time is its span times the mean SM use; each GPU's energy is split
// by the GPU time of everything that ran on it, and the parts of non-tenants stay unattributed.
TEST(Chargeback, SplitsEachGpusEnergyByGpuTime) {
  UsageSample s;
  s.ok = true;
  // GPU 0: tenants 10 (60%) and 11 (20%), a non-tenant 99 (20%); GPU 1: tenant 11 alone (50%);
  // GPU 2: tenant 10 at 0% (listed, not running); a tenant with no sample (-1) gets nothing.
  s.processes = {running(10, 60), running(11, 20), running(99, 20), running(11, 50, 1), running(10, 0, 2),
                 proc(12, GiB)};
  const uint64_t span = 2'000'000'000;
  const std::vector<Charge> c = apportion_round(s, {10, 11, 12}, span, {{0, 10000}, {1, 3001}, {2, 500}});
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].tenant, 0u);
  EXPECT_EQ(c[0].gpu, 0u);
  EXPECT_EQ(c[0].gpu_ns, 1'200'000'000u);
  EXPECT_EQ(c[0].energy_mj, 6000u);
  EXPECT_EQ(c[1].tenant, 1u);
  EXPECT_EQ(c[1].gpu_ns, 400'000'000u);
  EXPECT_EQ(c[1].energy_mj, 2000u);  // and 99's 2000 stay unattributed
  EXPECT_EQ(c[2].tenant, 1u);
  EXPECT_EQ(c[2].gpu, 1u);
  EXPECT_EQ(c[2].gpu_ns, 1'000'000'000u);
  EXPECT_EQ(c[2].energy_mj, 3001u);  // alone on the GPU: all of the round's energy
  // No energy figure for a GPU: GPU time only. No span (the first round): nothing.
  const std::vector<Charge> dark = apportion_round(s, {10, 11}, span, {});
  ASSERT_EQ(dark.size(), 3u);
  EXPECT_EQ(dark[0].gpu_ns, 1'200'000'000u);
  EXPECT_EQ(dark[0].energy_mj, 0u);
  EXPECT_TRUE(apportion_round(s, {10, 11}, 0, {{0, 10000}}).empty());
  // Rounded down: the parts never add up to more than the delta; use over 100% is capped.
  s.processes = {running(10, 33), running(11, 33), running(12, 33), running(13, 250)};
  uint64_t sum = 0;
  for (const Charge& x : apportion_round(s, {10, 11, 12, 13}, span, {{0, 100}})) sum += x.energy_mj;
  EXPECT_LE(sum, 100u);
  EXPECT_GE(sum, 97u);
  EXPECT_EQ(round_gpu_ns(running(13, 250), span), span);
}


// The freezer on a fake /proc and cgroup tree: it freezes a cgroup holding only the offender's
// processes, and refuses one that also holds another user's process, a tenant or gpuosd.
TEST(SystemEnforcer, FreezesOnlyACgroupOfTheOffendersOwn) {
  char tmpl[] = "/tmp/gpuos-enforcer-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::filesystem::path root(tmpl);
  auto write = [](const std::filesystem::path& f, const std::string& text) {
    std::filesystem::create_directories(f.parent_path());
    std::ofstream(f) << text;
  };
  auto add_proc = [&](int pid, int uid, const std::string& cg) {
    write(root / "proc" / std::to_string(pid) / "stat",
          std::to_string(pid) + " (a b) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " + std::to_string(5000 + pid) + " 0\n");
    write(root / "proc" / std::to_string(pid) / "status", "Name:\tx\nUid:\t" + std::to_string(uid) + "\t0\t0\t0\n");
    write(root / "proc" / std::to_string(pid) / "cgroup", "0::" + cg + "\n");
  };
  add_proc(200, 1000, "/job/a");
  add_proc(201, 1000, "/job/a");
  add_proc(300, 1000, "/job/b");
  add_proc(301, 2000, "/job/b");
  write(root / "cg/job/a/cgroup.procs", "200\n201\n");
  write(root / "cg/job/b/cgroup.procs", "300\n301\n");
  SystemEnforcer e((root / "proc").string(), (root / "cg").string());
  std::string why;
  EXPECT_EQ(e.start_time(200), 5200u);
  EXPECT_FALSE(e.freeze(200, 1000, 1, {}, &why)) << "a reused pid";
  EXPECT_FALSE(e.freeze(200, 1000, 5200, {201}, &why));  // 201 is another tenant
  EXPECT_NE(why.find("tenant pid 201"), std::string::npos) << why;
  EXPECT_FALSE(e.freeze(300, 1000, 5300, {}, &why));  // 301 is another user's
  EXPECT_NE(why.find("another user"), std::string::npos) << why;
  EXPECT_TRUE(e.freeze(200, 1000, 5200, {}, &why)) << why;
  std::ifstream f(root / "cg/job/a/cgroup.freeze");
  std::string v;
  f >> v;
  EXPECT_EQ(v, "1");
  EXPECT_FALSE(e.kill(200, 1, &why));  // not that process any more: no signal sent
  std::filesystem::remove_all(root);
}

// Records what the core asked for instead of doing it.
struct FakeEnforcer final : Enforcer {
  std::vector<pid_t> frozen, killed;
  bool freeze(pid_t pid, uid_t, unsigned long long, const std::set<pid_t>&, std::string* why) override {
    frozen.push_back(pid);
    *why = "frozen (fake)";
    return true;
  }
  bool kill(pid_t pid, unsigned long long, std::string* why) override {
    killed.push_back(pid);
    *why = "killed (fake)";
    return true;
  }
};

// The core: a tenant with a 1 GiB quota that NVML sees holding 6 GiB (it allocated around the
// interposer) is counted at every round, shown with its verified memory, and killed after the
// grace rounds; a tenant gated the whole round that keeps the SMs busy is found too.
TEST(CoreUsageCheck, CountsReportsAndEnforces) {
  UsageSample next;
  FakeEnforcer enforcer;
  uint64_t mono = 1'000'000'000;
  CoreOptions o;
  o.gpus.push_back(GpuInfo{0, "Sim", "GPU-0", 132, 80 * GiB, {}, 0});
  o.mono_ns = [&] { return mono; };
  o.pid_start_time = [](pid_t p) { return static_cast<uint64_t>(p) * 10; };
  o.verify.sample = [&] { return next; };
  o.verify.interval_ns = 1'000'000'000;
  o.verify.enforce = EnforceParams{EnforceMode::kKill, 2};
  o.verify.enforcer = &enforcer;
  Core core(std::move(o));
  auto reg = [&](pid_t pid, uint64_t quota) {
    Connection c;
    c.id = static_cast<uint64_t>(pid);
    c.peer.pid = pid;
    c.peer.uid = 1000;
    gpuos_msg_register m = tenant_side::registration(pid, GPUOS_CLASS_BEST_EFFORT);
    m.requested_mem_bytes = quota;
    return core.handle_message(c, &m, sizeof(m)).registered;
  };
  const uint32_t cheat = reg(700, 1 * GiB);
  const uint32_t gated = reg(701, 0);
  ASSERT_NE(cheat, 0u);
  ASSERT_NE(gated, 0u);
  ASSERT_EQ(core.admin_set_gate(gated, GPUOS_GATE_CLOSED), GPUOS_OK);
  next.ok = true;
  next.processes = {proc(700, 6 * GiB), proc(701, GiB, 95), proc(4242, GiB)};
  core.tick(mono);  // round 1: over quota (reported); the gate's first look
  EXPECT_EQ(core.tenant_stats(mono).at(0).violations, 1u);
  EXPECT_EQ(core.tenant_stats(mono).at(0).verified_mem_bytes, 6 * GiB);
  EXPECT_EQ(core.tenant_stats(mono).at(1).violations, 0u);  // not yet known gated a whole round
  EXPECT_EQ(core.stats().unregistered_processes, 1u);       // pid 4242
  EXPECT_TRUE(enforcer.killed.empty());                     // one round: grace
  mono += 1'000'000'000;
  core.tick(mono);  // round 2: both found; the cheat's second round in a row: killed
  EXPECT_EQ(core.tenant_stats(mono).at(1).violations, 1u);
  // ... and the process that is no tenant, its second round too (issue #62: not only reported).
  EXPECT_EQ(enforcer.killed, (std::vector<pid_t>{700, 4242}));
  EXPECT_EQ(core.stats().enforcements, 2u);
  EXPECT_EQ(core.stats().usage_rounds, 2u);
  // The gate opened and closed between two rounds: not gated the whole round.
  ASSERT_EQ(core.admin_set_gate(gated, GPUOS_GATE_OPEN), GPUOS_OK);
  ASSERT_EQ(core.admin_set_gate(gated, GPUOS_GATE_CLOSED), GPUOS_OK);
  mono += 1'000'000'000;
  core.tick(mono);
  EXPECT_EQ(core.tenant_stats(mono).at(1).violations, 1u);
  // A tenant's verified memory and violations reach LIST (ps --json) and the metrics.
  Connection client;
  client.peer.admin = true;  // an admin's `gpuos ps`: every tenant
  client.id = 99;
  gpuos_msg_list l{};
  init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 3);
  bool seen = false;
  for (const Outgoing& out : core.handle_message(client, &l, sizeof(l)).replies) {
    gpuos_msg_header h;
    std::memcpy(&h, out.bytes.data(), sizeof(h));
    if (h.type != GPUOS_MSG_TENANT_INFO) continue;
    gpuos_msg_tenant_info i;
    std::memcpy(&i, out.bytes.data(), sizeof(i));
    if (i.tenant_id != cheat) continue;
    seen = true;
    EXPECT_EQ(i.verified_mem_bytes, 6 * GiB);
    EXPECT_GE(i.violations, 3u);
  }
  EXPECT_TRUE(seen);
}

// A core under the priority policy with the usage check on (kill after 2 rounds in a row) and
// tenants whose blocks the test writes as their interposer would.
struct GatedCheck {
  UsageSample next;
  FakeEnforcer enforcer;
  uint64_t mono = 1'000'000'000;
  std::unique_ptr<Core> core;
  std::vector<tenant_side::TenantSide> sides = std::vector<tenant_side::TenantSide>(8);
  std::set<pid_t> gone;  // processes that exited (start time 0)

  explicit GatedCheck(uint64_t inflight_grace_ns, uint32_t kill_after_rounds = 2) {
    next.ok = true;
    CoreOptions o;
    o.gpus.push_back(GpuInfo{0, "Sim", "GPU-0", 132, 80 * GiB, {}, 0});
    o.mono_ns = [this] { return mono; };
    o.pid_start_time = [this](pid_t p) { return gone.count(p) != 0 ? uint64_t{0} : static_cast<uint64_t>(p) * 10; };
    o.time_gate = std::make_unique<policies::PriorityPolicy>(policies::PriorityParams{});
    o.verify.sample = [this] { return next; };
    o.verify.interval_ns = 1'000'000'000;
    o.verify.inflight_grace_ns = inflight_grace_ns;
    o.verify.enforce = EnforceParams{EnforceMode::kKill, kill_after_rounds};
    o.verify.enforcer = &enforcer;
    core = std::make_unique<Core>(std::move(o));
  }
  ~GatedCheck() {
    for (auto& s : sides) tenant_side::unmap(s);
  }
  tenant_side::TenantSide& reg(std::size_t i, pid_t pid, uint32_t cls, uint64_t quota_bytes = 0) {
    tenant_side::TenantSide& s = sides.at(i);
    s.conn.id = static_cast<uint64_t>(pid);
    s.conn.peer.pid = pid;
    s.conn.peer.uid = 1000;
    gpuos_msg_register m = tenant_side::registration(pid, cls);
    m.requested_mem_bytes = quota_bytes;
    tenant_side::adopt(s, core->handle_message(s.conn, &m, sizeof(m)));
    EXPECT_NE(s.id, 0u);
    return s;
  }
  // The interposer's busy word and the ACTIVITY message that goes with it.
  void busy(tenant_side::TenantSide& s, uint32_t b) {
    tenant_side::put(s.cb->busy, b);
    if (b == 1) tenant_side::put(s.cb->busy_transitions, load(s.cb->busy_transitions) + 1);
    gpuos_msg_activity a{};
    init_header(&a.hdr, GPUOS_MSG_ACTIVITY, sizeof(a), 2);
    a.busy = b;
    core->handle_message(s.conn, &a, sizeof(a));
  }
  uint64_t violations(uint32_t id) {
    for (const TenantStat& t : core->tenant_stats(mono)) {
      if (t.info.tenant_id == id) return t.violations;
    }
    return ~0ull;
  }
  void round() {
    mono += 1'000'000'000;
    core->tick(mono);
  }
};

// Issue #42 item 7: a best-effort tenant that launched one long kernel (6 s) while its gate was
// open, before a guaranteed tenant became busy, is not "launching while gated" (and not killed):
// only launches made while the gate is closed count. A launch around the closed gate afterwards
// (NVML sees it run while nothing of it is in flight) is still found and killed.
TEST(CoreUsageCheck, WorkInFlightWhenTheGateClosedIsNoBypass) {
  GatedCheck c(30'000'000'000);
  tenant_side::TenantSide& g = c.reg(0, 800, GPUOS_CLASS_GUARANTEED);
  tenant_side::TenantSide& be = c.reg(1, 801, GPUOS_CLASS_BEST_EFFORT);
  ASSERT_NE(be.cb, nullptr);
  ASSERT_EQ(load(be.grants->gate), static_cast<uint32_t>(GPUOS_GATE_OPEN));
  c.busy(be, 1);  // its 6 s kernel, launched while open
  c.busy(g, 1);   // then the guaranteed tenant gets busy: the best-effort gate closes
  ASSERT_EQ(load(be.grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  c.next.processes = {proc(801, GiB, 100), proc(800, GiB, 40)};
  for (int s = 0; s < 6; ++s) c.round();  // the kernel runs 6 s, the gate closed all along
  EXPECT_EQ(c.violations(be.id), 0u);
  c.busy(be, 0);  // it finished; the next round still sees its last part
  c.round();
  c.next.processes = {proc(801, GiB, 0), proc(800, GiB, 40)};
  c.round();
  EXPECT_EQ(c.violations(be.id), 0u);
  EXPECT_TRUE(c.enforcer.killed.empty());
  EXPECT_EQ(c.core->stats().violations, 0u);
  // Now it runs work around its closed gate (its interposer saw nothing: busy stays 0).
  c.next.processes = {proc(801, GiB, 90), proc(800, GiB, 40)};
  c.round();
  c.round();
  EXPECT_GE(c.violations(be.id), 2u);
  EXPECT_EQ(c.enforcer.killed, (std::vector<pid_t>{801}));
}

// The excuse is the tenant's own busy word, so it is bounded: a tenant that keeps saying its work
// from before the gate closed is still running is found once the grace (here 5 s) is over.
TEST(CoreUsageCheck, InFlightWorkIsExcusedForTheGraceAtMost) {
  GatedCheck c(5'000'000'000);
  tenant_side::TenantSide& g = c.reg(0, 800, GPUOS_CLASS_GUARANTEED);
  tenant_side::TenantSide& be = c.reg(1, 801, GPUOS_CLASS_BEST_EFFORT);
  ASSERT_NE(be.cb, nullptr);
  c.busy(be, 1);
  c.busy(g, 1);
  ASSERT_EQ(load(be.grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  c.next.processes = {proc(801, GiB, 100), proc(800, GiB, 40)};
  for (int s = 0; s < 5; ++s) c.round();
  EXPECT_EQ(c.violations(be.id), 0u);
  for (int s = 0; s < 4; ++s) c.round();
  EXPECT_GE(c.violations(be.id), 2u);
  EXPECT_EQ(c.enforcer.killed, (std::vector<pid_t>{801}));
}

// Issue #62 item 7: a best-effort tenant whose 6 s kernels run on a per-thread default stream
// (untracked work: its interposer cannot fence them, so its busy word falls to 0 a few ms after its
// last launch while the kernel still runs) launched its last kernel while open; a guaranteed tenant
// then gets busy and its gate closes. Its use while that launch can still run (the grace, here 10 s,
// from the round that counted it) is no bypass; a tenant beside it that launched nothing before its
// gate closed and runs is found at once, and use past the grace is found too.
TEST(CoreUsageCheck, UntrackedWorkLaunchedWhileOpenIsNoBypass) {
  GatedCheck c(10'000'000'000);
  tenant_side::TenantSide& g = c.reg(0, 800, GPUOS_CLASS_GUARANTEED);
  tenant_side::TenantSide& be = c.reg(1, 801, GPUOS_CLASS_BEST_EFFORT);
  tenant_side::TenantSide& sly = c.reg(2, 802, GPUOS_CLASS_BEST_EFFORT);
  ASSERT_NE(be.cb, nullptr);
  c.round();  // a round before it launches
  tenant_side::put(be.cb->untracked_work, 1u);
  tenant_side::put(be.cb->launches, load(be.cb->launches) + 1);  // its 6 s kernel, while open
  c.busy(be, 1);
  c.busy(be, 0);  // 2 ms without a launch: its monitor takes it for idle
  c.busy(g, 1);   // the best-effort gates close
  ASSERT_EQ(load(be.grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  ASSERT_EQ(load(sly.grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  c.next.processes = {proc(801, GiB, 100), proc(802, GiB, 0), proc(800, GiB, 40)};
  for (int s = 0; s < 6; ++s) c.round();  // its kernel runs 6 s, the gate closed all along
  c.next.processes = {proc(801, GiB, 0), proc(802, GiB, 0), proc(800, GiB, 40)};
  c.round();
  EXPECT_EQ(c.violations(be.id), 0u);
  EXPECT_EQ(c.core->stats().violations, 0u);
  // Beside it, a tenant that launched nothing while open runs around its closed gate: found.
  c.next.processes = {proc(801, GiB, 0), proc(802, GiB, 90), proc(800, GiB, 40)};
  c.round();
  c.round();
  EXPECT_GE(c.violations(sly.id), 2u);
  EXPECT_EQ(c.enforcer.killed, (std::vector<pid_t>{802}));
  EXPECT_EQ(c.violations(be.id), 0u);
  // Launches it counts at its closed gate excuse nothing, and the grace runs out: use now is found.
  tenant_side::put(be.cb->launches, load(be.cb->launches) + 5);
  c.next.processes = {proc(801, GiB, 90), proc(800, GiB, 40)};
  // 9 s after the round that counted its launch (excused), then 10 s (the grace is over; that round
  // still follows an excused one), then found.
  for (int s = 0; s < 2; ++s) c.round();
  EXPECT_EQ(c.violations(be.id), 0u);
  for (int s = 0; s < 2; ++s) c.round();
  EXPECT_GE(c.violations(be.id), 2u);
  EXPECT_EQ(c.enforcer.killed, (std::vector<pid_t>{802, 801}));
  EXPECT_EQ(c.violations(g.id), 0u);
}

// Issue #42 item 7: the low-duty bypass (14% of the SMs a round, never above the 20% of one round)
// beside a busy guaranteed tenant is found once its use while gated adds up over the window, and
// killed the round after (enforce: 2 rounds in a row); reconnecting does not empty its window.
TEST(CoreUsageCheck, ALowDutyBypassAddsUpOverTheWindow) {
  GatedCheck c(30'000'000'000);
  tenant_side::TenantSide& g = c.reg(0, 800, GPUOS_CLASS_GUARANTEED);
  c.reg(1, 801, GPUOS_CLASS_BEST_EFFORT);
  c.busy(g, 1);
  ASSERT_EQ(load(c.sides[1].grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  c.next.processes = {proc(801, GiB, 14), proc(800, GiB, 40)};
  // Rounds 1-2: its gate's first look, then the first round gated (not counted); 3-4: 14%, 28%.
  for (int s = 0; s < 4; ++s) c.round();
  EXPECT_EQ(c.violations(c.sides[1].id), 0u);
  // It reconnects to start afresh: its gate closes again, its window is still there.
  Connection gone = c.sides[1].conn;
  c.core->connection_closed(gone);
  tenant_side::unmap(c.sides[1]);
  c.sides[1].conn = Connection{};
  tenant_side::TenantSide& be = c.reg(1, 801, GPUOS_CLASS_BEST_EFFORT);
  ASSERT_EQ(load(be.grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  for (int s = 0; s < 3; ++s) c.round();  // the gate's first look, its first round gated, 42%
  EXPECT_EQ(c.violations(be.id), 0u);
  EXPECT_TRUE(c.enforcer.killed.empty());
  c.round();  // 56% over 4 rounds in the window
  EXPECT_EQ(c.violations(be.id), 1u);
  c.round();
  EXPECT_EQ(c.enforcer.killed, (std::vector<pid_t>{801}));
  EXPECT_EQ(c.violations(g.id), 0u);
}

// An honest best-effort tenant under the same gate is never found: no use while gated, or in-flight
// work from before the gate closed at any level (excused as ever), for the window's length and more.
TEST(CoreUsageCheck, HonestGatedTenantsAddNothingToTheWindow) {
  GatedCheck c(30'000'000'000);
  tenant_side::TenantSide& g = c.reg(0, 800, GPUOS_CLASS_GUARANTEED);
  tenant_side::TenantSide& idle = c.reg(1, 801, GPUOS_CLASS_BEST_EFFORT);
  tenant_side::TenantSide& inflight = c.reg(2, 802, GPUOS_CLASS_BEST_EFFORT);
  c.busy(inflight, 1);  // a long kernel, launched while open
  c.busy(g, 1);
  ASSERT_EQ(load(idle.grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  c.next.processes = {proc(801, GiB, 0), proc(802, GiB, 14), proc(800, GiB, 40)};
  for (int s = 0; s < 25; ++s) c.round();
  c.busy(inflight, 0);
  c.next.processes = {proc(801, GiB, -1), proc(802, GiB, 0), proc(800, GiB, 40)};
  for (int s = 0; s < 12; ++s) c.round();
  EXPECT_EQ(c.core->stats().violations, 0u);
  EXPECT_TRUE(c.enforcer.killed.empty());
}

// A time gate that opens every gate with the pacing the test sets (a budget policy's part).
class PacingGate final : public slots::TimeGate {
 public:
  const char* name() const override { return "pacing"; }
  slots::GateActions decide(const slots::GateView& v) override {
    slots::GateActions a;
    for (const auto& t : v.tenants) a.gates.push_back({t.id, GPUOS_GATE_OPEN, 0, pacing});
    return a;
  }
  slots::Pacing pacing;
};

// Issue #42 item 7: a best-effort tenant that ignores its pacing beside a budgeted tenant (NVML
// sees it use 80% of the GPU on a 20% share) is found after 3 rounds paced throughout, and killed
// the round after; its granted share is the time average over the round (40% for half a round and
// 60% for the other: 50%), and rounds in which pacing stopped (the guaranteed tenant idle: it may
// use the whole GPU) are not held against it. An honest tenant at 30% never is.
TEST(CoreUsageCheck, ATenantThatIgnoresItsPacingIsFound) {
  UsageSample next;
  next.ok = true;
  FakeEnforcer enforcer;
  uint64_t mono = 1'000'000'000;
  auto gate = std::make_unique<PacingGate>();
  PacingGate* pacing = gate.get();
  pacing->pacing.permille = 200;
  CoreOptions o;
  o.gpus.push_back(GpuInfo{0, "Sim", "GPU-0", 132, 80 * GiB, {}, 0});
  o.mono_ns = [&] { return mono; };
  o.pid_start_time = [](pid_t p) { return static_cast<uint64_t>(p) * 10; };
  o.time_gate = std::move(gate);
  o.verify.sample = [&] { return next; };
  o.verify.enforce = EnforceParams{EnforceMode::kKill, 2};
  o.verify.enforcer = &enforcer;
  Core core(std::move(o));
  std::vector<tenant_side::TenantSide> sides(2);
  auto reg = [&](tenant_side::TenantSide& s, pid_t pid) {
    s.conn.id = static_cast<uint64_t>(pid);
    s.conn.peer.pid = pid;
    s.conn.peer.uid = 1000;
    gpuos_msg_register m = tenant_side::registration(pid, GPUOS_CLASS_BEST_EFFORT);
    tenant_side::adopt(s, core.handle_message(s.conn, &m, sizeof(m)));
    return s.id;
  };
  const uint32_t cheat = reg(sides[0], 700);
  const uint32_t honest = reg(sides[1], 701);
  ASSERT_EQ(load(sides[0].grants->pace_permille), 200u);
  auto violations = [&](uint32_t id) -> uint64_t {
    for (const TenantStat& t : core.tenant_stats(mono)) {
      if (t.info.tenant_id == id) return t.violations;
    }
    return ~0ull;
  };
  auto at = [](pid_t pid, int32_t mean) {
    ObservedProcess p = proc(pid, GiB, mean);
    p.sm_util_mean = mean;
    return p;
  };
  auto round = [&] {
    mono += 1'000'000'000;
    core.tick(mono);
  };
  // Pacing stops for part of every round: 100% is its right, however long.
  next.processes = {at(700, 100), at(701, 100)};
  for (int s = 0; s < 12; ++s) {
    mono += 400'000'000;
    pacing->pacing.permille = 0;
    core.tick(mono);
    mono += 100'000'000;
    pacing->pacing.permille = 200;
    core.tick(mono);
    round();
  }
  EXPECT_EQ(core.stats().violations, 0u);
  // Paced at 40% for half of each round and 60% for the other: the share is 50% (bound 73%).
  next.processes = {at(700, 70), at(701, 30)};
  for (int s = 0; s < 12; ++s) {
    mono += 500'000'000;
    pacing->pacing.permille = 400;
    core.tick(mono);
    mono += 500'000'000;
    pacing->pacing.permille = 600;
    core.tick(mono);
  }
  EXPECT_EQ(core.stats().violations, 0u);
  // 20% throughout: 80% is too much (bound 35%), 30% is not. The window still holds the rounds
  // at 50%, which it kept to: their margin does not hide the excess for long.
  pacing->pacing.permille = 200;
  next.processes = {at(700, 80), at(701, 30)};
  round();  // (pacing changed in the last round: the first round paced at 20% throughout is the next)
  int rounds = 1;
  while (violations(cheat) == 0 && rounds < 12) {
    round();
    ++rounds;
  }
  EXPECT_EQ(violations(cheat), 1u);
  EXPECT_LE(rounds, 10);
  EXPECT_TRUE(enforcer.killed.empty());
  round();
  EXPECT_EQ(enforcer.killed, (std::vector<pid_t>{700}));
  for (int s = 0; s < 12; ++s) round();
  EXPECT_EQ(violations(honest), 0u);
  for (auto& s : sides) tenant_side::unmap(s);
}

// Issue #43 item 3: a tenant that exits cleanly may still be on the GPU a moment after its
// connection closed (contexts being torn down, NVML's samples of its last interval): that is no
// process outside gpuos. Past exit_grace_ns a process still there is one (it left gpuos and went on).
TEST(CoreUsageCheck, ATenantThatExitsIsNoUnregisteredProcess) {
  GatedCheck c(30'000'000'000);
  for (pid_t pid = 900; pid < 1000; ++pid) {  // 100 tenants come, run and exit
    tenant_side::TenantSide& t = c.reg(2, pid, GPUOS_CLASS_BEST_EFFORT);
    c.next.processes = {proc(pid, GiB, 60)};
    c.round();
    c.gone.insert(pid);  // it exits: its connection closes as it does
    c.core->connection_closed(t.conn);
    tenant_side::unmap(t);
    c.round();  // still listed, with its last interval's SM use
  }
  EXPECT_EQ(c.core->stats().violations, 0u);
  EXPECT_EQ(c.core->stats().unregistered_findings, 0u);
  c.next.processes = {proc(999, GiB, 60)};
  for (int s = 0; s < 5; ++s) c.round();  // exit_grace_ns (5 s) later it still runs
  EXPECT_EQ(c.core->stats().unregistered_processes, 1u);
  EXPECT_GE(c.core->stats().violations, 1u);
}

// ... and a tenant of the previous gpuosd (in the id ledger) that has not re-registered with the
// new one yet is none either, for rejoin_grace_ns after gpuosd started; one that never does is.
TEST(CoreUsageCheck, ASurvivorOfARestartIsNoUnregisteredProcessUntilItRejoins) {
  char dir[] = "/tmp/gpuos-ledger-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string ledger = std::string(dir) + "/tenant-ids";
  {
    std::ofstream f(ledger);
    f << "3 1000 800 8000\n4 1000 801 8010\n";  // two tenants of the previous gpuosd, still running
  }
  for (int restart = 0; restart < 3; ++restart) {
    UsageSample next;
    next.ok = true;
    next.processes = {proc(800, GiB, 50), proc(801, GiB, 50)};
    uint64_t mono = 1'000'000'000;
    CoreOptions o;
    o.gpus.push_back(GpuInfo{0, "Sim", "GPU-0", 132, 80 * GiB, {}, 0});
    o.mono_ns = [&] { return mono; };
    o.pid_start_time = [](pid_t p) { return static_cast<uint64_t>(p) * 10; };
    o.id_ledger_path = ledger;
    o.verify.sample = [&] { return next; };
    Core core(std::move(o));
    core.tick(mono);  // its first round, before either re-registered
    tenant_side::TenantSide back;
    back.conn.id = 1;
    back.conn.peer.pid = 800;
    back.conn.peer.uid = 1000;
    gpuos_msg_register m = tenant_side::registration(800, GPUOS_CLASS_BEST_EFFORT);
    m.previous_tenant_id = 3;
    tenant_side::adopt(back, core.handle_message(back.conn, &m, sizeof(m)));
    EXPECT_EQ(back.id, 3u);
    for (int s = 0; s < 9; ++s) {
      mono += 1'000'000'000;
      core.tick(mono);
    }
    EXPECT_EQ(core.stats().violations, 0u) << "restart " << restart;
    tenant_side::unmap(back);
    if (restart < 2) continue;
    // Pid 801 never comes back: past rejoin_grace_ns (10 s) it is a process outside gpuos.
    for (int s = 0; s < 2; ++s) {
      mono += 1'000'000'000;
      core.tick(mono);
    }
    EXPECT_EQ(core.stats().unregistered_processes, 1u);
    EXPECT_GE(core.stats().violations, 1u);
  }
  std::filesystem::remove_all(dir);
}

// Issue #42 item 1: a tenant's identity is its process. One that closes its connection and
// registers again (a new connection, asking for no previous id) gets its old tenant back: its id,
// an admin's hold, the usage check's strikes, the priority policy's reprieve cooldown.
struct Reconnect : GatedCheck {
  Reconnect() : GatedCheck(30'000'000'000) {}
  tenant_side::TenantSide& again(std::size_t i, pid_t pid, uint32_t cls) {
    core->connection_closed(sides.at(i).conn);
    tenant_side::unmap(sides.at(i));
    sides.at(i).conn = Connection{};
    return reg(i, pid, cls);
  }
};

TEST(Identity, AHeldTenantThatReconnectsStaysHeld) {
  Reconnect c;
  tenant_side::TenantSide& t = c.reg(0, 801, GPUOS_CLASS_BEST_EFFORT);
  const uint32_t id = t.id;
  ASSERT_EQ(c.core->admin_set_gate(id, GPUOS_GATE_CLOSED), GPUOS_OK);
  tenant_side::TenantSide& back = c.again(0, 801, GPUOS_CLASS_BEST_EFFORT);
  EXPECT_EQ(back.id, id);
  EXPECT_TRUE(c.core->pinned(id));
  ASSERT_NE(back.grants, nullptr);
  EXPECT_EQ(load(back.grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  EXPECT_EQ(c.core->live_tenants(), 1u);
}

// Issue #62 item 1: a tenant held by an admin shuts its connection down and runs on (its library
// fell open once re-registration failed, and gpuosd listed it as exited). Its process is still the
// tenant: live, held, its grant block still gpuosd's and its lease renewed, judged by the usage
// check as a tenant (not an unregistered process); leaving while held is an escape, enforced at once
// (kill here). It ends only when its process exits.
TEST(Identity, AHeldTenantThatLeavesItsConnectionIsStillHeldAndEscapes) {
  Reconnect c;
  tenant_side::TenantSide& t = c.reg(0, 801, GPUOS_CLASS_BEST_EFFORT);
  const uint32_t id = t.id;
  ASSERT_EQ(c.core->admin_set_gate(id, GPUOS_GATE_CLOSED), GPUOS_OK);
  c.core->connection_closed(t.conn);
  EXPECT_EQ(c.core->live_tenants(), 1u);
  EXPECT_TRUE(c.core->pinned(id));
  EXPECT_EQ(c.core->stats().escapes, 1u);
  EXPECT_EQ(c.violations(id), 1u);
  EXPECT_EQ(c.enforcer.killed, (std::vector<pid_t>{801}));  // at once: a fact, no grace rounds
  c.round();
  EXPECT_EQ(load(t.grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  EXPECT_EQ(load(t.grants->daemon_heartbeat_ns), c.mono);  // its lease renewed
  c.next.processes = {proc(801, GiB, 90)};
  c.round();
  c.round();
  EXPECT_EQ(c.core->stats().unregistered_findings, 0u);  // a tenant, judged as one
  EXPECT_GE(c.violations(id), 2u);                       // launching while gated
  // Its process exits: the tenant ends (noticed at a tick).
  c.gone.insert(801);
  c.round();
  EXPECT_EQ(c.core->live_tenants(), 0u);
  ASSERT_FALSE(c.core->history().empty());
  EXPECT_EQ(c.core->history().back().tenant_id, id);
  EXPECT_EQ(c.core->history().back().state, static_cast<uint32_t>(GPUOS_TENANT_EXITED));
}

// Leaving with the gate open is no escape; the tenant stays until its process exits, and the
// process registering again takes it over (same id, no history entry in between).
TEST(Identity, ATenantThatLeavesItsConnectionStaysItUntilItExitsOrComesBack) {
  Reconnect c;
  tenant_side::TenantSide& t = c.reg(0, 801, GPUOS_CLASS_BEST_EFFORT);
  const uint32_t id = t.id;
  c.core->connection_closed(t.conn);
  EXPECT_EQ(c.core->live_tenants(), 1u);
  EXPECT_EQ(c.core->stats().escapes, 0u);
  EXPECT_TRUE(c.enforcer.killed.empty());
  tenant_side::unmap(t);
  t.conn = Connection{};
  tenant_side::TenantSide& back = c.reg(0, 801, GPUOS_CLASS_BEST_EFFORT);
  EXPECT_EQ(back.id, id);
  EXPECT_EQ(c.core->live_tenants(), 1u);
  EXPECT_TRUE(c.core->history().empty());
  // It leaves again, and its process exits: the tenant ends.
  c.core->connection_closed(back.conn);
  tenant_side::unmap(back);
  back.conn = Connection{};
  c.gone.insert(801);
  c.round();
  EXPECT_EQ(c.core->live_tenants(), 0u);
}

// Under "report", an escape is counted and logged, nothing more; the tenant stays held.
TEST(Identity, UnderReportAnEscapeIsOnlyReported) {
  UsageSample next;
  next.ok = true;
  FakeEnforcer enforcer;
  uint64_t mono = 1'000'000'000;
  CoreOptions o;
  o.gpus.push_back(GpuInfo{0, "Sim", "GPU-0", 132, 80 * GiB, {}, 0});
  o.mono_ns = [&] { return mono; };
  o.pid_start_time = [](pid_t p) { return static_cast<uint64_t>(p) * 10; };
  o.verify.sample = [&] { return next; };
  o.verify.enforcer = &enforcer;  // enforce: report (the default)
  Core core(std::move(o));
  tenant_side::TenantSide t;
  t.conn.id = 1;
  t.conn.peer.pid = 900;
  t.conn.peer.uid = 1000;
  gpuos_msg_register m = tenant_side::registration(900, GPUOS_CLASS_BEST_EFFORT);
  tenant_side::adopt(t, core.handle_message(t.conn, &m, sizeof(m)));
  ASSERT_EQ(core.admin_set_gate(t.id, GPUOS_GATE_CLOSED), GPUOS_OK);
  core.connection_closed(t.conn);
  EXPECT_EQ(core.stats().escapes, 1u);
  EXPECT_EQ(core.stats().violations, 1u);
  EXPECT_TRUE(enforcer.killed.empty());
  EXPECT_TRUE(enforcer.frozen.empty());
  EXPECT_TRUE(core.pinned(t.id));
  tenant_side::unmap(t);
}

// gpuosd shutting down closes every connection: no escape, and the ledger keeps the running
// processes' holds for the next gpuosd (Adoption.*).
TEST(Identity, AShutdownIsNoEscape) {
  Reconnect c;
  tenant_side::TenantSide& t = c.reg(0, 801, GPUOS_CLASS_BEST_EFFORT);
  ASSERT_EQ(c.core->admin_set_gate(t.id, GPUOS_GATE_CLOSED), GPUOS_OK);
  c.core->shutdown();
  c.core->connection_closed(t.conn);
  EXPECT_EQ(c.core->stats().escapes, 0u);
  EXPECT_TRUE(c.enforcer.killed.empty());
  EXPECT_EQ(c.core->live_tenants(), 0u);
}

TEST(Identity, StrikesSurviveAReconnect) {
  Reconnect c;
  // A 64 MiB quota, and 3 GiB on the GPU (allocated around the interposer).
  auto connect = [&] {
    tenant_side::TenantSide& t = c.sides[0];
    t.conn = Connection{};
    t.conn.id = 801;
    t.conn.peer.pid = 801;
    t.conn.peer.uid = 1000;
    gpuos_msg_register m = tenant_side::registration(801, GPUOS_CLASS_BEST_EFFORT);
    m.requested_mem_bytes = 64ull << 20;
    tenant_side::adopt(t, c.core->handle_message(t.conn, &m, sizeof(m)));
    return t.id;
  };
  const uint32_t id = connect();
  ASSERT_NE(id, 0u);
  c.next.processes = {proc(801, 3 * GiB)};
  c.round();  // strike 1 of 2
  EXPECT_EQ(c.violations(id), 1u);
  EXPECT_TRUE(c.enforcer.killed.empty());
  // It reconnects to wipe the strike: the count goes on, and the second round in a row kills it.
  c.core->connection_closed(c.sides[0].conn);
  tenant_side::unmap(c.sides[0]);
  EXPECT_EQ(connect(), id);
  EXPECT_EQ(c.violations(id), 1u);
  c.round();
  EXPECT_EQ(c.enforcer.killed, (std::vector<pid_t>{801}));
}

TEST(Identity, TheReprieveCooldownSurvivesAReconnect) {
  Reconnect c;
  tenant_side::TenantSide& g = c.reg(0, 800, GPUOS_CLASS_GUARANTEED);
  c.reg(1, 801, GPUOS_CLASS_BEST_EFFORT);
  c.busy(g, 1);  // the best-effort gate closes
  auto signalled = [&](tenant_side::TenantSide& be) {
    tenant_side::put(be.cb->waiting, 1u);
    tenant_side::put(be.cb->signalled, 1u);
    c.busy(be, 0);  // (its ACTIVITY: gpuosd decides again)
    return load(be.grants->gate);
  };
  ASSERT_EQ(load(c.sides[1].grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  EXPECT_EQ(signalled(c.sides[1]), static_cast<uint32_t>(GPUOS_GATE_OPEN));  // its one reprieve
  c.round();  // (1 s: the reprieve of 1 s is over)
  c.round();
  ASSERT_EQ(load(c.sides[1].grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  // Reconnecting does not buy another within the cooldown (10 s).
  tenant_side::TenantSide& back = c.again(1, 801, GPUOS_CLASS_BEST_EFFORT);
  c.round();
  ASSERT_EQ(load(back.grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  EXPECT_EQ(signalled(back), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
}

// The core learns a tenant's contexts (NVML beyond its report) from the round after one that saw it
// launch, and finds it when it then holds more than it reports; found, counted and logged, never
// enforced (kill is set here).
TEST(CoreUsageCheck, ATenantThatZeroesItsReportIsFoundNotKilled) {
  constexpr uint64_t MiB = 1ull << 20;
  GatedCheck c(30'000'000'000, /*kill_after_rounds=*/1);
  tenant_side::TenantSide& t = c.reg(0, 700, GPUOS_CLASS_BEST_EFFORT, 64 * MiB);
  ASSERT_NE(t.cb, nullptr);
  tenant_side::put(t.cb->launches, uint64_t{1});
  c.next.processes = {proc(700, 500 * MiB)};  // its context alone
  c.round();
  c.round();
  EXPECT_EQ(c.violations(t.id), 0u);
  // It allocates its 64 MiB and writes 0 over its report.
  c.next.processes = {proc(700, 564 * MiB)};
  tenant_side::put(t.cb->mem_used_bytes, uint64_t{0});
  c.round();
  EXPECT_EQ(c.violations(t.id), 1u);
  EXPECT_TRUE(c.enforcer.killed.empty());
  // Honest again: its report says what it holds.
  tenant_side::put(t.cb->mem_used_bytes, 64 * MiB);
  c.round();
  EXPECT_EQ(c.violations(t.id), 1u);
}

// ... and the core sums the rounds: two tenants at 3:1 get GPU time and energy at 3:1, their energy
// with the non-tenant's part adds up to the GPU's counter, and LIST (ps --json) shows it.
TEST(CoreUsageCheck, ChargesTenantsGpuTimeAndEnergyInProportion) {
  GatedCheck c(30'000'000'000);
  tenant_side::TenantSide& a = c.reg(0, 810, GPUOS_CLASS_BEST_EFFORT);
  tenant_side::TenantSide& b = c.reg(1, 811, GPUOS_CLASS_BEST_EFFORT);
  uint64_t counter = 5'000'000;  // mJ since the driver loaded
  c.next.energy = {GpuEnergy{0, counter}};
  c.next.processes = {running(810, 60), running(811, 20), running(4242, 20)};
  c.round();  // the first round: the counter's baseline, no span yet
  ASSERT_EQ(c.core->gpu_energy_mj(0), 0u);
  for (int r = 0; r < 4; ++r) {
    counter += 10'000;  // 10 J a second: 10 W
    c.next.energy = {GpuEnergy{0, counter}};
    c.round();
  }
  auto info = [&](uint32_t id) {
    for (const TenantStat& t : c.core->tenant_stats(c.mono)) {
      if (t.info.tenant_id == id) return t.info;
    }
    return gpuos_msg_tenant_info{};
  };
  EXPECT_EQ(info(a.id).gpu_time_ns, 4 * 600'000'000ull);
  EXPECT_EQ(info(b.id).gpu_time_ns, 4 * 200'000'000ull);
  EXPECT_EQ(info(a.id).energy_mj, 24'000u);
  EXPECT_EQ(info(b.id).energy_mj, 8'000u);
  EXPECT_EQ(c.core->gpu_energy_mj(0), 40'000u);
  EXPECT_EQ(c.core->gpu_energy_attributed_mj(0), info(a.id).energy_mj + info(b.id).energy_mj);
  // The counter went back (the driver reloaded): a new baseline, that round counts no energy.
  c.next.energy = {GpuEnergy{0, 1000}};
  c.round();
  EXPECT_EQ(c.core->gpu_energy_mj(0), 40'000u);
  EXPECT_EQ(info(a.id).energy_mj, 24'000u);
  EXPECT_EQ(info(a.id).gpu_time_ns, 5 * 600'000'000ull);
  // NVML gives no energy: GPU time goes on, energy stays.
  c.next.energy.clear();
  c.round();
  EXPECT_EQ(info(a.id).energy_mj, 24'000u);
  EXPECT_EQ(info(b.id).gpu_time_ns, 6 * 200'000'000ull);
}


// --- duty cycles: the pure check ---
// Issue #62 item 7, duty cycles: a synthetic GPU of `period_ms` NVML sampling periods, rounds of 1 s
// over 20 s, a gate `pattern` (closed times, ms since 0, repeated every cycle_ms) and processes
// that run in bursts (burst_ms every every_ms from phase_ms; the honest one only while open). NVML
// samples each process in each period it ran in, at the period's end, with the share of it it ran.
struct DutySim {
  uint64_t period_ms = 100;
  uint64_t cycle_ms = 1000;
  std::vector<std::pair<uint64_t, uint64_t>> closed;  // within a cycle; {0, cycle}: closed throughout
  static constexpr uint64_t kMs = 1'000'000;
  static constexpr uint64_t kT0 = 100'000 * kMs;  // monotonic ns of ms 0

  bool closed_at(uint64_t ms_x10) const {  // in tenths of ms
    const uint64_t in = ms_x10 % (cycle_ms * 10);
    for (auto [a, b] : closed) {
      if (in >= a * 10 && in < b * 10) return true;
    }
    return false;
  }
  // The gate's closed spans up to `now_ms` (monotonic ns), the current one still open.
  std::vector<ClosedSpan> spans(uint64_t now_ms) const {
    std::vector<ClosedSpan> out;
    for (uint64_t c = 0; c * cycle_ms < now_ms; ++c) {
      for (auto [a, b] : closed) {
        const uint64_t from = c * cycle_ms + a, to = c * cycle_ms + b;
        if (from >= now_ms) continue;
        if (!out.empty() && out.back().to_ns == kT0 + from * kMs) {  // closed across cycles: one span
          out.back().to_ns = to >= now_ms ? UINT64_MAX : kT0 + to * kMs;
          continue;
        }
        out.push_back(ClosedSpan{kT0 + from * kMs, to >= now_ms ? UINT64_MAX : kT0 + to * kMs, 1, UINT64_MAX, false});
      }
    }
    return out;
  }
  // Samples of a process in (from_ms, to_ms]: a bypass runs burst_x10 (tenths of a ms) every
  // every_ms from phase_ms whatever the gate; an honest one (honest) runs only while open, all the
  // time it is open.
  std::vector<SmPoint> samples(uint64_t from_ms, uint64_t to_ms, bool honest, uint64_t burst_x10, uint64_t every_ms,
                               uint64_t phase_ms) const {
    std::vector<SmPoint> out;
    for (uint64_t end = (from_ms / period_ms + 1) * period_ms; end <= to_ms; end += period_ms) {
      uint64_t ran = 0;  // tenths of ms
      for (uint64_t x = (end - period_ms) * 10; x < end * 10; ++x) {
        const bool runs = honest ? !closed_at(x) : ((x + every_ms * 10 - phase_ms * 10) % (every_ms * 10)) < burst_x10;
        ran += runs ? 1 : 0;
      }
      if (ran != 0) out.push_back(SmPoint{kT0 + end * kMs, static_cast<uint32_t>((ran * 100 + period_ms * 5) / (period_ms * 10))});
    }
    return out;
  }
  struct Result {
    int found_round = 0;      // 0: never found
    uint32_t duty = 0;        // the duty measured over the window at the last round
    uint64_t closed_ms = 0;   // ... over that much closed time
  };
  // Runs 20 rounds of check_usage with the process (pid 10) as the only tenant.
  Result run(bool honest, uint64_t burst_x10, uint64_t every_ms, uint64_t phase_ms = 37) const {
    Result r;
    UsageWindow window;
    const CheckParams p;
    for (int round = 1; round <= 20; ++round) {
      const uint64_t to = static_cast<uint64_t>(round) * 1000, from = to - 1000;
      UsageSample s;
      s.ok = true;
      ObservedProcess o = proc(10, GiB);
      o.points = samples(from, to, honest, burst_x10, every_ms, phase_ms);
      o.period_ns = period_ms * kMs;  // learned from a tenant beside it that runs all along
      s.processes.push_back(o);
      TenantGrant g;
      g.id = 1;
      g.pid = 10;
      g.window = &window;
      g.closed = spans(to);
      g.round_from_ns = kT0 + from * kMs;
      g.round_to_ns = kT0 + to * kMs;
      std::vector<RoundFigures> figures;
      const std::vector<Finding> f = check_usage(s, {g}, p, {}, &figures);
      window.push_back(figures.at(0));
      while (window.size() >= p.window_rounds) window.pop_front();
      uint64_t closed = 0, used = 0;
      for (const RoundFigures& w : window) {
        closed += w.closed_ns;
        used += w.closed_used_ns;
      }
      closed_duty_bypass(closed, used, &r.duty);
      r.closed_ms = closed / kMs;
      for (const Finding& x : f) {
        if (x.kind == FindingKind::kLaunchedWhileGated && x.duty && r.found_round == 0) r.found_round = round;
      }
    }
    return r;
  }
};

// The pure check: samples wholly inside closed spans only, period from the samples' gaps.
TEST(ClosedDuty, CountsOnlySamplesWhollyInsideAClosedSpan) {
  const std::vector<ClosedSpan> spans = {ClosedSpan{1'000'000'000, 2'000'000'000, 1, UINT64_MAX, false}};
  // Period 100 ms (the gaps): ends at 1.1 s (straddles the close with its edge) and 1.2 s ... 1.9 s.
  std::vector<SmPoint> pts;
  for (uint64_t ms = 1100; ms <= 2100; ms += 100) pts.push_back(SmPoint{ms * 1'000'000, 50});
  const ClosedUse u = closed_use(pts, 0, 0, spans, 500'000'000, 2'500'000'000);
  // Sample ends in [1.12 s, 1.98 s]: 1.2 ... 1.9 (8 of them), each 50% of 100 ms.
  EXPECT_EQ(u.used_ns, 8 * 50'000'000ull);
  EXPECT_EQ(u.closed_ns, 860'000'000ull);
  // Another GPU, an excused span, a round before the first: nothing.
  EXPECT_EQ(closed_use(pts, 0, 1, spans, 500'000'000, 2'500'000'000).used_ns, 0u);
  std::vector<ClosedSpan> excused = spans;
  excused[0].excused = true;
  EXPECT_EQ(closed_use(pts, 0, 0, excused, 500'000'000, 2'500'000'000).used_ns, 0u);
  EXPECT_EQ(closed_use(pts, 0, 0, spans, 0, 2'500'000'000).closed_ns, 0u);
  // One sample: the period is unknown, taken as 1 s: no span of 1 s holds it with its edges.
  EXPECT_EQ(closed_use({SmPoint{1'900'000'000, 90}}, 0, 0, spans, 500'000'000, 2'500'000'000).used_ns, 0u);
  uint32_t duty = 0;
  EXPECT_FALSE(closed_duty_bypass(kClosedDutyMinNs - 1, kClosedDutyMinNs, &duty));  // too little closed time
  EXPECT_TRUE(closed_duty_bypass(kClosedDutyMinNs, kClosedDutyMinNs * kClosedDutyPercent / 100, &duty));
  EXPECT_EQ(duty, kClosedDutyPercent);
}

// Per gate pattern: a bypass of 14% and 10% duty is found, an honest tenant (runs whenever open)
// never; the least duty found and what a 5% bypass shows are printed (docs/SECURITY.md).
TEST(ClosedDuty, ABypassAtTenPercentDutyIsFoundBesideAnyGatePattern) {
  struct Pattern {
    const char* name;
    uint64_t period_ms;
    std::vector<std::pair<uint64_t, uint64_t>> closed;
    uint64_t cycle_ms = 1000;
    bool judged = true;  // enough closed time for kClosedDutyMinNs (else: what is still missed)
  };
  const std::vector<Pattern> patterns = {
      {"closed throughout", 100, {{0, 1000}}},
      {"closed 900 of each 1000 ms", 100, {{50, 950}}},
      {"closed 700, open 300 ms within every round", 100, {{150, 850}}},
      // (Its cycle no multiple of NVML's period: it closes at every phase of it, as a real gate.)
      {"closed 290, open 200 ms (twice a round)", 100, {{0, 290}}, 490},
      // Missed: 50 ms of each 190 ms closed can hold a sample with its edges, 1.7 s in 10 s.
      {"closed 190, open 100 ms (3 times a round)", 100, {{0, 190}}, 290, false},
      {"closed 700, open 300 ms, NVML period 167 ms", 167, {{150, 850}}},
  };
  for (const Pattern& pat : patterns) {
    DutySim sim;
    sim.period_ms = pat.period_ms;
    sim.closed = pat.closed;
    sim.cycle_ms = pat.cycle_ms;
    const DutySim::Result honest = sim.run(true, 0, 1);
    EXPECT_EQ(honest.found_round, 0) << pat.name << ": an honest tenant, duty " << honest.duty;
    EXPECT_EQ(honest.duty, 0u) << pat.name;
    // Bursts every 290 ms (no multiple of the gate's cycle: they meet every part of it), at 37 ms.
    auto bypass = [&](int percent) { return sim.run(false, static_cast<uint64_t>(percent) * 29, 290); };
    const DutySim::Result d14 = bypass(14), d10 = bypass(10), d5 = bypass(5);
    EXPECT_EQ(d14.found_round != 0, pat.judged) << pat.name << ": 14% measured " << d14.duty << "% over " << d14.closed_ms << " ms";
    EXPECT_EQ(d10.found_round != 0, pat.judged) << pat.name << ": 10% measured " << d10.duty << "% over " << d10.closed_ms << " ms";
    int least = 0;  // the least duty found (1% steps)
    for (int d = 1; d <= 20 && least == 0; ++d) {
      if (bypass(d).found_round != 0) least = d;
    }
    std::printf("[duty] %-45s 14%%: found round %2d (measured %u%%), 10%%: round %2d (%u%%), 5%%: %s (%u%%), "
                "least found: %d%%, closed time judged %llu ms\n",
                pat.name, d14.found_round, d14.duty, d10.found_round, d10.duty, d5.found_round != 0 ? "found" : "missed",
                d5.duty, least, static_cast<unsigned long long>(d14.closed_ms));
  }
}
// --- duty cycles: the core ---
// Issue #62 item 7: beside a guaranteed tenant busy 700 ms of every round (its gate opens and closes
// within every round, so no round is gated throughout), a bypass at 14% duty is found and killed;
// an honest best-effort tenant that runs whenever its gate is open (its samples that straddle the
// gate's moves included) is not. Before, neither round was judged: the bypass ran on unfound.
TEST(CoreUsageCheck, ADutyBypassBesideAGateThatMovesWithinEveryRoundIsFound) {
  GatedCheck c(30'000'000'000);
  tenant_side::TenantSide& g = c.reg(0, 800, GPUOS_CLASS_GUARANTEED);
  tenant_side::TenantSide& honest = c.reg(1, 801, GPUOS_CLASS_BEST_EFFORT);
  tenant_side::TenantSide& cheat = c.reg(2, 802, GPUOS_CLASS_BEST_EFFORT);
  constexpr uint64_t kMs = 1'000'000;
  // NVML's samples of one process (a 100 ms period, as learned from the guaranteed tenant).
  auto sampled = [](pid_t pid, const std::vector<SmPoint>& pts) {
    ObservedProcess o = proc(pid, GiB);
    uint32_t sum = 0;
    for (const SmPoint& p : pts) {
      o.sm_util = std::max<int32_t>(o.sm_util, static_cast<int32_t>(p.sm));
      sum += p.sm;
    }
    if (!pts.empty()) o.sm_util_mean = static_cast<int32_t>(sum / pts.size());
    o.points = pts;
    o.period_ns = 100 * kMs;
    return o;
  };
  bool killed_round = false;
  for (int round = 0; round < 12; ++round) {
    const uint64_t r = c.mono;
    c.mono = r + 150 * kMs;
    c.busy(g, 1);
    ASSERT_EQ(load(cheat.grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
    ASSERT_EQ(load(honest.grants->gate), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
    c.mono = r + 850 * kMs;
    c.busy(g, 0);
    ASSERT_EQ(load(honest.grants->gate), static_cast<uint32_t>(GPUOS_GATE_OPEN));
    // The honest one ran while open: [r-150, r+150) and [r+850, r+1000).
    const std::vector<SmPoint> h = {{r + 100 * kMs, 100}, {r + 200 * kMs, 50}, {r + 900 * kMs, 50}, {r + 1000 * kMs, 100}};
    std::vector<SmPoint> b, gs;  // the bypass: 14% of every period, whatever its gate; the guaranteed
    for (uint64_t ms = 100; ms <= 1000; ms += 100) {
      b.push_back({r + ms * kMs, 14});
      if (ms > 200 && ms <= 800) gs.push_back({r + ms * kMs, 80});
    }
    c.next.processes = {sampled(800, gs), sampled(801, h)};
    if (std::find(c.enforcer.killed.begin(), c.enforcer.killed.end(), 802) == c.enforcer.killed.end()) {
      c.next.processes.push_back(sampled(802, b));
    } else {
      killed_round = true;
    }
    c.mono = r + 1000 * kMs;
    c.core->tick(c.mono);
  }
  EXPECT_GE(c.violations(cheat.id), 2u);
  EXPECT_EQ(c.enforcer.killed, (std::vector<pid_t>{802}));
  EXPECT_TRUE(killed_round);
  EXPECT_EQ(c.violations(honest.id), 0u);
  EXPECT_EQ(c.violations(g.id), 0u);
}

}  // namespace
}  // namespace gpuos::daemon
