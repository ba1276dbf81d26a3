// SPDX-License-Identifier: Apache-2.0
// The right-sizing sample table the interposer writes into a tenant's control block.
#include "interpose/shape_table.h"

#include <gtest/gtest.h>

#include <memory>

namespace gpuos::interpose {
namespace {

const gpuos_shape_latency* find(const gpuos_control_block& cb, uint64_t key) {
  for (const gpuos_shape_latency& e : cb.space_shapes)
    if (e.key == key) return &e;
  return nullptr;
}

TEST(ShapeTable, AccumulatesPerShapeAndSmCountLeavingOutTheFirstSampleOfEach) {
  auto cb = std::make_unique<gpuos_control_block>();
  shape_table_add(cb.get(), 7, 0, 112, 900000);  // the first at 112 SMs (loading the kernel): left out
  shape_table_add(cb.get(), 7, 0, 112, 1000);
  shape_table_add(cb.get(), 7, 0, 112, 3000);
  shape_table_add(cb.get(), 7, 0, 64, 700000);  // the first at 64
  shape_table_add(cb.get(), 7, 0, 64, 5000);
  shape_table_add(cb.get(), 9, 0, 112, 10);
  const gpuos_shape_latency* s = find(*cb, 7);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->launches, 5u);
  EXPECT_EQ(s->points[0].sms, 112u);
  EXPECT_EQ(s->points[0].count, 2u);
  EXPECT_EQ(s->points[0].sum_ns, 4000u);
  EXPECT_EQ(s->points[1].sms, 64u);
  EXPECT_EQ(s->points[1].count, 1u);
  EXPECT_EQ(s->points[1].sum_ns, 5000u);
  EXPECT_EQ(find(*cb, 9)->launches, 1u);
  EXPECT_EQ(find(*cb, 9)->points[0].count, 0u);
  EXPECT_EQ(cb->space_samples, 6u);
  EXPECT_EQ(cb->space_sample_seq % 2, 0u) << "even: no write in progress";
  EXPECT_EQ(cb->space_sample_seq, 12u);
}

TEST(ShapeTable, ANewShapeTakesTheLeastFrequentSlotWithoutItsCount) {
  auto cb = std::make_unique<gpuos_control_block>();
  for (uint64_t k = 1; k <= GPUOS_SPACE_SHAPES; ++k) {
    for (uint64_t i = 0; i < 10 + k; ++i) shape_table_add(cb.get(), k, 0, 112, 100);
  }
  shape_table_add(cb.get(), 100, 0, 104, 100);  // the table is full: shape 1 (11 launches) goes
  EXPECT_EQ(find(*cb, 1), nullptr);
  const gpuos_shape_latency* s = find(*cb, 100);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->launches, 1u) << "a new shape does not inherit the evicted shape's count";
  EXPECT_EQ(s->points[0].sms, 104u);
  EXPECT_EQ(s->points[0].count, 0u);  // its first sample there is left out
  for (int i = 1; i < GPUOS_SPACE_POINTS; ++i) EXPECT_EQ(s->points[i].count, 0u);  // the evicted shape's are gone
  // Frequent shapes keep their slots; rare newcomers take turns in the least frequent one.
  shape_table_add(cb.get(), 101, 0, 104, 100);
  EXPECT_EQ(find(*cb, 100), nullptr);
  EXPECT_NE(find(*cb, 2), nullptr);
}

TEST(ShapeTable, KeepsEachShapesGridBesideItsEntry) {
  auto cb = std::make_unique<gpuos_control_block>();
  for (uint64_t k = 1; k <= GPUOS_SPACE_SHAPES; ++k) {
    for (uint64_t i = 0; i < 10 + k; ++i) shape_table_add(cb.get(), k, static_cast<uint32_t>(k * 8), 112, 100);
  }
  for (int i = 0; i < GPUOS_SPACE_SHAPES; ++i) {
    EXPECT_EQ(cb->space_shape_blocks[i], cb->space_shapes[i].key * 8) << "slot " << i;
  }
  // A graph (no grid) takes the least frequent slot: its block count is not the evicted shape's.
  shape_table_add(cb.get(), 100, 0, 104, 100);
  const gpuos_shape_latency* s = find(*cb, 100);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(cb->space_shape_blocks[s - cb->space_shapes], 0u);
}

bool has_point(const gpuos_shape_latency& s, uint32_t sms) {
  for (const gpuos_latency_point& p : s.points)
    if (p.sms == sms) return true;
  return false;
}

TEST(ShapeTable, ANewSmCountTakesTheLeastSampledPointButNotTheLargestOrSmallest) {
  auto cb = std::make_unique<gpuos_control_block>();
  // As on the H200: sized down from 104 SMs one size at a time, the 104-SM figure (the reference)
  // has the fewest samples when the seventh size comes.
  const uint32_t counts[GPUOS_SPACE_POINTS] = {9, 10, 11, 10, 10, 9};
  for (uint32_t i = 0; i < GPUOS_SPACE_POINTS; ++i) {
    for (uint32_t n = 0; n <= counts[i]; ++n) shape_table_add(cb.get(), 5, 0, 104 - 8 * i, 100);
  }
  shape_table_add(cb.get(), 5, 0, 56, 100);
  shape_table_add(cb.get(), 5, 0, 56, 100);
  const gpuos_shape_latency* s = find(*cb, 5);
  EXPECT_TRUE(has_point(*s, 104)) << "the largest SM count is the reference: kept";
  EXPECT_TRUE(has_point(*s, 64)) << "the smallest before the newcomer: kept";
  EXPECT_FALSE(has_point(*s, 96)) << "the least sampled of the rest goes";
  EXPECT_TRUE(has_point(*s, 56));
  for (const gpuos_latency_point& p : s->points) {
    if (p.sms == 56) {
      EXPECT_EQ(p.count, 1u);
    }
  }
}

}  // namespace
}  // namespace gpuos::interpose
