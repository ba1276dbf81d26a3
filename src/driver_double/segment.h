// SPDX-License-Identifier: Apache-2.0
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
// 2: SM count and one engine per SM slot; 3: busy time per pid; 4: when the pid took its slot;
// 5: rendezvous of gpuos_collective kernels
constexpr uint32_t kLayoutVersion = 5;
constexpr int kPidSlots = 256;
constexpr int kCollGroups = 32;  // collective groups that can exist at once on the simulated node
constexpr int kCollRanks = 32;   // ranks of one group at most

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

// One rank of a collective group: a process on one simulated GPU (so a process may hold a rank
// on each of several GPUs, as with NCCL).
struct CollMember {
  int32_t pid;
  int32_t dev;        // simulated GPU
  uint64_t arrivals;  // collectives it counted in: its k-th arrival is the group's round k
};

// The rendezvous of one group of gpuos_collective kernels (collective.cc); guarded by Segment::mu.
// Round k is complete once `ranks` members have more than k arrivals.
struct CollGroup {
  uint32_t used;     // 0 = free
  uint32_t ranks;
  uint32_t members;  // in member[0 .. members)
  uint32_t broken;   // a rank timed out or died before arriving: every rank of the group fails
  uint64_t id;
  CollMember member[kCollRanks];
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
  CollGroup coll[kCollGroups];  // guarded by mu
};

// The segment's name for this process: GPUOS_SIM_SHM (a leading '/' added), else
// "/gpuos-sim-<uid>".
std::string segment_name();

// Locks a robust mutex of the segment, taking over one whose owner died (the state it guards is
// counters and tables that stay consistent at every store).
void lock_robust(pthread_mutex_t* m);
// Whether pid is known not to exist (ESRCH; another user's process counts as alive).
bool pid_dead(int32_t pid);
// This process's mapping of the segment (device.cc; valid after a successful cuInit).
Segment* shared_segment();

}  // namespace dd
