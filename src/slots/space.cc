// SPDX-License-Identifier: Apache-2.0
#include "slots/space.h"

#include <algorithm>

namespace gpuos::slots {

uint32_t space_groups(const SpaceGpu& gpu, uint32_t group_sms) {
  if (!gpu.group_sizes.empty()) return std::min<uint32_t>(static_cast<uint32_t>(gpu.group_sizes.size()), 64);
  if (group_sms == 0) return 0;
  return std::min<uint32_t>(gpu.sm_count / group_sms, 64);
}

uint32_t space_mask_sms(uint64_t mask, const SpaceGpu& gpu, uint32_t group_sms) {
  const uint32_t groups = space_groups(gpu, group_sms);
  uint32_t sms = 0;
  for (uint32_t i = 0; i < groups; ++i) {
    if ((mask >> i & 1u) == 0) continue;
    if (!gpu.group_sizes.empty()) {
      sms += gpu.group_sizes[i];
    } else {
      sms += i + 1 == groups ? gpu.sm_count - group_sms * (groups - 1) : group_sms;
    }
  }
  return sms;
}

uint64_t space_keep_highest(uint64_t mask, uint32_t groups) {
  if (groups == 0) return mask;
  uint64_t out = 0;
  for (int i = 63; i >= 0 && groups > 0; --i) {
    if ((mask >> i & 1u) == 0) continue;
    out |= uint64_t{1} << i;
    --groups;
  }
  return out;
}

}  // namespace gpuos::slots
