// Pacing of a best-effort tenant beside a guaranteed tenant with a latency budget (time policy
// "budget"): gpuosd grants the best-effort tenant a share of the GPU's time (pace_permille) and,
// with it, an open gate. Its launches then leave gaps: each waits until the one before it has had
// its expected duration divided by the share, so its kernels reach the GPU spread out, a few
// between each two of the guaranteed tenant's steps, rather than in one block that would stall a
// step. A launch expected to run longer than pace_max_kernel_us waits for pacing to end (the
// guaranteed tenant idle), so no single long kernel overruns the budget.
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

// Before a launch of shape `key` while pace_permille != 0 (read by the caller as `pace`).
void pace_before_launch(gpuos_control_block* cb, uint64_t key, uint32_t pace);

// For tests: the pacing clock starts afresh.
void TEST_reset_pacing();

}  // namespace gpuos::interpose
