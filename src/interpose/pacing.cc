// SPDX-License-Identifier: Apache-2.0
#include "interpose/pacing.h"

#include <algorithm>
#include <atomic>
#include <iterator>

#include "interpose/blocks.h"
#include "interpose/launch_durations.h"
#include "interpose/runtime.h"

namespace gpuos::interpose {
namespace {

// When the next paced launch may go (CLOCK_MONOTONIC): one clock for the process, since the
// share is the process's.
std::atomic<uint64_t> g_next_launch_ns{0};

// Whether a launch on `device` goes to a partition of its GPU (spatial.cc places it on the SMs of
// space_mask); a device not known: whether any of its GPUs has one (the cautious side).
bool on_partition(const gpuos_grant_block* g, LaunchDevice* device) {
  const bool any = std::any_of(std::begin(g->space_mask), std::end(g->space_mask),
                               [](const uint64_t& mask) { return grant_load(mask, std::memory_order_relaxed) != 0; });
  if (!any) return false;  // asks the driver nothing
  const int dev = device->ordinal();
  return dev < 0 || grant_load(g->space_mask[dev], std::memory_order_relaxed) != 0;
}

}  // namespace

bool pace_before_launch(gpuos_control_block* cb, uint64_t key, bool graph, uint32_t pace, LaunchDevice* device) {
  const gpuos_grant_block* g = grants_of(cb);
  // A process on several GPUs is paced only on those a budget works on.
  if (const uint32_t devices = grant_load(g->pace_devices, std::memory_order_relaxed);
      devices != 0 && !paced_on(devices, device->ordinal())) {
    return true;
  }
  const ShapeDurations timed = launch_durations(key);
  const uint64_t expected =
      on_partition(g, device) ? expected_partition_launch_ns(cb, timed) : expected_launch_ns(cb, timed);
  uint64_t waited_from = 0;
  const uint32_t max_us = grant_load(g->pace_max_kernel_us, std::memory_order_relaxed);
  // A graph never timed may hold a whole batch's work: long until its first launch, made while
  // the guaranteed tenant is idle, is timed (a budget times graph launches whenever it can).
  const bool untimed_graph = graph && timed.solo_ns == 0 && timed.paced_ns == 0;
  if (max_us != 0 && (untimed_graph || expected > uint64_t{max_us} * 1000u)) {
    // Too long to fit between the guaranteed tenant's steps: wait for it to go idle.
    waited_from = monotonic_ns();
    while ((pace = grant_load(g->pace_permille)) != 0 && gate_binds(cb)) futex_wait(&g->pace_permille, pace, 50);
  }
  // The token bucket (pace_step), its clock shared by the process's threads.
  while (pace != 0) {
    const uint64_t now = monotonic_ns();
    uint64_t next = g_next_launch_ns.load(std::memory_order_acquire);
    const PaceStep step =
        pace_step(next, now, expected, pace, grant_load(g->pace_burst_us, std::memory_order_relaxed));
    if (step.wait_ns != 0) {
      if (!gate_binds(cb)) break;  // gpuosd is gone: nobody paces this tenant any more
      if (waited_from == 0) waited_from = now;
      if (futex_wait_ns(&g->pace_permille, pace, std::min<uint64_t>(step.wait_ns, 50'000'000))) {
        note_signalled(cb);  // the program has a signal to act on once this call returns: let it go
        break;
      }
      pace = grant_load(g->pace_permille);
      continue;
    }
    if (g_next_launch_ns.compare_exchange_weak(next, step.next_ns, std::memory_order_acq_rel)) break;
  }
  if (waited_from == 0) return true;
  std::atomic_ref<uint64_t>(cb->pace_waits).fetch_add(1, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(cb->pace_wait_ns).fetch_add(monotonic_ns() - waited_from, std::memory_order_relaxed);
  // Pacing also ends when the gate closes (the guaranteed tenant is back and lends nothing): the
  // launch then waits at the gate, not goes.
  return !gate_binds(cb) || gate_lets_through(g, grant_load(g->gate), device);
}

void TEST_reset_pacing() { g_next_launch_ns.store(0); }

}  // namespace gpuos::interpose
