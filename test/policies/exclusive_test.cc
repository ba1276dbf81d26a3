// SPDX-License-Identifier: Apache-2.0
// The example policy of docs/ARCHITECTURE.md ("How to add a policy"): `exclusive`, one tenant at a
// time, in turn. Built by name from its config section, as gpuosd builds it.
#include <gtest/gtest.h>

#include "common/config.h"
#include "gate_table.h"
#include "policies/exclusive/exclusive.h"
#include "policies/registry.h"

namespace gpuos::policies {
namespace {

using slots::Event;
using testing::GateTable;
constexpr uint32_t O = GPUOS_GATE_OPEN;
constexpr uint32_t C = GPUOS_GATE_CLOSED;
constexpr uint64_t kMs = 1'000'000;

std::unique_ptr<slots::TimeGate> from_config(const char* text) {
  ConfigResult r = parse_config(text, "t.toml");
  EXPECT_TRUE(r) << r.error;
  PolicySet set;
  std::string why;
  EXPECT_TRUE(make_policies(*r.config, &set, &why)) << why;
  return std::move(set.time_gate);
}

TEST(Exclusive, OneAtATimeInTurn) {
  auto p = from_config("[scheduler]\npolicy = \"exclusive\"\n[policy.exclusive]\nmax_hold_ms = 30\n");
  ASSERT_NE(p, nullptr);
  ASSERT_STREQ(p->name(), "exclusive");
  GateTable g;
  g.add(1, GPUOS_CLASS_BEST_EFFORT);
  g.add(2, GPUOS_CLASS_GUARANTEED);  // classes do not matter to it
  g.add(3, GPUOS_CLASS_BEST_EFFORT);
  g.run(*p, 0);
  EXPECT_EQ(g.gate(1), O);  // nobody active: nobody held back
  EXPECT_EQ(g.gate(2), O);

  g.live[2].busy = true;
  g.run(*p, 1 * kMs, Event::kActivity, 2);
  EXPECT_EQ(g.gate(1), C);
  EXPECT_EQ(g.gate(2), O);
  EXPECT_EQ(g.gate(3), C);
  EXPECT_EQ(g.next_tick_ns, 0u);  // alone: it keeps the GPU as long as it likes

  g.live[3].waiting = true;
  g.run(*p, 2 * kMs, Event::kActivity, 3);
  EXPECT_EQ(g.gate(2), O);
  EXPECT_EQ(g.gate(3), C);
  EXPECT_EQ(g.next_tick_ns, 31 * kMs);  // 30 ms from when it took the GPU
  g.run(*p, 31 * kMs);
  EXPECT_EQ(g.gate(2), C);  // its turn is over while 3 waits
  EXPECT_EQ(g.gate(3), O);

  // The holder goes idle: the next active one, wrapping around to 2.
  g.live[3].waiting = false;
  g.run(*p, 32 * kMs, Event::kActivity, 3);
  EXPECT_EQ(g.gate(2), O);
  EXPECT_EQ(g.gate(3), C);

  // It exits: nobody active, every gate open.
  g.live.erase(2);
  p->on_exit(2);
  g.run(*p, 33 * kMs, Event::kExit, 2);
  EXPECT_EQ(g.gate(1), O);
  EXPECT_EQ(g.gate(3), O);
}

TEST(Exclusive, APinnedTenantIsNeverTheHolder) {
  ExclusivePolicy p(10 * kMs);
  GateTable g;
  g.add(1, GPUOS_CLASS_BEST_EFFORT).pinned = true;
  g.live[1].waiting = true;
  g.live[1].gate = C;
  g.add(2, GPUOS_CLASS_BEST_EFFORT).busy = true;
  g.run(p, 0);
  EXPECT_EQ(p.holder(), 2u);
  EXPECT_EQ(g.gate(2), O);
}

TEST(Exclusive, EachGroupOfGpusTakesItsOwnTurns) {
  ExclusivePolicy p(30 * kMs);
  GateTable g;
  // 1 and 2 on GPU 0, 3 on GPU 1: GPU 1's tenant is nobody's turn but its own.
  g.add(1, GPUOS_CLASS_BEST_EFFORT).busy = true;
  g.live[1].gpus = 0b01;
  g.add(2, GPUOS_CLASS_BEST_EFFORT).waiting = true;
  g.live[2].gpus = 0b01;
  g.add(3, GPUOS_CLASS_BEST_EFFORT).busy = true;
  g.live[3].gpus = 0b10;
  g.run(p, 0);
  EXPECT_EQ(g.gate(1), O);
  EXPECT_EQ(g.gate(2), C);
  EXPECT_EQ(g.gate(3), O);
  g.run(p, 30 * kMs);
  EXPECT_EQ(g.gate(1), C);
  EXPECT_EQ(g.gate(2), O);
  EXPECT_EQ(g.gate(3), O);
  // 4 comes on both GPUs: one group; it waits for its turn, held on both.
  g.add(4, GPUOS_CLASS_BEST_EFFORT).waiting = true;
  g.live[4].gpus = 0b11;
  g.run(p, 31 * kMs, Event::kActivity, 4);
  EXPECT_EQ(g.gate(4), C);
  EXPECT_EQ(g.gate(2), O);  // the holder of the merged group's turn
  EXPECT_EQ(g.gate(3), C);
  // An idle tenant is held while a holder works on one of its GPUs, not otherwise.
  g.add(5, GPUOS_CLASS_BEST_EFFORT).gpus = 0b100;
  g.run(p, 32 * kMs);
  EXPECT_EQ(g.gate(5), O);
}

}  // namespace
}  // namespace gpuos::policies
