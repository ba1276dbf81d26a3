// SPDX-License-Identifier: Apache-2.0
// e2e probe for spatial sharing on the driver test double: a tenant that keeps launching for
// --ms milliseconds and reports where its kernels ran and whether stream order held.
//
// Each round, on each of three streams (the legacy default stream, a created blocking stream and a
// created non-blocking one) and through cuLaunchKernel, cuLaunchKernelEx and a graph:
//   gpuos_sm_mask  -> the SM slots the kernel occupied (the double's built-in),
//   gpuos_fill_u32 -> dst[i] = round ^ i,
//   cuMemcpyDtoHAsync of dst on the same stream, then cuStreamSynchronize, and the copy is checked:
// placement moves kernels to other streams, so a copy that overtook its fill would see the previous
// round's values. Prints one JSON line: {"rounds", "launches", "graph_launches", "order_errors",
// "masks": [distinct slot masks seen], "union"}.
//
// --pipeline R adds R rounds (before the timed loop) of two fills of one buffer queued back to back
// on the non-blocking stream, A then C, read back after both: the second may skip its forward join
// to the stream (spatial.h). Every other round puts stream work between them that the second fill
// must wait for, and that ends after it would if it did not: a host function that sleeps 20 ms and
// a memset to B on the same stream, or a wait for an event that another stream records after such
// a host function and memset. The buffer must read C at the end; reports "pipeline_errors".
//
// usage: gpuos-space-probe --ms N [--wait-file PATH] [--blocks B] [--iters I] [--pipeline R]
//   PATH must exist before it starts timing; B: blocks of the gpuos_sm_mask kernel (default 256,
//   2 per SM: one wave on 128 SMs; fewer blocks need fewer SMs for one wave); I: its simulated
//   work per wave (default 20000, ~20 us)
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "probe_util.h"

namespace {

long arg_long(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atol(argv[i + 1]);
  return fallback;
}

void CUDA_CB sleep_20ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

// See --pipeline in the file comment. Returns the rounds whose buffer did not read C.
long pipeline(long rounds, CUfunction fill, CUstream st, CUdeviceptr dst, unsigned words) {
  CUstream other;
  CUevent done;
  CHECK_CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  std::vector<unsigned> host(words);
  long errors = 0;
  unsigned long long n = words;
  for (long r = 0; r < rounds; ++r) {
    unsigned a = 0xA000u + static_cast<unsigned>(r), c = 0xC000u + static_cast<unsigned>(r);
    void* fill_a[] = {&dst, &a, &n};
    void* fill_c[] = {&dst, &c, &n};
    CHECK_CU(cuLaunchKernel(fill, 4, 1, 1, 128, 1, 1, 0, st, fill_a, nullptr));
    if (r % 3 == 1) {
      CHECK_CU(cuLaunchHostFunc(st, sleep_20ms, nullptr));
      CHECK_CU(cuMemsetD32Async(dst, 0xB0B0u, words, st));
    } else if (r % 3 == 2) {
      CHECK_CU(cuLaunchHostFunc(other, sleep_20ms, nullptr));
      CHECK_CU(cuMemsetD32Async(dst, 0xB0B0u, words, other));
      CHECK_CU(cuEventRecord(done, other));
      CHECK_CU(cuStreamWaitEvent(st, done, 0));
    }
    CHECK_CU(cuLaunchKernel(fill, 4, 1, 1, 128, 1, 1, 0, st, fill_c, nullptr));
    CHECK_CU(cuMemcpyDtoHAsync_v2(host.data(), dst, words * sizeof(unsigned), st));
    CHECK_CU(cuStreamSynchronize(st));
    for (unsigned i = 0; i < words; ++i) {
      if (host[i] != (c ^ i)) {
        std::fprintf(stderr, "pipeline round %ld: word %u = 0x%x, expected 0x%x\n", r, i, host[i], c ^ i);
        ++errors;
        break;
      }
    }
  }
  CHECK_CU(cuStreamSynchronize(other));
  return errors;
}

}  // namespace

