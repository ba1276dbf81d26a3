// SPDX-License-Identifier: Apache-2.0
// Shared by the driver-double tests and their child process: loads the double by absolute path
// (never whatever libcuda.so.1 the system has) and resolves any cu* name from it.
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "gpuos/driver_api.h"

namespace ddtest {

inline GpuosDriverTable& drv() {
  static GpuosDriverTable t{};
  return t;
}

inline bool load(char* err, std::size_t len) {
  return gpuos::load_driver(&drv(), GPUOS_DRIVER_DOUBLE_PATH, nullptr, err, len);
}

inline void* sym(const char* name) {
  void* p = dlsym(drv().handle, name);
  if (p == nullptr) {
    std::fprintf(stderr, "driver double lacks %s\n", name);
    std::abort();
  }
  return p;
}

// CU(cuStreamSynchronize)(s): calls the double's export of exactly that name.
#define CU(name) (reinterpret_cast<decltype(&::name)>(::ddtest::sym(#name)))

// Launches gpuos_fixed_work(iters, done) with `blocks` blocks of `threads` threads.
inline CUresult launch_fixed(CUfunction f, CUstream s, unsigned long long iters, CUdeviceptr done,
                             unsigned blocks = 1, unsigned threads = 32) {
  auto* d = reinterpret_cast<unsigned long long*>(done);
  void* params[] = {&iters, &d};
  return drv().cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, s, params, nullptr);
}

constexpr unsigned long long kItersPerMs = 1'000'000;  // at GPUOS_SIM_NS_PER_ITER=1.0, one wave

}  // namespace ddtest
