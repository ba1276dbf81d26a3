// SPDX-License-Identifier: Apache-2.0
#include "interpose/quiescence.h"

#include <sched.h>

#include "common/clock.h"

namespace gpuos::interpose {

constinit Quiescence g_control_users;

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

bool Quiescence::wait_quiet(unsigned slot, uint64_t timeout_ns) const {
  const std::atomic<uint32_t>& n = users_[slot & 1u];
  // Most users are a launch between two driver calls: microseconds. Spin first, then give the CPU
  // away (the user may be waiting for it on a loaded machine), then sleep: a user can also be
  // blocked in the driver for a long time (a full launch queue, a context being made).
  for (int i = 0; i < 1000; ++i) {
    if (n.load(std::memory_order_seq_cst) == 0) return true;
    cpu_relax();
  }
  const uint64_t deadline = monotonic_ns() + timeout_ns;
  for (unsigned round = 0; n.load(std::memory_order_seq_cst) != 0; ++round) {
    if (monotonic_ns() >= deadline) return false;
    if (round < 100) {
      sched_yield();
    } else {
      timespec pause{0, 200 * 1000};
      nanosleep(&pause, nullptr);
    }
  }
  return true;
}

}  // namespace gpuos::interpose
