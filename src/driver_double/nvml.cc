// An NVML stand-in (libnvidia-ml.so.1) for the driver double: what each process really holds and
// runs on the simulated GPUs, read from the double's shared segment (segment.h), where every
// process using the double accounts its allocations and kernel time itself. So gpuosd's usage check
// sees a process that bypasses libgpuos.so exactly as NVML would on a GPU.
//
// Semantics kept from NVML: init before use (NVML_ERROR_UNINITIALIZED), in/out counts with
// NVML_ERROR_INSUFFICIENT_SIZE when the array is too small (the count then says how many),
// utilization samples newer than last_seen_us (NVML_ERROR_NOT_FOUND when there are none). No MPS
// here: its process list is always empty.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "driver_double/segment.h"
#include "gpuos/nvml_api.h"

#define NVML_API extern "C" __attribute__((visibility("default"))) nvmlReturn_t

namespace {

std::mutex g_mu;
const dd::Segment* g_seg = nullptr;  // read-only mapping; null until nvmlInit_v2 found it
int g_devices = 0;
// Per device and pid: busy time and wall time at the previous utilization query (the segment keeps
// totals; NVML reports a share of the interval).
struct Seen {
  uint64_t busy_ns = 0;
  uint64_t at_us = 0;
};
std::map<std::pair<int, int32_t>, Seen> g_seen;

uint64_t now_us() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000u + static_cast<uint64_t>(t.tv_nsec) / 1000u;
}

bool alive(int32_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH); }

int device_of(nvmlDevice_t d) {
  const auto i = static_cast<int>(reinterpret_cast<uintptr_t>(d)) - 1;
  return i >= 0 && i < g_devices ? i : -1;
}

}  // namespace

NVML_API nvmlInit_v2(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_seg != nullptr) return NVML_SUCCESS;
  const char* env = std::getenv("GPUOS_SIM_DEVICES");
  g_devices = env != nullptr && *env != '\0' ? std::atoi(env) : 1;
  if (g_devices < 0 || g_devices > dd::kMaxDevices) g_devices = 1;
  // The segment exists once a process of the double ran cuInit; before that, nothing holds memory.
  const int fd = shm_open(dd::segment_name().c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return NVML_SUCCESS;
  struct stat st {};
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && st.st_size == static_cast<off_t>(sizeof(dd::Segment))) {
    p = mmap(nullptr, sizeof(dd::Segment), PROT_READ, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (p == MAP_FAILED) return NVML_SUCCESS;
  const auto* s = static_cast<const dd::Segment*>(p);
  if (s->magic.load(std::memory_order_acquire) != dd::kSegmentMagic || s->layout_version != dd::kLayoutVersion) {
    munmap(p, sizeof(dd::Segment));
    return NVML_SUCCESS;
  }
  g_seg = s;
  return NVML_SUCCESS;
}

NVML_API nvmlShutdown(void) { return NVML_SUCCESS; }

NVML_API nvmlDeviceGetCount_v2(unsigned int* count) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned>(g_devices);
  return NVML_SUCCESS;
}

NVML_API nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (device == nullptr || index >= static_cast<unsigned>(g_devices)) return NVML_ERROR_INVALID_ARGUMENT;
  *device = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(index) + 1);
  return NVML_SUCCESS;
}

NVML_API nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  const int d = device_of(device);
  if (d < 0 || uuid == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const std::string text = dd::sim_uuid_text(d);
  if (length < text.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(uuid, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

NVML_API nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos) {
  const int d = device_of(device);
  if (d < 0 || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = 0;
  const unsigned cap = infos != nullptr ? *count : 0;
  if (g_seg != nullptr) {
    for (const dd::PidSlot& s : g_seg->slots) {
      const int32_t pid = s.pid.load();
      const uint64_t used = s.used[d].load();
      if (!alive(pid) || (used == 0 && s.busy_ns[d].load() == 0)) continue;
      if (n < cap) infos[n] = nvmlProcessInfo_t{static_cast<unsigned>(pid), used, 0xFFFFFFFFu, 0xFFFFFFFFu};
      ++n;
    }
  }
  *count = n;
  return n > cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

NVML_API nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t*) {
  if (device_of(device) < 0 || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = 0;
  return NVML_SUCCESS;
}

NVML_API nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* samples,
                                         unsigned int* count, unsigned long long last_seen_us) {
  const int d = device_of(device);
  if (d < 0 || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::lock_guard<std::mutex> lock(g_mu);
  const uint64_t now = now_us();
  unsigned n = 0;
  const unsigned cap = samples != nullptr ? *count : 0;
  if (g_seg != nullptr) {
    for (const dd::PidSlot& s : g_seg->slots) {
      const int32_t pid = s.pid.load();
      if (!alive(pid)) continue;
      const uint64_t busy = s.busy_ns[d].load();
      Seen& seen = g_seen[{d, pid}];
      // One sample per process for the time since it was last looked at (or since last_seen_us).
      const uint64_t from_us = std::max<uint64_t>(seen.at_us, last_seen_us);
      if (seen.at_us == 0 || now <= from_us || busy == seen.busy_ns) {
        if (seen.at_us == 0 || busy == seen.busy_ns) seen = Seen{busy, now};
        continue;
      }
      const uint64_t util = std::min<uint64_t>(100, (busy - seen.busy_ns) / 10 / (now - seen.at_us));
      if (n < cap) samples[n] = nvmlProcessUtilizationSample_t{static_cast<unsigned>(pid), now, static_cast<unsigned>(util), 0, 0, 0};
      ++n;
      if (n <= cap) seen = Seen{busy, now};
    }
  }
  *count = n;
  if (n > cap) return NVML_ERROR_INSUFFICIENT_SIZE;
  return n == 0 ? NVML_ERROR_NOT_FOUND : NVML_SUCCESS;
}

NVML_API nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  static const char kVersion[] = "580.00-gpuos-double";
  if (version == nullptr || length < sizeof(kVersion)) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(version, kVersion, sizeof(kVersion));
  return NVML_SUCCESS;
}
