// What the interposer adds to a kernel launch when nothing blocks it.
//
// Both variants launch the same empty kernel on the same stream in one process: `direct` calls
// the driver's cuLaunchKernel from the driver table, `interposed` calls libgpuos.so's exported
// cuLaunchKernel (dlopen'd, so the gate, counters and registration are all live). The difference
// of the two is the interposer's cost. Run it under a gpuosd (GPUOS_SOCKET) to measure the
// registered path; without one it measures the pass-through path, which is the same code.
//
// Environment: GPUOS_DRIVER_LIBRARY (default libcuda.so.1), GPUOS_INTERPOSER (default
// <exe dir>/../lib/libgpuos.so).
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpuos/driver_api.h"

namespace {

// An empty kernel with the signature of gpuos_fixed_work, so that the driver test double (which
// knows that name) and a real GPU (which JIT-compiles this PTX) run the same program.
const char kEmptyKernelPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry gpuos_fixed_work(.param .u64 iters, .param .u64 done) { ret; }
)";

using LaunchFn = decltype(GpuosDriverTable::cuLaunchKernel);

struct Setup {
  GpuosDriverTable d{};
  LaunchFn interposed = nullptr;
  CUfunction fn = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr done = 0;
  unsigned long long iters = 0;
  void* params[2] = {&iters, &done};
  bool ok = false;
  std::string error;
};

std::string exe_dir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string s(buf);
  return s.substr(0, s.rfind('/'));
}

Setup& setup() {
  static Setup* s = [] {
    auto* s = new Setup();
    char err[256];
    if (!gpuos::load_driver(&s->d, nullptr, nullptr, err, sizeof(err))) {
      s->error = err;
      return s;
    }
    const char* lib_env = std::getenv("GPUOS_INTERPOSER");
    std::string lib = lib_env ? lib_env : exe_dir() + "/../lib/libgpuos.so";
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      s->error = "cannot load " + lib + ": " + dlerror();
      return s;
    }
    s->interposed = reinterpret_cast<LaunchFn>(dlsym(h, "cuLaunchKernel"));
    auto* interposed_init = reinterpret_cast<decltype(GpuosDriverTable::cuInit)>(dlsym(h, "cuInit"));
    auto& d = s->d;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    // Initialise through the interposer so that it registers with gpuosd, as a tenant would.
    if (interposed_init(0) != CUDA_SUCCESS || d.cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        d.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) {
      s->error = "no CUDA device";
      return s;
    }
    auto set_current = reinterpret_cast<CUresult (*)(CUcontext)>(dlsym(d.handle, "cuCtxSetCurrent"));
    auto load = reinterpret_cast<CUresult (*)(CUmodule*, const void*)>(dlsym(d.handle, "cuModuleLoadData"));
    auto get_fn = reinterpret_cast<CUresult (*)(CUfunction*, CUmodule, const char*)>(dlsym(d.handle, "cuModuleGetFunction"));
    if (set_current(ctx) != CUDA_SUCCESS || load(&mod, kEmptyKernelPtx) != CUDA_SUCCESS ||
        get_fn(&s->fn, mod, "gpuos_fixed_work") != CUDA_SUCCESS ||
        d.cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        d.cuMemAlloc_v2(&s->done, 8) != CUDA_SUCCESS) {
      s->error = "setting up the empty kernel failed";
      return s;
    }
    s->ok = true;
    return s;
  }();
  return *s;
}

// Launches in batches and drains the stream between batches so the driver's queue never fills
// (a full queue would make launches block and measure the GPU instead of the host path).
void run(benchmark::State& state, LaunchFn launch) {
  Setup& s = setup();
  if (!s.ok) {
    state.SkipWithError(s.error.c_str());
    return;
  }
  auto sync = reinterpret_cast<CUresult (*)(CUstream)>(dlsym(s.d.handle, "cuStreamSynchronize"));
  constexpr int kBatch = 256;
  int in_batch = 0;
  for (auto _ : state) {
    if (launch(s.fn, 1, 1, 1, 32, 1, 1, 0, s.stream, s.params, nullptr) != CUDA_SUCCESS) {
      state.SkipWithError("launch failed");
      break;
    }
    if (++in_batch == kBatch) {
      state.PauseTiming();
      sync(s.stream);
      state.ResumeTiming();
      in_batch = 0;
    }
  }
  sync(s.stream);
}

void BM_LaunchDirect(benchmark::State& state) { run(state, setup().d.cuLaunchKernel); }
void BM_LaunchInterposed(benchmark::State& state) { run(state, setup().interposed); }

// Run with --benchmark_enable_random_interleaving=true so the two variants alternate and drift
// (clocks, queue state) hits both alike.
BENCHMARK(BM_LaunchDirect)->Repetitions(10)->ReportAggregatesOnly(true)->MinTime(0.3);
BENCHMARK(BM_LaunchInterposed)->Repetitions(10)->ReportAggregatesOnly(true)->MinTime(0.3);

}  // namespace

BENCHMARK_MAIN();
