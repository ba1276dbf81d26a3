// SPDX-License-Identifier: Apache-2.0
// The long-launch hold shared by the priority and budget policies (policies/long_launch_hold.h).
#include "policies/long_launch_hold.h"

#include <gtest/gtest.h>

#include "gpuos/abi.h"

namespace gpuos::policies {
namespace {

constexpr uint64_t kMs = 1'000'000;

slots::GateTenant tenant(uint32_t id, uint32_t cls, uint64_t gpus, const char* domain = "") {
  slots::GateTenant t;
  t.id = id;
  t.tenant_class = cls;
  t.gpus = gpus;
  t.space_domain = domain;
  return t;
}

TEST(IdleClock, HoldsFromTheFirstDecisionThatSeesItIdleAfterItWasActive) {
  IdleClock c;
  c.observe(false, 1 * kMs);
  EXPECT_FALSE(c.holding(2 * kMs, 20 * kMs)) << "never active: no pause to protect";
  c.observe(true, 3 * kMs);
  EXPECT_FALSE(c.holding(3 * kMs, 20 * kMs));
  c.observe(false, 5 * kMs);
  c.observe(false, 9 * kMs);  // still idle: the hold counts from when it went idle
  EXPECT_TRUE(c.holding(24 * kMs, 20 * kMs));
  EXPECT_EQ(c.hold_end(20 * kMs), 25 * kMs);
  EXPECT_FALSE(c.holding(25 * kMs, 20 * kMs));
  c.observe(true, 26 * kMs);
  EXPECT_EQ(c.idle_since_ns, 0u);
}

TEST(LongLaunchHold, TheSmallestBoundOfTheHoldersSharingTimeOnItsGpus) {
  const slots::GateTenant be = tenant(9, GPUOS_CLASS_BEST_EFFORT, 0b011);
  const slots::GateTenant a = tenant(1, GPUOS_CLASS_GUARANTEED, 0b001);
  const slots::GateTenant b = tenant(2, GPUOS_CLASS_GUARANTEED, 0b010);
  const slots::GateTenant elsewhere = tenant(3, GPUOS_CLASS_GUARANTEED, 0b100);
  slots::Pacing p = long_launch_hold(be, {{&a, 3000}, {&b, 1000}, {&elsewhere, 10}});
  EXPECT_EQ(p.permille, 1000u) << "the full share: only long launches wait";
  EXPECT_EQ(p.max_kernel_us, 1000u);
  EXPECT_EQ(p.burst_us, 1'000'000u);
  EXPECT_EQ(p.gpus, 0b011u) << "the GPUs it shares with the holders";
  p = long_launch_hold(be, {{&a, 3000}});
  EXPECT_EQ(p.gpus, 0b001u);
  EXPECT_EQ(p.max_kernel_us, 3000u);
  EXPECT_EQ(long_launch_hold(be, {{&elsewhere, 10}}), slots::Pacing{}) << "no GPU in common";
  EXPECT_EQ(long_launch_hold(be, {{&a, 0}}), slots::Pacing{}) << "a holder with no bound holds nothing";
  EXPECT_EQ(long_launch_hold(be, {}), slots::Pacing{});
  const slots::GateTenant unknown = tenant(4, GPUOS_CLASS_GUARANTEED, 0);
  EXPECT_EQ(long_launch_hold(be, {{&unknown, 500}}).gpus, 0u) << "GPUs not known yet: all of them";
}

TEST(LongLaunchHold, AHolderInItsSpaceDomainRunsBesideItNotInTurns) {
  const slots::GateTenant be = tenant(9, GPUOS_CLASS_BEST_EFFORT, 0b1, "mps0");
  const slots::GateTenant same = tenant(1, GPUOS_CLASS_GUARANTEED, 0b1, "mps0");
  const slots::GateTenant timed = tenant(2, GPUOS_CLASS_GUARANTEED, 0b1);
  EXPECT_EQ(long_launch_hold(be, {{&same, 1000}}), slots::Pacing{});
  EXPECT_EQ(long_launch_hold(be, {{&same, 1000}, {&timed, 2000}}).max_kernel_us, 2000u);
  const slots::GateTenant be_timed = tenant(8, GPUOS_CLASS_BEST_EFFORT, 0b1);
  EXPECT_EQ(long_launch_hold(be_timed, {{&same, 1000}}).max_kernel_us, 1000u) << "outside the domain: in turns";
}

}  // namespace
}  // namespace gpuos::policies
