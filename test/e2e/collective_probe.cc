// SPDX-License-Identifier: Apache-2.0
// e2e probe for collectives across GPUs on the driver test double: one rank of an NCCL-like group
// (issue #27, a data-parallel job with one rank per GPU).
//
// On its device (CUDA_VISIBLE_DEVICES picks it) it runs --rounds K gpuos_collective kernels of
// group --group G with --ranks N ranks back to back on one stream, each followed by a stream
// synchronize, --iters I of fixed work each after the rendezvous (default 1000, ~1 us). The double's
// kernel spins on its SMs until the round's N ranks have all arrived (docs/CONTRACTS.md).
// Prints one JSON line: {"group", "ranks", "rounds", "completed", "wait_ns": [per round],
// "arrive_ns": [...], "release_ns": [...], "total_wait_ns"}, arrive/release in CLOCK_MONOTONIC ns.
// A failed round (the double's safety bound, a dead peer) prints the line for the rounds completed
// and exits 2 with the error.
//
// --pause-at R --wait-file PATH: before round R the rank waits (on the host, like a job's data
// loader) until PATH exists, so a test can bring another tenant in between two rounds.
//
// usage: gpuos-collective-probe --group G --ranks N --rounds K [--iters I] [--pause-at R --wait-file PATH]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "probe_util.h"

namespace {

unsigned long long arg_u64(int argc, char** argv, const char* name, unsigned long long fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  return fallback;
}

std::string list(const std::vector<unsigned long long>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  unsigned long long group = arg_u64(argc, argv, "--group", 1);
  unsigned ranks = static_cast<unsigned>(arg_u64(argc, argv, "--ranks", 2));
  const unsigned long long rounds = arg_u64(argc, argv, "--rounds", 1);
  unsigned long long iters = arg_u64(argc, argv, "--iters", 1000);
  const unsigned long long pause_at = arg_u64(argc, argv, "--pause-at", ~0ull);
  const char* wait_file = nullptr;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--wait-file") == 0) wait_file = argv[i + 1];

  CHECK_CU(cuInit(0));
  CUmodule mod = probe::primary_context_module("gpuos-collective-probe");
  CUfunction coll;
  CHECK_CU(cuModuleGetFunction(&coll, mod, "gpuos_collective"));
  CUstream st;
  CHECK_CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  CUdeviceptr out;
  CHECK_CU(cuMemAlloc_v2(&out, 4 * sizeof(unsigned long long)));

  std::vector<unsigned long long> wait, arrive, release;
  unsigned long long total = 0;
  CUresult failed = CUDA_SUCCESS;
  for (unsigned long long k = 0; k < rounds && failed == CUDA_SUCCESS; ++k) {
    if (k == pause_at && wait_file != nullptr) {
      while (access(wait_file, F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    void* params[] = {&group, &ranks, &iters, &out};
    CHECK_CU(cuLaunchKernel(coll, 1, 1, 1, 32, 1, 1, 0, st, params, nullptr));
    unsigned long long t[4] = {};  // wait, arrive, release, round
    failed = cuStreamSynchronize(st);
    if (failed == CUDA_SUCCESS) failed = cuMemcpyDtoH_v2(t, out, sizeof t);
    if (failed != CUDA_SUCCESS) break;
    probe::expect(t[3] == k, "the k-th collective of this rank is round k");
    wait.push_back(t[0]);
    arrive.push_back(t[1]);
    release.push_back(t[2]);
    total += t[0];
  }
  std::printf("{\"group\": %llu, \"ranks\": %u, \"rounds\": %llu, \"completed\": %zu, \"wait_ns\": %s, "
              "\"arrive_ns\": %s, \"release_ns\": %s, \"total_wait_ns\": %llu}\n",
              group, ranks, rounds, wait.size(), list(wait).c_str(), list(arrive).c_str(),
              list(release).c_str(), total);
  std::fflush(stdout);
  if (failed != CUDA_SUCCESS) {
    const char* n = nullptr;
    cuGetErrorName(failed, &n);
    std::fprintf(stderr, "probe: round %zu failed: %s (%d)\n", wait.size(), n ? n : "?", failed);
    return 2;
  }
  return probe::g_failures == 0 ? 0 : 1;
}