int main(int argc, char** argv) {
  const long ms = arg_long(argc, argv, "--ms", 500);
  const unsigned blocks = static_cast<unsigned>(arg_long(argc, argv, "--blocks", 256));
  const char* wait_file = nullptr;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--wait-file") == 0) wait_file = argv[i + 1];

  CHECK_CU(cuInit(0));
  CUmodule mod = probe::primary_context_module("gpuos-space-probe");
  CUfunction sm_mask, fill;
  CHECK_CU(cuModuleGetFunction(&sm_mask, mod, "gpuos_sm_mask"));
  CHECK_CU(cuModuleGetFunction(&fill, mod, "gpuos_fill_u32"));

  CUstream blocking, nonblocking;
  CHECK_CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  CHECK_CU(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
  const CUstream streams[] = {nullptr, blocking, nonblocking};
  constexpr unsigned kWords = 4096;
  CUdeviceptr dst, mask_out;
  CHECK_CU(cuMemAlloc_v2(&dst, kWords * sizeof(unsigned)));
  CHECK_CU(cuMemAlloc_v2(&mask_out, sizeof(unsigned long long)));
  std::vector<unsigned> host(kWords);

  // A graph of one sm_mask kernel, captured on the non-blocking stream.
  unsigned long long iters = static_cast<unsigned long long>(arg_long(argc, argv, "--iters", 20000));
  void* mask_params[] = {&mask_out, &iters};
  CUgraph graph;
  CUgraphExec exec;
  CHECK_CU(cuStreamBeginCapture_v2(nonblocking, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CHECK_CU(cuLaunchKernel(sm_mask, blocks, 1, 1, 1024, 1, 1, 0, nonblocking, mask_params, nullptr));
  CHECK_CU(cuStreamEndCapture(nonblocking, &graph));
  CHECK_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));

  if (wait_file != nullptr) {
    std::fprintf(stderr, "ready\n");
    while (access(wait_file, F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const long pipeline_errors = pipeline(arg_long(argc, argv, "--pipeline", 0), fill, nonblocking, dst, kWords);
  std::set<unsigned long long> masks;
  long rounds = 0, launches = 0, graph_launches = 0, order_errors = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  do {
    for (int s = 0; s < 3; ++s) {
      const CUstream st = streams[s];
      const int path = static_cast<int>(rounds % 3);
      if (path == 0) {
        CHECK_CU(cuLaunchKernel(sm_mask, blocks, 1, 1, 1024, 1, 1, 0, st, mask_params, nullptr));
        ++launches;
      } else if (path == 1) {
        CUlaunchConfig cfg{};
        cfg.gridDimX = blocks, cfg.gridDimY = 1, cfg.gridDimZ = 1;
        cfg.blockDimX = 1024, cfg.blockDimY = 1, cfg.blockDimZ = 1;
        cfg.hStream = st;
        CHECK_CU(cuLaunchKernelEx(&cfg, sm_mask, mask_params, nullptr));
        ++launches;
      } else {
        CHECK_CU(cuGraphLaunch(exec, st));
        ++graph_launches;
      }
      unsigned long long m = 0;
      CHECK_CU(cuMemcpyDtoHAsync_v2(&m, mask_out, sizeof(m), st));
      unsigned value = static_cast<unsigned>(rounds * 3 + s + 1);
      unsigned long long n = kWords;
      void* fill_params[] = {&dst, &value, &n};
      CHECK_CU(cuLaunchKernel(fill, 4, 1, 1, 128, 1, 1, 0, st, fill_params, nullptr));
      ++launches;
      CHECK_CU(cuMemcpyDtoHAsync_v2(host.data(), dst, kWords * sizeof(unsigned), st));
      CHECK_CU(cuStreamSynchronize(st));
      masks.insert(m);
      for (unsigned i = 0; i < kWords; ++i) {
        if (host[i] != (value ^ i)) {
          ++order_errors;
          break;
        }
      }
    }
    ++rounds;
  } while (std::chrono::steady_clock::now() < end);
  CHECK_CU(cuCtxSynchronize());

  unsigned long long all = 0;
  std::printf("{\"rounds\": %ld, \"launches\": %ld, \"graph_launches\": %ld, \"order_errors\": %ld, "
              "\"pipeline_errors\": %ld, \"masks\": [",
              rounds, launches, graph_launches, order_errors, pipeline_errors);
  bool first = true;
  for (unsigned long long m : masks) {
    std::printf("%s%llu", first ? "" : ", ", m);
    first = false;
    all |= m;
  }
  std::printf("], \"union\": %llu}\n", all);
  return order_errors == 0 && pipeline_errors == 0 && probe::g_failures == 0 ? 0 : 1;
}
