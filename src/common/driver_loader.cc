// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpuos/driver_api.h"

namespace gpuos {

bool load_driver(GpuosDriverTable* table, const char* library, DlsymFn lookup, char* err,
                 std::size_t err_len) {
  std::memset(table, 0, sizeof(*table));
  if (library == nullptr || library[0] == '\0') {
    const char* env = std::getenv("GPUOS_DRIVER_LIBRARY");
    library = (env != nullptr && env[0] != '\0') ? env : "libcuda.so.1";
  }
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    std::snprintf(err, err_len, "cannot load CUDA driver %s: %s", library, why ? why : "unknown");
    return false;
  }
  if (lookup == nullptr) lookup = &dlsym;
#define GPUOS_DRIVER_RESOLVE(name, params, args) \
  table->name = reinterpret_cast<decltype(table->name)>(lookup(handle, #name));
  GPUOS_DRIVER_FUNCS(GPUOS_DRIVER_RESOLVE)
#undef GPUOS_DRIVER_RESOLVE
  if (table->cuInit == nullptr || table->cuGetProcAddress_v2 == nullptr) {
    std::snprintf(err, err_len, "%s is not a usable CUDA driver (no cuInit/cuGetProcAddress_v2)",
                  library);
    std::memset(table, 0, sizeof(*table));
    dlclose(handle);
    return false;
  }
  table->handle = handle;
  return true;
}

const char* cu_result_name(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_DEINITIALIZED: return "CUDA_ERROR_DEINITIALIZED";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case CUDA_ERROR_LAUNCH_FAILED: return "CUDA_ERROR_LAUNCH_FAILED";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    default: return "CUDA_ERROR_UNKNOWN_CODE";
  }
}

}  // namespace gpuos
