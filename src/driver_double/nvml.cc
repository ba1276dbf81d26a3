// SPDX-License-Identifier: Apache-2.0
// An NVML stand-in (libnvidia-ml.so.1) for the driver double: what each process really holds and
// runs on the simulated GPUs, read from the double's shared segment (segment.h), where every
// process using the double accounts its allocations and kernel time itself (device.cc). So
// gpuosd's usage check sees a process that bypasses libgpuos.so exactly as NVML would on a GPU.
//
// Semantics kept from NVML (include/gpuos/nvml_api.h): NVML_ERROR_UNINITIALIZED before
// nvmlInit_v2 (reference-counted with nvmlShutdown); in/out counts with
// NVML_ERROR_INSUFFICIENT_SIZE and the count needed when the array is too small (a null array asks
// for the count); utilization samples newer than last_seen_us, NVML_ERROR_NOT_FOUND when there are
// none; the energy counter in mJ. Differences (README.md): the energy is a fixed 100 W; no MPS
// (its process list is always empty); usedGpuMemory is what the process allocated, without a
// context's own memory; a process is listed once it holds memory or ran a kernel on the device.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <type_traits>

#include "driver_double/segment.h"
#include "gpuos/nvml_api.h"

#define NVML_API extern "C" __attribute__((visibility("default")))

namespace {

std::mutex g_mu;  // guards everything below
int g_inits = 0;  // nvmlInit_v2 calls not yet matched by nvmlShutdown
int g_devices = 0;
int g_fd = -1;                       // the segment, kept open to notice it was unlinked
const dd::Segment* g_seg = nullptr;  // read-only mapping; null until a process of the double made it

// Utilization: the segment keeps each pid's total busy time on a device since it took its slot;
// a sample is the busy share of the time between two looks. Every query records a look, so the
// samples newer than any last_seen_us can be answered, and no caller consumes another's samples.
struct Look {
  uint64_t at_us;
  uint64_t busy_ns;
};
struct History {
  uint64_t since_us = 0;  // the slot's since_us: a new value is a new process in that slot
  std::deque<Look> looks;
};
constexpr std::size_t kMaxLooks = 64;
std::map<std::pair<int, int32_t>, History> g_history;  // (device, pid)

uint64_t now_us() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000u + static_cast<uint64_t>(t.tv_nsec) / 1000u;
}

bool alive(int32_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH); }

void unmap() {
  if (g_seg != nullptr) munmap(const_cast<dd::Segment*>(g_seg), sizeof(dd::Segment));
  if (g_fd >= 0) close(g_fd);
  g_seg = nullptr;
  g_fd = -1;
}

// The segment as it is now: mapped on first need (it appears at the first cuInit of a process of
// the double, maybe after nvmlInit_v2), mapped again if it was unlinked and made anew.
const dd::Segment* segment() {
  struct stat st {};
  if (g_fd >= 0 && fstat(g_fd, &st) == 0 && st.st_nlink > 0) return g_seg;
  unmap();
  const int fd = shm_open(dd::segment_name().c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && st.st_size == static_cast<off_t>(sizeof(dd::Segment))) {
    p = mmap(nullptr, sizeof(dd::Segment), PROT_READ, MAP_SHARED, fd, 0);
  }
  const auto* s = static_cast<const dd::Segment*>(p);
  if (p == MAP_FAILED || s->magic.load(std::memory_order_acquire) != dd::kSegmentMagic ||
      s->layout_version != dd::kLayoutVersion) {
    if (p != MAP_FAILED) munmap(p, sizeof(dd::Segment));
    close(fd);
    return nullptr;
  }
  g_fd = fd;
  g_seg = s;
  return s;
}

int device_of(nvmlDevice_t d) {
  const auto i = static_cast<int>(reinterpret_cast<uintptr_t>(d)) - 1;
  return i >= 0 && i < g_devices ? i : -1;
}

}  // namespace

NVML_API nvmlReturn_t nvmlInit_v2(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits++ > 0) return NVML_SUCCESS;
  // The devices are the segment's (its first process set them), else what the double would make.
  const dd::Segment* s = segment();
  const char* env = std::getenv("GPUOS_SIM_DEVICES");
  g_devices = s != nullptr && s->devices > 0 ? s->devices : env != nullptr && *env != '\0' ? std::atoi(env) : 1;
  g_devices = std::clamp(g_devices, 0, dd::kMaxDevices);
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlShutdown(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  if (--g_inits == 0) {
    unmap();
    g_history.clear();
  }
  return NVML_SUCCESS;
}

