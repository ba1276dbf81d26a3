#include "policies/budget/controller.h"

#include <algorithm>

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

}  // namespace gpuos::policies::budget
