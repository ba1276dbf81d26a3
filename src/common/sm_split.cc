// SPDX-License-Identifier: Apache-2.0
#include "common/sm_split.h"

namespace gpuos {

unsigned SmSplit::append_group(unsigned i, std::vector<CUdevResource>* out) const {
  if (i >= count()) return 0;
  out->push_back(groups[i]);
  unsigned sms = groups[i].sm.smCount;
  if (i + 1 == count() && remainder.type == CU_DEV_RESOURCE_TYPE_SM && remainder.sm.smCount > 0) {
    out->push_back(remainder);
    sms += remainder.sm.smCount;
  }
  return sms;
}

CUresult split_sms(const GpuosDriverTable& d, CUdevice dev, unsigned min_count, SmSplit* out) {
  *out = SmSplit{};
  if (d.cuDeviceGetDevResource == nullptr || d.cuDevSmResourceSplitByCount == nullptr) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  CUdevResource all{};
  CUresult r = d.cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM);
  if (r != CUDA_SUCCESS) return r;
  if (min_count == 0) min_count = all.sm.minSmPartitionSize;
  if (min_count == 0) return CUDA_ERROR_NOT_SUPPORTED;
  unsigned n = 0;
  r = d.cuDevSmResourceSplitByCount(nullptr, &n, &all, nullptr, 0, min_count);
  if (r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_ERROR_NOT_SUPPORTED;
  out->groups.resize(n);
  r = d.cuDevSmResourceSplitByCount(out->groups.data(), &n, &all, &out->remainder, 0, min_count);
  if (r != CUDA_SUCCESS) {
    *out = SmSplit{};
    return r;
  }
  out->groups.resize(n);
  out->min_count = min_count;
  return CUDA_SUCCESS;
}

std::vector<uint64_t> neighbour_partitions(uint64_t mask, unsigned groups) {
  std::vector<uint64_t> out;
  if (mask == 0 || groups == 0 || groups > 64) return out;
  const uint64_t all = groups == 64 ? ~0ull : (1ull << groups) - 1;
  const unsigned low = static_cast<unsigned>(__builtin_ctzll(mask));
  const unsigned high = 63 - static_cast<unsigned>(__builtin_clzll(mask));
  const uint64_t run = mask >> low;
  if ((run & (run + 1)) != 0 || (mask & ~all) != 0 || mask == all) return out;  // not one run of groups
  if (low == 0) {
    if (high + 1 < groups) out.push_back(mask | 1ull << (high + 1));
    if (high > 0) out.push_back(mask & ~(1ull << high));
  } else if (high == groups - 1) {
    out.push_back(mask | 1ull << (low - 1));
    if (low < high) out.push_back(mask & ~(1ull << low));
  }
  std::erase(out, all);  // all groups: a tenant alone runs unconfined, on no partition
  return out;
}

}  // namespace gpuos
