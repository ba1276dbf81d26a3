// SPDX-License-Identifier: Apache-2.0
// The sizer's stages (policies/partition/sizer_stages.h), each asked alone: the sizes it starts
// from, which shapes are main, the floor's hold, the limit a returned size is held to, the grid.
#include <gtest/gtest.h>

#include <vector>

#include "policies/partition/sizer_stages.h"

namespace gpuos::policies::partition {
namespace {

constexpr uint64_t kS = 1'000'000'000;

ShapeSamples shape(uint64_t key, std::vector<LatencyPoint> points, uint32_t blocks = 0) {
  ShapeSamples s;
  s.key = key;
  s.points = std::move(points);
  s.blocks = blocks;
  return s;
}

TEST(SizerStages, SizesTheGpuGives) {
  const std::vector<uint32_t> sizes = {8, 16, 24, 32};
  EXPECT_EQ(size_at_or_below(sizes, 24), 24u);
  EXPECT_EQ(size_at_or_below(sizes, 30), 24u) << "not a size: the largest below";
  EXPECT_EQ(size_at_or_below(sizes, 4), 8u) << "below them all: the smallest";
  EXPECT_EQ(current_size(sizes, 24, 0), 24u) << "not sized yet: the ceiling";
  EXPECT_EQ(current_size(sizes, 24, 16), 16u);
  EXPECT_EQ(current_size(sizes, 24, 32), 24u) << "never above the ceiling";
  EXPECT_EQ(current_size(sizes, 24, 12), 24u) << "not a size: the ceiling";
}

TEST(SizerStages, MainShapesByTheirShareOfTheFreshTime) {
  // Shape 1: many short launches; shape 2: few long ones, most of the time; shape 3: a trace.
  const std::vector<ShapeSamples> shapes = {shape(1, {{16, 100, 1'000.0}}), shape(2, {{16, 10, 100'000.0}}),
                                            shape(3, {{16, 2, 1'000.0}}), shape(4, {{24, 50, 1'000.0}})};
  SizerState st;
  MainShapes main = main_shapes(shapes, st, 16, 0.05);
  ASSERT_EQ(main.shapes.size(), 2u);
  EXPECT_EQ(main.shapes[0]->key, 1u);
  EXPECT_EQ(main.shapes[1]->key, 2u) << "rare, but most of the time";
  EXPECT_EQ(main.fresh, (std::vector<uint64_t>{100, 10}));
  EXPECT_FALSE(main.ready(16)) << "shape 2 has 10 fresh samples";
  EXPECT_TRUE(main.ready(10));
  // Fresh: since the sizer moved to the size; a shape with none there is no main shape.
  st.at_move = {{2, 16, 10, 1'000'000.0}};
  main = main_shapes(shapes, st, 16, 0.05);
  ASSERT_EQ(main.shapes.size(), 1u) << "shape 2 has nothing fresh; shape 3 is still 2% of the time";
  EXPECT_EQ(main.shapes[0]->key, 1u);
  EXPECT_FALSE(MainShapes{}.ready(0)) << "no main shape: nothing to judge";
}

TEST(SizerStages, TheFloorsHoldDoublesUpToItsMost) {
  SizerParams p;
  p.hold_ns = 30 * kS;
  p.max_hold_ns = 600 * kS;
  EXPECT_EQ(floor_hold_ns(p, 0), 30 * kS);
  EXPECT_EQ(floor_hold_ns(p, 1), 60 * kS);
  EXPECT_EQ(floor_hold_ns(p, 4), 480 * kS);
  EXPECT_EQ(floor_hold_ns(p, 5), 600 * kS) << "960 s capped";
  EXPECT_EQ(floor_hold_ns(p, 40), 600 * kS);
  p.max_hold_ns = 10 * kS;
  EXPECT_EQ(floor_hold_ns(p, 3), 30 * kS) << "a most below hold_ns: hold_ns";
}

TEST(SizerStages, AReturnedSizeIsHeldToTheSettledSlack) {
  SizerParams p;  // slack 4%, settled_slack 12%
  Reading r;
  r.ref = 100;
  r.measured = 108;
  SizerState st;
  EXPECT_TRUE(over_limit(r, 16, p, st, 0));
  st.floor_sms = 16;
  st.floor_until_ns = 10 * kS;
  EXPECT_FALSE(over_limit(r, 16, p, st, 5 * kS)) << "returned to, held";
  EXPECT_TRUE(over_limit(r, 16, p, st, 10 * kS)) << "its hold expired";
  EXPECT_TRUE(over_limit(r, 24, p, st, 5 * kS)) << "another size";
  r.measured = 113;
  EXPECT_TRUE(over_limit(r, 16, p, st, 5 * kS)) << "a clear regression";
}

TEST(SizerStages, TheGridHoldsOnlyAShapeOfOneBlockPerSm) {
  const std::vector<ShapeSamples> shapes = {shape(1, {}, 0), shape(2, {}, 100), shape(3, {}, 20)};
  MainShapes main;
  for (const ShapeSamples& s : shapes) main.shapes.push_back(&s);
  main.fresh = {1, 1, 1};
  EXPECT_EQ(grid_held(main, 24, 16), 20u) << "20 blocks: one per SM at 24, two on some at 16";
  EXPECT_EQ(grid_held(main, 32, 24), 0u) << "still one per SM at 24";
  EXPECT_EQ(grid_held(main, 16, 8), 0u) << "two per SM already: no step to keep";
}

}  // namespace
}  // namespace gpuos::policies::partition
