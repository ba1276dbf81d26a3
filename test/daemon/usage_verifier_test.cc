// The usage check (issue #22, "trust but verify"): NVML's view of each process against what gpuosd
// granted, the enforce policy, the freezer's safety rules, and the core acting on findings. NVML is
// faked here through its table; test/e2e runs it on the driver double's NVML stand-in.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/ipc.h"
#include "daemon/core.h"
#include "daemon/enforcer.h"
#include "daemon/usage_verifier.h"
#include "policies/enforce/enforce.h"
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

// A fake NVML: two devices (the second is not one of gpuosd's), a process list that needs the
// array to grow, memory NVML cannot tell, utilization samples.
struct FakeNvml {
  static inline int process_calls = 0;
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
};

// Issue #42 (2): a tenant zeroed its mem_used_bytes after each allocation. NVML's measure beyond
// its report plus its contexts' memory (the least seen beyond it) and a small margin (64 MiB, at
// most a quarter of its quota) is a finding; within it, or not measured yet, none.
TEST(CheckUsage, AReportBelowWhatNvmlMeasuresIsAFinding) {
  constexpr uint64_t MiB = 1ull << 20;
  EXPECT_EQ(report_margin(0), 64 * MiB);
  EXPECT_EQ(report_margin(64 * MiB), 16 * MiB);
  EXPECT_EQ(report_margin(8 * GiB), 64 * MiB);
  UsageSample s;
  s.ok = true;
  s.processes = {proc(10, 500 * MiB + 64 * MiB), proc(11, 500 * MiB + 70 * MiB), proc(12, 2 * GiB), proc(13, GiB)};
  std::vector<TenantGrant> tenants(4);
  // 10: a 64 MiB quota, reports 0, its context 500 MiB: hides its 64 MiB.
  tenants[0] = TenantGrant{1, 10, 64 * MiB, 0, 0, 500 * MiB};
  // 11: no quota, reports 6 MiB, its context 500: 64 MiB beyond, at the margin: fine.
  tenants[1] = TenantGrant{2, 11, 0, 0, 6 * MiB, 500 * MiB};
  // 12: reports 1.9 GiB: fine. 13: not measured before (no context known): nothing to compare.
  tenants[2] = TenantGrant{3, 12, 0, 0, 2 * GiB - 100 * MiB, 100 * MiB};
  tenants[3] = TenantGrant{4, 13, 0, 0, 0};
  const std::vector<Finding> f = check_usage(s, tenants, CheckParams{}, {});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, FindingKind::kUnderReported);
  EXPECT_EQ(f[0].tenant_id, 1u);
  EXPECT_EQ(f[0].measured, 564 * MiB);
  EXPECT_EQ(f[0].limit, 516 * MiB);
  EXPECT_STREQ(finding_name(f[0].kind), "under_reported");
}

