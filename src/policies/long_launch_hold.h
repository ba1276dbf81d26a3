// SPDX-License-Identifier: Apache-2.0
// Kernel-length awareness of the time gates that guard guaranteed tenants (priority, budget).
// Gating acts at launch time: a best-effort launch started in a guaranteed tenant's short pause (a
// server between two steps) holds its next step for the launch's whole length. So for a while after
// a guaranteed tenant goes idle, the best-effort tenants that share its GPUs' time keep an open gate
// at the full share, but their launches expected to run longer than a bound wait (the mechanism:
// interpose/pacing.h). The policies decide the bound; the hold's bookkeeping is here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "policies/gpu_groups.h"
#include "slots/time_gate.h"

namespace gpuos::policies {

// When a guaranteed tenant went idle, as the decisions see its busy word.
struct IdleClock {
  bool was_active = false;     // at the last decision
  uint64_t idle_since_ns = 0;  // when a decision first saw it idle after it was active (0: active, or never was)

  void observe(bool active, uint64_t now) {
    if (active) {
      idle_since_ns = 0;
    } else if (was_active) {
      idle_since_ns = now;  // decisions follow its busy word: this one is about when it went idle
    }
    was_active = active;
  }
  // Idle for less than hold_ns: perhaps a pause between its steps.
  bool holding(uint64_t now, uint64_t hold_ns) const { return idle_since_ns != 0 && now < hold_end(hold_ns); }
  uint64_t hold_end(uint64_t hold_ns) const { return idle_since_ns + hold_ns; }
};

// The tighter of two bounds on a launch's length, 0 meaning none.
inline uint32_t smaller_bound(uint32_t a, uint32_t b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); }

// A guaranteed tenant in its hold, and how long a best-effort launch beside it may run (0: any).
struct LongLaunchHolder {
  const slots::GateTenant* tenant = nullptr;
  uint32_t max_kernel_us = 0;
};

// The pacing of best-effort tenant `be`'s open gate while `holders` hold: the full share, with
// launches longer than the smallest bound among the holders it shares time with waiting, on the
// GPUs it shares with them only. No pacing (permille 0) when it shares time with none. A holder in
// `be`'s space domain runs beside it on its own SMs, not in turns: it holds nothing.
inline slots::Pacing long_launch_hold(const slots::GateTenant& be, const std::vector<LongLaunchHolder>& holders) {
  uint32_t bound = 0;
  uint64_t gpus = 0;
  bool every_gpu = false;
  for (const LongLaunchHolder& h : holders) {
    const slots::GateTenant& g = *h.tenant;
    if (h.max_kernel_us == 0 || (gpus_or_all(g.gpus) & gpus_or_all(be.gpus)) == 0) continue;
    if (!be.space_domain.empty() && g.space_domain == be.space_domain) continue;
    bound = smaller_bound(bound, h.max_kernel_us);
    every_gpu = every_gpu || g.gpus == 0 || be.gpus == 0;
    gpus |= g.gpus & be.gpus;
  }
  slots::Pacing p;
  if (bound == 0) return p;
  p.permille = 1000;
  p.max_kernel_us = bound;
  p.burst_us = 1'000'000;
  p.gpus = every_gpu ? 0 : gpus;
  return p;
}

}  // namespace gpuos::policies
