// SPDX-License-Identifier: Apache-2.0
// GPU discovery through the driver table (real libcuda or the driver test double).
#include <cstdio>
#include <cstring>
#include <vector>

#include <algorithm>
#include <atomic>

#include "common/sm_split.h"
#include "daemon/core/gpus.h"
#include "gpuos/driver_api.h"

namespace gpuos::daemon {

namespace {

// The device's SM groups, as every tenant's interposer will split them for green contexts.
void split_sms(const GpuosDriverTable& t, CUdevice dev, GpuInfo* g) {
  SmSplit split;
  if (gpuos::split_sms(t, dev, 0, &split) != CUDA_SUCCESS) return;
  std::vector<CUdevResource> unused;
  for (unsigned i = 0; i < split.count(); ++i) g->sm_groups.push_back(split.append_group(i, &unused));
  g->sm_group_min = split.min_count;
}

}  // namespace

std::vector<GpuInfo> discover_gpus(const char* library, std::string* warning) {
  std::vector<GpuInfo> out;
  static GpuosDriverTable table;  // kept loaded for the daemon's lifetime
  char err[256] = {};
  if (!load_driver(&table, library, nullptr, err, sizeof(err))) {
    if (warning) *warning = std::string("no CUDA driver: ") + err;
    return out;
  }
  auto fail = [&](const char* what, CUresult r) {
    if (warning) *warning = std::string(what) + " failed: " + cu_result_name(r);
  };
  if (table.cuInit == nullptr || table.cuDeviceGetCount == nullptr || table.cuDeviceGet == nullptr) {
    if (warning) *warning = "driver lacks cuInit/cuDeviceGetCount/cuDeviceGet";
    return out;
  }
  CUresult r = table.cuInit(0);
  if (r != CUDA_SUCCESS) {
    fail("cuInit", r);
    return out;
  }
  int count = 0;
  r = table.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS) {
    fail("cuDeviceGetCount", r);
    return out;
  }
  if (count > GPUOS_MAX_DEVICES) {
    if (warning) *warning = "driver reports " + std::to_string(count) + " GPUs; gpuos handles the first " +
                            std::to_string(GPUOS_MAX_DEVICES);
    count = GPUOS_MAX_DEVICES;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    r = table.cuDeviceGet(&dev, i);
    if (r != CUDA_SUCCESS) {
      fail("cuDeviceGet", r);
      break;
    }
    GpuInfo g;
    g.index = static_cast<uint32_t>(i);
    char name[256] = {};
    if (table.cuDeviceGetName && table.cuDeviceGetName(name, sizeof(name) - 1, dev) == CUDA_SUCCESS) g.name = name;
    int sms = 0;
    if (table.cuDeviceGetAttribute &&
        table.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) == CUDA_SUCCESS && sms > 0) {
      g.sm_count = static_cast<uint32_t>(sms);
    }
    size_t bytes = 0;
    if (table.cuDeviceTotalMem_v2 && table.cuDeviceTotalMem_v2(&bytes, dev) == CUDA_SUCCESS) g.total_mem_bytes = bytes;
    CUuuid u{};
    if (table.cuDeviceGetUuid_v2 && table.cuDeviceGetUuid_v2(&u, dev) == CUDA_SUCCESS) {
      g.uuid = format_gpu_uuid(reinterpret_cast<const uint8_t*>(u.bytes));
    }
    split_sms(table, dev, &g);
    out.push_back(std::move(g));
  }
  return out;
}

std::string format_gpu_uuid(const uint8_t b[16]) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

uint32_t GpuMap::ordinals_of(const Tenant& t, uint64_t gpus) const {
  uint32_t ordinals = 0;
  for (uint32_t g = 0; g < GPUOS_MAX_DEVICES && (gpus >> g) != 0; ++g) {
    if ((gpus >> g & 1u) == 0) continue;
    if (const int o = ordinal_of(t, g); o >= 0) ordinals |= 1u << o;
  }
  return ordinals;
}

int GpuMap::ordinal_of(const Tenant& t, uint32_t gpu) const {
  if (gpu >= GPUOS_MAX_DEVICES) return -1;
  const uint32_t n = std::atomic_ref<uint32_t>(t.cb->device_count).load(std::memory_order_acquire);
  DeviceMap& m = t.devices;
  if (n != m.mapped_device_count) {
    // The tenant published (or re-published) its devices: match their UUIDs to gpuosd's GPUs.
    for (uint32_t g = 0; g < GPUOS_MAX_DEVICES; ++g) m.ordinal_of_gpu[g] = n == 0 ? static_cast<int8_t>(g) : -1;
    for (uint32_t o = 0; o < n && o < GPUOS_MAX_DEVICES; ++o) {
      uint8_t b[16];
      for (int i = 0; i < 16; ++i) b[i] = load(t.cb->device_uuid[o][i]);
      const std::string text = format_gpu_uuid(b);
      for (const GpuInfo& g : gpus_) {
        if (g.index < GPUOS_MAX_DEVICES && g.uuid == text) m.ordinal_of_gpu[g.index] = static_cast<int8_t>(o);
      }
    }
    m.mapped_device_count = n;
  }
  return m.ordinal_of_gpu[gpu];
}

int GpuMap::gpu_of(const Tenant& t, int ordinal) const {
  for (uint32_t g = 0; g < GPUOS_MAX_DEVICES; ++g) {
    if (ordinal_of(t, g) == ordinal) return static_cast<int>(g);
  }
  return -1;
}

uint64_t GpuMap::used_on(const Tenant& t, uint32_t gpu) const {
  const int o = ordinal_of(t, gpu);
  if (o < 0) return 0;
  const uint64_t used = load(t.cb->mem_used_per_device[o]);
  const GpuInfo* g = find(gpu);
  return g != nullptr && g->total_mem_bytes != 0 ? std::min(used, g->total_mem_bytes) : used;
}

uint64_t GpuMap::at_most_all(uint64_t bytes) const {
  uint64_t all = 0;
  for (const GpuInfo& g : gpus_) all += g.total_mem_bytes;
  return all != 0 ? std::min(bytes, all) : bytes;
}

bool GpuMap::launched_on(const Tenant& t, uint32_t gpu) const {
  const int o = ordinal_of(t, gpu);
  return o >= 0 && o < 32 && (load(t.cb->space_devices) >> o & 1u) != 0;
}

uint32_t GpuMap::home(const Tenant& t) const {
  uint32_t home = 0;
  uint64_t most = 0;
  for (uint32_t g = 0; g < GPUOS_MAX_DEVICES; ++g) {
    const uint64_t b = used_on(t, g);
    if (b > most) most = b, home = g;
  }
  if (most == 0) {  // no memory yet: the first GPU it launched on, if any
    for (uint32_t g = 0; g < GPUOS_MAX_DEVICES; ++g) {
      if (launched_on(t, g)) return g;
    }
  }
  return home;
}

const GpuInfo* GpuMap::find(uint32_t index) const {
  for (const GpuInfo& g : gpus_) {
    if (g.index == index) return &g;
  }
  return nullptr;
}

}  // namespace gpuos::daemon