TEST(NvmlReader, MatchesGpusByUuidAndReadsEveryProcess) {
  GpuosNvmlTable t{};
  t.nvmlInit_v2 = &FakeNvml::init;
  t.nvmlDeviceGetCount_v2 = &FakeNvml::count;
  t.nvmlDeviceGetHandleByIndex_v2 = &FakeNvml::handle;
  t.nvmlDeviceGetUUID = &FakeNvml::uuid;
  t.nvmlDeviceGetComputeRunningProcesses_v3 = &FakeNvml::procs;
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

TEST(EnforcePolicy, ActsOnlyOnPersistentFindingsOfTenants) {
  using policies::EnforceAction;
  policies::EnforceParams p{policies::EnforceMode::kKill, 2};
  EXPECT_EQ(decide_enforcement(p, true, 1), EnforceAction::kReport);
  EXPECT_EQ(decide_enforcement(p, true, 2), EnforceAction::kKill);
  EXPECT_EQ(decide_enforcement(p, false, 5), EnforceAction::kReport);  // never a non-tenant
  p.mode = policies::EnforceMode::kFreeze;
  EXPECT_EQ(decide_enforcement(p, true, 3), EnforceAction::kFreeze);
  p.mode = policies::EnforceMode::kReport;
  EXPECT_EQ(decide_enforcement(p, true, 9), EnforceAction::kReport);
  policies::EnforceMode m;
  EXPECT_TRUE(policies::parse_enforce_mode("freeze", &m));
  EXPECT_FALSE(policies::parse_enforce_mode("nuke", &m));
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
  o.verify.enforce = policies::EnforceParams{policies::EnforceMode::kKill, 2};
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
  EXPECT_EQ(enforcer.killed, (std::vector<pid_t>{700}));
  EXPECT_EQ(core.stats().enforcements, 1u);
  EXPECT_EQ(core.stats().usage_rounds, 2u);
  // The gate opened and closed between two rounds: not gated the whole round.
  ASSERT_EQ(core.admin_set_gate(gated, GPUOS_GATE_OPEN), GPUOS_OK);
  ASSERT_EQ(core.admin_set_gate(gated, GPUOS_GATE_CLOSED), GPUOS_OK);
  mono += 1'000'000'000;
  core.tick(mono);
  EXPECT_EQ(core.tenant_stats(mono).at(1).violations, 1u);
  // A tenant's verified memory and violations reach LIST (ps --json) and the metrics.
  Connection client;
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

// The core learns a tenant's contexts from the first round (NVML beyond its report) and finds it when
// it then holds more than it reports; found, counted and logged, never enforced (kill is set here).
TEST(CoreUsageCheck, ATenantThatZeroesItsReportIsFoundNotKilled) {
  constexpr uint64_t MiB = 1ull << 20;
  UsageSample next;
  FakeEnforcer enforcer;
  uint64_t mono = 1'000'000'000;
  CoreOptions o;
  o.gpus.push_back(GpuInfo{0, "Sim", "GPU-0", 132, 80 * GiB, {}, 0});
  o.mono_ns = [&] { return mono; };
  o.pid_start_time = [](pid_t p) { return static_cast<uint64_t>(p) * 10; };
  o.verify.sample = [&] { return next; };
  o.verify.interval_ns = 1'000'000'000;
  o.verify.enforce = policies::EnforceParams{policies::EnforceMode::kKill, 1};
  o.verify.enforcer = &enforcer;
  Core core(std::move(o));
  Connection c;
  c.id = 1;
  c.peer.pid = 700;
  c.peer.uid = 1000;
  gpuos_msg_register m = tenant_side::registration(700, GPUOS_CLASS_BEST_EFFORT);
  m.requested_mem_bytes = 64 * MiB;
  tenant_side::TenantSide t;
  t.conn = c;
  Outcome reg = core.handle_message(t.conn, &m, sizeof(m));
  tenant_side::adopt(t, reg);
  ASSERT_NE(t.cb, nullptr);
  next.ok = true;
  next.processes = {proc(700, 500 * MiB)};  // its context alone
  core.tick(mono);
  EXPECT_EQ(core.tenant_stats(mono).at(0).violations, 0u);
  // It allocates its 64 MiB and writes 0 over its report.
  next.processes = {proc(700, 564 * MiB)};
  tenant_side::put(t.cb->mem_used_bytes, uint64_t{0});
  mono += 1'000'000'000;
  core.tick(mono);
  EXPECT_EQ(core.tenant_stats(mono).at(0).violations, 1u);
  EXPECT_TRUE(enforcer.killed.empty());
  // Honest again: its report says what it holds.
  tenant_side::put(t.cb->mem_used_bytes, 64 * MiB);
  mono += 1'000'000'000;
  core.tick(mono);
  EXPECT_EQ(core.tenant_stats(mono).at(0).violations, 1u);
  tenant_side::unmap(t);
}

}  // namespace
}  // namespace gpuos::daemon
