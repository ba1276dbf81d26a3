// SPDX-License-Identifier: Apache-2.0
// The texts of gpuos_kv_result (include/gpuos/kv.h), in one place: libgpuos_kv.so answers
// gpuos_kv_result_text with them (also in a process without gpuos), and the interposer's
// implementation of the pools returns the same texts through its gpuos_kv_interface table.
// Header-only and constexpr: no allocation, no exceptions, usable in the interposer.
#pragma once

#include "gpuos/kv.h"

namespace gpuos::kv {

// Whether a result is one this ABI version defines (its text is not "unknown result").
constexpr bool result_known(int result) noexcept {
  return result >= GPUOS_KV_OK && result <= GPUOS_KV_ERR_NOT_INITIALIZED;
}

// A short English text for a result; "unknown result" for a value this ABI version does not
// define. Never null. The switch names every enumerator, so -Wswitch flags a result added to
// kv.h without a text (and the range check comes first: an int outside the enumeration is not
// converted to it).
constexpr const char* result_text(int result) noexcept {
  if (!result_known(result)) return "unknown result";
  switch (static_cast<gpuos_kv_result>(result)) {
    case GPUOS_KV_OK:
      return "ok";
    case GPUOS_KV_ERR_INVALID:
      return "invalid argument";
    case GPUOS_KV_ERR_NOT_GOVERNED:
      return "not running under gpuos";
    case GPUOS_KV_ERR_VERSION:
      return "gpuos in this process does not speak this KV ABI version";
    case GPUOS_KV_ERR_OUT_OF_MEMORY:
      return "out of memory (quota, target or GPU)";
    case GPUOS_KV_ERR_DRIVER:
      return "CUDA driver error";
    case GPUOS_KV_ERR_NOT_MAPPED:
      return "page not mapped";
    case GPUOS_KV_ERR_NOT_INITIALIZED:
      return "CUDA is not initialised in this process (call cuInit, or e.g. torch.cuda.init(), first)";
  }
  return "unknown result";
}

}  // namespace gpuos::kv
