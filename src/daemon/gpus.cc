// GPU discovery through the driver table (real libcuda or the driver test double).
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/sm_split.h"
#include "daemon/core.h"
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

}  // namespace gpuos::daemon
