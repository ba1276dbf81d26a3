// The segment the driver double's processes share (GPUOS_SIM_SHM): device memory accounted per
// process, and each device's SM slots. device.cc creates and updates it; the NVML stand-in
// (nvml.cc, libnvidia-ml.so.1) reads it to report what each process really holds and runs.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "driver_double/internal.h"  // kMaxDevices, kMaxSlots, sim_uuid

namespace dd {

constexpr uint64_t kSegmentMagic = 0x6770756f7353494dull;  // "gpuosSIM"
// 2: SM count and one engine per SM slot; 3: busy time per pid; 4: when the pid took its slot
constexpr uint32_t kLayoutVersion = 4;
constexpr int kPidSlots = 256;

struct PidSlot {
  std::atomic<int32_t> pid;  // 0 = free
  std::atomic<uint64_t> used[kMaxDevices];
  std::atomic<uint64_t> busy_ns[kMaxDevices];  // simulated kernel time run on each device
  std::atomic<uint64_t> since_us;  // CLOCK_REALTIME at cuInit: busy_ns counts from here
};

struct Engine {  // one SM slot
  pthread_mutex_t mu;               // robust, process-shared: held while a kernel slice runs
  std::atomic<uint32_t> waiters;    // slices waiting for mu (a hint for fair hand-over)
  std::atomic<uint64_t> handovers;  // bumped by every acquisition
};

struct Segment {
  std::atomic<uint64_t> magic;  // set last by the creator: the segment is initialised
  uint32_t layout_version;
  uint32_t size;
  pthread_mutex_t mu;  // robust, process-shared: guards accounting below
  int32_t devices;
  int32_t sms;  // SMs per device, so all processes agree on the slots
  uint64_t total[kMaxDevices];
  uint64_t used[kMaxDevices];
  PidSlot slots[kPidSlots];
  Engine engine[kMaxDevices][kMaxSlots];
};

// The segment's name for this process: GPUOS_SIM_SHM (a leading '/' added), else
// "/gpuos-sim-<uid>".
std::string segment_name();

}  // namespace dd
