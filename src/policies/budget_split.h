// SPDX-License-Identifier: Apache-2.0
// How a latency budget B is spent in a spatial domain, where three costs compound on the
// guaranteed tenant's time alone: its partition (fewer SMs than the GPU: the right-sizer's slack),
// MPS's own cost per kernel (about 8-10% of a graph-replayed decode step on the H200, PLATFORM.md;
// its times alone are already under MPS, so its meter cannot see it), and what best-effort tenants
// beside it take from the memory system (what the budget policy's meter sees, and paces). Each gets
// a factor, and their product is B: (1 + slack) x (1 + mps_cost) x interference = B. Both the
// `partition` space policy and the `budget` time policy read it from here, so they cannot spend the
// same part twice. Time-shared (no domain), the whole budget is the meter's.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gpuos::policies {

// The partition gets this share of B - 1 as the right-sizer's slack: compute-bound steps (a
// prefill) slow down in proportion to the SMs taken away, and a server's TTFT p99 amplifies that
// by queueing, so the partition gets the smallest part.
inline constexpr double kBudgetSlackShare = 0.25;

inline double budget_slack(uint32_t max_slowdown_permille) {
  return max_slowdown_permille > 1000 ? kBudgetSlackShare * (max_slowdown_permille / 1000.0 - 1.0) : 0.0;
}

// MPS's cost to one kernel of a client: a fixed start/drain time on the GPU, whatever the kernel's
// length (+0.37 us per kernel fitted over the 1736 kernels of a graph-replayed 8B decode step on the
// H200, bench/results/2026-12-05-mps-cost; PLATFORM.md's probe measured 0.32).
inline constexpr uint64_t kMpsKernelCostNs = 370;

// MPS's cost to a tenant, as a fraction of its GPU time without MPS, from its kernels' mean time
// under MPS (timed_ns over timed_kernels): each of them holds cost_ns of MPS's own, so the cost is
// cost_ns / (mean - cost_ns). The 8B step's kernels (4.92 us under MPS) give 8.1% (7.9% measured);
// the 1B suite server's (3.93 us on an H100) 10.4% (10.6% measured on the H200). 0 with nothing
// timed; at most 1 (kernels no longer than MPS's own part of them).
inline double measured_mps_cost(uint64_t timed_kernels, uint64_t timed_ns, uint64_t cost_ns) {
  if (timed_kernels == 0 || timed_ns == 0) return 0;
  const double mean = static_cast<double>(timed_ns) / static_cast<double>(timed_kernels);
  const double cost = static_cast<double>(cost_ns);
  return mean <= 2 * cost ? 1.0 : cost / (mean - cost);
}

// The slowdown the budget policy's meter may allow a tenant in a spatial domain: what is left of
// B after its partition (when it is confined to one: not when it runs on the whole GPU, alone in
// its domain or planned whole_gpu) and MPS. At most B; at least 1 (then nothing is lent:
// best-effort tenants of its domain are held).
inline double interference_budget(uint32_t max_slowdown_permille, double mps_cost, bool partitioned = true) {
  const double b = max_slowdown_permille / 1000.0;
  const double slack = partitioned ? budget_slack(max_slowdown_permille) : 0.0;
  return std::clamp(b / ((1.0 + slack) * (1.0 + std::max(mps_cost, 0.0))), 1.0, b);
}

}  // namespace gpuos::policies
