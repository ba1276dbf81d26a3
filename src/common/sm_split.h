// SPDX-License-Identifier: Apache-2.0
// The finest split of a device's SMs into the groups spatial partitions are made of. gpuosd
// (sizes, planning) and every tenant's interposer (green contexts) must make the same split, so
// that group i of a mask names the same SMs in every process: groups of the driver's minimum
// partition size, in the driver's order, with the split's remainder joined to the last group.
#pragma once

#include <cstdint>
#include <vector>

#include "gpuos/driver_api.h"

namespace gpuos {

struct SmSplit {
  std::vector<CUdevResource> groups;  // as the driver made them (at most 64 are used)
  CUdevResource remainder{};          // SMs left over; type CU_DEV_RESOURCE_TYPE_INVALID when none
  unsigned min_count = 0;             // the split's count per group

  unsigned count() const { return groups.size() < 64 ? static_cast<unsigned>(groups.size()) : 64u; }
  // Appends the resources of group i (the last one also the remainder) to out; returns its SMs.
  unsigned append_group(unsigned i, std::vector<CUdevResource>* out) const;
};

// Splits device dev's SMs in groups of min_count (0: the device's minimum partition size).
// CUDA_SUCCESS, CUDA_ERROR_NOT_SUPPORTED when the driver has no green contexts, or its error.
CUresult split_sms(const GpuosDriverTable& d, CUdevice dev, unsigned min_count, SmSplit* out);

// The partitions a tenant is likely to be given next (for making them ahead): its mask of groups
// grown or shrunk by one group at its moving end. gpuosd gives a guaranteed tenant groups from
// group 0 up and best-effort tenants groups that end at the last one (daemon/space_planner.h).
// Empty for other masks (several runs, all groups, none).
std::vector<uint64_t> neighbour_partitions(uint64_t mask, unsigned groups);

}  // namespace gpuos
