// SPDX-License-Identifier: Apache-2.0
// A tenant's last rounds as gpuosd's usage check saw them (usage_verifier.h), kept with the tenant.
#pragma once

#include <cstdint>
#include <deque>

namespace gpuos::daemon {

// What one round showed of a tenant, kept over CheckParams::window_rounds rounds (a tenant's
// UsageWindow, oldest first) so that use too small for one round's threshold adds up.
struct RoundFigures {
  uint32_t gated_sm = 0;       // SM percent on the GPUs it was gated on since before the last round
  bool paced = false;          // paced since before the last round, and NVML sampled it where paced
  uint32_t paced_sm = 0;       // ... its SM percent there (means of the round's samples, summed)
  uint32_t pace_permille = 0;  // ... its granted share over the round (time average)
};
using UsageWindow = std::deque<RoundFigures>;

}  // namespace gpuos::daemon
