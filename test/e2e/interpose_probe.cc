// SPDX-License-Identifier: Apache-2.0
// A tenant that reaches the driver through every path the interposer must govern — linked
// symbols, cuGetProcAddress v1 and v2 (legacy and per-thread), and dlsym on a dlopen'd libcuda —
// and reports, as one JSON line on stdout, exactly what it issued. The e2e test runs it under
// `gpuos run` on the driver test double and compares with what gpuosd counted.
//
// usage: interpose_probe [--launches N] [--graph-replays N] [--hold-ms N] [--wait-file PATH]
//   --wait-file: after registering (cuInit), print "ready" on stderr and launch nothing until
//   PATH exists (lets a test close the gate first).
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "probe_util.h"

namespace {

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void**, void**);
using GetProcV2Fn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                 CUdriverProcAddressQueryResult*);
using GraphLaunchFn = CUresult (*)(CUgraphExec, CUstream);

long arg_long(int argc, char** argv, const char* flag, long fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return std::strtol(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const long n = arg_long(argc, argv, "--launches", 10);
  const long replays = arg_long(argc, argv, "--graph-replays", 5);
  const long hold_ms = arg_long(argc, argv, "--hold-ms", 0);
  const unsigned blocks = 4;
  const unsigned long long iters = 1000;

  CHECK_CU(cuInit(0));
  const char* wait_file = nullptr;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--wait-file") == 0) wait_file = argv[i + 1];
  if (wait_file != nullptr) {
    std::fprintf(stderr, "ready\n");
    while (access(wait_file, F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CUmodule mod = probe::primary_context_module("gpuos-probe");
  CUdevice dev;
  CHECK_CU(cuCtxGetDevice(&dev));
  CUfunction work;
  CHECK_CU(cuModuleGetFunction(&work, mod, "gpuos_fixed_work"));
  CUstream stream;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  CUdeviceptr done;
  CHECK_CU(cuMemAlloc_v2(&done, sizeof(unsigned long long)));
  CHECK_CU(cuMemsetD8_v2(done, 0, sizeof(unsigned long long)));
  unsigned long long iters_arg = iters;
  void* params[] = {&iters_arg, &done};
  long issued = 0, graph_issued = 0, captured = 0;

  // Path 1: the linked symbol.
  for (long i = 0; i < n; ++i, ++issued)
    CHECK_CU(cuLaunchKernel(work, blocks, 1, 1, 128, 1, 1, 0, stream, params, nullptr));

  // Path 2: cuGetProcAddress_v2, legacy and per-thread default stream.
  void* p_legacy = nullptr;
  void* p_ptsz = nullptr;
  CUdriverProcAddressQueryResult q;
  CHECK_CU(cuGetProcAddress_v2("cuLaunchKernel", &p_legacy, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &q));
  CHECK_CU(cuGetProcAddress_v2("cuLaunchKernel", &p_ptsz, 12000,
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q));
  probe::expect(p_legacy == dlsym(RTLD_DEFAULT, "cuLaunchKernel"), "v2 legacy lookup gives the governed cuLaunchKernel");
  probe::expect(p_ptsz == dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz"), "v2 ptsz lookup gives the governed cuLaunchKernel_ptsz");
  for (long i = 0; i < n; ++i, ++issued)
    CHECK_CU(reinterpret_cast<LaunchFn>(p_legacy)(work, blocks, 1, 1, 128, 1, 1, 0, stream, params, nullptr));
  for (long i = 0; i < n; ++i, ++issued)
    CHECK_CU(reinterpret_cast<LaunchFn>(p_ptsz)(work, blocks, 1, 1, 128, 1, 1, 0, stream, params, nullptr));

  // cuGetProcAddress asked for itself (the CUDA runtime does this) must stay governed.
  void* gpa = nullptr;
  CHECK_CU(cuGetProcAddress_v2("cuGetProcAddress", &gpa, 12000, 0, &q));
  probe::expect(gpa == dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2"), "cuGetProcAddress(\"cuGetProcAddress\") is governed");
  // v1 entry point with an old cudaVersion gets v1 of itself.
  void* gpa1 = nullptr;
  CHECK_CU(cuGetProcAddress("cuGetProcAddress", &gpa1, 11080, 0));
  probe::expect(gpa1 == dlsym(RTLD_DEFAULT, "cuGetProcAddress"), "v1 lookup of itself gives governed v1");
  // A function gpuos does not govern passes through untouched.
  void* sync_fn = nullptr;
  CHECK_CU(cuGetProcAddress_v2("cuStreamSynchronize", &sync_fn, 12000, 0, &q));
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  probe::expect(lib != nullptr, "libcuda.so.1 is loaded");
  probe::expect(sync_fn == dlsym(lib, "cuStreamSynchronize"), "ungoverned symbols pass through");

  // Path 3: dlsym on a dlopen'd libcuda (Triton's launcher does this).
  auto dl_launch = reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernel"));
  probe::expect(reinterpret_cast<void*>(dl_launch) == dlsym(RTLD_DEFAULT, "cuLaunchKernel"), "dlsym(libcuda) gives the governed launch");
  for (long i = 0; i < n; ++i, ++issued)
    CHECK_CU(dl_launch(work, blocks, 1, 1, 128, 1, 1, 0, stream, params, nullptr));
  auto dl_gpa = reinterpret_cast<GetProcV2Fn>(dlsym(lib, "cuGetProcAddress_v2"));
  void* graph_launch = nullptr;
  CHECK_CU(dl_gpa("cuGraphLaunch", &graph_launch, 12000, 0, &q));
  probe::expect(graph_launch == dlsym(RTLD_DEFAULT, "cuGraphLaunch"), "graph launch through dlsym'd cuGetProcAddress is governed");

  // Stream capture: recorded launches are not submissions; each replay is one graph launch.
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (int i = 0; i < 3; ++i, ++captured)
    CHECK_CU(cuLaunchKernel(work, blocks, 1, 1, 128, 1, 1, 0, stream, params, nullptr));
  CUgraph graph;
  CHECK_CU(cuStreamEndCapture(stream, &graph));
  CUgraphExec exec;
  CHECK_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  for (long i = 0; i < replays; ++i, ++graph_issued)
    CHECK_CU(reinterpret_cast<GraphLaunchFn>(graph_launch)(exec, stream));
  CHECK_CU(cuStreamSynchronize(stream));

  unsigned long long done_blocks = 0;
  CHECK_CU(cuMemcpyDtoH_v2(&done_blocks, done, sizeof(done_blocks)));
  unsigned long long want_blocks = (issued + 3 * graph_issued) * blocks;
  probe::expect(done_blocks == want_blocks, "every issued kernel ran exactly once");

  // Allocation paths; what stays allocated at exit is reported as mem_held.
  const size_t mib = 1 << 20;
  // Successful allocation calls: done, a, pitched, managed, async_p, h, kept; one refused below.
  const long successful_allocs = 7;
  CUdeviceptr a, pitched, managed, async_p;
  size_t pitch = 0;
  CHECK_CU(cuMemAlloc_v2(&a, 3 * mib));
  CHECK_CU(cuMemAllocPitch_v2(&pitched, &pitch, 1000, 100, 4));
  CHECK_CU(cuMemAllocManaged(&managed, mib, CU_MEM_ATTACH_GLOBAL));
  CHECK_CU(cuMemAllocAsync(&async_p, 2 * mib, stream));
  CHECK_CU(cuMemFreeAsync(async_p, stream));
  CHECK_CU(cuMemFree_v2(a));
  size_t gran = 0;
  CUmemAllocationProp prop = probe::device_prop(dev, &gran);
  CUmemGenericAllocationHandle h;
  CHECK_CU(cuMemCreate(&h, 2 * gran, &prop, 0));
  CHECK_CU(cuMemRelease(h));
  CUmemGenericAllocationHandle kept;
  CHECK_CU(cuMemCreate(&kept, gran, &prop, 0));
  CHECK_CU(cuStreamSynchronize(stream));
  const unsigned long long held = sizeof(unsigned long long) + pitch * 100 + mib + gran;

  // An allocation the driver refuses is counted as a failure, not as memory.
  CUdeviceptr huge;
  CUresult r = cuMemAlloc_v2(&huge, static_cast<size_t>(1) << 50);
  probe::expect(r == CUDA_ERROR_OUT_OF_MEMORY, "an impossible allocation fails with OUT_OF_MEMORY");

  if (hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  std::printf("{\"pid\": %d, \"launches\": %ld, \"graph_launches\": %ld, \"captured_launches\": %ld, "
              "\"alloc_calls\": %ld, \"alloc_failures\": 1, \"mem_held_bytes\": %llu, \"failures\": %d}\n",
              static_cast<int>(getpid()), issued, graph_issued, captured, successful_allocs + 1, held, probe::g_failures);
  std::fflush(stdout);
  return probe::g_failures == 0 ? 0 : 1;
}
