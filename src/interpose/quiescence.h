// SPDX-License-Identifier: Apache-2.0
// Knowing when no governed call uses the old control block any more, so that re-registration
// (runtime.h) carries each feature's state over only once nothing can still add to it there.
//
// A call that uses the control block enters before it loads g_control and leaves when it is done
// with the block it loaded (ControlBlockUse). Re-registration publishes the new block, retires the
// current period and waits until every user of that period has left. Users count in one of two
// slots, picked by the period's parity: users that enter after the switch count in the other slot
// (and load the new block), so a steady stream of launches, or a launch waiting at the new block's
// closed gate, never holds the wait up.
//
// Why it is exact: enter is a seq_cst load of the period and a seq_cst increment, then the caller's
// seq_cst load of g_control; retire is the seq_cst store of g_control, then a seq_cst increment of
// the period, then seq_cst loads of the slot. If a user's load of g_control missed the new block,
// it precedes that store in the single total order, and so do its read of the period (it picked the
// retired slot) and its increment (the waiter sees it). Acquire/release alone would not order a
// store before a later load (the Dekker pattern); on x86 a seq_cst increment is the same lock xadd
// as a relaxed one, and a seq_cst load a plain mov. Leave is a release decrement: what the user
// wrote to the old block happens before the waiter's load that sees the slot at zero.
//
// Lock-free and syscall-free for users: one load and two atomic read-modify-writes on one cache
// line. The wait spins, then yields, then sleeps briefly, up to a bound.
#pragma once

#include <atomic>
#include <cstdint>

namespace gpuos::interpose {

class Quiescence {
 public:
  constexpr Quiescence() = default;
  Quiescence(const Quiescence&) = delete;
  Quiescence& operator=(const Quiescence&) = delete;

  // A user enters before it loads the shared pointer (seq_cst) and leaves, with the slot enter
  // returned, when done with what it loaded.
  unsigned enter() {
    const unsigned slot = period_.load(std::memory_order_seq_cst) & 1u;
    users_[slot].fetch_add(1, std::memory_order_seq_cst);
    return slot;
  }
  void leave(unsigned slot) { users_[slot].fetch_sub(1, std::memory_order_release); }

  // The writer (one at a time), after it published the new pointer (seq_cst): starts a new period
  // and returns the slot of the one it ended.
  unsigned retire() { return period_.fetch_add(1, std::memory_order_seq_cst) & 1u; }
  // Waits until every user of that slot has left: true, or false once timeout_ns passed first.
  bool wait_quiet(unsigned slot, uint64_t timeout_ns) const;
  // Users still in that slot (for logs and tests).
  uint32_t users(unsigned slot) const { return users_[slot & 1u].load(std::memory_order_seq_cst); }

  // In a child of fork: only the forking thread lives on, so nobody else uses anything.
  void reset_after_fork() {
    users_[0].store(0, std::memory_order_relaxed);
    users_[1].store(0, std::memory_order_relaxed);
  }

 private:
  // One cache line: a user reads the period and bumps a slot in one transfer.
  alignas(64) std::atomic<uint32_t> period_{0};
  std::atomic<uint32_t> users_[2]{};
};

// The users of the tenant's control block (g_control).
extern Quiescence g_control_users;

// Held by a governed call for as long as it uses the control block it loads after entering.
class ControlBlockUse {
 public:
  ControlBlockUse() : slot_(g_control_users.enter()) {}
  ~ControlBlockUse() { g_control_users.leave(slot_); }
  ControlBlockUse(const ControlBlockUse&) = delete;
  ControlBlockUse& operator=(const ControlBlockUse&) = delete;

 private:
  unsigned slot_;
};

}  // namespace gpuos::interpose
