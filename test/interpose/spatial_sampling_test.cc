// Which launches the interposer times for right-sizing: one in kSamplePeriod on average, at random
// gaps, so that no periodic launch sequence of an app is timed at the same positions every time.
#include <gtest/gtest.h>

#include <vector>

#include "interpose/spatial.h"

namespace gpuos::interpose {
namespace {

TEST(SpatialSampling, GapsAverageThePeriodAndVary) {
  std::vector<int> seen(2 * kSamplePeriod + 1, 0);
  double sum = 0;
  constexpr int kDraws = 200000;
  for (int i = 0; i < kDraws; ++i) {
    const unsigned g = next_sample_gap();
    ASSERT_GE(g, 1u);
    ASSERT_LE(g, 2 * kSamplePeriod - 1);
    ++seen[g];
    sum += g;
  }
  EXPECT_NEAR(sum / kDraws, kSamplePeriod, 0.1);
  for (unsigned g = 1; g <= 2 * kSamplePeriod - 1; ++g) EXPECT_GT(seen[g], kDraws / 30) << "gap " << g;
}

TEST(SpatialSampling, APeriodicSequenceHasEveryPositionTimed) {
  // An app whose launches alternate a long and a short kernel (period 2, as the e2e probe's), and
  // one with a period of 8: every position of the sequence gets timed.
  for (unsigned period : {2u, 8u, 6u}) {
    std::vector<int> timed(period, 0);
    unsigned countdown = next_sample_gap();
    for (unsigned launch = 0; launch < 100000; ++launch) {
      if (--countdown == 0) {
        ++timed[launch % period];
        countdown = next_sample_gap();
      }
    }
    for (unsigned p = 0; p < period; ++p) {
      EXPECT_GT(timed[p], 100000 / static_cast<int>(kSamplePeriod * period) / 2) << "period " << period << " position " << p;
    }
  }
}

}  // namespace
}  // namespace gpuos::interpose
