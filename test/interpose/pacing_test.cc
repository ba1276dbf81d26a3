// SPDX-License-Identifier: Apache-2.0
// Pacing of a best-effort tenant (interpose/pacing.h): the token bucket, and the durations it
// expects of each launch shape (launch_durations.h).
#include <gtest/gtest.h>

#include <cstring>

#include "interpose/launch_durations.h"
#include "interpose/launch_phase.h"
#include "interpose/pacing.h"

namespace gpuos::interpose {
namespace {

constexpr uint64_t kUs = 1000, kMs = 1'000'000;

TEST(Pacing, ASharedGpuTimeOfOneFifthSpacesLaunchesFiveTimesTheirLength) {
  // 100 us kernels at a share of 200 per mille, no burst: one every 500 us.
  uint64_t clock = 0, now = 10 * kMs;
  int launched = 0;
  for (uint64_t t = now; t < now + 100 * kMs; t += 10 * kUs) {
    const PaceStep s = pace_step(clock, t, 100 * kUs, 200, 0);
    if (s.wait_ns == 0) {
      clock = s.next_ns;
      ++launched;
    }
  }
  EXPECT_NEAR(launched, 200, 2);  // 100 ms / 500 us
}

TEST(Pacing, ABurstRunsBackToBackThenWaits) {
  // 1 ms of burst at 250 per mille: four 250 us kernels at once (1 ms of GPU time), then the fifth
  // waits for the first one's share of wall time to pass (1 ms).
  const uint64_t now = 50 * kMs;
  uint64_t clock = 0;
  for (int i = 0; i < 4; ++i) {
    const PaceStep s = pace_step(clock, now, 250 * kUs, 250, 1000);
    ASSERT_EQ(s.wait_ns, 0u) << "launch " << i;
    clock = s.next_ns;
  }
  const PaceStep fifth = pace_step(clock, now, 250 * kUs, 250, 1000);
  EXPECT_EQ(fifth.wait_ns, 1 * kMs);
  EXPECT_EQ(pace_step(clock, now + fifth.wait_ns, 250 * kUs, 250, 1000).wait_ns, 0u);
}

TEST(Pacing, AnIdleTenantSavesNoMoreThanOneBurst) {
  // Idle for a second: it may then run one burst (1 ms of GPU time at 500 per mille), not 500 ms.
  uint64_t clock = 0, now = 1000 * kMs;
  int at_once = 0;
  for (;;) {
    const PaceStep s = pace_step(clock, now, 100 * kUs, 500, 1000);
    if (s.wait_ns != 0) break;
    clock = s.next_ns;
    ++at_once;
  }
  EXPECT_EQ(at_once, 10);  // 10 x 100 us
}

TEST(Pacing, OutOfRangeSharesAreClamped) {
  EXPECT_EQ(pace_step(0, 1 * kMs, 100 * kUs, 5000, 0).next_ns, 1 * kMs + 100 * kUs);  // at most the whole GPU
  EXPECT_EQ(pace_step(0, 1 * kMs, 100 * kUs, 0, 0).next_ns, 1 * kMs + 100 * kUs * 1000);  // as 1 per mille
}

TEST(Pacing, OnlyTheDevicesABudgetWorksOnArePaced) {
  EXPECT_TRUE(paced_on(0, 3));         // every device
  EXPECT_TRUE(paced_on(0b01, 0));
  EXPECT_FALSE(paced_on(0b01, 1));     // its other GPU runs unpaced
  EXPECT_TRUE(paced_on(0b01, -1));     // a device not known: paced, the cautious side
  EXPECT_TRUE(paced_on(0b01, 40));     // beyond the word: likewise
}

TEST(LaunchDurations, SoloTimingsArePreferredToPacedOnes) {
  TEST_reset_launch_durations();
  gpuos_control_block cb;
  std::memset(&cb, 0, sizeof(cb));
  EXPECT_EQ(expected_launch_ns(&cb, 7), kDefaultExpectedNs);
  cb.space_timed_kernels = 4;
  cb.space_timed_ns = 40 * kUs;
  EXPECT_EQ(expected_launch_ns(&cb, 7), 10 * kUs) << "the mean of its timed kernels";
  note_launch_duration(7, 900 * kUs, /*paced=*/true);
  EXPECT_EQ(expected_launch_ns(&cb, 7), 900 * kUs);
  note_launch_duration(7, 200 * kUs, /*paced=*/false);
  EXPECT_EQ(expected_launch_ns(&cb, 7), 200 * kUs);
  note_launch_duration(7, 600 * kUs, /*paced=*/false);
  EXPECT_EQ(expected_launch_ns(&cb, 7), 300 * kUs) << "a moving average (3:1)";
  EXPECT_EQ(launch_durations(7).solo_ns, 300 * kUs);
  EXPECT_EQ(launch_durations(7).paced_ns, 900 * kUs);
  EXPECT_EQ(launch_durations(8).solo_ns, 0u) << "a shape never timed";
  // A full table remembers no new shape, and forgets none.
  for (uint64_t k = 100; k < 200; ++k) note_launch_duration(k, 5 * kUs, false);
  EXPECT_EQ(expected_launch_ns(&cb, 7), 300 * kUs);
  EXPECT_EQ(launch_durations(12345).solo_ns, 0u) << "a lookup in a full table (a few slots read)";
  EXPECT_EQ(launch_durations(150).solo_ns, 5 * kUs) << "a shape that found a slot near its own";
  TEST_reset_launch_durations();
}

// On a partition (SM groups) a kernel runs longer than alone on the whole GPU, and its share is of
// the partition's time: the paced timing first (taken there), else as on the whole GPU.
TEST(LaunchDurations, OnAPartitionPacedTimingsArePreferred) {
  TEST_reset_launch_durations();
  gpuos_control_block cb;
  std::memset(&cb, 0, sizeof(cb));
  EXPECT_EQ(expected_partition_launch_ns(&cb, launch_durations(7)), kDefaultExpectedNs);
  note_launch_duration(7, 200 * kUs, /*paced=*/false);
  EXPECT_EQ(expected_partition_launch_ns(&cb, launch_durations(7)), 200 * kUs) << "not timed there yet";
  note_launch_duration(7, 3000 * kUs, /*paced=*/true);  // one SM group of 15
  EXPECT_EQ(expected_partition_launch_ns(&cb, launch_durations(7)), 3000 * kUs);
  EXPECT_EQ(expected_launch_ns(&cb, 7), 200 * kUs) << "time-shared: alone first, as before";
  TEST_reset_launch_durations();
}

// Issue #40 item 2: a budgeted tenant's long launches, learned from its own timings.
TEST(LaunchPhase, ALongLaunchTakesTwiceTheTypicalOneAndHalfAMillisecond) {
  EXPECT_TRUE(long_launch(8 * kMs, 4 * kMs));    // a prefill graph twice a decode step
  EXPECT_FALSE(long_launch(6 * kMs, 4 * kMs));   // a bit longer is a step
  EXPECT_FALSE(long_launch(400 * kUs, 100 * kUs));  // a short kernel among shorter ones: no phase
  EXPECT_TRUE(long_launch(600 * kUs, 100 * kUs));
  EXPECT_FALSE(long_launch(0, 4 * kMs));         // never timed
  EXPECT_FALSE(long_launch(8 * kMs, 0));         // nothing typical yet
}

TEST(LaunchPhase, TheTypicalLaunchIsTheOneTimedMost) {
  TEST_reset_launch_durations();
  EXPECT_EQ(typical_launch_ns(), 0u);
  // Nine decode steps of 4 ms for each 12 ms prefill: typical stays near the step.
  for (int i = 0; i < 200; ++i) {
    note_launch_duration(1, 4 * kMs, false);
    if (i % 9 == 0) note_launch_duration(2, 12 * kMs, false);
  }
  EXPECT_GT(typical_launch_ns(), 4 * kMs);
  EXPECT_LT(typical_launch_ns(), 6 * kMs);
  EXPECT_TRUE(long_launch(launch_durations(2).solo_ns, typical_launch_ns()));
  EXPECT_FALSE(long_launch(launch_durations(1).solo_ns, typical_launch_ns()));
  // Paced timings (a best-effort tenant's) say nothing of what is typical alone.
  const uint64_t before = typical_launch_ns();
  note_launch_duration(3, 100 * kMs, true);
  EXPECT_EQ(typical_launch_ns(), before);
  TEST_reset_launch_durations();
}

}  // namespace
}  // namespace gpuos::interpose
