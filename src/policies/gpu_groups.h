// SPDX-License-Identifier: Apache-2.0
// Tenants grouped by the GPUs they work on, for the time gates that take turns per group of GPUs
// (priority's best-effort rotation, exclusive's turns).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace gpuos::policies {

// A tenant's GPUs (bit i = GPU i); one whose GPUs are not known yet (0) is on all of them.
inline uint64_t gpus_or_all(uint64_t gpus) { return gpus == 0 ? ~0ull : gpus; }

// `tenants` (anything with `id` and `gpus`) in groups that work on a GPU in common, directly or
// through others, each with the union of its GPUs; members in id order.
template <typename Tenant>
std::vector<std::pair<uint64_t, std::vector<const Tenant*>>> gpu_groups(const std::vector<const Tenant*>& tenants) {
  std::vector<std::pair<uint64_t, std::vector<const Tenant*>>> groups;
  for (const Tenant* t : tenants) {
    uint64_t mask = gpus_or_all(t->gpus);
    std::vector<const Tenant*> members{t};
    // Merge every group it touches (a tenant can join two groups into one).
    for (auto it = groups.begin(); it != groups.end();) {
      if ((it->first & mask) == 0) {
        ++it;
        continue;
      }
      mask |= it->first;
      members.insert(members.end(), it->second.begin(), it->second.end());
      it = groups.erase(it);
    }
    std::sort(members.begin(), members.end(), [](const Tenant* a, const Tenant* b) { return a->id < b->id; });
    groups.emplace_back(mask, std::move(members));
  }
  return groups;
}

}  // namespace gpuos::policies
