// SPDX-License-Identifier: Apache-2.0
// A best-effort companion for gpu/mps_cost.sh's presence variants (issue #40): what does a
// co-runner on a few SMs cost a decode step, and why? It runs one kind of fixed-work kernel back to
// back until SIGTERM, then writes how many it finished:
//   alu      256-thread blocks of dependent FMAs in registers, no shared memory: an SM it runs on
//            still has room for other kernels' blocks (no memory traffic either)
//   alufull  the same work in 1024-thread blocks with half an SM's shared memory each: two fill an
//            SM's thread slots, so no other kernel's block fits beside them until they end
//   mem      256-thread blocks streaming reads over a 2 GiB buffer: memory bandwidth, few FLOPs
// Each kernel's grid is 8 blocks per SM the context reports (under MPS with a thread limit, the
// SMs it may use run them in waves). Alone on the whole GPU a kernel takes a few hundred us.
//
//   presence_be --mode alu|alufull|mem --json OUT [--ready-file PATH] [--work N]
// The ready file appears after the first kernel ended. OUT: {"mode", "kernels", "seconds",
// "kernels_per_s", "sms", "blocks"}.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

std::atomic<bool> g_stop{false};
void on_term(int) { g_stop.store(true); }

__global__ void alu_kernel(float* out, int work) {
  float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 0.9999f;
  for (int i = 0; i < work; ++i) {
    a = fmaf(a, b, c);
    b = fmaf(b, c, a * 1e-9f);
  }
  if (a == 12345.0f) out[blockIdx.x] = a + b;  // never true: keeps the loop, writes nothing
}

__global__ void alufull_kernel(float* out, int work) {
  extern __shared__ float smem[];
  float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 0.9999f;
  for (int i = 0; i < work; ++i) {
    a = fmaf(a, b, c);
    b = fmaf(b, c, a * 1e-9f);
  }
  smem[threadIdx.x] = a;
  __syncthreads();
  if (smem[(threadIdx.x + 1) % blockDim.x] == 12345.0f) out[blockIdx.x] = a + b;
}

__global__ void mem_kernel(const float4* in, size_t n, float* out, int passes) {
  float acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (int p = 0; p < passes; ++p)
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
      const float4 v = in[i];
      acc += v.x + v.y + v.z + v.w;
    }
  if (acc == 12345.0f) out[blockIdx.x] = acc;
}

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "presence_be: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

int usage() {
  std::fprintf(stderr, "usage: presence_be --mode alu|alufull|mem --json OUT [--ready-file PATH] [--work N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode, json, ready;
  int work = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    if (a == "--mode") mode = argv[++i];
    else if (a == "--json") json = argv[++i];
    else if (a == "--ready-file") ready = argv[++i];
    else if (a == "--work") work = std::atoi(argv[++i]);
    else return usage();
  }
  if (json.empty() || (mode != "alu" && mode != "alufull" && mode != "mem")) return usage();
  std::signal(SIGTERM, on_term);
  std::signal(SIGINT, on_term);

  int sms = 0;
  if (!check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count")) return 1;
  float* out = nullptr;
  if (!check(cudaMalloc(&out, sizeof(float) * 8 * sms), "cudaMalloc")) return 1;
  const size_t mem_bytes = size_t(2) << 30;
  float4* buf = nullptr;
  int threads = 256, blocks = 8 * sms;
  size_t smem = 0;
  if (mode == "mem") {
    if (!check(cudaMalloc(&buf, mem_bytes), "cudaMalloc 2 GiB") || !check(cudaMemset(buf, 0, mem_bytes), "memset"))
      return 1;
    if (work <= 0) work = 1;  // passes over the buffer (~0.7 ms alone on an H100)
  } else {
    if (work <= 0) work = 20000;  // FMA pairs per thread
    if (mode == "alufull") {
      threads = 1024;
      blocks = 2 * sms;
      int max_smem = 0;
      cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0);
      smem = size_t(max_smem) / 2 - 2048;  // two blocks per SM, room for nothing else
      if (!check(cudaFuncSetAttribute(alufull_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                 "smem attribute"))
        return 1;
    }
  }
  cudaStream_t s;
  if (!check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream")) return 1;
  auto launch = [&] {
    if (mode == "alu") alu_kernel<<<blocks, threads, 0, s>>>(out, work);
    else if (mode == "alufull") alufull_kernel<<<blocks, threads, smem, s>>>(out, work);
    else mem_kernel<<<blocks, threads, 0, s>>>(buf, mem_bytes / sizeof(float4), out, work);
  };
  launch();
  if (!check(cudaStreamSynchronize(s), "first kernel")) return 1;
  if (!ready.empty()) {
    if (FILE* f = std::fopen(ready.c_str(), "w")) std::fclose(f);
  }
  const auto t0 = std::chrono::steady_clock::now();
  unsigned long long n = 0;
  while (!g_stop.load()) {
    for (int k = 0; k < 4; ++k) launch();
    if (!check(cudaStreamSynchronize(s), "kernels")) return 1;  // at most 4 queued: SIGTERM ends it soon
    n += 4;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  FILE* f = std::fopen(json.c_str(), "w");
  if (!f) return 1;
  std::fprintf(f,
               "{\"mode\": \"%s\", \"kernels\": %llu, \"seconds\": %.3f, \"kernels_per_s\": %.3f, \"sms\": %d, "
               "\"blocks\": %d, \"threads\": %d, \"smem\": %zu, \"work\": %d}\n",
               mode.c_str(), n, secs, secs > 0 ? n / secs : 0.0, sms, blocks, threads, smem, work);
  std::fclose(f);
  return 0;
}
