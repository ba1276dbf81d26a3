// SPDX-License-Identifier: Apache-2.0
// The partition policy's right-sizing of a guaranteed spatial tenant (PartitionPolicy::decide): when
// it is sized, and the ceiling it is sized within (its share of its domain's groups on its GPU).
#include <gtest/gtest.h>

#include <vector>

#include "gpuos/abi.h"
#include "policies/partition/partition.h"

namespace gpuos::policies {
namespace {

constexpr uint64_t kMs = 1'000'000;

// 80 SMs in 10 groups of 8; be_reserve_groups (2) are kept for best-effort tenants.
slots::SpaceView view_of(std::vector<slots::SpaceTenant> tenants) {
  slots::SpaceView v;
  v.now_ns = 1000 * kMs;
  v.group_sms = 8;
  v.gpus = {slots::SpaceGpu{0, 80, {}}};
  v.tenants = std::move(tenants);
  return v;
}
slots::SpaceTenant tenant(uint32_t id, uint32_t cls, const char* domain) {
  slots::SpaceTenant t;
  t.id = id;
  t.name = "t" + std::to_string(id);
  t.tenant_class = cls;
  t.domain = domain;
  t.busy = true;
  return t;
}
// A guaranteed tenant of domain d with 20 samples of one 1 ms shape at `sms` SMs.
slots::SpaceTenant timed_at(uint32_t id, uint32_t sms) {
  slots::SpaceTenant t = tenant(id, GPUOS_CLASS_GUARANTEED, "d");
  t.samples_read = true;
  t.shapes = {slots::ShapeSamples{7, 20, {{sms, 20, 1.0 * kMs}}, 0}};
  return t;
}
const slots::SpaceGrant& grant_of(const slots::SpaceActions& a, uint32_t id) {
  for (const slots::SpaceGrant& g : a.grants) {
    if (g.id == id) return g;
  }
  static const slots::SpaceGrant none;
  return none;
}

TEST(PartitionPolicy, SizedOnlyBesideABestEffortTenantOfItsDomain) {
  PartitionPolicy alone{PartitionParams{}};
  EXPECT_EQ(grant_of(alone.decide(view_of({timed_at(1, 64)})), 1).sized_sms, 0u);
  PartitionPolicy shared{PartitionParams{}};
  const slots::SpaceActions a = shared.decide(view_of({timed_at(1, 64), tenant(2, GPUOS_CLASS_BEST_EFFORT, "d")}));
  // Its ceiling: the 8 groups the reserve leaves; seen at one size only, it probes one size down.
  EXPECT_EQ(grant_of(a, 1).default_sms, 64u);
  EXPECT_EQ(grant_of(a, 1).sized_sms, 56u);
  PartitionPolicy elsewhere{PartitionParams{}};
  const slots::SpaceActions b = elsewhere.decide(view_of({timed_at(1, 64), tenant(2, GPUOS_CLASS_BEST_EFFORT, "e")}));
  EXPECT_EQ(grant_of(b, 1).sized_sms, 0u) << "a best-effort tenant of another domain takes none of its SMs";
}

TEST(PartitionPolicy, TheCeilingIsItsShareOfWhatTheOthersDidNotAskFor) {
  PartitionPolicy even{PartitionParams{}};
  const slots::SpaceActions a = even.decide(view_of(
      {timed_at(1, 32), tenant(2, GPUOS_CLASS_BEST_EFFORT, "d"), tenant(3, GPUOS_CLASS_GUARANTEED, "d")}));
  EXPECT_EQ(grant_of(a, 1).default_sms, 32u) << "half of 8 groups: another guaranteed tenant asked for no size";
  slots::SpaceTenant asked = tenant(3, GPUOS_CLASS_GUARANTEED, "d");
  asked.asked_sms = 20;  // 3 groups
  PartitionPolicy rest{PartitionParams{}};
  const slots::SpaceActions b = rest.decide(view_of({timed_at(1, 40), tenant(2, GPUOS_CLASS_BEST_EFFORT, "d"), asked}));
  EXPECT_EQ(grant_of(b, 1).default_sms, 40u) << "what the 3 groups asked for leave";
}

}  // namespace
}  // namespace gpuos::policies
