// SPDX-License-Identifier: Apache-2.0
#include "interpose/memory_accounting.h"

#include "interpose/blocks.h"

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
  void SetUp() override {
    std::memset(&blocks_, 0, sizeof(blocks_));
    forget_memory_usage();  // a new block: this process holds nothing in it
  }
  LocalBlocks blocks_;  // the quota is in the grant block, reached through grants_of
  gpuos_control_block& cb_ = blocks_.cb;
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

TEST_F(MemoryAccountingTest, EveryKindIsItsOwnKeySpace) {
  const AllocKind kinds[] = {AllocKind::kPointer, AllocKind::kVmmHandle, AllocKind::kArray,
                             AllocKind::kMipmappedArray, AllocKind::kMallocHeap};
  static_assert(sizeof(kinds) / sizeof(kinds[0]) == kAllocKindCount);
  uint64_t bytes = 1;
  for (AllocKind k : kinds) account_alloc(&cb_, k, 0x42, bytes, 0), bytes *= 10;
  EXPECT_EQ(cb_.mem_used_bytes, 11111u);
  account_free(&cb_, AllocKind::kMallocHeap, 0x42);
  EXPECT_EQ(cb_.mem_used_bytes, 1111u);
  account_free(&cb_, AllocKind::kArray, 0x42);
  EXPECT_EQ(cb_.mem_used_bytes, 1011u);
  account_free(&cb_, AllocKind::kArray, 0x42);  // gone from its own space only
  EXPECT_EQ(cb_.untracked_frees, 1u);
  account_free(&cb_, AllocKind::kMipmappedArray, 0x42);
  account_free(&cb_, AllocKind::kVmmHandle, 0x42);
  account_free(&cb_, AllocKind::kPointer, 0x42);
  EXPECT_EQ(cb_.mem_used_bytes, 0u);
  EXPECT_EQ(cb_.untracked_frees, 1u);
}

TEST_F(MemoryAccountingTest, AKeyCommittedAgainReplacesTheStaleEntry) {
  // The driver handed out a handle gpuos still records (its free went by an unseen path): the old
  // entry's bytes must not stay counted forever.
  account_alloc(&cb_, AllocKind::kArray, 0x77, 300, 1);
  account_alloc(&cb_, AllocKind::kArray, 0x77, 200, 0);
  EXPECT_EQ(cb_.mem_used_bytes, 200u);
  EXPECT_EQ(cb_.mem_used_per_device[0], 200u);
  EXPECT_EQ(cb_.mem_used_per_device[1], 0u);
  account_free(&cb_, AllocKind::kArray, 0x77);
  EXPECT_EQ(cb_.mem_used_bytes, 0u);
  EXPECT_EQ(cb_.mem_used_per_device[0], 0u);
}

