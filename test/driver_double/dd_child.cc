// SPDX-License-Identifier: Apache-2.0
// Child process for the driver-double tests: things that need a fresh process (calls before
// cuInit, fault injection read at cuInit) or a second process sharing the simulated GPU (memory,
// IPC, SMs: whole-device kernels and green-context partitions).
// Prints key=value lines; exits 0 unless setup failed.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "dd_test_util.h"

using namespace ddtest;

namespace {

CUfunction g_fixed = nullptr;
CUdeviceptr g_done = 0;

#define SETUP_OK(call)                                               \
  do {                                                               \
    CUresult r_ = (call);                                            \
    if (r_ != CUDA_SUCCESS) {                                        \
      std::printf("setup_failed=%s rc=%d\n", #call, static_cast<int>(r_)); \
      return 2;                                                      \
    }                                                                \
  } while (0)

int setup() {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUmodule mod = nullptr;
  SETUP_OK(drv().cuInit(0));
  SETUP_OK(drv().cuDeviceGet(&dev, 0));
  SETUP_OK(drv().cuDevicePrimaryCtxRetain(&ctx, dev));
  SETUP_OK(CU(cuCtxSetCurrent)(ctx));
  static const char kImage[] = "any image";
  SETUP_OK(CU(cuModuleLoadData)(&mod, kImage));
  SETUP_OK(CU(cuModuleGetFunction)(&g_fixed, mod, "gpuos_fixed_work"));
  SETUP_OK(drv().cuMemAlloc_v2(&g_done, sizeof(unsigned long long)));
  SETUP_OK(CU(cuMemsetD8_v2)(g_done, 0, sizeof(unsigned long long)));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  char err[512];
  if (argc < 2 || !load(err, sizeof err)) {
    std::printf("usage_or_load_failed=%s\n", argc < 2 ? "usage" : err);
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "preinit") {  // everything before cuInit is CUDA_ERROR_NOT_INITIALIZED
    int n = 0;
    CUdeviceptr p = 0;
    CUcontext c = nullptr;
    CUstream s = nullptr;
    int version = 0;
    void* pfn = nullptr;
    std::printf("count=%d\n", drv().cuDeviceGetCount(&n));
    std::printf("alloc=%d\n", drv().cuMemAlloc_v2(&p, 16));
    std::printf("getcurrent=%d\n", drv().cuCtxGetCurrent(&c));
    std::printf("streamcreate=%d\n", drv().cuStreamCreate(&s, 0));
    // (each call before the printf that shows its output: argument order is unspecified)
    CUresult r = drv().cuDriverGetVersion(&version);
    std::printf("version=%d,%d\n", r, version);
    r = drv().cuGetProcAddress_v2("cuInit", &pfn, 13000, 0, nullptr);
    std::printf("procaddr=%d,%d\n", r, pfn == dlsym(drv().handle, "cuInit") ? 1 : 0);
    std::printf("init=%d\n", drv().cuInit(0));
    r = drv().cuDeviceGetCount(&n);
    std::printf("count_after=%d,%d\n", r, n);
    return 0;
  }
  if (int r = setup(); r != 0) return r;
  if (mode == "hold" && argc == 3) {  // hold N MiB until stdin closes, then die without freeing
    CUdeviceptr p = 0;
    std::printf("alloc=%d\n", drv().cuMemAlloc_v2(&p, std::stoull(argv[2]) << 20));
    std::printf("ready\n");
    std::fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
    _exit(0);
  }
  if (mode == "serve" && argc == 3) {  // hold N MiB; each stdin line "k MS" runs an MS kernel; EOF: exit
    CUdeviceptr p = 0;
    std::printf("alloc=%d\nready\n", drv().cuMemAlloc_v2(&p, std::stoull(argv[2]) << 20));
    std::fflush(stdout);
    std::string line;
    for (char c; read(0, &c, 1) > 0;) {
      if (c != '\n') {
        line += c;
        continue;
      }
      if (line.rfind("k ", 0) == 0) {
        CUresult l = launch_fixed(g_fixed, nullptr, std::stoull(line.substr(2)) * kItersPerMs, g_done);
        CUresult s = CU(cuStreamSynchronize)(nullptr);
        std::printf("done launch=%d sync=%d\n", l, s);
        std::fflush(stdout);
      }
      line.clear();
    }
    _exit(0);
  }
  if (mode == "kernel" && argc == 3) {  // one fixed-work kernel: wall time from launch to sync
    auto t0 = std::chrono::steady_clock::now();
    CUresult l = launch_fixed(g_fixed, nullptr, std::stoull(argv[2]) * kItersPerMs, g_done);
    CUresult s = CU(cuStreamSynchronize)(nullptr);
    auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0);
    std::printf("launch=%d sync=%d elapsed_ms=%.1f\n", l, s, ms.count());
    return 0;
  }
  if (mode == "green" && argc == 5) {  // one fixed-work kernel on groups [first, first+n) of 8 SMs
    CUdevResource all{}, groups[64] = {};
    unsigned nb = 64;
    CUdevResourceDesc desc = nullptr;
    CUgreenCtx g = nullptr;
    CUstream s = nullptr;
    SETUP_OK(CU(cuDeviceGetDevResource)(0, &all, CU_DEV_RESOURCE_TYPE_SM));
    SETUP_OK(CU(cuDevSmResourceSplitByCount)(groups, &nb, &all, nullptr, 0, 8));
    const unsigned first = static_cast<unsigned>(std::stoul(argv[2]));
    const unsigned n = static_cast<unsigned>(std::stoul(argv[3]));
    if (first + n > nb) {
      std::printf("setup_failed=groups\n");
      return 2;
    }
    SETUP_OK(CU(cuDevResourceGenerateDesc)(&desc, groups + first, n));
    SETUP_OK(CU(cuGreenCtxCreate)(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
    SETUP_OK(CU(cuGreenCtxStreamCreate)(&s, g, CU_STREAM_NON_BLOCKING, 0));
    auto t0 = std::chrono::steady_clock::now();  // the primary context stays current
    CUresult l = launch_fixed(g_fixed, s, std::stoull(argv[4]) * kItersPerMs, g_done);
    CUresult y = CU(cuStreamSynchronize)(s);
    auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0);
    std::printf("launch=%d sync=%d elapsed_ms=%.1f\n", l, y, ms.count());
    CU(cuStreamDestroy_v2)(s);
    CU(cuGreenCtxDestroy)(g);
    return 0;
  }
  if (mode == "collective" && argc == 6) {  // ROUNDS gpuos_collective of GROUP/RANKS, DELAY_MS before each
    CUmodule mod = nullptr;
    CUfunction coll = nullptr;
    CUdeviceptr out = 0;
    static const char kImage[] = "any image";
    SETUP_OK(CU(cuModuleLoadData)(&mod, kImage));
    SETUP_OK(CU(cuModuleGetFunction)(&coll, mod, "gpuos_collective"));
    SETUP_OK(drv().cuMemAlloc_v2(&out, 4 * sizeof(unsigned long long)));
    unsigned long long group = std::stoull(argv[2]), iters = 1000;
    unsigned ranks = static_cast<unsigned>(std::stoul(argv[3]));
    const long rounds = std::stol(argv[4]), delay_ms = std::stol(argv[5]);
    auto* o = reinterpret_cast<unsigned long long*>(out);
    void* params[] = {&group, &ranks, &iters, &o};
    for (long k = 0; k < rounds; ++k) {
      if (delay_ms > 0) usleep(static_cast<useconds_t>(delay_ms) * 1000);
      CUresult l = drv().cuLaunchKernel(coll, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr);
      CUresult y = CU(cuStreamSynchronize)(nullptr);
      unsigned long long t[4] = {};
      if (y == CUDA_SUCCESS) std::memcpy(t, o, sizeof t);  // host-visible here
      std::printf("launch=%d sync=%d wait=%llu arrive=%llu release=%llu round=%llu\n", l, y, t[0], t[1], t[2], t[3]);
      std::fflush(stdout);
      if (y != CUDA_SUCCESS) {
        std::printf("after=%d\n", CU(cuCtxSynchronize)());  // the error is sticky
        break;
      }
    }
    return 0;
  }
  if (mode == "fault") {  // run with GPUOS_SIM_FAULT_AFTER_LAUNCHES=2
    CUresult l1 = launch_fixed(g_fixed, nullptr, 1000, g_done);
    CUresult s1 = CU(cuStreamSynchronize)(nullptr);
    CUresult l2 = launch_fixed(g_fixed, nullptr, 1000, g_done);
    CUresult s2 = CU(cuStreamSynchronize)(nullptr);
    CUresult l3 = launch_fixed(g_fixed, nullptr, 1000, g_done);
    CUdeviceptr p = 0;
    CUresult a = drv().cuMemAlloc_v2(&p, 16);
    CUresult cs = CU(cuCtxSynchronize)();
    unsigned long long done = 0;
    std::memcpy(&done, reinterpret_cast<void*>(g_done), sizeof done);  // host-visible here
    std::printf("launch1=%d sync1=%d launch2=%d sync2=%d launch3=%d alloc=%d ctxsync=%d done=%llu\n",
                l1, s1, l2, s2, l3, a, cs, done);
    return 0;
  }
  if (mode == "ipc" && argc == 3) {  // open another process's IPC handle (hex), read, write, close
    CUipcMemHandle h{};
    const std::string hex = argv[2];
    for (size_t i = 0; i < sizeof h.reserved && 2 * i + 1 < hex.size(); ++i)
      h.reserved[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    size_t free0 = 0, free1 = 0, total = 0;
    drv().cuMemGetInfo_v2(&free0, &total);
    CUdeviceptr p = 0, again = 0;
    CUresult open = drv().cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    drv().cuMemGetInfo_v2(&free1, &total);
    CUresult open2 = drv().cuIpcOpenMemHandle(&again, h, 0);  // the v1 entry point, same handle
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult range = drv().cuMemGetAddressRange_v2(&base, &size, p + 1);
    unsigned int word = 0;
    CUresult get = CU(cuMemcpyDtoH_v2)(&word, p, sizeof word);
    const unsigned int reply = word ^ 0xffffffffu;
    CUresult put = CU(cuMemcpyHtoD_v2)(p + 4, &reply, sizeof reply);
    CUresult freed = drv().cuMemFree_v2(p);  // imported memory is not this process's to free
    CUresult close1 = drv().cuIpcCloseMemHandle(p);
    CUresult close2 = drv().cuIpcCloseMemHandle(p);
    CUresult close3 = drv().cuIpcCloseMemHandle(p);
    std::printf("open=%d open2=%d same=%d range=%d size=%zu get=%d word=%08x put=%d free=%d "
                "close1=%d close2=%d close3=%d charged=%lld\n",
                open, open2, again == p ? 1 : 0, range, size, get, word, put, freed, close1, close2,
                close3, static_cast<long long>(free0) - static_cast<long long>(free1));
    return 0;
  }
  std::printf("unknown_mode=%s\n", mode.c_str());
  return 2;
}
