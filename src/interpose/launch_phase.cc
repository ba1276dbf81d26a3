// SPDX-License-Identifier: Apache-2.0
#include "interpose/launch_phase.h"

#include <atomic>

#include "interpose/activity.h"
#include "interpose/launch_durations.h"
#include "interpose/spatial_samples.h"

namespace gpuos::interpose {

void note_launch_phase(gpuos_control_block* cb, uint64_t key, bool graph) {
  // Timed on its own, or (a graph: a budget's steps, spatial_samples.h) chained to the one before.
  ShapeDurations timed = launch_durations(key);
  if (graph && timed.solo_ns == 0 && timed.paced_ns == 0) timed = launch_durations(key ^ spatial::kChainedKey);
  const uint64_t expected = timed.solo_ns != 0 ? timed.solo_ns : timed.paced_ns;
  const uint32_t phase = long_launch(expected, typical_launch_ns()) ? GPUOS_LAUNCH_PHASE_LONG : GPUOS_LAUNCH_PHASE_STEPS;
  if (phase == GPUOS_LAUNCH_PHASE_LONG) std::atomic_ref<uint64_t>(cb->long_launches).fetch_add(1, std::memory_order_relaxed);
  set_word_and_notify(cb, cb->launch_phase, phase);
}

}  // namespace gpuos::interpose
