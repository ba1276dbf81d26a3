// SPDX-License-Identifier: Apache-2.0
// The usage check's NVML side against the real semantics of NVML (faked through its table): MPS
// clients count, a driver without MPS is no failure, the utilization array grows and the next round
// asks only for samples newer than the newest seen, every call is timed, NVML is shut down with the
// reader; what counts as an unregistered process; and the freezer's walk of the cgroups below the
// offender's, and thawing. test/driver_double/nvml_double_test.cc runs the reader on the double.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "daemon/core/enforcer.h"
#include "daemon/core/usage_verifier.h"

namespace gpuos::daemon {
namespace {

constexpr uint64_t GiB = 1ull << 30;

// One GPU ("GPU-a") with tenant pid 100 on it, MPS client 200 whose memory NVML cannot say, and
// 300 utilization samples (more than the reader's first array).
struct Fake {
  static inline nvmlReturn_t mps_result = NVML_SUCCESS;
  static inline std::vector<unsigned long long> last_seen;  // what each utilization call asked for
  static inline int inits = 0;
  static nvmlReturn_t init() { return ++inits, NVML_SUCCESS; }
  static nvmlReturn_t shutdown() { return --inits, NVML_SUCCESS; }
  static nvmlReturn_t count(unsigned* n) { return *n = 1, NVML_SUCCESS; }
  static nvmlReturn_t handle(unsigned, nvmlDevice_t* d) {
    *d = reinterpret_cast<nvmlDevice_t>(uintptr_t{1});
    return NVML_SUCCESS;
  }
  static nvmlReturn_t uuid(nvmlDevice_t, char* out, unsigned len) {
    std::snprintf(out, len, "GPU-a");
    return NVML_SUCCESS;
  }
  static nvmlReturn_t procs(nvmlDevice_t, unsigned* n, nvmlProcessInfo_t* infos) {
    if (*n < 1) return *n = 1, NVML_ERROR_INSUFFICIENT_SIZE;
    infos[0] = nvmlProcessInfo_t{100, 3 * GiB, 0xFFFFFFFFu, 0xFFFFFFFFu};
    return *n = 1, NVML_SUCCESS;
  }
  static nvmlReturn_t mps(nvmlDevice_t, unsigned* n, nvmlProcessInfo_t* infos) {
    if (mps_result != NVML_SUCCESS) return mps_result;
    infos[0] = nvmlProcessInfo_t{200, GPUOS_NVML_VALUE_NOT_AVAILABLE, 0xFFFFFFFFu, 0xFFFFFFFFu};
    return *n = 1, NVML_SUCCESS;
  }
  static nvmlReturn_t util(nvmlDevice_t, nvmlProcessUtilizationSample_t* s, unsigned* n, unsigned long long seen) {
    last_seen.push_back(seen);
    constexpr unsigned kSamples = 300;
    if (seen >= 5000) return *n = 0, NVML_ERROR_NOT_FOUND;
    if (*n < kSamples) return *n = kSamples, NVML_ERROR_INSUFFICIENT_SIZE;
    for (unsigned i = 0; i < kSamples; ++i) {
      // pid 100 at 10..40%, pid 300 (only here: it just exited) at 0%; the newest at t = 5000.
      s[i] = i % 2 == 0 ? nvmlProcessUtilizationSample_t{100, 4000 + i, 10 + i % 31, 0, 0, 0}
                        : nvmlProcessUtilizationSample_t{300, 4700u + (i == 299 ? 300u : 0u), 0, 0, 0, 0};
    }
    return *n = kSamples, NVML_SUCCESS;
  }
  static GpuosNvmlTable table() {
    GpuosNvmlTable t{};
    t.nvmlInit_v2 = &init;
    t.nvmlShutdown = &shutdown;
    t.nvmlDeviceGetCount_v2 = &count;
    t.nvmlDeviceGetHandleByIndex_v2 = &handle;
    t.nvmlDeviceGetUUID = &uuid;
    t.nvmlDeviceGetComputeRunningProcesses_v3 = &procs;
    t.nvmlDeviceGetMPSComputeRunningProcesses_v3 = &mps;
    t.nvmlDeviceGetProcessUtilization = &util;
    return t;
  }
};

const ObservedProcess* find(const UsageSample& s, pid_t pid) {
  for (const ObservedProcess& p : s.processes) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

TEST(NvmlReader, MpsClientsSamplesAndCostsOfEveryCall) {
  Fake::last_seen.clear();
  Fake::mps_result = NVML_SUCCESS;
  {
    NvmlReader r(Fake::table(), {GpuInfo{5, "H200", "GPU-a", 132, 141 * GiB, {}, 0}});
    ASSERT_TRUE(r.available()) << r.why_not();
    EXPECT_EQ(Fake::inits, 1);
    UsageSample s = r.read();
    EXPECT_TRUE(s.ok);
    ASSERT_NE(find(s, 100), nullptr);
    EXPECT_EQ(find(s, 100)->gpu, 5u);
    EXPECT_EQ(find(s, 100)->mem_bytes, 3 * GiB);
    EXPECT_EQ(find(s, 100)->sm_util, 40);       // the highest sample of the round
    EXPECT_EQ(find(s, 100)->sm_util_mean, 24);  // ... and the mean of its 150 (the pacing check's)
    ASSERT_NE(find(s, 200), nullptr);      // an MPS client, its memory unknown
    EXPECT_TRUE(find(s, 200)->listed);
    EXPECT_FALSE(find(s, 200)->mem_known);
    ASSERT_NE(find(s, 300), nullptr);
    EXPECT_FALSE(find(s, 300)->listed);
    EXPECT_EQ(find(s, 300)->sm_util, 0);
    EXPECT_EQ(find(s, 300)->sm_util_mean, 0);
    // Every call timed, the failed first utilization call (array too small) included.
    ASSERT_EQ(s.calls.size(), 4u);
    EXPECT_STREQ(s.calls[1].name, "nvmlDeviceGetMPSComputeRunningProcesses_v3");
    EXPECT_EQ(s.calls[2].result, NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(s.calls[3].result, NVML_SUCCESS);
    uint64_t sum = 0;
    for (const NvmlCall& c : s.calls) sum += c.ns;
    EXPECT_LE(sum, s.cost_ns);
    // The next round asks for samples newer than the newest seen (t = 5000): none.
    s = r.read();
    EXPECT_EQ(Fake::last_seen.back(), 5000u);
    EXPECT_EQ(find(s, 100)->sm_util, -1);
    EXPECT_EQ(find(s, 100)->sm_util_mean, -1);
    EXPECT_EQ(find(s, 300), nullptr);
    // A driver without MPS: nothing to list there, and no failure.
    Fake::mps_result = NVML_ERROR_NOT_SUPPORTED;
    s = r.read();
    EXPECT_TRUE(s.ok);
    EXPECT_EQ(find(s, 200), nullptr);
    Fake::mps_result = NVML_ERROR_UNKNOWN;
    EXPECT_FALSE(r.read().ok);
    Fake::mps_result = NVML_SUCCESS;
  }
  EXPECT_EQ(Fake::inits, 0) << "the reader shuts NVML down";
  EXPECT_EQ(Fake::last_seen.front(), 0u);
}

TEST(NvmlReader, SaysWhyItIsOff) {
  GpuosNvmlTable t = Fake::table();
  t.nvmlInit_v2 = [] { return nvmlReturn_t{NVML_ERROR_DRIVER_NOT_LOADED}; };
  NvmlReader r(t, {GpuInfo{0, "H200", "GPU-a", 132, 141 * GiB, {}, 0}});
  EXPECT_FALSE(r.available());
  EXPECT_EQ(r.why_not(), "nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED");
  EXPECT_FALSE(NvmlReader(Fake::table(), {}).available());  // no GPU of gpuosd's
  EXPECT_EQ(Fake::inits, 0);
}

// Unregistered: memory, activity, or a context NVML cannot size; not a 0% sample alone (a process
// that just exited). One finding per process, whichever of its GPUs shows it.
TEST(CheckUsage, WhatCountsAsAProcessOutsideGpuos) {
  UsageSample s;
  auto add = [&](pid_t pid, uint32_t gpu, bool listed, bool known, uint64_t mem, int32_t util) {
    ObservedProcess p;
    p.pid = pid;
    p.gpu = gpu;
    p.listed = listed;
    p.mem_known = known;
    p.mem_bytes = mem;
    p.sm_util = util;
    s.processes.push_back(p);
  };
  add(300, 0, false, false, 0, 0);        // a 0% sample only: no evidence
  add(301, 0, false, false, 0, 0);        // 0% on GPU 0 ...
  add(301, 1, true, true, GiB, -1);       // ... and 1 GiB on GPU 1: found once, on GPU 1
  add(302, 0, true, false, 0, -1);        // an MPS client NVML cannot size
  add(303, 0, false, false, 0, 55);       // activity alone
  add(304, 0, true, true, 0, -1);         // listed, nothing held, idle
  add(305, 0, true, true, 66 << 20, 99);  // an MPS server: its clients' SM use, no tenant by design
  s.processes.back().mps_server = true;
  const std::vector<Finding> f = check_usage(s, {}, CheckParams{}, {});
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].pid, 301);
  EXPECT_EQ(f[0].gpu, 1u);
  EXPECT_EQ(f[0].measured, GiB);
  EXPECT_EQ(f[1].pid, 302);
  EXPECT_EQ(f[2].pid, 303);
}

class FakeTree : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuos-freezer-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::filesystem::path& f, const std::string& text) {
    std::filesystem::create_directories(f.parent_path());
    std::ofstream(f) << text;
  }
  void add_proc(int pid, int uid, const std::string& cg) {
    write(root_ / "proc" / std::to_string(pid) / "stat",
          std::to_string(pid) + " (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " + std::to_string(7000 + pid) + " 0\n");
    write(root_ / "proc" / std::to_string(pid) / "status", "Uid:\t" + std::to_string(uid) + "\t0\t0\t0\n");
    write(root_ / "proc" / std::to_string(pid) / "cgroup", "0::" + cg + "\n");
  }
  std::string freeze_word(const std::string& cg) {
    std::string v;
    std::ifstream(root_ / "cg" / cg.substr(1) / "cgroup.freeze") >> v;
    return v;
  }
  std::filesystem::path root_;
};

