#include "interpose/memory_accounting.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace gpuos::interpose {
namespace {

class MemoryAccountingTest : public ::testing::Test {
 protected:
  void SetUp() override { std::memset(&cb_, 0, sizeof(cb_)); }
  gpuos_control_block cb_;
};

TEST_F(MemoryAccountingTest, AllocAndFreeBalance) {
  account_alloc(&cb_, AllocKind::kPointer, 0x1000, 100, 0);
  account_alloc(&cb_, AllocKind::kPointer, 0x2000, 50, 1);
  EXPECT_EQ(cb_.mem_used_bytes, 150u);
  EXPECT_EQ(cb_.mem_used_per_device[0], 100u);
  EXPECT_EQ(cb_.mem_used_per_device[1], 50u);
  account_free(&cb_, AllocKind::kPointer, 0x1000);
  EXPECT_EQ(cb_.mem_used_bytes, 50u);
  EXPECT_EQ(cb_.mem_used_per_device[0], 0u);
  EXPECT_EQ(cb_.mem_peak_bytes, 150u);
  EXPECT_EQ(cb_.alloc_calls, 2u);
  EXPECT_EQ(cb_.free_calls, 1u);
  account_free(&cb_, AllocKind::kPointer, 0x2000);
}

TEST_F(MemoryAccountingTest, UnknownFreeNeverUnderflows) {
  account_free(&cb_, AllocKind::kPointer, 0xdead);
  account_alloc(&cb_, AllocKind::kPointer, 0x3000, 10, 0);
  account_free(&cb_, AllocKind::kPointer, 0x3000);
  account_free(&cb_, AllocKind::kPointer, 0x3000);  // double free: the driver would fail it
  EXPECT_EQ(cb_.mem_used_bytes, 0u);
  EXPECT_EQ(cb_.untracked_frees, 2u);
}

TEST_F(MemoryAccountingTest, PointersAndHandlesAreSeparateKeySpaces) {
  account_alloc(&cb_, AllocKind::kPointer, 7, 1, 0);
  account_alloc(&cb_, AllocKind::kVmmHandle, 7, 2, 0);
  account_free(&cb_, AllocKind::kVmmHandle, 7);
  EXPECT_EQ(cb_.mem_used_bytes, 1u);
  account_free(&cb_, AllocKind::kPointer, 7);
  EXPECT_EQ(cb_.mem_used_bytes, 0u);
}

TEST_F(MemoryAccountingTest, OutOfRangeDeviceIsClampedNotOverflowed) {
  account_alloc(&cb_, AllocKind::kPointer, 0x10, 5, GPUOS_MAX_DEVICES + 3);
  EXPECT_EQ(cb_.mem_used_per_device[0], 5u);
  account_free(&cb_, AllocKind::kPointer, 0x10);
  EXPECT_EQ(cb_.mem_used_per_device[0], 0u);
}

TEST_F(MemoryAccountingTest, ConcurrentThreadsBalance) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t] {
      for (uint64_t i = 0; i < 2000; ++i) {
        uint64_t key = (static_cast<uint64_t>(t) << 32) | (i + 1);
        account_alloc(&cb_, AllocKind::kPointer, key, 64, t);
        account_free(&cb_, AllocKind::kPointer, key);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(cb_.mem_used_bytes, 0u);
  EXPECT_EQ(cb_.alloc_calls, 8000u);
  EXPECT_EQ(cb_.untracked_frees, 0u);
  EXPECT_GE(cb_.mem_peak_bytes, 64u);
}

}  // namespace
}  // namespace gpuos::interpose

namespace gpuos::interpose {
namespace {

TEST(MemoryQuotaTest, ReservationsNeverExceedTheQuota) {
  gpuos_control_block cb;
  std::memset(&cb, 0, sizeof(cb));
  cb.mem_quota_bytes = 1000;
  EXPECT_TRUE(reserve_bytes(&cb, 600));
  EXPECT_FALSE(reserve_bytes(&cb, 401));
  EXPECT_EQ(cb.mem_used_bytes, 600u);
  EXPECT_TRUE(reserve_bytes(&cb, 400));
  cancel_bytes(&cb, 1000);
  EXPECT_EQ(cb.mem_used_bytes, 0u);
  EXPECT_EQ(cb.mem_peak_bytes, 1000u);
  EXPECT_TRUE(reserve_bytes(&cb, 5000, /*enforce_quota=*/false));  // driver-chosen padding
  cancel_bytes(&cb, 5000);
}

TEST(MemoryQuotaTest, ConcurrentReservationsStayWithinQuota) {
  gpuos_control_block cb;
  std::memset(&cb, 0, sizeof(cb));
  cb.mem_quota_bytes = 64 * 100;
  std::atomic<int> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        if (reserve_bytes(&cb, 64)) granted.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(granted.load(), 100);
  EXPECT_EQ(cb.mem_used_bytes, 64u * 100);
  EXPECT_EQ(cb.mem_peak_bytes, 64u * 100);
}

TEST(MemoryQuotaTest, ZeroQuotaMeansUnlimitedButNoOverflow) {
  gpuos_control_block cb;
  std::memset(&cb, 0, sizeof(cb));
  EXPECT_TRUE(reserve_bytes(&cb, UINT64_MAX - 1));
  EXPECT_FALSE(reserve_bytes(&cb, 2));
}

}  // namespace
}  // namespace gpuos::interpose
