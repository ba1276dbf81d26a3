// SPDX-License-Identifier: Apache-2.0
// Which launches the interposer times for right-sizing: one in kSamplePeriod on average, at random
// gaps, so that no periodic launch sequence of an app is timed at the same positions every time.
#include <gtest/gtest.h>

#include <vector>

#include "gpuos/abi.h"
#include "interpose/spatial.h"

namespace gpuos::interpose {
namespace {

// A shape's key never has the top bit (GPUOS_TIMING_KEY_ADMISSION marks a timed admission): half
// of all hashes did, and an engine's steps then read as admissions (and their pacing durations were
// filed under another key).
TEST(SpatialSampling, ShapeKeysLeaveTheAdmissionBitFree) {
  for (uintptr_t fn = 1; fn < 4096; ++fn) {
    LaunchShape shape;
    shape.fn = reinterpret_cast<const void*>(fn * 0x1000 + 0x7f0000000000);
    shape.grid[0] = static_cast<unsigned>(fn % 132 + 1);
    shape.block[0] = 256;
    const uint64_t key = shape_key(shape);
    EXPECT_EQ(key & GPUOS_TIMING_KEY_ADMISSION, 0u) << fn;
    EXPECT_NE(key, 0u);
  }
}

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
