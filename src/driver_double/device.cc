// SPDX-License-Identifier: Apache-2.0
// Process-wide setup and the segment shared by every process using the double.
//
// The segment makes separate processes see one simulated GPU: memory usage is accounted there
// (with per-pid slots, so a crashed process's memory is reclaimed), and each device's SMs are
// slots of kSlotSms SMs, each a robust process-shared mutex that kernels hold in time slices.
// A kernel holds all the slots of its context (all of them, or a green context's partition), so
// kernels on disjoint partitions run concurrently, in one process or in several.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "driver_double/internal.h"
#include "driver_double/segment.h"

namespace dd {
namespace {

// Leaked on purpose (see internal.h).
Config* g_config = nullptr;
Segment* g_seg = nullptr;
int g_slot = -1;
int g_slot_width = kSlotSms;  // SMs per full SM slot
int g_sm_slots = 1;           // SM slots per device
std::atomic<bool> g_initialized{false};
std::once_flag g_init_once;
CUresult g_init_result = CUDA_ERROR_NOT_INITIALIZED;

void init_robust_mutex(pthread_mutex_t* m) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
}

long env_long(const char* name, long def, long lo, long hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return def;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (end == v) return def;
  return x < lo ? lo : (x > hi ? hi : x);
}

Config* read_config() {
  auto* c = new Config();
  c->devices = static_cast<int>(env_long("GPUOS_SIM_DEVICES", 1, 0, kMaxDevices));
  c->sms = static_cast<int>(env_long("GPUOS_SIM_SMS", 132, 1, 100000));
  c->mem_bytes = static_cast<uint64_t>(env_long("GPUOS_SIM_MEM_MIB", 16384, 1, 1L << 30)) << 20;
  if (const char* v = std::getenv("GPUOS_SIM_NS_PER_ITER"); v != nullptr && *v != '\0') {
    double d = std::strtod(v, nullptr);
    if (d >= 0) c->ns_per_iter = d;
  }
  c->timeslice_ns =
      static_cast<uint64_t>(env_long("GPUOS_SIM_TIMESLICE_US", 2000, 10, 10'000'000)) * 1000;
  c->fault_after = env_long("GPUOS_SIM_FAULT_AFTER_LAUNCHES", 0, 0, 1L << 40);
  c->collective_timeout_ns =
      static_cast<uint64_t>(env_long("GPUOS_SIM_COLLECTIVE_TIMEOUT_S", 120, 1, 86400)) * 1'000'000'000;
  c->unmap_delay_ns = static_cast<uint64_t>(env_long("GPUOS_SIM_UNMAP_DELAY_US", 0, 0, 60'000'000)) * 1000;
  c->shm_name = segment_name();
  return c;
}

// Under g_seg->mu: returns the memory of processes that no longer exist.
void reclaim_dead_locked() {
  for (auto& s : g_seg->slots) {
    int32_t pid = s.pid.load();
    if (pid == 0 || !pid_dead(pid)) continue;
    for (int d = 0; d < kMaxDevices; ++d) {
      uint64_t u = s.used[d].exchange(0);
      g_seg->used[d] -= u < g_seg->used[d] ? u : g_seg->used[d];
      s.busy_ns[d].store(0);
    }
    s.pid.store(0);
  }
}

Segment* map_fd(int fd) {
  void* p = mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<Segment*>(p);
}

// Opens or creates the segment. A segment left half-initialised by a creator that crashed, or
// one of an older layout, is unlinked and recreated.
Segment* open_segment(const std::string& name) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      Segment* s = nullptr;
      if (ftruncate(fd, sizeof(Segment)) == 0) s = map_fd(fd);
      close(fd);
      if (s == nullptr) {
        shm_unlink(name.c_str());
        return nullptr;
      }
      s->layout_version = kLayoutVersion;
      s->size = sizeof(Segment);
      init_robust_mutex(&s->mu);
      for (auto& dev : s->engine)
        for (auto& e : dev) init_robust_mutex(&e.mu);
      s->devices = 0;  // totals are set by the first registering process (see init_once)
      s->magic.store(kSegmentMagic, std::memory_order_release);
      return s;
    }
    if (errno != EEXIST) return nullptr;
    fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) continue;  // unlinked meanwhile: retry creating
    struct stat st {};
    Segment* s = nullptr;
    if (fstat(fd, &st) == 0 && st.st_size == static_cast<off_t>(sizeof(Segment))) s = map_fd(fd);
    close(fd);
    if (s != nullptr) {
      for (int i = 0; i < 100 && s->magic.load(std::memory_order_acquire) != kSegmentMagic; ++i)
        sleep_ns(1'000'000);
      if (s->magic.load(std::memory_order_acquire) == kSegmentMagic &&
          s->layout_version == kLayoutVersion && s->size == sizeof(Segment))
        return s;
      munmap(s, sizeof(Segment));
    } else if (attempt < 20) {
      sleep_ns(1'000'000);  // the creator may still be sizing it
      continue;
    }
    shm_unlink(name.c_str());  // stale or foreign layout
  }
  return nullptr;
}

