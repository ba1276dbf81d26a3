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