// Freezing a cgroup freezes the cgroups below it too: another user's process there forbids it.
TEST_F(FakeTree, FreezingLooksBelowTheOffendersCgroupAndThaws) {
  add_proc(400, 1000, "/job");
  add_proc(401, 2000, "/job/helper");
  write(root_ / "cg/job/cgroup.procs", "400\n");
  write(root_ / "cg/job/helper/cgroup.procs", "401\n");
  SystemEnforcer e((root_ / "proc").string(), (root_ / "cg").string());
  std::string why;
  EXPECT_FALSE(e.freeze(400, 1000, 7400, {}, &why));
  EXPECT_NE(why.find("pid 401 of another user"), std::string::npos) << why;
  EXPECT_EQ(freeze_word("/job"), "");
  // Below it, only the offender's own processes: frozen, then thawed.
  add_proc(401, 1000, "/job/helper");
  EXPECT_TRUE(e.freeze(400, 1000, 7400, {}, &why)) << why;
  EXPECT_EQ(freeze_word("/job"), "1");
  EXPECT_TRUE(e.thaw(400, &why)) << why;
  EXPECT_EQ(freeze_word("/job"), "0");
  // A tenant below: refused, as one beside it.
  EXPECT_FALSE(e.freeze(400, 1000, 7400, {401}, &why));
  EXPECT_NE(why.find("tenant pid 401"), std::string::npos) << why;
  // Never the root cgroup.
  add_proc(402, 1000, "/");
  EXPECT_FALSE(e.freeze(402, 1000, 7402, {}, &why));
  EXPECT_FALSE(e.thaw(402, &why));
}

