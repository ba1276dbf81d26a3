// SPDX-License-Identifier: Apache-2.0
// A budgeted guaranteed tenant's phases, learned from its own timings (issue #40, item 2): no
// engine hint needed. A launch whose shape took several times the tenant's typical launch (a
// prefill graph, a chunked-prefill step, among decode steps) marks the control block's
// launch_phase LONG, and the next launch of a usual length marks it STEPS again; each change wakes
// gpuosd (ACTIVITY), whose budget lends nothing while the tenant is busy in a long launch. The
// engine's own word (engine_phase, gpuos_kv_report_phase) says the same where an engine gives it.
#pragma once

#include <cstdint>

#include "gpuos/abi.h"

namespace gpuos::interpose {

// Long: expected at least kLongLaunchFactor times the typical launch, and at least
// kLongLaunchMinNs (a short kernel among shorter ones is no phase).
inline constexpr uint64_t kLongLaunchFactor = 2;
inline constexpr uint64_t kLongLaunchMinNs = 500'000;

// Whether a launch expected to take expected_ns is long beside launches that typically take
// typical_ns (0: not known, so not long).
inline bool long_launch(uint64_t expected_ns, uint64_t typical_ns) {
  return expected_ns != 0 && typical_ns != 0 && expected_ns >= kLongLaunchMinNs &&
         expected_ns / kLongLaunchFactor >= typical_ns;
}

// Before a launch of shape `key` (a graph: `graph`) by a guaranteed tenant with a latency budget:
// sets launch_phase by what the shape is expected to take (launch_durations.h), and notifies
// gpuosd when it changed. Lock-free: a lookup of the shape (two for a graph) and one relaxed load.
void note_launch_phase(gpuos_control_block* cb, uint64_t key, bool graph);

}  // namespace gpuos::interpose