TEST_F(MemoryAccountingTest, ImportsAreCountedApartAndByReference) {
  blocks_.grants.mem_quota_bytes = 100;
  account_import(&cb_, 0x5000, 4096);
  account_import(&cb_, 0x5000, 4096);  // opened again: same mapping, one more reference
  account_import(&cb_, 0x9000, 50);
  EXPECT_EQ(cb_.mem_imported_bytes, 4146u);
  EXPECT_EQ(cb_.mem_used_bytes, 0u);  // never the importer's memory, never its quota
  EXPECT_TRUE(reserve_bytes(&cb_, 100));
  cancel_bytes(&cb_, 100);
  account_unimport(&cb_, 0x5000);
  EXPECT_EQ(cb_.mem_imported_bytes, 4146u);  // still open once
  account_unimport(&cb_, 0x5000);
  EXPECT_EQ(cb_.mem_imported_bytes, 50u);
  account_unimport(&cb_, 0x5000);  // closed more often than opened: nothing changes
  account_unimport(&cb_, 0x1234);
  EXPECT_EQ(cb_.mem_imported_bytes, 50u);
  account_unimport(&cb_, 0x9000);
  EXPECT_EQ(cb_.mem_imported_bytes, 0u);
  EXPECT_EQ(cb_.untracked_frees, 0u);  // imports are no allocations
  EXPECT_EQ(cb_.alloc_calls, 0u);
  // A pointer imported and one allocated with the same value are different things.
  account_alloc(&cb_, AllocKind::kPointer, 0x5000, 10, 0);
  account_import(&cb_, 0x5000, 7);
  account_free(&cb_, AllocKind::kPointer, 0x5000);
  EXPECT_EQ(cb_.mem_imported_bytes, 7u);
  account_unimport(&cb_, 0x5000);
  EXPECT_EQ(cb_.mem_imported_bytes, 0u);
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
  LocalBlocks blocks{};
  gpuos_control_block& cb = blocks.cb;
  forget_memory_usage();
  blocks.grants.mem_quota_bytes = 1000;
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
  LocalBlocks blocks{};
  gpuos_control_block& cb = blocks.cb;
  forget_memory_usage();
  blocks.grants.mem_quota_bytes = 64 * 100;
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

// Issue #42 (2): the quota check read mem_used_bytes back from the control block, which the tenant
// writes: zeroing it after each allocation got 1024 MiB on a 64 MiB quota. The count is the
// process's own now; the word is only its mirror, rewritten at the next change.
TEST(MemoryQuotaTest, ZeroingTheWordInTheControlBlockGetsNoMoreMemory) {
  LocalBlocks blocks{};
  gpuos_control_block& cb = blocks.cb;
  forget_memory_usage();
  constexpr uint64_t kMiB = 1ull << 20;
  blocks.grants.mem_quota_bytes = 64 * kMiB;
  uint64_t got = 0;
  for (int i = 0; i < 16; ++i) {
    if (reserve_bytes(&cb, 64 * kMiB)) got += 64 * kMiB;
    std::atomic_ref<uint64_t>(cb.mem_used_bytes).store(0);  // the tenant's write
  }
  EXPECT_EQ(got, 64 * kMiB);
  EXPECT_EQ(memory_used(&cb), 64 * kMiB);
  EXPECT_FALSE(reserve_bytes(&cb, 1));
  cancel_bytes(&cb, 32 * kMiB);
  EXPECT_EQ(cb.mem_used_bytes, 32 * kMiB);  // mirrored again
  cancel_bytes(&cb, 32 * kMiB);
  EXPECT_EQ(cb.mem_used_bytes, 0u);
}

// cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE): a context's heap is charged the size set last; growth is
// reserved against the quota first (as the hook does), a smaller heap gives back. Two contexts apart.
TEST(MemoryQuotaTest, TheMallocHeapIsChargedTheSizeSetLast) {
  LocalBlocks blocks{};
  gpuos_control_block& cb = blocks.cb;
  forget_memory_usage();
  blocks.grants.mem_quota_bytes = 100;
  auto set = [&](uint64_t ctx, uint64_t bytes) {
    const uint64_t before = malloc_heap_bytes(ctx);
    if (bytes > before && !reserve_bytes(&cb, bytes - before)) return false;
    set_malloc_heap(&cb, ctx, bytes, 1, before);
    return true;
  };
  EXPECT_TRUE(set(0x1000, 60));
  EXPECT_EQ(cb.mem_used_bytes, 60u);
  EXPECT_EQ(cb.mem_used_per_device[1], 60u);
  EXPECT_FALSE(set(0x2000, 41));  // a second context's heap: beyond the quota together
  EXPECT_TRUE(set(0x1000, 90));   // the same context's, larger: only the growth counts
  EXPECT_EQ(cb.mem_used_bytes, 90u);
  EXPECT_TRUE(set(0x1000, 10));
  EXPECT_EQ(cb.mem_used_bytes, 10u);
  EXPECT_EQ(malloc_heap_bytes(0x1000), 10u);
  // Two threads that both read the old size before either set it: the count ends at the last.
  const uint64_t before = malloc_heap_bytes(0x1000);
  ASSERT_TRUE(reserve_bytes(&cb, 30 - before));
  ASSERT_TRUE(reserve_bytes(&cb, 50 - before));
  set_malloc_heap(&cb, 0x1000, 30, 1, before);
  set_malloc_heap(&cb, 0x1000, 50, 1, before);
  EXPECT_EQ(cb.mem_used_bytes, 50u);
  EXPECT_EQ(cb.mem_used_per_device[1], 50u);
  set_malloc_heap(&cb, 0x1000, 0, 1, 50);
  EXPECT_EQ(cb.mem_used_bytes, 0u);
}

TEST(MemoryQuotaTest, ZeroQuotaMeansUnlimitedButNoOverflow) {
  LocalBlocks blocks{};
  gpuos_control_block& cb = blocks.cb;
  forget_memory_usage();
  EXPECT_TRUE(reserve_bytes(&cb, UINT64_MAX - 1));
  EXPECT_FALSE(reserve_bytes(&cb, 2));
}

}  // namespace
}  // namespace gpuos::interpose

