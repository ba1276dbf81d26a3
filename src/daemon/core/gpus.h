// SPDX-License-Identifier: Apache-2.0
// The node's GPUs as gpuosd sees them, and where each tenant's memory and launches are on them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/tenant.h"

namespace gpuos::daemon {

struct GpuInfo {
  uint32_t index = 0;
  std::string name;
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", "" if unknown
  uint32_t sm_count = 0;
  uint64_t total_mem_bytes = 0;
  // SMs of each group of the device's finest SM split (the partitions green contexts are made of;
  // the last group also takes the split's remainder); empty = unknown (sm_count in groups of 8).
  std::vector<uint32_t> sm_groups;
  uint32_t sm_group_min = 0;  // the driver's minimum partition size (the split's count); 0 = unknown
};

// Finds the GPUs through the driver table (library: null = $GPUOS_DRIVER_LIBRARY or libcuda.so.1).
// On any failure returns what it found so far (often nothing) and writes a reason into *warning.
std::vector<GpuInfo> discover_gpus(const char* library, std::string* warning);
// A GPU UUID as gpuosd shows it: "GPU-" and the 16 bytes in the 8-4-4-4-12 hex form.
std::string format_gpu_uuid(const uint8_t bytes[16]);

// A tenant's per-device control-block words are indexed by its device ordinals, which
// CUDA_VISIBLE_DEVICES may reorder; gpuosd's GPUs by index. This maps between the two.
class GpuMap {
 public:
  explicit GpuMap(const std::vector<GpuInfo>& gpus) : gpus_(gpus) {}
  // The tenant's ordinal of GPU index `gpu` (-1: it does not see that GPU).
  int ordinal_of(const Tenant& t, uint32_t gpu) const;
  // The tenant's ordinals (bit o) of the GPU indices `gpus` (bit g) that it sees.
  uint32_t ordinals_of(const Tenant& t, uint64_t gpus) const;
  // The GPU index of the tenant's ordinal (-1: none of gpuosd's GPUs).
  int gpu_of(const Tenant& t, int ordinal) const;
  // The tenant's memory on GPU index `gpu`, as it reports it, at most the GPU's memory (a tenant
  // writes the word: a forged value must not poison sums, metrics or decisions).
  uint64_t used_on(const Tenant& t, uint32_t gpu) const;
  // A byte count the tenant reports, at most the memory of all GPUs (0 GPUs: as is).
  uint64_t at_most_all(uint64_t bytes) const;
  // Whether a spatial tenant launched on GPU index `gpu` (control block space_devices).
  bool launched_on(const Tenant& t, uint32_t gpu) const;
  // The GPU holding most of the tenant's memory; with none, the first it launched on; else 0.
  uint32_t home(const Tenant& t) const;
  const GpuInfo* find(uint32_t index) const;

 private:
  const std::vector<GpuInfo>& gpus_;
};

}  // namespace gpuos::daemon
