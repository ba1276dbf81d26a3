// SPDX-License-Identifier: Apache-2.0
// GPU test for spatial sharing (gpu/spatial_test.sh): an unmodified CUDA program that keeps the
// GPU busy with fixed-work kernels and reports, per kernel, on how many distinct SMs it ran
// (%smid; under MPS it is virtualised to 0..n-1 of the client's SMs, so the count is what is
// checked), its latency, and whether stream order held across the legacy stream, a created stream
// and graph replays.
//
//   spatial --seconds S --iters N [--gap-us G] [--json PATH]
//
// Each round: on each stream, a fixed-work kernel of 8 blocks per SM that also marks its SMs, then
// a kernel that fills a buffer with round-dependent values, then an async copy to the host on the
// same stream and a synchronize; the copy must see this round's values (a placed kernel that did
// not stay in stream order would show the previous round's). Every third round the work kernel is
// replayed through a CUDA graph instead. Prints one JSON line:
//   {rounds, kernels, graph_replays, order_errors, sm_counts: {min, max, p50}, lat_us: {p50, p99, max}}
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "probe.cuh"

namespace {

__global__ void work(int iters, float* sink, unsigned* sm_seen) {
  float a = threadIdx.x, b = 1.0000001f;
  for (int i = 0; i < iters; ++i) a = a * b + 0.5f;
  if (a == -1.f) sink[0] = a;
  if (threadIdx.x == 0) sm_seen[smid() % 1024] = 1;
}

__global__ void fill(unsigned* dst, unsigned value, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dst[i] = value ^ i;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = arg(argc, argv, "--seconds", 5);
  const int iters = static_cast<int>(arg(argc, argv, "--iters", 100000));
  const double gap_us = arg(argc, argv, "--gap-us", 0);
  const char* json = nullptr;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--json")) json = argv[i + 1];

  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const unsigned blocks = static_cast<unsigned>(sms) * 8;
  constexpr unsigned kWords = 1 << 20;
  float* sink;
  unsigned *seen, *dst;
  CK(cudaMalloc(&sink, 4));
  CK(cudaMalloc(&seen, 1024 * sizeof(unsigned)));
  CK(cudaMalloc(&dst, kWords * sizeof(unsigned)));
  std::vector<unsigned> host(kWords), seen_host(1024);
  cudaStream_t created;
  CK(cudaStreamCreate(&created));
  const cudaStream_t streams[] = {nullptr, created};

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(created, cudaStreamCaptureModeGlobal));
  work<<<blocks, 256, 0, created>>>(iters, sink, seen);
  CK(cudaStreamEndCapture(created, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));

  std::vector<int> sm_counts;
  int graph_sm_min = 1 << 30, graph_sm_max = 0, kernel_sm_min = 1 << 30, kernel_sm_max = 0;
  std::vector<double> lat;
  long rounds = 0, kernels = 0, replays = 0, order_errors = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    for (cudaStream_t s : streams) {
      CK(cudaMemsetAsync(seen, 0, 1024 * sizeof(unsigned), s));
      const auto t0 = std::chrono::steady_clock::now();
      if (rounds % 3 == 2) {
        CK(cudaGraphLaunch(exec, s));
        ++replays;
      } else {
        work<<<blocks, 256, 0, s>>>(iters, sink, seen);
        CK(cudaGetLastError());
        ++kernels;
      }
      const unsigned value = static_cast<unsigned>(rounds * 2 + (s == nullptr ? 0 : 1) + 1);
      fill<<<64, 256, 0, s>>>(dst, value, kWords);
      CK(cudaGetLastError());
      CK(cudaMemcpyAsync(host.data(), dst, kWords * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
      CK(cudaMemcpyAsync(seen_host.data(), seen, 1024 * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
      lat.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      const int used = static_cast<int>(std::count(seen_host.begin(), seen_host.end(), 1u));
      sm_counts.push_back(used);
      if (rounds % 3 == 2) {
        graph_sm_min = std::min(graph_sm_min, used), graph_sm_max = std::max(graph_sm_max, used);
      } else {
        kernel_sm_min = std::min(kernel_sm_min, used), kernel_sm_max = std::max(kernel_sm_max, used);
      }
      for (unsigned i = 0; i < kWords; ++i) {
        if (host[i] != (value ^ i)) {
          ++order_errors;
          break;
        }
      }
      if (gap_us > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(gap_us));
    }
    ++rounds;
  }
  CK(cudaDeviceSynchronize());
  std::sort(sm_counts.begin(), sm_counts.end());
  std::sort(lat.begin(), lat.end());
  auto pct = [](const std::vector<double>& v, double p) { return v.empty() ? 0.0 : v[static_cast<size_t>(p * (v.size() - 1))]; };
  char line[640];
  std::snprintf(line, sizeof(line),
                "{\"rounds\": %ld, \"kernels\": %ld, \"graph_replays\": %ld, \"order_errors\": %ld, \"device_sms\": %d, "
                "\"sm_counts\": {\"min\": %d, \"max\": %d, \"p50\": %d}, \"kernel_sms\": [%d, %d], \"graph_sms\": [%d, %d], "
                "\"lat_us\": {\"p50\": %.0f, \"p99\": %.0f, \"max\": %.0f}}",
                rounds, kernels, replays, order_errors, sms, sm_counts.empty() ? 0 : sm_counts.front(),
                sm_counts.empty() ? 0 : sm_counts.back(), sm_counts.empty() ? 0 : sm_counts[sm_counts.size() / 2],
                kernel_sm_min, kernel_sm_max, graph_sm_min, graph_sm_max,
                pct(lat, 0.5), pct(lat, 0.99), lat.empty() ? 0.0 : lat.back());
  std::printf("%s\n", line);
  if (json != nullptr) {
    if (FILE* f = std::fopen(json, "w")) {
      std::fprintf(f, "%s\n", line);
      std::fclose(f);
    }
  }
  return order_errors == 0 ? 0 : 1;
}
