// SPDX-License-Identifier: Apache-2.0
// Pacing of a best-effort tenant beside a guaranteed tenant with a latency budget (time policy
// "budget"): gpuosd grants the best-effort tenant a share of the GPU's time (pace_permille) and,
// with it, an open gate. Its launches then leave gaps: a token bucket in which each launch costs
// its expected duration divided by the share, and which holds pace_burst_us of GPU time, so its
// kernels reach the GPU in short bursts between the guaranteed tenant's steps (each switch between
// the two contexts costs the guaranteed tenant time, so not one kernel at a time either) rather than
// in one block that would stall a step. A launch expected to run longer than pace_max_kernel_us
// (gpuosd's bound, from the budget: budget.h) waits for pacing to end (the guaranteed tenant idle
// for a while), so no single long kernel or graph overruns the budget; so does a graph never
// timed yet. A wait interrupted by a signal handler lets the launch go (note_signalled); one that
// ends with the gate closed goes back to wait at the gate.
//
// Expected durations: launch_durations.h.
//
// Pacing is the tenant's own cooperation inside what the gate allows: a tenant that ignores it
// slows the guaranteed tenant, whose measured slowdown then makes gpuosd lower the share to 0,
// which closes the gate (the authority). Lock-free on the launch path; waits are futex waits on
// pace_permille, so a change of share or its end takes effect at once.
#pragma once

#include <cstdint>

#include "gpuos/abi.h"

namespace gpuos::interpose {

// The token bucket as a pure function. `next` is the tenant's virtual clock: when its launches so
// far will have had their share of wall time. A launch costs its expected duration / share of
// wall time; it may go when the clock has caught up with now, or when the clock after it stays
// within the burst's worth of wall time (burst_us / share) of now. It then moves the clock on from
// no earlier than now: an idle tenant saves nothing beyond one burst.
struct PaceStep {
  uint64_t wait_ns = 0;  // > 0: wait this long first (then look again)
  uint64_t next_ns = 0;  // the clock once it goes (when wait_ns is 0)
};
inline PaceStep pace_step(uint64_t next, uint64_t now, uint64_t expected_ns, uint32_t pace_permille,
                          uint32_t burst_us) {
  const uint64_t pace = pace_permille == 0 ? 1 : pace_permille > 1000 ? 1000 : pace_permille;
  const uint64_t ahead = uint64_t{burst_us} * 1000u * 1000u / pace;
  const uint64_t cost = expected_ns * 1000u / pace;
  if (next > now && next + cost > now + ahead) {
    const uint64_t caught_up = next - now, fits = next + cost - now - ahead;
    return PaceStep{caught_up < fits ? caught_up : fits, next};
  }
  return PaceStep{0, (next > now ? next : now) + cost};
}

// Whether a launch on device ordinal `ordinal` (-1: not known) is paced, by the grant block's
// pace_devices: 0 = every device; a device not known is paced (the cautious side).
inline bool paced_on(uint32_t pace_devices, int ordinal) {
  return pace_devices == 0 || ordinal < 0 || ordinal >= 32 || (pace_devices >> ordinal & 1u) != 0;
}

class LaunchDevice;

// Before a launch of shape `key` (a graph's, when `graph`) on `device` while pace_permille != 0
// (read by the caller as `pace`). The device is asked of the driver only when pacing is limited to some devices. Returns
// false when the gate closed while it waited: the caller waits at the gate and paces again.
bool pace_before_launch(gpuos_control_block* cb, uint64_t key, bool graph, uint32_t pace, LaunchDevice* device);

// For tests: the pacing clock starts afresh.
void TEST_reset_pacing();

}  // namespace gpuos::interpose
