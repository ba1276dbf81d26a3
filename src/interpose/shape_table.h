// SPDX-License-Identifier: Apache-2.0
// The right-sizing sample table of a tenant's control block (space_shapes): the interposer adds
// each timed launch to the entry of its shape at the SM count it ran on; gpuosd reads the table
// (daemon/space_sizer.h) under its seqlock.
#pragma once

#include <cstdint>

#include "gpuos/abi.h"

namespace gpuos::interpose {

// Adds one timed launch of shape `key` (non-zero, `blocks` in its grid, 0 = not known) that ran
// `ns` on `sms` SMs. A new shape takes an
// unused slot or that of the least frequent shape, starting from a count of one: not inheriting
// the count, as Space-Saving would, since a shape with an inherited count but no samples would
// look like main work to gpuosd's sizer. Frequent shapes keep their slots; the rare ones of an
// eager workload take turns in the least frequent slot. A new SM count of a shape takes an unused
// point or its least sampled one other than its largest and smallest SM counts (the sizer's
// reference and the size that proved too small), and that first sample is not counted (it may
// include loading the kernel into the partition's green context). The caller serialises writers;
// readers see space_sample_seq odd while an update is in progress.
void shape_table_add(gpuos_control_block* cb, uint64_t key, uint32_t blocks, uint32_t sms, uint64_t ns);

// Appends one timed launch to the control block's timing_ring (gpuosd measures a latency budget on
// it): the entry first, then timing_head (release). The caller serialises writers.
void timing_ring_add(gpuos_control_block* cb, uint64_t key, uint64_t ns);

}  // namespace gpuos::interpose