namespace gpuos::interpose {
namespace {

CUDA_ARRAY3D_DESCRIPTOR desc(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch,
                             unsigned flags = 0) {
  CUDA_ARRAY3D_DESCRIPTOR a{};
  a.Width = w, a.Height = h, a.Depth = d, a.Format = f, a.NumChannels = ch, a.Flags = flags;
  return a;
}

// cuMemAllocPitch pads rows (to 512 bytes on the H200): what it can take is checked up front.
TEST(PitchEstimateTest, RowsArePaddedToTheAlignment) {
  EXPECT_EQ(pitched_bytes(1, 10, kPitchAlignFloor), 5120u);
  EXPECT_EQ(pitched_bytes(512, 1, 512), 512u);
  EXPECT_EQ(pitched_bytes(513, 2, 512), 2048u);
  EXPECT_EQ(pitched_bytes(128, 1u << 19, 512), 256ull << 20) << "4x what width * height asks";
  EXPECT_EQ(pitched_bytes(0, 10, 512), 0u);
  EXPECT_EQ(pitched_bytes(1000, 3, 1), 3000u);
  EXPECT_EQ(pitched_bytes(UINT64_MAX, 2, 512), UINT64_MAX) << "saturates";
  EXPECT_EQ(pitched_bytes(1ull << 40, 1ull << 40, 512), UINT64_MAX);
}

constexpr uint64_t kMiB = 1ull << 20;

// A tree of graphs: each level's parent and its allocations on device 0, breadth first.
struct Level {
  std::size_t parent;
  std::vector<uint64_t> allocs;
};
GraphFootprint tree_footprint(const std::vector<Level>& levels) {
  std::vector<GraphLevel> tree(levels.size());
  for (std::size_t i = 0; i < levels.size(); ++i) {
    tree[i].parent = levels[i].parent;
    for (uint64_t a : levels[i].allocs) tree[i].pages[0] += graph_pages(a);
  }
  return graph_tree_footprint(tree.data(), tree.size());
}
std::vector<uint64_t> times(int n, uint64_t bytes) { return std::vector<uint64_t>(n, bytes); }

// What an exec makes the H200's graph pool reserve (driver 13.0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_
// CURRENT after one launch, all allocations of a graph live at once): the footprint is never less,
// and equal where the driver packs no tighter than whole pages.
TEST(GraphFootprintTest, CoversWhatTheH200Reserves) {
  struct Case {
    const char* what;
    std::vector<Level> tree;
    uint64_t measured_mib;
    bool exact;
  };
  const Case cases[] = {
      {"1 x 64 MiB", {{0, {64 * kMiB}}}, 64, true},
      {"1 byte", {{0, {1}}}, 32, true},
      {"2 x 20 MiB", {{0, times(2, 20 * kMiB)}}, 64, true},
      {"3 x 17 MiB", {{0, times(3, 17 * kMiB)}}, 64, true},
      {"16 x 1 MiB", {{0, times(16, kMiB)}}, 32, true},
      {"40 x 1 MiB", {{0, times(40, kMiB)}}, 64, false},     // packed below a page each
      {"100 x 3 MiB", {{0, times(100, 3 * kMiB)}}, 320, false},
      {"5 x 31 MiB", {{0, times(5, 31 * kMiB)}}, 160, true},
      {"1 x 100 MiB", {{0, {100 * kMiB}}}, 128, true},
      {"1 x 1000 MiB", {{0, {1000 * kMiB}}}, 1024, true},
      {"2 x 32 MiB", {{0, times(2, 32 * kMiB)}}, 64, true},
      {"child 1 byte", {{0, {}}, {0, {1}}}, 64, true},
      {"child 30 MiB", {{0, {}}, {0, {30 * kMiB}}}, 64, true},
      {"child 64 MiB", {{0, {}}, {0, {64 * kMiB}}}, 96, true},
      {"child 100 MiB", {{0, {}}, {0, {100 * kMiB}}}, 160, true},
      {"child 3 x 17 MiB", {{0, {}}, {0, times(3, 17 * kMiB)}}, 96, true},
      {"10 MiB + child 64 MiB", {{0, {10 * kMiB}}, {0, {64 * kMiB}}}, 128, true},
      {"two children of 20 MiB", {{0, {}}, {0, {20 * kMiB}}, {0, {20 * kMiB}}}, 128, true},
      {"grandchild 20 MiB", {{0, {}}, {0, {}}, {1, {20 * kMiB}}}, 96, true},
  };
  for (const Case& c : cases) {
    const GraphFootprint fp = tree_footprint(c.tree);
    EXPECT_GE(fp.total(), c.measured_mib * kMiB) << c.what;
    if (c.exact) {
      EXPECT_EQ(fp.total(), c.measured_mib * kMiB) << c.what;
    }
    EXPECT_EQ(fp.on(0), fp.total()) << c.what;
  }
  EXPECT_EQ(tree_footprint({{0, {}}, {0, {}}}).total(), 0u) << "a child graph without allocations";
}

TEST(GraphFootprintTest, PerDeviceAndSaturating) {
  GraphLevel tree[2];
  tree[0].pages[1] = graph_pages(1);
  tree[1].parent = 0;
  tree[1].pages[2] = graph_pages(33 * kMiB);
  GraphFootprint fp = graph_tree_footprint(tree, 2);
  EXPECT_EQ(fp.on(0), 0u);
  EXPECT_EQ(fp.on(1), 32 * kMiB);
  EXPECT_EQ(fp.on(2), 96 * kMiB);  // 34 MiB of pages in two chunks, one more as a child
  EXPECT_EQ(fp.on(-1), 0u);
  EXPECT_EQ(fp.on(GPUOS_MAX_DEVICES), 0u);
  EXPECT_EQ(fp.total(), 128 * kMiB);
  tree[0].pages[0] = graph_pages(UINT64_MAX);
  tree[1].pages[0] = UINT64_MAX;
  EXPECT_EQ(graph_tree_footprint(tree, 2).total(), UINT64_MAX) << "saturates: the quota check refuses it";
}

// A footprint of dev0 chunks on device 0 and dev1 on device 1.
GraphFootprint chunks(uint64_t dev0, uint64_t dev1) {
  GraphFootprint fp;
  fp.bytes[0] = dev0 * kGraphChunkBytes;
  fp.bytes[1] = dev1 * kGraphChunkBytes;
  return fp;
}

// An exec's charge lives from instantiation (reserved, then committed) until it is destroyed, and
// then on as retained charge of its devices until a trim shows the driver's pool gave it back.
TEST_F(MemoryAccountingTest, GraphExecChargeIsRetainedUntilThePoolGivesItBack) {
  GraphFootprint fp = chunks(1, 2);
  ASSERT_TRUE(reserve_bytes(&cb_, fp.total()));
  commit_graph_exec(&cb_, 0x77, fp);
  EXPECT_EQ(cb_.mem_used_bytes, 96 * kMiB);
  EXPECT_EQ(cb_.mem_used_per_device[0], 32 * kMiB);
  EXPECT_EQ(cb_.mem_used_per_device[1], 64 * kMiB);
  retire_graph_exec(&cb_, 0x77);
  EXPECT_EQ(cb_.mem_used_bytes, 96 * kMiB) << "destroyed: the pool still has it";
  EXPECT_EQ(graph_retained(0), 32 * kMiB);
  EXPECT_EQ(graph_retained(1), 64 * kMiB);
  EXPECT_EQ(graph_retained_total(), 96 * kMiB);
  retire_graph_exec(&cb_, 0x77);  // unknown now: nothing
  EXPECT_EQ(graph_retained_total(), 96 * kMiB);
  // A trim that left the pool with all of it releases nothing; one that emptied it, all.
  EXPECT_EQ(settle_graph_retained(&cb_, 0, 32 * kMiB, 32 * kMiB), 0u);
  EXPECT_EQ(settle_graph_retained(&cb_, 0, 32 * kMiB, 0), 32 * kMiB);
  EXPECT_EQ(cb_.mem_used_per_device[0], 0u);
  EXPECT_EQ(cb_.mem_used_bytes, 64 * kMiB);
  // An exec retired while a trim was under way keeps its charge: the trim began before it.
  GraphFootprint late = chunks(0, 1);
  ASSERT_TRUE(reserve_bytes(&cb_, late.total()));
  commit_graph_exec(&cb_, 0x88, late);
  retire_graph_exec(&cb_, 0x88);
  EXPECT_EQ(settle_graph_retained(&cb_, 1, 64 * kMiB, 0), 64 * kMiB);
  EXPECT_EQ(graph_retained(1), 32 * kMiB);
  // What the pool still holds (a live allocation) stays charged.
  EXPECT_EQ(settle_graph_retained(&cb_, 1, 32 * kMiB, 40 * kMiB), 0u);
  EXPECT_EQ(settle_graph_retained(&cb_, 1, 32 * kMiB, 0), 32 * kMiB);
  EXPECT_EQ(cb_.mem_used_bytes, 0u);
  EXPECT_EQ(cb_.mem_used_per_device[1], 0u);
  EXPECT_EQ(graph_retained_total(), 0u);
  EXPECT_EQ(settle_graph_retained(&cb_, 99, 1, 0), 0u);
}

// A handle committed again (its destruction went by unseen): the old charge is retained, not lost.
TEST_F(MemoryAccountingTest, GraphExecCommittedAgainRetainsTheOldCharge) {
  GraphFootprint fp = chunks(1, 0);
  ASSERT_TRUE(reserve_bytes(&cb_, 2 * fp.total()));
  commit_graph_exec(&cb_, 0x99, fp);
  commit_graph_exec(&cb_, 0x99, fp);
  EXPECT_EQ(graph_retained(0), 32 * kMiB);
  EXPECT_EQ(cb_.mem_used_bytes, 64 * kMiB);
  retire_graph_exec(&cb_, 0x99);
  EXPECT_EQ(settle_graph_retained(&cb_, 0, 64 * kMiB, 0), 64 * kMiB);
  EXPECT_EQ(cb_.mem_used_bytes, 0u);
}

TEST(ArrayEstimateTest, ElementsTimesChannelsTimesFormat) {
  auto d = desc(1000, 0, 0, CU_AD_FORMAT_FLOAT, 1);  // 1D: height and depth count as 1
  EXPECT_EQ(array_bytes(&d), 4000u);
  d = desc(640, 480, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4);
  EXPECT_EQ(array_bytes(&d), 640u * 480 * 4);
  d = desc(64, 64, 16, CU_AD_FORMAT_HALF, 2);
  EXPECT_EQ(array_bytes(&d), 64u * 64 * 16 * 4);
  d = desc(100, 10, 0, CU_AD_FORMAT_SNORM_INT16X4, 4);
  EXPECT_EQ(array_bytes(&d), 100u * 10 * 8);
  d = desc(100, 10, 0, static_cast<CUarray_format>(0x4242), 2);  // unknown: 4 bytes a channel
  EXPECT_EQ(array_bytes(&d), 100u * 10 * 8);
  d = desc(64, 64, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP);  // six faces
  EXPECT_EQ(array_bytes(&d), 64u * 64 * 6 * 4);
  EXPECT_EQ(array_bytes(nullptr), 0u);
}

TEST(ArrayEstimateTest, VideoAndBlockCompressedFormats) {
  EXPECT_EQ(array_level_bytes(1920, 1080, 0, CU_AD_FORMAT_NV12, 3), 1920u * 1080 * 3 / 2);
  EXPECT_EQ(array_level_bytes(3, 1, 0, CU_AD_FORMAT_NV12, 3), 5u);  // 4.5 bytes: rounded up
  EXPECT_EQ(array_level_bytes(1920, 1080, 0, CU_AD_FORMAT_P010, 3), 1920u * 1080 * 3);
  EXPECT_EQ(array_level_bytes(64, 64, 0, CU_AD_FORMAT_Y416, 4), 64u * 64 * 8);
  EXPECT_EQ(array_level_bytes(64, 64, 0, CU_AD_FORMAT_BC1_UNORM, 4), 16u * 16 * 8);
  EXPECT_EQ(array_level_bytes(65, 63, 0, CU_AD_FORMAT_BC7_UNORM, 4), 17u * 16 * 16);  // partial blocks
  EXPECT_EQ(array_level_bytes(1, 1, 0, CU_AD_FORMAT_BC4_SNORM, 1), 8u);
}

TEST(ArrayEstimateTest, ArraysWithoutTheirOwnMemoryCountNothing) {
  auto d = desc(4096, 4096, 0, CU_AD_FORMAT_FLOAT, 4, CUDA_ARRAY3D_DEFERRED_MAPPING);
  EXPECT_EQ(array_bytes(&d), 0u);
  EXPECT_EQ(mipmapped_array_bytes(&d, 3), 0u);
  d.Flags = CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_SURFACE_LDST;
  EXPECT_EQ(array_bytes(&d), 0u);
  d.Flags = CUDA_ARRAY3D_SURFACE_LDST;
  EXPECT_EQ(array_bytes(&d), 4096u * 4096 * 16);
}

TEST(ArrayEstimateTest, MipmapLevelsHalveButLayersDoNot) {
  auto d = desc(1024, 1024, 0, CU_AD_FORMAT_HALF, 1);
  EXPECT_EQ(mipmapped_array_bytes(&d, 1), 1024u * 1024 * 2);
  EXPECT_EQ(mipmapped_array_bytes(&d, 3), (1024u * 1024 + 512 * 512 + 256 * 256) * 2);
  EXPECT_EQ(mipmapped_array_bytes(&d, 11), 2796202u);  // down to 1 x 1: sum of 4^-k, x2
  d = desc(8, 4, 2, CU_AD_FORMAT_UNSIGNED_INT8, 1);  // 3D: depth halves too, never below 1
  EXPECT_EQ(mipmapped_array_bytes(&d, 4), 8u * 4 * 2 + 4 * 2 * 1 + 2 * 1 * 1 + 1);
  d = desc(16, 16, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP);  // faces do not shrink
  EXPECT_EQ(mipmapped_array_bytes(&d, 2), (16u * 16 + 8 * 8) * 6 * 4);
  d = desc(16, 0, 5, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED);  // 1D layered: 5 layers
  EXPECT_EQ(mipmapped_array_bytes(&d, 3), (16u + 8 + 4) * 5 * 4);
  EXPECT_EQ(mipmapped_array_bytes(&d, 0), 0u);
  EXPECT_EQ(mipmapped_array_bytes(&d, 1000), mipmapped_array_bytes(&d, 64));  // bounded loop
}

TEST(ArrayEstimateTest, HugeDescriptorsSaturateInsteadOfWrapping) {
  auto d = desc(1ull << 40, 1ull << 30, 1ull << 20, CU_AD_FORMAT_FLOAT, 4);
  EXPECT_EQ(array_bytes(&d), UINT64_MAX);
  EXPECT_EQ(mipmapped_array_bytes(&d, 3), UINT64_MAX);
  EXPECT_EQ(array_level_bytes(UINT64_MAX, 3, 1, CU_AD_FORMAT_NV12, 3), UINT64_MAX);
  EXPECT_EQ(array_level_bytes(UINT64_MAX, UINT64_MAX, 1, CU_AD_FORMAT_BC1_UNORM, 4), UINT64_MAX);
  LocalBlocks blocks{};
  gpuos_control_block& cb = blocks.cb;
  forget_memory_usage();
  blocks.grants.mem_quota_bytes = 1ull << 50;  // any quota refuses it
  EXPECT_FALSE(reserve_bytes(&cb, array_bytes(&d)));
}

}  // namespace
}  // namespace gpuos::interpose
