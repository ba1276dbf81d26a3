// SPDX-License-Identifier: Apache-2.0
// SpaceEngine without a Core: planned only with spatial tenants, masks within the GPU's groups.
#include "daemon/core/space_engine.h"

#include <gtest/gtest.h>

#include "common/ipc.h"
#include "engine_tenants.h"

namespace gpuos::daemon {
namespace {

struct SpaceFixture : ::testing::Test {
  std::vector<GpuInfo> info{GpuInfo{0, "g0", "", 32, 80ull << 30, {}, 0}};  // 4 groups of 8 SMs
  GpuMap gpus{info};
  SpaceEngine engine{gpus, info, 8};
  EngineTenants live;
};

TEST_F(SpaceFixture, NoSpatialTenantNothingToPlan) {
  live.add(1);
  slots::SpaceView view;
  EXPECT_FALSE(engine.make_view(live.tenants, slots::Event::kTick, 0, 1, &view));
  EXPECT_EQ(engine.next_ns(), 0u);
}

TEST_F(SpaceFixture, MasksWithinTheGroupsAreWrittenOthersRefused) {
  Tenant& t = live.add(1);
  copy_name(t.space.domain, sizeof(t.space.domain), "d");
  live.add(2);  // time-shared
  slots::SpaceView view;
  ASSERT_TRUE(engine.make_view(live.tenants, slots::Event::kTick, 0, 1, &view));
  EXPECT_EQ(view.tenants.size(), 2u);
  std::string why;
  slots::SpaceActions a;
  a.grants.push_back({2, {0x1}});
  EXPECT_FALSE(engine.check(view, a, &why));  // not in a domain
  a.grants = {{1, {0x10}}};
  EXPECT_FALSE(engine.check(view, a, &why));  // group 4 of 4
  a.grants = {{1, {0x3}}};
  a.next_ns = 77;
  ASSERT_TRUE(engine.check(view, a, &why)) << why;
  engine.apply(live.tenants, view, a, 1);
  EXPECT_EQ(load(t.grants->space_mask[0]), 0x3u);
  EXPECT_EQ(engine.next_ns(), 77u);
  engine.apply_group_cap(t, 1);  // the time gate's Pacing::groups: the highest group only
  EXPECT_EQ(load(t.grants->space_mask[0]), 0x2u);
}

}  // namespace
}  // namespace gpuos::daemon
