// SPDX-License-Identifier: Apache-2.0
// The prefetch helper (spatial.h): a change of size needs the new partition's green context (~1.7
// ms to create), its streams and the graphs' variants. When a tenant first runs on a partition, a
// short-lived helper thread makes the partitions one group larger and smaller (common/sm_split.h:
// neighbour_partitions) with those, off the launch path, so that the sizer's next step does not
// stall the launch that meets it.
#pragma once

#include "gpuos/abi.h"
#include "gpuos/driver_api.h"

namespace gpuos::interpose::spatial {

// Starts the helper for partition (dev, mask) once per process; ctx is the launching thread's (the
// device's primary context). Does nothing if it ran for (dev, mask) already or cannot start.
void prefetch_neighbours(const GpuosDriverTable& d, gpuos_control_block* cb, CUcontext ctx, int dev, uint64_t mask);

}  // namespace gpuos::interpose::spatial
