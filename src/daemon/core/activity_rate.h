// SPDX-License-Identifier: Apache-2.0
// How many ACTIVITY messages of one tenant gpuosd decides on: a token bucket per tenant. ACTIVITY is
// a wake-up (the control block's words are authoritative), and each one costs gpuosd a decision
// over every tenant, so a tenant that flips its busy word or its engine's phase in a loop could
// keep gpuosd's loop busy. Beyond the rate, its words are decided on at a tick kDeferNs later, not
// lost. An honest server flips them a few hundred to a few thousand times a second (a busy flip
// per step and pause, two phase changes per admission): far below the rate.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gpuos::daemon {

struct ActivityRate {
  static constexpr double kPerSecond = 20'000;
  static constexpr double kBurst = 2'000;
  static constexpr uint64_t kDeferNs = 1'000'000;  // the tick that decides on what was held back

  double tokens = kBurst;
  uint64_t at_ns = 0;  // when tokens was last brought up to date (0: never)
  uint64_t deferred = 0;  // messages decided on at a later tick, not at once

  // Whether a message at now_ns makes a decision at once.
  bool take(uint64_t now_ns) {
    if (at_ns != 0 && now_ns > at_ns) tokens = std::min(kBurst, tokens + (now_ns - at_ns) * (kPerSecond / 1e9));
    at_ns = std::max(at_ns, now_ns);
    if (tokens >= 1) {
      tokens -= 1;
      return true;
    }
    ++deferred;
    return false;
  }
};

}  // namespace gpuos::daemon
