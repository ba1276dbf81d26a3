// SPDX-License-Identifier: Apache-2.0
// The names of GPUOS_BUDGET_LIMIT_* (include/gpuos/abi.h), as gpuosd's log and `gpuos ps` print
// them: one table for the policy that judges and the CLI that shows.
#pragma once

#include <cstdint>

#include "gpuos/abi.h"

namespace gpuos {

inline const char* budget_limit_name(uint32_t limit) {
  switch (limit) {
    case GPUOS_BUDGET_LIMIT_SPENT: return "spent";
    case GPUOS_BUDGET_LIMIT_NO_SOLO: return "no-solo-times";
    case GPUOS_BUDGET_LIMIT_NO_BE: return "no-best-effort";
    case GPUOS_BUDGET_LIMIT_MPS: return "mps-cost";
    case GPUOS_BUDGET_LIMIT_SHARE_CAP: return "largest-share";
    case GPUOS_BUDGET_LIMIT_GROWTH: return "load-growth";
    case GPUOS_BUDGET_LIMIT_OVER: return "over-readings";
    case GPUOS_BUDGET_LIMIT_PHASES: return "phase-holds";
    case GPUOS_BUDGET_LIMIT_CONTROL: return "controller";
    default: return "-";
  }
}

}  // namespace gpuos
