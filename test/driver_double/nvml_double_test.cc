// SPDX-License-Identifier: Apache-2.0
// The NVML loader and the driver double's NVML stand-in (src/driver_double/nvml.cc): a process that
// uses the double without any interposer is seen through NVML, with the bytes the double counted
// in that process itself and the time its kernels ran; gpuosd's reader (daemon/usage_verifier.h)
// sees it through the stand-in and finds it. No assertion depends on how fast this machine is: a
// kernel's busy time is exact in the double, and a share is only checked to be above zero.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/core/usage_verifier.h"
#include "dd_child_process.h"
#include "gpuos/nvml_api.h"


namespace {

constexpr unsigned long long kMiB = 1ull << 20;

std::string shm_name() { return "/gpuos-nvml-test-" + std::to_string(getpid()); }

GpuosNvmlTable& nvml() {
  static GpuosNvmlTable t{};
  return t;
}

// Each test process gets its own simulated GPU (segment), removed at the end.
class Env : public ::testing::Environment {
 public:
  void SetUp() override {
    setenv("GPUOS_SIM_SHM", shm_name().c_str(), 1);
    setenv("GPUOS_SIM_MEM_MIB", "2048", 1);
    setenv("GPUOS_SIM_NS_PER_ITER", "1.0", 1);
    unsetenv("GPUOS_SIM_DEVICES");
    unsetenv("GPUOS_SIM_FAULT_AFTER_LAUNCHES");
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("LD_PRELOAD");  // the child uses the double directly, without any interposer
    char err[512];
    ASSERT_TRUE(gpuos::load_nvml(&nvml(), GPUOS_NVML_DOUBLE_PATH, err, sizeof err)) << err;
  }
  void TearDown() override { shm_unlink(shm_name().c_str()); }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new Env);

using Child = ddtest::ChildProcess;

nvmlDevice_t device0() {
  nvmlDevice_t d = nullptr;
  EXPECT_EQ(nvml().nvmlDeviceGetHandleByIndex_v2(0, &d), NVML_SUCCESS);
  return d;
}

TEST(NvmlLoader, LoadsByPathOrEnvironmentAndRefusesWhatIsNotNvml) {
  GpuosNvmlTable t{};
  char err[512] = "";
  EXPECT_FALSE(gpuos::load_nvml(&t, "/nonexistent/libnvidia-ml.so.1", err, sizeof err));
  EXPECT_NE(std::string(err).find("cannot load NVML /nonexistent/libnvidia-ml.so.1"), std::string::npos) << err;
  EXPECT_EQ(t.handle, nullptr);
  // A library that loads but is no NVML (the double's libcuda): refused, the table left empty.
  EXPECT_FALSE(gpuos::load_nvml(&t, GPUOS_DRIVER_DOUBLE_PATH, err, sizeof err));
  EXPECT_NE(std::string(err).find("is not a usable NVML (no nvmlInit_v2)"), std::string::npos) << err;
  EXPECT_EQ(t.nvmlInit_v2, nullptr);
  // No library named: $GPUOS_NVML_LIBRARY.
  setenv("GPUOS_NVML_LIBRARY", GPUOS_NVML_DOUBLE_PATH, 1);
  const bool ok = gpuos::load_nvml(&t, nullptr, err, sizeof err);
  unsetenv("GPUOS_NVML_LIBRARY");
  ASSERT_TRUE(ok) << err;
#define GPUOS_NVML_PRESENT(ret, name, params) EXPECT_NE(t.name, nullptr) << #name;
  GPUOS_NVML_FUNCS(GPUOS_NVML_PRESENT)
#undef GPUOS_NVML_PRESENT
  EXPECT_STREQ(t.nvmlErrorString(NVML_ERROR_NOT_FOUND), "Not Found");
  EXPECT_STREQ(gpuos::nvml_return_name(NVML_ERROR_INSUFFICIENT_SIZE), "NVML_ERROR_INSUFFICIENT_SIZE");
}

TEST(NvmlStandIn, InitDevicesAndSizes) {
  const GpuosNvmlTable& t = nvml();
  unsigned n = 0;
  EXPECT_EQ(t.nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(t.nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
  ASSERT_EQ(t.nvmlInit_v2(), NVML_SUCCESS);
  ASSERT_EQ(t.nvmlInit_v2(), NVML_SUCCESS);  // counted: one shutdown leaves it initialised
  ASSERT_EQ(t.nvmlShutdown(), NVML_SUCCESS);
  ASSERT_EQ(t.nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
  EXPECT_EQ(n, 1u);  // GPUOS_SIM_DEVICES unset
  nvmlDevice_t d = nullptr;
  EXPECT_EQ(t.nvmlDeviceGetHandleByIndex_v2(1, &d), NVML_ERROR_INVALID_ARGUMENT);
  d = device0();
  char uuid[96] = "";
  EXPECT_EQ(t.nvmlDeviceGetUUID(d, uuid, 10), NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(t.nvmlDeviceGetUUID(d, uuid, sizeof uuid), NVML_SUCCESS);
  EXPECT_EQ(std::string(uuid).rfind("GPU-", 0), 0u) << uuid;
  EXPECT_EQ(std::strlen(uuid), 40u) << uuid;  // GPU- and 36 characters, as NVML and gpuosd write it
  char version[80] = "";
  EXPECT_EQ(t.nvmlSystemGetDriverVersion(version, sizeof version), NVML_SUCCESS);
  // Nothing holds memory or ran a kernel here: an empty list, no utilization sample.
  n = 0;
  EXPECT_EQ(t.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, nullptr), NVML_SUCCESS);
  EXPECT_EQ(n, 0u);
  nvmlProcessUtilizationSample_t s[2];
  n = 2;
  EXPECT_EQ(t.nvmlDeviceGetProcessUtilization(d, s, &n, 0), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(n, 0u);
  n = 0;
  EXPECT_EQ(t.nvmlDeviceGetMPSComputeRunningProcesses_v3(d, &n, nullptr), NVML_SUCCESS);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(t.nvmlShutdown(), NVML_SUCCESS);
}

// A process that allocates and launches on the double without libgpuos.so: NVML lists it with the
// bytes the double counted in it, and reports the time its kernels ran, sample by sample.
TEST(NvmlStandIn, SeesAProcessThatBypassesTheInterposer) {
  const GpuosNvmlTable& t = nvml();
  ASSERT_EQ(t.nvmlInit_v2(), NVML_SUCCESS);  // before the segment exists: it is found later
  Child c({"serve", "300"});
  ASSERT_GT(c.pid, 0);
  ASSERT_EQ(c.line(), "alloc=0");
  ASSERT_EQ(c.line(), "ready");
  const nvmlDevice_t d = device0();
  unsigned n = 0;
  ASSERT_EQ(t.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(n, 1u);  // the count needed
  nvmlProcessInfo_t infos[4] = {};
  n = 4;
  ASSERT_EQ(t.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, infos), NVML_SUCCESS);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(static_cast<pid_t>(infos[0].pid), c.pid);
  EXPECT_GE(infos[0].usedGpuMemory, 300 * kMiB);  // plus the child's own 8-byte counter (a page)
  EXPECT_LE(infos[0].usedGpuMemory, 300 * kMiB + 64 * 1024);
  EXPECT_EQ(infos[0].gpuInstanceId, 0xFFFFFFFFu);  // no MIG
  // The device's memory: what the live processes hold, against its size (GPUOS_SIM_MEM_MIB).
  nvmlMemory_t mem{};
  ASSERT_EQ(t.nvmlDeviceGetMemoryInfo(d, &mem), NVML_SUCCESS);
  EXPECT_EQ(mem.total, 2048 * kMiB);
  EXPECT_EQ(mem.used, infos[0].usedGpuMemory);
  EXPECT_EQ(mem.free + mem.used, mem.total);

  nvmlProcessUtilizationSample_t s[4] = {};
  n = 4;
  EXPECT_EQ(t.nvmlDeviceGetProcessUtilization(d, s, &n, 0), NVML_ERROR_NOT_FOUND) << "no kernel ran yet";
  ASSERT_EQ(c.kernel(300), "done launch=0 sync=0");
  n = 4;
  ASSERT_EQ(t.nvmlDeviceGetProcessUtilization(d, s, &n, 0), NVML_SUCCESS);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(static_cast<pid_t>(s[0].pid), c.pid);
  EXPECT_GE(s[0].smUtil, 1u);  // 300 ms busy since its cuInit (any share of up to 30 s shows)
  EXPECT_LE(s[0].smUtil, 100u);
  const unsigned long long t1 = s[0].timeStamp;
  EXPECT_GT(t1, 0u);
  n = 4;
  EXPECT_EQ(t.nvmlDeviceGetProcessUtilization(d, s, &n, t1), NVML_ERROR_NOT_FOUND) << "nothing ran since t1";
  n = 0;
  EXPECT_EQ(t.nvmlDeviceGetProcessUtilization(d, nullptr, &n, 0), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(n, 1u);
  // A second kernel: one sample newer than t1; asked from 0 again, both (a query consumes nothing).
  ASSERT_EQ(c.kernel(200), "done launch=0 sync=0");
  n = 4;
  ASSERT_EQ(t.nvmlDeviceGetProcessUtilization(d, s, &n, t1), NVML_SUCCESS);
  ASSERT_EQ(n, 1u);
  EXPECT_GT(s[0].timeStamp, t1);
  EXPECT_GE(s[0].smUtil, 1u);
  n = 4;
  ASSERT_EQ(t.nvmlDeviceGetProcessUtilization(d, s, &n, 0), NVML_SUCCESS);
  EXPECT_EQ(n, 2u);
  // Gone: no longer listed, no samples.
  EXPECT_EQ(c.wait(), 0);
  n = 4;
  EXPECT_EQ(t.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, infos), NVML_SUCCESS);
  EXPECT_EQ(n, 0u);
  n = 4;
  EXPECT_EQ(t.nvmlDeviceGetProcessUtilization(d, s, &n, 0), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(t.nvmlShutdown(), NVML_SUCCESS);
}

// gpuosd's reader over the stand-in: the bypassing process with its bytes and activity, found as a
// process that is no tenant, and over quota if it were a tenant of 64 MiB.
TEST(NvmlStandIn, TheUsageCheckFindsTheBypassingProcess) {
  using namespace gpuos::daemon;
  Child c({"serve", "256"});
  ASSERT_GT(c.pid, 0);
  ASSERT_EQ(c.line(), "alloc=0");
  ASSERT_EQ(c.line(), "ready");
  ASSERT_EQ(c.kernel(200), "done launch=0 sync=0");
  const GpuosNvmlTable& t = nvml();
  ASSERT_EQ(t.nvmlInit_v2(), NVML_SUCCESS);
  char uuid[96] = "";
  ASSERT_EQ(t.nvmlDeviceGetUUID(device0(), uuid, sizeof uuid), NVML_SUCCESS);
  ASSERT_EQ(t.nvmlShutdown(), NVML_SUCCESS);
  GpuInfo g;
  g.index = 0;
  g.uuid = uuid;
  NvmlReader reader(t, {g});
  ASSERT_TRUE(reader.available()) << reader.why_not();
  const UsageSample s = reader.read();
  EXPECT_TRUE(s.ok);
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].pid, c.pid);
  EXPECT_TRUE(s.processes[0].listed);
  EXPECT_GE(measured_bytes(s, c.pid), 256 * kMiB);
  EXPECT_GE(s.processes[0].sm_util, 1);
  ASSERT_EQ(s.calls.size(), 4u);  // processes, MPS processes, utilization, energy of the one GPU
  EXPECT_STREQ(s.calls[0].name, "nvmlDeviceGetComputeRunningProcesses_v3");
  EXPECT_STREQ(s.calls[2].name, "nvmlDeviceGetProcessUtilization");
  EXPECT_EQ(s.calls[2].result, NVML_SUCCESS);
  EXPECT_STREQ(s.calls[3].name, "nvmlDeviceGetTotalEnergyConsumption");
  ASSERT_EQ(s.energy.size(), 1u);  // chargeback: the stand-in's 100 W since boot
  EXPECT_EQ(s.energy[0].gpu, 0u);
  EXPECT_GT(s.energy[0].mj, 0u);
  std::vector<Finding> f = check_usage(s, {}, CheckParams{}, {});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, FindingKind::kUnregistered);
  EXPECT_EQ(f[0].pid, c.pid);
  EXPECT_GE(f[0].measured, 256 * kMiB);
  EXPECT_TRUE(check_usage(s, {}, CheckParams{}, {c.pid}).empty()) << "allowed (e.g. gpuosd itself)";
  f = check_usage(s, {TenantGrant{7, c.pid, 64 * kMiB, 0}}, CheckParams{64 * kMiB, 20}, {});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].kind, FindingKind::kOverQuota);
  EXPECT_EQ(f[0].tenant_id, 7u);
  // The next round: nothing ran since, so no utilization sample; the memory is still there.
  const UsageSample next = reader.read();
  ASSERT_EQ(next.processes.size(), 1u);
  ASSERT_EQ(next.energy.size(), 1u);
  EXPECT_GE(next.energy[0].mj, s.energy[0].mj);  // a counter: never goes back
  EXPECT_EQ(next.processes[0].sm_util, -1);
  EXPECT_EQ(next.calls[2].result, NVML_ERROR_NOT_FOUND);
  EXPECT_GE(measured_bytes(next, c.pid), 256 * kMiB);
  // The GPU's free memory (what backs a request for room): its size less what the process holds.
  uint64_t free = 0;
  ASSERT_TRUE(reader.free_bytes(0, &free));
  EXPECT_EQ(free, 2048 * kMiB - measured_bytes(next, c.pid));
  EXPECT_FALSE(reader.free_bytes(1, &free));  // no such GPU
}

}  // namespace
