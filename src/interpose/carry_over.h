// SPDX-License-Identifier: Apache-2.0
// Re-registration after a daemon restart (runtime.h: maintain_daemon_connection) moves the tenant
// from the control block of the daemon that is gone to the block of the new one. Each feature
// carries over what it keeps in the block (counters, gauges, flags) itself, through a CarryOver
// hook defined beside the code that writes those words; carry_over.cc lists the hooks, and the
// re-registration only runs the list, in two phases:
//   1. seed, before the new block is published: words that calls act on as soon as they load the
//      new block, while the old one is still in use;
//   2. carry, once no governed call uses the old block any more (quiescence.h), or the bounded wait
//      for that gave up: the rest. Counters are added, not copied, because the new block already
//      counts what happened since the switch.
// The old block stays mapped (a thread may still hold a pointer into it), so hooks read it there.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "gpuos/abi.h"

namespace gpuos::interpose {

struct CarryOver {
  const char* feature;  // for logs and tests
  void (*seed)(gpuos_control_block* from, gpuos_control_block* to);   // null: nothing to seed
  void (*carry)(gpuos_control_block* from, gpuos_control_block* to);  // null: nothing to carry
};

// Every feature's hook, in the order they run.
std::span<const CarryOver* const> carry_over_hooks();

// The hooks, each defined with its feature.
extern const CarryOver kLaunchCountersCarryOver;  // carry_over.cc: the launch path's and creation counters
extern const CarryOver kGateCarryOver;            // runtime.cc: gate waits
extern const CarryOver kDeviceMapCarryOver;       // runtime.cc: the tenant's device map
extern const CarryOver kMemoryCarryOver;          // memory_accounting.cc: usage, peak, allocation counters
extern const CarryOver kActivityCarryOver;        // activity.cc: busy, in-flight waits
extern const CarryOver kSpatialCarryOver;         // spatial.cc: devices launched on
extern const CarryOver kSwapCarryOver;            // swap.cc: swap words and counters
extern const CarryOver kKvCarryOver;              // kv_pool.cc: KV pool words and counters

// For hooks: adds counter `from` to `to`.
inline void carry_add(uint64_t& from, uint64_t& to) {
  std::atomic_ref<uint64_t>(to).fetch_add(std::atomic_ref<uint64_t>(from).load(), std::memory_order_relaxed);
}

}  // namespace gpuos::interpose
