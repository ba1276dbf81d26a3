// SPDX-License-Identifier: Apache-2.0
// The memory slot: who swaps out or in, and how a tenant's request for room is answered (memory
// oversubscription). See slot.h for the hook table all slots share.
//
// The core carries the decisions out: it holds the victim's gate closed, gives it a slice of its
// own swap pool, writes SWAP_OUT / SWAP_IN into its control block and notes when they are done;
// it answers requests for room. One command at a time is the policy's business: the core sends
// what it is told, to tenants with no command pending (others' actions are rejected).
#pragma once

#include <cstdint>
#include <vector>

#include "slots/slot.h"

namespace gpuos::slots {

// What the memory slot sees of a live tenant.
struct SwapTenant {
  uint32_t id = 0;
  uint32_t device = 0;           // the GPU it holds (most of) its memory on; for a request for room,
                                 // the GPU of the waiting allocation
  bool guaranteed = false;
  bool swappable = false;        // its allocations can move (gpuos run --swap)
  bool resident = true;          // swap state RESIDENT (memory on the GPU)
  bool swapped_out = false;      // swap state SWAPPED_OUT (some or all of its movable memory is out)
  bool command_pending = false;  // a SWAP_OUT / SWAP_IN is being carried out
  bool waiting = false;          // a thread is blocked at its closed gate: it wants to run
  bool signalled = false;        // a signal handler woke a thread blocked in gpuos (at the gate or
                                 // waiting for room): it has a signal to act on (SIGTERM, Ctrl-C)
  bool busy = false;
  bool wants_room = false;       // an allocation of it waits for room (unanswered request)
  bool room_made = false;        // ... and memory was freed since it asked
  uint64_t wanted_bytes = 0;     // ... for an allocation of this size
  bool swap_in_failed = false;   // its last swap-in found no room; needs a victim first
  uint64_t movable_bytes = 0;    // resident bytes a swap-out would move
  uint64_t swapped_bytes = 0;    // bytes a swap-in would bring back
  uint64_t resident_bytes = 0;   // bytes it holds on the GPU now (movable or not), including an
                                 // allocation waiting for room (its bytes are reserved first)
  uint64_t quota_left_bytes = 0; // its memory quota minus what it holds (0: no quota)
  uint64_t borrowed_bytes = 0;   // what it holds beyond its quota (borrowed while there was room)
  uint64_t resident_since_ns = 0;
  uint64_t out_since_ns = 0;        // when its memory started to be out (swapped_out)
  uint64_t no_victim_until_ns = 0;  // a swap-out of it failed: leave it alone until then
  uint64_t pool_largest_free = 0;   // the largest slice its swap pool can give now
  // KV pools (include/gpuos/kv.h): what it can give back by freeing blocks, before any swap.
  int32_t priority = 0;             // gpuos run --priority (higher runs first)
  uint64_t guaranteed_bytes = 0;    // its quota without what it may borrow (0: no quota)
  uint64_t kv_bytes = 0;            // GPU memory its KV pools hold (part of resident_bytes)
  uint32_t kv_queue_depth = 0;      // requests its engine has waiting (tenant-written, clamped)
  bool kv_target_on = false;        // gpuosd set its pools a target ...
  uint64_t kv_target_bytes = 0;     // ... of this many resident bytes
  uint64_t kv_target_since_ns = 0;  // ... at this time (the last change)
  bool kv_target_overdue = false;   // ... and its deadline passed with kv_bytes still above it
};

struct SwapParams {
  std::vector<uint64_t> capacity;  // per GPU: memory tenants may hold (total minus headroom)
  uint64_t quantum_ns = 0;         // a tenant keeps its memory at least this long against peers
  uint64_t margin_bytes = 0;       // made free on top of what is needed (estimates are rough)
  uint64_t kv_hold_ns = 0;         // a KV target stays at least this long before it is raised
};

struct SwapAction {
  // kSetKvTarget: the tenant's KV pools should come down to (or may grow up to) `bytes`, within
  // the deadline; kLiftKvTarget: no target any more (its pools may grow up to its quota).
  enum class Kind { kSwapOut, kSwapIn, kAnswerRetry, kAnswerRefused, kSetKvTarget, kLiftKvTarget };
  Kind kind;
  uint32_t tenant_id;
  uint64_t bytes = 0;  // kSwapOut: how much to move (whole allocations, at least this much);
                       // kSetKvTarget: the target
  uint32_t deadline_ms = 0;  // kSetKvTarget: the time the tenant has to come down to the target
                             // (the policy's kv_deadline_ms); then kv_target_overdue
  bool operator==(const SwapAction&) const = default;
};

struct MemoryView {
  uint64_t now_ns = 0;
  Event event = Event::kTick;
  uint32_t tenant_id = 0;
  SwapParams params;
  std::vector<SwapTenant> tenants;  // every live tenant, in id order
};

struct MemoryActions {
  std::vector<SwapAction> actions;  // carried out in order
};

class MemoryPolicy : public Slot<MemoryView, MemoryActions> {};

}  // namespace gpuos::slots
