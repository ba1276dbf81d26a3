// SPDX-License-Identifier: Apache-2.0
// What the interposer adds to a kernel launch when nothing blocks it.
//
// Both variants launch the same empty kernel on the same stream in one process: `direct` calls
// the driver's cuLaunchKernel from the driver table, `interposed` calls libgpuos.so's exported
// cuLaunchKernel (dlopen'd, so the gate, counters and registration are all live). The difference
// of the two is the interposer's cost. Run it under a gpuosd (GPUOS_SOCKET) to measure the
// registered path; without one it measures the pass-through path, which is the same code.
//
// A third variant, `joined_to_partition`, measures the driver calls spatial placement adds to a
// launch (src/interpose/spatial.cc): the kernel goes to a stream of a green context and is joined
// to the app stream both ways (record, wait, launch, record, wait). It needs green contexts (CUDA
// 12.4+ driver); it is skipped otherwise.
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
#include <vector>

#include "common/sm_split.h"
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
  CUstream partition = nullptr;  // a stream of a green context (spatial placement)
  CUevent forward = nullptr, back = nullptr;
  std::string partition_error;
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
    // The partition: all but the last two SM groups of the device's finest split, as gpuosd gives a
    // guaranteed tenant by default.
    gpuos::SmSplit split;
    std::vector<CUdevResource> chosen;
    if (gpuos::split_sms(d, dev, 0, &split) != CUDA_SUCCESS || split.count() < 3 || d.cuGreenCtxCreate == nullptr) {
      s->partition_error = "no green contexts on this driver/device";
      return s;
    }
    for (unsigned i = 0; i + 2 < split.count(); ++i) split.append_group(i, &chosen);
    CUdevResourceDesc desc = nullptr;
    CUgreenCtx green = nullptr;
    if (d.cuDevResourceGenerateDesc(&desc, chosen.data(), static_cast<unsigned>(chosen.size())) != CUDA_SUCCESS ||
        d.cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM) != CUDA_SUCCESS ||
        d.cuGreenCtxStreamCreate(&s->partition, green, CU_STREAM_NON_BLOCKING, 0) != CUDA_SUCCESS ||
        d.cuEventCreate(&s->forward, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
        d.cuEventCreate(&s->back, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      s->partition_error = "creating the green context, its stream or the events failed";
      s->partition = nullptr;
    }
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

// The placed launch, as spatial.cc issues it, through the driver table.
CUresult launch_joined(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shmem, CUstream stream, void** params, void** extra) {
  const Setup& s = setup();
  const GpuosDriverTable& d = s.d;
  CUresult r = d.cuEventRecord(s.forward, stream);
  if (r == CUDA_SUCCESS) r = d.cuStreamWaitEvent(s.partition, s.forward, 0);
  if (r == CUDA_SUCCESS) r = d.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s.partition, params, extra);
  if (r == CUDA_SUCCESS) r = d.cuEventRecord(s.back, s.partition);
  if (r == CUDA_SUCCESS) r = d.cuStreamWaitEvent(stream, s.back, 0);
  return r;
}

void BM_LaunchJoinedToPartition(benchmark::State& state) {
  if (setup().ok && setup().partition == nullptr) {
    state.SkipWithError(setup().partition_error.c_str());
    return;
  }
  run(state, launch_joined);
}

void BM_LaunchDirect(benchmark::State& state) { run(state, setup().d.cuLaunchKernel); }
void BM_LaunchInterposed(benchmark::State& state) { run(state, setup().interposed); }

}  // namespace

// Run with --benchmark_enable_random_interleaving=true so the variants alternate and drift
// (clocks, queue state) hits all alike. GPUOS_BENCH_QUICK=1: one short repetition each (CI smoke).
int main(int argc, char** argv) {
  const bool quick = std::getenv("GPUOS_BENCH_QUICK") != nullptr;
  const int reps = quick ? 1 : 10;
  const double min_time = quick ? 0.01 : 0.3;
  for (auto [name, fn] : {std::pair{"BM_LaunchDirect", &BM_LaunchDirect},
                          std::pair{"BM_LaunchInterposed", &BM_LaunchInterposed},
                          std::pair{"BM_LaunchJoinedToPartition", &BM_LaunchJoinedToPartition}}) {
    benchmark::RegisterBenchmark(name, fn)->Repetitions(reps)->ReportAggregatesOnly(!quick)->MinTime(min_time);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
