// SPDX-License-Identifier: Apache-2.0
// One reading of a clock in ns for every component (CLOCK_MONOTONIC unless told), so deadlines and
// durations taken in gpuosd, the CLI and the interposer compare. Header-only, libc only: the
// interposer uses it too.
#pragma once

#include <time.h>

#include <cstdint>

namespace gpuos {

inline uint64_t clock_ns(clockid_t clock = CLOCK_MONOTONIC) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec);
}

inline uint64_t monotonic_ns() { return clock_ns(CLOCK_MONOTONIC); }

}  // namespace gpuos
