// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpuos/nvml_api.h"

namespace gpuos {

bool load_nvml(GpuosNvmlTable* table, const char* library, char* err, std::size_t err_len) {
  std::memset(table, 0, sizeof(*table));
  if (library == nullptr || library[0] == '\0') {
    const char* env = std::getenv("GPUOS_NVML_LIBRARY");
    library = (env != nullptr && env[0] != '\0') ? env : "libnvidia-ml.so.1";
  }
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    std::snprintf(err, err_len, "cannot load NVML %s: %s", library, why ? why : "unknown");
    return false;
  }
#define GPUOS_NVML_RESOLVE(ret, name, params) \
  table->name = reinterpret_cast<decltype(table->name)>(dlsym(handle, #name));
  GPUOS_NVML_FUNCS(GPUOS_NVML_RESOLVE)
#undef GPUOS_NVML_RESOLVE
  if (table->nvmlInit_v2 == nullptr) {
    std::snprintf(err, err_len, "%s is not a usable NVML (no nvmlInit_v2)", library);
    std::memset(table, 0, sizeof(*table));
    dlclose(handle);
    return false;
  }
  table->handle = handle;
  return true;
}

const char* nvml_return_name(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS: return "NVML_SUCCESS";
    case NVML_ERROR_UNINITIALIZED: return "NVML_ERROR_UNINITIALIZED";
    case NVML_ERROR_INVALID_ARGUMENT: return "NVML_ERROR_INVALID_ARGUMENT";
    case NVML_ERROR_NOT_SUPPORTED: return "NVML_ERROR_NOT_SUPPORTED";
    case NVML_ERROR_NO_PERMISSION: return "NVML_ERROR_NO_PERMISSION";
    case NVML_ERROR_NOT_FOUND: return "NVML_ERROR_NOT_FOUND";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "NVML_ERROR_INSUFFICIENT_SIZE";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "NVML_ERROR_DRIVER_NOT_LOADED";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "NVML_ERROR_FUNCTION_NOT_FOUND";
    case NVML_ERROR_GPU_IS_LOST: return "NVML_ERROR_GPU_IS_LOST";
    case NVML_ERROR_UNKNOWN: return "NVML_ERROR_UNKNOWN";
    default: return "NVML_ERROR_OTHER";
  }
}

}  // namespace gpuos
