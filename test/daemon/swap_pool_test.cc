// SPDX-License-Identifier: Apache-2.0
// The swap pool's slice allocator.
#include "daemon/core/swap_pool.h"

#include <gtest/gtest.h>

namespace gpuos::daemon {
namespace {

constexpr uint64_t GiB = 1ull << 30;

TEST(SwapSpace, FirstFitAlignedCoalescedAndShrunk) {
  SwapSpace s(10 * GiB);
  auto a = s.allocate(3 * GiB + 1);  // rounded up to 2 MiB
  auto b = s.allocate(4 * GiB);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 3 * GiB + (2u << 20));
  EXPECT_FALSE(s.allocate(4 * GiB));
  s.shrink(*b, 1 * GiB);  // keeps the first GiB, frees the rest
  EXPECT_EQ(s.free_bytes(), 10 * GiB - (3 * GiB + (2u << 20)) - 1 * GiB);
  s.free(*a);
  s.free(*b);
  EXPECT_EQ(s.largest_free(), 10 * GiB);  // everything coalesced again
  s.free(12345);  // unknown offsets change nothing
  EXPECT_EQ(s.free_bytes(), 10 * GiB);
}

}  // namespace
}  // namespace gpuos::daemon
