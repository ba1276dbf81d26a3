// SPDX-License-Identifier: Apache-2.0
// Shared by the e2e probe programs: fail-fast driver calls and counted expectations.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "gpuos/cuda_internal.h"

namespace probe {

inline int g_failures = 0;

inline void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "probe: expectation failed: %s\n", what);
    ++g_failures;
  }
}

// A device-memory allocation property for device `dev`, and its granularity.
inline CUmemAllocationProp device_prop(CUdevice dev, size_t* granularity) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  *granularity = 0;
  cuMemGetAllocationGranularity(granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  return prop;
}

// Device 0's primary context made current, and a module of the double's built-in kernels (the
// double accepts any image). Exits like CHECK_CU on failure. Call after cuInit.
CUmodule primary_context_module(const char* image);

}  // namespace probe

// Exits with status 2 and the error's name when a driver call that must succeed fails.
#define CHECK_CU(call)                                                                \
  do {                                                                                \
    CUresult r_ = (call);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                         \
      const char* n_ = nullptr;                                                       \
      cuGetErrorName(r_, &n_);                                                        \
      std::fprintf(stderr, "probe: %s failed: %s (%d)\n", #call, n_ ? n_ : "?", r_); \
      std::exit(2);                                                                   \
    }                                                                                 \
  } while (0)

inline CUmodule probe::primary_context_module(const char* image) {
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CHECK_CU(cuModuleLoadData(&mod, image));
  return mod;
}