// gpuosd's own pid in the offender's cgroup forbids freezing it (the real /proc: this process).
TEST_F(FakeTree, NeverTheCgroupOfGpuosd) {
  const pid_t me = getpid();
  add_proc(500, 1000, "/shared");
  add_proc(me, 1000, "/shared");
  write(root_ / "cg/shared/cgroup.procs", "500\n" + std::to_string(me) + "\n");
  SystemEnforcer e((root_ / "proc").string(), (root_ / "cg").string());
  std::string why;
  EXPECT_FALSE(e.freeze(500, 1000, 7500, {}, &why));
  EXPECT_NE(why.find("also holds gpuosd"), std::string::npos) << why;
}

// An MPS server is known by the binary it runs, not by a name its process can choose: on the H200
// its comm reads "nvidia-cuda-mps" (cut to 15 characters), which the old comm check never matched.
TEST_F(FakeTree, AnMpsServerIsKnownByItsBinary) {
  auto binary = [&](const std::string& name, std::filesystem::perms mode) {
    const std::filesystem::path f = root_ / "bin" / name;
    write(f, "#!/bin/true\n");
    std::filesystem::permissions(f, mode);
    return f;
  };
  auto exe = [&](int pid, const std::filesystem::path& target) {
    std::filesystem::create_directories(root_ / "proc" / std::to_string(pid));
    std::filesystem::create_symlink(target, root_ / "proc" / std::to_string(pid) / "exe");
  };
  using P = std::filesystem::perms;
  const auto rx = P::owner_all | P::group_read | P::group_exec | P::others_read | P::others_exec;
  exe(600, binary("nvidia-cuda-mps-server", rx));
  exe(601, binary("gpuos-synth", rx));
  exe(602, root_ / "elsewhere" / "nvidia-cuda-mps-server");  // gone: cannot be checked
  const std::string proc = (root_ / "proc").string();
  const uid_t me = getuid();
  EXPECT_TRUE(is_mps_server(600, proc, me));
  EXPECT_FALSE(is_mps_server(600, proc, me + 1)) << "a copy owned by someone else than the trusted owner";
  EXPECT_FALSE(is_mps_server(601, proc, me));
  EXPECT_FALSE(is_mps_server(602, proc, me));
  EXPECT_FALSE(is_mps_server(603, proc, me)) << "no such process";
  std::filesystem::permissions(root_ / "bin" / "nvidia-cuda-mps-server", rx | P::others_write);
  EXPECT_FALSE(is_mps_server(600, proc, me)) << "a binary anyone could have replaced";
  EXPECT_FALSE(is_mps_server(getpid())) << "this test is no MPS server";
}

}  // namespace
}  // namespace gpuos::daemon
