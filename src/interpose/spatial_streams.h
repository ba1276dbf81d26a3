// SPDX-License-Identifier: Apache-2.0
// Partitions and their streams (spatial.h): the green context of a set of SM groups on a device,
// and the partition stream that stands in for one application stream at one mask, found through a
// per-thread cache (lock-free in the steady state) in front of the registry.
#pragma once

#include "interpose/spatial_registry.h"

namespace gpuos::interpose::spatial {

// The key of the partition stream of `stream` (as a launch in context ctx on device dev spelled it;
// ptsz: through a _ptsz entry point) at `mask`.
StreamKey key_of(CUcontext ctx, int dev, CUstream stream, bool ptsz, uint64_t mask);

// The green context holding exactly the SM groups of `mask` on device dev (the groups of one split
// of the device's SMs in groups of group_sms; the highest group takes the split's remainder), or
// null when it cannot be made. Touches no table: callers hold the registry lock, or (prefetch) add
// the result under it.
Partition make_partition(const GpuosDriverTable& d, gpuos_control_block* cb, int dev, uint64_t mask);

// A stream of partition `part` (null stream if it cannot be made). Never destroyed, like its note.
PartitionStream new_partition_stream(const GpuosDriverTable& d, const Partition& part, int priority);

// The partition stream of `key` for a launch on app_stream, made (with its partition) on first use.
PartitionStream partition_stream(const GpuosDriverTable& d, gpuos_control_block* cb, const StreamKey& key,
                                 CUstream app_stream, bool ptsz);

}  // namespace gpuos::interpose::spatial
