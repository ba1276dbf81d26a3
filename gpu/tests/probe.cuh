// SPDX-License-Identifier: Apache-2.0
// What the standalone CUDA runtime probes of gpu/tests share (each builds with a plain
// `nvcc ... gpu/tests/<probe>.cu`; this header is found beside it).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

// The SM a block runs on (virtualised to 0..n-1 of the client's SMs under MPS).
__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// The GPU's nanosecond clock, shared by all SMs (resynchronised to the host clock now and then).
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A failed runtime call: one JSON line naming it, exit 2.
#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("{\"error\": \"%s: %s\"}\n", #x, cudaGetErrorString(e_));                 \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

// "--name value" from the command line, or the fallback.
inline const char* sarg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], name)) return argv[i + 1];
  return fallback;
}
inline double arg(int argc, char** argv, const char* name, double fallback) {
  const char* s = sarg(argc, argv, name, nullptr);
  return s ? std::atof(s) : fallback;
}