NVML_API const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    default: return "Unknown Error";
  }
}

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned>(g_devices);
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  if (device == nullptr || index >= static_cast<unsigned>(g_devices)) return NVML_ERROR_INVALID_ARGUMENT;
  *device = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(index) + 1);
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  const int d = device_of(device);
  if (d < 0 || uuid == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const std::string text = dd::sim_uuid_text(d);  // the double's cuDeviceGetUuid, as text
  if (length < text.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(uuid, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                             nvmlProcessInfo_t* infos) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  const int d = device_of(device);
  if (d < 0 || count == nullptr || (infos == nullptr && *count != 0)) return NVML_ERROR_INVALID_ARGUMENT;
  const unsigned cap = *count;
  unsigned n = 0;
  if (const dd::Segment* s = segment()) {
    for (const dd::PidSlot& slot : s->slots) {
      const int32_t pid = slot.pid.load();
      const uint64_t used = slot.used[d].load();
      if (!alive(pid) || (used == 0 && slot.busy_ns[d].load() == 0)) continue;
      if (n < cap) infos[n] = nvmlProcessInfo_t{static_cast<unsigned>(pid), used, 0xFFFFFFFFu, 0xFFFFFFFFu};
      ++n;
    }
  }
  *count = n;
  return n > cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                                nvmlProcessInfo_t*) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  if (device_of(device) < 0 || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = 0;  // the double has no MPS
  return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* samples,
                                                     unsigned int* count, unsigned long long last_seen_us) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  const int d = device_of(device);
  if (d < 0 || count == nullptr || (samples == nullptr && *count != 0)) return NVML_ERROR_INVALID_ARGUMENT;
  const unsigned cap = *count;
  unsigned n = 0;
  const uint64_t now = now_us();
  std::map<std::pair<int, int32_t>, History> kept;  // this device's live pids (the dead are dropped)
  if (const dd::Segment* s = segment()) {
    for (const dd::PidSlot& slot : s->slots) {
      const int32_t pid = slot.pid.load();
      if (!alive(pid)) continue;
      const uint64_t since = slot.since_us.load();
      History h = std::move(g_history[{d, pid}]);
      if (h.since_us != since || h.looks.empty()) h = History{since, {Look{since, 0}}};
      if (now > h.looks.back().at_us) h.looks.push_back(Look{now, slot.busy_ns[d].load()});
      if (h.looks.size() > kMaxLooks) h.looks.pop_front();
      // One sample per interval between looks that ends after last_seen_us and had kernels running.
      for (std::size_t i = 1; i < h.looks.size(); ++i) {
        const Look& a = h.looks[i - 1];
        const Look& b = h.looks[i];
        if (b.at_us <= last_seen_us || b.busy_ns <= a.busy_ns) continue;
        const uint64_t pct = std::min<uint64_t>(100, (b.busy_ns - a.busy_ns) / 10 / (b.at_us - a.at_us));
        if (n < cap) {
          samples[n] = nvmlProcessUtilizationSample_t{static_cast<unsigned>(pid), b.at_us,
                                                      static_cast<unsigned>(pct), 0, 0, 0};
        }
        ++n;
      }
      kept[{d, pid}] = std::move(h);
    }
  }
  std::erase_if(g_history, [d](const auto& e) { return e.first.first == d; });
  g_history.merge(kept);
  *count = n;
  if (n > cap) return NVML_ERROR_INSUFFICIENT_SIZE;
  return n == 0 ? NVML_ERROR_NOT_FOUND : NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  static const char kVersion[] = "580.00-gpuos-double";
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (length < sizeof(kVersion)) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(version, kVersion, sizeof(kVersion));
  return NVML_SUCCESS;
}

// The GPU's energy: a fixed 100 W since the machine booted (CLOCK_MONOTONIC), the same counter for
// every process that reads it, as a driver loaded at boot would give. Chargeback tests split it.
NVML_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* energy) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  if (device_of(device) < 0 || energy == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  constexpr uint64_t kWatts = 100;  // mJ = ns * W / 1e6
  *energy = (static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec)) * kWatts / 1000000u;
  return NVML_SUCCESS;
}

// The device's memory now: what the live processes of the double hold on it (a dead process's
// memory is the driver's again, as on a GPU; the double's allocator reclaims it at its next
// shortage), against the device's size.
NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  const int d = device_of(device);
  if (d < 0 || memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const dd::Segment* s = segment();
  if (s == nullptr) return NVML_ERROR_UNKNOWN;  // no process of the double has made the device yet
  uint64_t used = 0;
  for (const dd::PidSlot& slot : s->slots) {
    if (alive(slot.pid.load())) used += slot.used[d].load();
  }
  const uint64_t total = s->total[d];
  memory->total = total;
  memory->used = std::min(used, total);
  memory->free = total - memory->used;
  return NVML_SUCCESS;
}

// Every export has exactly the type gpuos's table expects (as the driver's are checked).
#define GPUOS_NVML_SAME_TYPE(ret, name, params) \
  static_assert(std::is_same_v<decltype(&::name), decltype(GpuosNvmlTable::name)>, #name);
GPUOS_NVML_FUNCS(GPUOS_NVML_SAME_TYPE)
#undef GPUOS_NVML_SAME_TYPE
