// SPDX-License-Identifier: Apache-2.0
#include "policies/budget/controller.h"

#include <algorithm>
#include <cmath>

namespace gpuos::policies::budget {

double next_share(const ControllerParams& p, double share, double budget, const Measure& m) {
  const double target = 1.0 + p.target_fraction * (budget - 1.0);
  if (m.recent > 0 && m.recent_p90 > budget) {
    share *= p.decrease;
  } else if (m.window >= p.min_samples && m.window_p99 > target) {
    share *= p.hold_decrease;
  } else if (m.window >= p.min_samples && (share == 0 || m.lent >= p.min_lent)) {
    share += p.increase + p.growth * share;
  } else if (m.window == 0) {
    share *= p.decrease;  // idle: what it proved harmless is stale by the time its load comes back
  }
  if (share < p.increase / 4) share = 0;  // too little to be worth a best-effort tenant's launches
  return std::clamp(share, 0.0, p.max_share);
}

double next_group_share(const ControllerParams& p, double share, double budget, const Measure& m,
                        uint32_t planned_groups, bool settled) {
  if (planned_groups == 0) return next_share(p, share, budget, m);
  const double one = 1.0 / planned_groups;
  const double cap = group_share_cap(p, planned_groups);
  if (share < one - 1e-9) return std::min(next_share(p, share, budget, m), one);
  const double target = 1.0 + p.target_fraction * (budget - 1.0);
  if (m.recent > 0 && m.recent_p90 > budget) {
    share *= p.decrease;
  } else if (m.window >= p.min_samples && m.window_p99 > target) {
    share = share - one >= one - 1e-9 ? share - one : one * p.hold_decrease;
  } else if (settled && m.window >= p.min_samples) {
    share = std::min(share + one, cap);
  }
  share = whole_groups(share, planned_groups);
  if (share < p.increase / 4) share = 0;
  return std::clamp(share, 0.0, cap);
}

double whole_groups(double share, uint32_t planned_groups) {
  if (planned_groups == 0 || share * planned_groups < 1.0 - 1e-9) return share;
  return std::floor(share * planned_groups + 1e-9) / planned_groups;
}

}  // namespace gpuos::policies::budget
