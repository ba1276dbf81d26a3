// The texts of gpuos_kv_result (include/gpuos/kv.h), shared by libgpuos_kv.so and the interposer.
#pragma once

#include "gpuos/kv.h"

namespace gpuos::kv {

inline const char* result_text(int result) {
  switch (result) {
    case GPUOS_KV_OK: return "ok";
    case GPUOS_KV_ERR_INVALID: return "invalid argument";
    case GPUOS_KV_ERR_NOT_GOVERNED: return "this process does not run under gpuos";
    case GPUOS_KV_ERR_VERSION: return "the gpuos in this process does not speak this KV ABI version";
    case GPUOS_KV_ERR_OUT_OF_MEMORY: return "out of memory (quota, gpuosd's target or the GPU)";
    case GPUOS_KV_ERR_DRIVER: return "a CUDA driver call failed";
    case GPUOS_KV_ERR_NOT_MAPPED: return "page not mapped";
    default: return "unknown result";
  }
}

}  // namespace gpuos::kv
