// SPDX-License-Identifier: Apache-2.0
// A tenant's last rounds as gpuosd's usage check saw them (usage_verifier.h), kept with the tenant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace gpuos::daemon {

// What one round showed of a tenant, kept over CheckParams::window_rounds rounds (a tenant's
// UsageWindow, oldest first) so that use too small for one round's threshold adds up.
struct RoundFigures {
  uint32_t gated_sm = 0;       // SM percent on the GPUs it was gated on since before the last round
  // Sub-round (closed_use): the time its gate was closed in the round that NVML samples could show
  // wholly, and the SM time its samples showed in it (ns; GPUs added up).
  uint64_t closed_ns = 0;
  uint64_t closed_used_ns = 0;
  bool paced = false;          // paced since before the last round, and NVML sampled it where paced
  uint32_t paced_sm = 0;       // ... its SM percent there (means of the round's samples, summed)
  uint32_t pace_permille = 0;  // ... its granted share over the round (time average)
};
using UsageWindow = std::deque<RoundFigures>;

// One NVML utilization sample of a process (CLOCK_MONOTONIC ns, mapped from NVML's CLOCK_REALTIME
// microseconds when read): SM percent over the sampling period that ended at at_ns.
struct SmPoint {
  uint64_t at_ns = 0;
  uint32_t sm = 0;
};

// A time a tenant's gate was closed on `gpus` (bit i = gpuosd's GPU i; CLOCK_MONOTONIC ns; to_ns
// UINT64_MAX: still closed), noted by publish_gate (issue #62 item 7). excuse_from_ns: where it
// closed with work launched while open possibly still running (busy at closing, or untracked work),
// when that work's excuse began (the busy period first seen at a close, or its last launch before
// the close); UINT64_MAX: none. `excused`: the usage check excuses it (inflight_grace_ns).
struct ClosedSpan {
  uint64_t from_ns = 0;
  uint64_t to_ns = UINT64_MAX;
  uint64_t gpus = 0;
  uint64_t excuse_from_ns = UINT64_MAX;
  bool excused = false;
};
// The most spans a tenant keeps (oldest dropped): a window of 10 rounds of 1 s with a gate that
// moves every 25 ms.
inline constexpr std::size_t kClosedSpans = 400;
using ClosedSpans = std::deque<ClosedSpan>;

}  // namespace gpuos::daemon