// CUDA_VISIBLE_DEVICES as the real driver reads it: a comma list of indices (or the UUIDs
// cuDeviceGetUuid reports, "GPU-" + 32 hex digits); the list ends at the first entry that names no
// GPU. Unset: every simulated GPU in order.
std::vector<int> visible_devices(int physical) {
  std::vector<int> out;
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (v == nullptr) {
    for (int i = 0; i < physical; ++i) out.push_back(i);
    return out;
  }
  std::string all(v);
  std::size_t pos = 0;
  while (pos <= all.size()) {
    std::size_t comma = all.find(',', pos);
    std::string item = all.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int idx = -1;
    char* end = nullptr;
    long n = std::strtol(item.c_str(), &end, 10);
    if (!item.empty() && end != nullptr && *end == '\0' && n >= 0 && n < physical) {
      idx = static_cast<int>(n);
    } else {
      for (int i = 0; i < physical && idx < 0; ++i) {
        if (item == sim_uuid_text(i)) idx = i;
      }
    }
    if (idx < 0 || std::find(out.begin(), out.end(), idx) != out.end()) break;
    out.push_back(idx);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

CUresult do_init() {
  g_config = read_config();
  g_seg = open_segment(g_config->shm_name);
  if (g_seg == nullptr) return CUDA_ERROR_OPERATING_SYSTEM;
  lock_robust(&g_seg->mu);
  reclaim_dead_locked();
  bool any_alive = false;
  for (auto& s : g_seg->slots) any_alive |= s.pid.load() != 0;
  if (!any_alive) {
    // Nobody else uses the simulated GPU: (re)apply this process's settings and clear any drift.
    g_seg->devices = g_config->devices;
    g_seg->sms = g_config->sms;
    for (int d = 0; d < kMaxDevices; ++d) {
      g_seg->total[d] = d < g_config->devices ? g_config->mem_bytes : 0;
      g_seg->used[d] = 0;
    }
  }
  const int32_t me = getpid();
  for (int i = 0; i < kPidSlots; ++i) {
    if (g_seg->slots[i].pid.load() == 0) {
      // The NVML stand-in reads slots without the lock: fill the slot before naming its pid.
      for (auto& u : g_seg->slots[i].used) u.store(0);
      for (auto& b : g_seg->slots[i].busy_ns) b.store(0);
      timespec now{};
      clock_gettime(CLOCK_REALTIME, &now);  // NVML's timestamps are CPU time in microseconds
      g_seg->slots[i].since_us.store(static_cast<uint64_t>(now.tv_sec) * 1000000u +
                                     static_cast<uint64_t>(now.tv_nsec) / 1000u);
      g_seg->slots[i].pid.store(me);
      g_slot = i;
      break;
    }
  }
  // Devices, SMs and memory size are those of the segment, so all processes agree.
  g_config->physical_devices = g_seg->devices;
  g_config->visible = visible_devices(g_seg->devices);
  g_config->devices = static_cast<int>(g_config->visible.size());
  if (g_seg->sms > 0) g_config->sms = g_seg->sms;
  pthread_mutex_unlock(&g_seg->mu);
  // Slots of kSlotSms SMs, the last one possibly smaller (132 SMs: 16 of 8 and one of 4); a
  // device of more than kMaxSlots * kSlotSms SMs gets wider slots (still a multiple of 8).
  const int per = (g_config->sms + kMaxSlots - 1) / kMaxSlots;
  g_slot_width = per <= kSlotSms ? kSlotSms : (per + kSlotSms - 1) / kSlotSms * kSlotSms;
  g_sm_slots = (g_config->sms + g_slot_width - 1) / g_slot_width;
  return CUDA_SUCCESS;
}

}  // namespace

bool initialized() { return g_initialized.load(std::memory_order_acquire); }

CUresult init_once() {
  std::call_once(g_init_once, [] {
    g_init_result = do_init();
    if (g_init_result == CUDA_SUCCESS) g_initialized.store(true, std::memory_order_release);
  });
  return g_init_result;
}

const Config& config() { return *g_config; }

Segment* shared_segment() { return g_seg; }

CUresult mem_reserve(int dev, uint64_t bytes) {
  dev = physical_device(dev);
  lock_robust(&g_seg->mu);
  if (g_seg->used[dev] + bytes > g_seg->total[dev]) reclaim_dead_locked();
  if (g_seg->used[dev] + bytes > g_seg->total[dev]) {
    pthread_mutex_unlock(&g_seg->mu);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g_seg->used[dev] += bytes;
  if (g_slot >= 0) g_seg->slots[g_slot].used[dev] += bytes;
  pthread_mutex_unlock(&g_seg->mu);
  return CUDA_SUCCESS;
}

void mem_release(int dev, uint64_t bytes) {
  dev = physical_device(dev);
  lock_robust(&g_seg->mu);
  g_seg->used[dev] -= bytes < g_seg->used[dev] ? bytes : g_seg->used[dev];
  if (g_slot >= 0) {
    uint64_t mine = g_seg->slots[g_slot].used[dev].load();
    g_seg->slots[g_slot].used[dev].store(bytes < mine ? mine - bytes : 0);
  }
  pthread_mutex_unlock(&g_seg->mu);
}

void mem_info(int dev, uint64_t* used, uint64_t* total) {
  dev = physical_device(dev);
  lock_robust(&g_seg->mu);
  reclaim_dead_locked();
  *used = g_seg->used[dev];
  *total = g_seg->total[dev];
  pthread_mutex_unlock(&g_seg->mu);
}

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void sleep_ns(uint64_t ns) {
  int64_t deadline = now_ns() + static_cast<int64_t>(ns);
  timespec ts{static_cast<time_t>(deadline / 1'000'000'000),
              static_cast<long>(deadline % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

int slot_width() { return g_slot_width; }

uint64_t all_slots() { return g_sm_slots >= 64 ? ~0ull : (1ull << g_sm_slots) - 1; }

unsigned sms_of(uint64_t slots) {
  unsigned n = 0;
  for (int i = 0; i < g_sm_slots; ++i) {
    if ((slots >> i & 1) == 0) continue;
    n += i + 1 < g_sm_slots ? g_slot_width : g_config->sms - (g_sm_slots - 1) * g_slot_width;
  }
  return n;
}

int physical_device(int dev) {
  const std::vector<int>& v = g_config->visible;
  return dev >= 0 && dev < static_cast<int>(v.size()) ? v[dev] : dev;
}

namespace {

// Takes the mutexes of `slots` in increasing order: two kernels never wait for each other's slots
// in a cycle.
void acquire_slots(Engine* e, uint64_t slots) {
  for (uint64_t m = slots; m != 0; m &= m - 1) {
    Engine& x = e[__builtin_ctzll(m)];
    x.waiters.fetch_add(1);
    lock_robust(&x.mu);
    x.waiters.fetch_sub(1);
    x.handovers.fetch_add(1);
  }
}

// Releases `slots`; with more_to_run, lets a waiter for one of them have the next slice.
void release_slots(Engine* e, uint64_t slots, bool more_to_run) {
  // Highest slot first: a waiter blocked on our lowest slot finds the others free when it wakes.
  uint64_t contested = 0;
  for (int i = 63; i >= 0; --i) {
    if ((slots >> i & 1) == 0) continue;
    pthread_mutex_unlock(&e[i].mu);
    if (e[i].waiters.load() > 0) contested |= 1ull << i;
  }
  if (!more_to_run || contested == 0) return;
  // Mutexes are not fair: give a waiter (another process or stream) the next slice, as the GPU's
  // time-slice scheduler would, but never wait long for one that may have died.
  auto handovers = [&] {
    uint64_t n = 0;
    for (uint64_t m = contested; m != 0; m &= m - 1) n += e[__builtin_ctzll(m)].handovers.load();
    return n;
  };
  uint64_t seen = handovers();
  for (int i = 0; i < 40 && handovers() == seen; ++i) sleep_ns(50'000);
}

void count_busy(int dev, uint64_t ns) {
  if (g_slot >= 0) g_seg->slots[g_slot].busy_ns[dev].fetch_add(ns);  // what NVML reports
}

}  // namespace

void engine_run(int dev, uint64_t slots, uint64_t ns, const std::function<void()>& body) {
  dev = physical_device(dev);
  slots &= all_slots();
  if (slots == 0) slots = all_slots();
  Engine* e = g_seg->engine[dev];
  uint64_t remaining = ns;
  bool body_done = false;
  do {
    acquire_slots(e, slots);
    uint64_t slice = remaining < g_config->timeslice_ns ? remaining : g_config->timeslice_ns;
    if (slice > 0) sleep_ns(slice);
    remaining -= slice;
    count_busy(dev, slice);
    if (remaining == 0 && !body_done) {
      body();  // the kernel's effect happens at its end, while it still owns its SMs
      body_done = true;
    }
    release_slots(e, slots, remaining > 0);
  } while (remaining > 0);
}

void engine_spin(int dev, uint64_t slots, const std::function<bool()>& spin) {
  dev = physical_device(dev);
  slots &= all_slots();
  if (slots == 0) slots = all_slots();
  Engine* e = g_seg->engine[dev];
  constexpr uint64_t kPollNs = 100'000;
  bool spinning = true;
  while (spinning) {
    acquire_slots(e, slots);
    const int64_t start = now_ns();
    // Polls while holding the slots, for at most one time slice, then lets waiters have a turn.
    while ((spinning = spin()) && static_cast<uint64_t>(now_ns() - start) < g_config->timeslice_ns)
      sleep_ns(kPollNs);
    count_busy(dev, static_cast<uint64_t>(now_ns() - start));  // a spinning kernel keeps its SMs busy
    release_slots(e, slots, spinning);
  }
}

}  // namespace dd
