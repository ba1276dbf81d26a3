// SPDX-License-Identifier: Apache-2.0
#include "interpose/launch_durations.h"

#include <atomic>

namespace gpuos::interpose {
namespace {

// Expected durations by shape: open addressing over a fixed table, written under the sample lock
// (spatial_registry.h: sample_mu), read lock-free. A shape that finds no slot within kProbes of its
// own is not remembered: a lookup on the launch path (an eager program has hundreds of shapes)
// reads at most kProbes slots, even when the table is full.
constexpr int kDurationSlots = 64;
constexpr int kProbes = 8;
struct DurationSlot {
  std::atomic<uint64_t> key{0};
  std::atomic<uint64_t> solo_ns{0};   // moving average of its unpaced timings
  std::atomic<uint64_t> paced_ns{0};  // ... and of its paced ones
};
DurationSlot g_durations[kDurationSlots];
std::atomic<uint64_t> g_typical_ns{0};

DurationSlot* find_slot(uint64_t key, bool insert) {
  for (int i = 0; i < kProbes; ++i) {
    DurationSlot& s = g_durations[(key + static_cast<uint64_t>(i)) % kDurationSlots];
    const uint64_t k = s.key.load(std::memory_order_acquire);
    if (k == key) return &s;
    if (k == 0) {
      if (!insert) return nullptr;
      s.key.store(key, std::memory_order_release);
      return &s;
    }
  }
  return nullptr;
}

void average_in(std::atomic<uint64_t>& avg, uint64_t ns) {
  const uint64_t old = avg.load(std::memory_order_relaxed);
  avg.store(old == 0 ? ns : (3 * old + ns) / 4, std::memory_order_relaxed);
}

}  // namespace

void note_launch_duration(uint64_t key, uint64_t ns, bool paced) {
  if (key == 0 || ns == 0) return;
  if (DurationSlot* s = find_slot(key, true)) average_in(paced ? s->paced_ns : s->solo_ns, ns);
  if (!paced) {
    const uint64_t old = g_typical_ns.load(std::memory_order_relaxed);
    g_typical_ns.store(old == 0 ? ns : (15 * old + ns) / 16, std::memory_order_relaxed);
  }
}

uint64_t typical_launch_ns() { return g_typical_ns.load(std::memory_order_relaxed); }

uint64_t expected_launch_ns(const gpuos_control_block* cb, uint64_t key) {
  return expected_launch_ns(cb, launch_durations(key));
}

uint64_t expected_launch_ns(const gpuos_control_block* cb, const ShapeDurations& timed) {
  if (timed.solo_ns != 0) return timed.solo_ns;
  if (timed.paced_ns != 0) return timed.paced_ns;
  const uint64_t kernels = std::atomic_ref<const uint64_t>(cb->space_timed_kernels).load(std::memory_order_relaxed);
  const uint64_t ns = std::atomic_ref<const uint64_t>(cb->space_timed_ns).load(std::memory_order_relaxed);
  return kernels != 0 && ns / kernels != 0 ? ns / kernels : kDefaultExpectedNs;
}

uint64_t expected_partition_launch_ns(const gpuos_control_block* cb, const ShapeDurations& timed) {
  return timed.paced_ns != 0 ? timed.paced_ns : expected_launch_ns(cb, timed);
}

ShapeDurations launch_durations(uint64_t key) {
  const DurationSlot* s = find_slot(key, false);
  if (s == nullptr) return {};
  return {s->solo_ns.load(std::memory_order_relaxed), s->paced_ns.load(std::memory_order_relaxed)};
}

void TEST_reset_launch_durations() {
  g_typical_ns.store(0);
  for (DurationSlot& s : g_durations) {
    s.key.store(0);
    s.solo_ns.store(0);
    s.paced_ns.store(0);
  }
}

}  // namespace gpuos::interpose
