// SPDX-License-Identifier: Apache-2.0
// What a launch of a given shape is expected to take on the GPU, from the tenant's own timed
// launches (spatial_samples.h): pacing (pacing.h) spreads a best-effort tenant's launches by it.
// Per shape, preferably the launches timed while unpaced (alone on the GPU, or beside idle
// tenants), since a paced kernel's time includes the guaranteed tenant's time slices; else the
// paced figure (which only makes pacing more cautious); else the mean of its timed kernels; else
// kDefaultExpectedNs. Writers are serialised by the caller (the sample lock); readers are
// lock-free.
#pragma once

#include <cstdint>

#include "gpuos/abi.h"

namespace gpuos::interpose {

inline constexpr uint64_t kDefaultExpectedNs = 100'000;

// A timed launch of shape `key` took ns; paced: pacing was on when it was launched.
void note_launch_duration(uint64_t key, uint64_t ns, bool paced);

// What shape `key` took on average alone and while paced (0 where it has no such timing).
struct ShapeDurations {
  uint64_t solo_ns = 0;
  uint64_t paced_ns = 0;
};
ShapeDurations launch_durations(uint64_t key);

// The duration expected of a launch of shape `key`; from its durations already looked up, the
// same without a second lookup.
uint64_t expected_launch_ns(const gpuos_control_block* cb, uint64_t key);
uint64_t expected_launch_ns(const gpuos_control_block* cb, const ShapeDurations& timed);
// The same for a launch placed on a partition of its GPU (SM groups): the paced figure first. A
// kernel on a few SM groups runs up to the GPU's SMs over the partition's longer than alone on the
// whole GPU, and a share there is of the partition's time: charged its time alone, a best-effort
// tenant on one group of 15 with a share of 0.5% kept its group busy and got 10% of its speed (an
// H100, beside a server at 30% load: `bench/results/2026-12-06-w80-h100-0.3`).
uint64_t expected_partition_launch_ns(const gpuos_control_block* cb, const ShapeDurations& timed);

// The tenant's typical launch: a slow moving average of all its unpaced timings, so the shape it
// launches most (a server's decode step) weighs most. 0 before the first.
uint64_t typical_launch_ns();

// For tests: forget every duration.
void TEST_reset_launch_durations();

}  // namespace gpuos::interpose
