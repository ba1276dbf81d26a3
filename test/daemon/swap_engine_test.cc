// SPDX-License-Identifier: Apache-2.0
// SwapEngine without a Core: oversubscription off refuses every request for room; the view and the
// slot's contract with it on.
#include "daemon/core/swap_engine.h"

#include <gtest/gtest.h>

#include <atomic>

#include "engine_tenants.h"

namespace gpuos::daemon {
namespace {

void ask_for_room(Tenant& t, uint64_t bytes) {
  std::atomic_ref<uint64_t>(t.cb->mem_wanted_bytes).store(bytes);
  std::atomic_ref<uint32_t>(t.cb->mem_request_seq).fetch_add(1);
}

struct SwapFixture : ::testing::Test {
  std::vector<GpuInfo> info{GpuInfo{0, "g0", "", 132, 8ull << 30, {}, 0}};
  GpuMap gpus{info};
  EngineTenants live;
};

TEST_F(SwapFixture, OffRefusesEveryRequestForRoomAndAsksNoPolicy) {
  SwapEngine engine(gpus, info, SwapOptions{});
  Tenant& t = live.add(1);
  ask_for_room(t, 1 << 20);
  slots::MemoryView view;
  EXPECT_FALSE(engine.make_view(live.tenants, slots::Event::kActivity, 1, 1, &view));
  EXPECT_EQ(load(t.grants->mem_answer), static_cast<uint32_t>(GPUOS_MEM_REFUSED));
  EXPECT_EQ(load(t.grants->mem_answer_seq), load(t.cb->mem_request_seq));
}

TEST_F(SwapFixture, TheContractRefusesCommandsItCannotCarryOut) {
  SwapOptions o;
  o.pool_bytes = 1 << 30;
  o.prefault = false;
  SwapEngine engine(gpus, info, o);
  live.add(1);
  slots::MemoryView view;
  ASSERT_TRUE(engine.make_view(live.tenants, slots::Event::kTick, 0, 1, &view));
  ASSERT_EQ(view.tenants.size(), 1u);
  std::string why;
  slots::MemoryActions a;
  a.actions.push_back({slots::SwapAction::Kind::kSwapIn, 1});  // nothing of it is out
  EXPECT_FALSE(engine.check(view, a, &why));
  a.actions = {{slots::SwapAction::Kind::kAnswerRetry, 9}};  // no such tenant
  EXPECT_FALSE(engine.check(view, a, &why));
  a.actions.clear();
  EXPECT_TRUE(engine.check(view, a, &why)) << why;
}

}  // namespace
}  // namespace gpuos::daemon
