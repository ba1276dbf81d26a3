// The daemon's one monotonic clock reading (CLOCK_MONOTONIC in ns), shared by the event loop, the
// core and the MPS supervisor so their deadlines compare.
#pragma once

#include <time.h>

#include <cstdint>

namespace gpuos::daemon {

inline uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace gpuos::daemon
