// SPDX-License-Identifier: Apache-2.0
// The daemon's side of a control block: reading the tenant's latency samples.
#include "daemon/core/control_block.h"

#include <gtest/gtest.h>

namespace gpuos::daemon {
namespace {

using slots::ShapeSamples;

TEST(ControlBlock, ReadsTheLatencySamples) {
  gpuos_control_block cb{};
  cb.space_shapes[2].key = 42;
  cb.space_shapes[2].launches = 30;
  cb.space_shapes[2].points[0] = {112, 10, 10000};
  cb.space_shapes[2].points[3] = {64, 20, 30000};
  cb.space_shape_blocks[2] = 64;
  std::vector<ShapeSamples> s;
  ASSERT_TRUE(read_shape_samples(cb, &s));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].key, 42u);
  EXPECT_EQ(s[0].blocks, 64u);
  ASSERT_EQ(s[0].points.size(), 2u);
  EXPECT_DOUBLE_EQ(s[0].points[1].mean_ns, 1500.0);
  cb.space_sample_seq = 3;  // being written
  EXPECT_FALSE(read_shape_samples(cb, &s));
}

}  // namespace
}  // namespace gpuos::daemon
