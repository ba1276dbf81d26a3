// SPDX-License-Identifier: Apache-2.0
// libgpuos_kv.so (src/kv) over the test stand-in of the interposer's pools (libgpuos_kv_fake.so,
// preloaded: suite KvShim), without any interposer (KvShimNoInterposer: NOT_GOVERNED), and over a
// table it must refuse (KvShimVersion, GPUOS_KV_FAKE_MODE=null or old). ctest runs each suite in
// its own process with its own environment (test/kv/CMakeLists.txt): the shim looks the table up
// once per process.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpuos/kv.h"
#include "gpuos/result_text.h"

namespace {

constexpr uint64_t kMiB = 1ull << 20;

template <typename Fn>
Fn fake_control(const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
  EXPECT_NE(fn, nullptr) << name << ": is libgpuos_kv_fake.so preloaded?";
  return fn;
}

gpuos_kv_pool_options options(uint64_t max_bytes, uint64_t page_bytes = 0, uint64_t chunk_bytes = 0) {
  gpuos_kv_pool_options o{};
  o.abi_version = GPUOS_KV_ABI_VERSION;
  o.size = sizeof(o);
  o.max_bytes = max_bytes;
  o.page_bytes = page_bytes;
  o.chunk_bytes = chunk_bytes;
  return o;
}

gpuos_kv_stats stats_of(gpuos_kv_pool* pool) {
  gpuos_kv_stats s{};
  s.size = sizeof(s);
  EXPECT_EQ(gpuos_kv_stats_get(pool, &s), GPUOS_KV_OK);
  return s;
}

TEST(KvShimTexts, EveryResultHasItsOwnText) {
  EXPECT_EQ(gpuos_kv_abi_version(), GPUOS_KV_ABI_VERSION);
  std::vector<std::string> seen;
  for (int r = GPUOS_KV_OK; r <= GPUOS_KV_ERR_NOT_INITIALIZED; ++r) {
    const std::string text = gpuos_kv_result_text(r);
    EXPECT_EQ(text, gpuos::kv::result_text(r));
    EXPECT_NE(text, "unknown result") << r;
    for (const std::string& other : seen) EXPECT_NE(text, other);
    seen.push_back(text);
  }
  EXPECT_STREQ(gpuos_kv_result_text(GPUOS_KV_ERR_OUT_OF_MEMORY), "out of memory (quota, target or GPU)");
  EXPECT_STREQ(gpuos_kv_result_text(-1), "unknown result");
  EXPECT_STREQ(gpuos_kv_result_text(1000), "unknown result");
}

TEST(KvShim, PoolLifecycleMapsAndUnmapsInChunks) {
  gpuos_kv_pool* pool = nullptr;
  uint64_t base = 0;
  const auto o = options(100 * kMiB, 2 * kMiB, 8 * kMiB);  // rounded up to 104 MiB: 13 chunks
  ASSERT_EQ(gpuos_kv_pool_create(&o, &pool, &base), GPUOS_KV_OK);
  ASSERT_NE(pool, nullptr);
  ASSERT_NE(base, 0u);
  gpuos_kv_stats s = stats_of(pool);
  EXPECT_EQ(s.abi_version, GPUOS_KV_ABI_VERSION);
  EXPECT_EQ(s.base, base);
  EXPECT_EQ(s.reserved_bytes, 104 * kMiB);
  EXPECT_EQ(s.pages, 52u);
  EXPECT_EQ(s.resident_bytes, 0u);

  const uint64_t pages[] = {0, 1, 5, 51};  // chunks 0, 1 and 12
  ASSERT_EQ(gpuos_kv_map(pool, pages, 4), GPUOS_KV_OK);
  EXPECT_EQ(gpuos_kv_is_mapped(pool, 5), 1);
  EXPECT_EQ(gpuos_kv_is_mapped(pool, 6), 0);
  EXPECT_EQ(gpuos_kv_is_mapped(pool, 52), -1);
  s = stats_of(pool);
  EXPECT_EQ(s.mapped_pages, 4u);
  EXPECT_EQ(s.resident_bytes, 24 * kMiB);
  EXPECT_EQ(s.chunks_created, 3u);
  // The memory at the base address is the pool's (host memory in the fake).
  std::memset(reinterpret_cast<void*>(base + 51 * 2 * kMiB), 0x5a, 2 * kMiB);

  // All or nothing: page 6 is not mapped, so page 5 stays mapped too.
  const uint64_t bad[] = {5, 6};
  EXPECT_EQ(gpuos_kv_unmap(pool, bad, 2), GPUOS_KV_ERR_NOT_MAPPED);
  EXPECT_EQ(gpuos_kv_is_mapped(pool, 5), 1);
  const uint64_t out_of_range[] = {1, 52};
  EXPECT_EQ(gpuos_kv_map(pool, out_of_range, 2), GPUOS_KV_ERR_INVALID);

  const uint64_t first_chunk[] = {0, 1};
  ASSERT_EQ(gpuos_kv_unmap(pool, first_chunk, 2), GPUOS_KV_OK);
  s = stats_of(pool);
  EXPECT_EQ(s.mapped_pages, 2u);
  EXPECT_EQ(s.resident_bytes, 16 * kMiB);
  EXPECT_EQ(s.chunks_released, 1u);
  EXPECT_EQ(s.pages_unmapped, 2u);

  EXPECT_EQ(fake_control<uint32_t (*)()>("gpuos_kv_fake_pools")(), 1u);
  EXPECT_EQ(gpuos_kv_pool_destroy(pool), GPUOS_KV_OK);
  EXPECT_EQ(fake_control<uint32_t (*)()>("gpuos_kv_fake_pools")(), 0u);
}

TEST(KvShim, BadArgumentsAreRefusedNotCrashed) {
  gpuos_kv_pool* pool = nullptr;
  EXPECT_EQ(gpuos_kv_pool_create(nullptr, &pool, nullptr), GPUOS_KV_ERR_INVALID);
  auto o = options(64 * kMiB, 3 * kMiB);  // not a multiple of the 2 MiB granularity
  EXPECT_EQ(gpuos_kv_pool_create(&o, &pool, nullptr), GPUOS_KV_ERR_INVALID);
  o = options(64 * kMiB);
  o.size = 8;  // a struct too short for this version
  EXPECT_EQ(gpuos_kv_pool_create(&o, &pool, nullptr), GPUOS_KV_ERR_INVALID);
  EXPECT_EQ(pool, nullptr);
}

TEST(KvShim, QuotaAndTargetRefuseGrowth) {
  auto set_quota = fake_control<void (*)(uint64_t)>("gpuos_kv_fake_set_quota");
  auto set_target = fake_control<void (*)(uint64_t, uint32_t)>("gpuos_kv_fake_set_target");
  auto reset = fake_control<void (*)()>("gpuos_kv_fake_reset");
  gpuos_kv_pool* pool = nullptr;
  const auto o = options(256 * kMiB);  // default pages (2 MiB) and chunks (32 MiB)
  ASSERT_EQ(gpuos_kv_pool_create(&o, &pool, nullptr), GPUOS_KV_OK);
  set_quota(64 * kMiB);
  const uint64_t two_chunks[] = {0, 16};
  ASSERT_EQ(gpuos_kv_map(pool, two_chunks, 2), GPUOS_KV_OK);
  const uint64_t third_chunk[] = {1, 32};  // 1 is in a chunk with memory, 32 is not
  EXPECT_EQ(gpuos_kv_map(pool, third_chunk, 2), GPUOS_KV_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(gpuos_kv_is_mapped(pool, 1), 0);  // all or nothing
  const uint64_t same_chunk[] = {1, 2};
  EXPECT_EQ(gpuos_kv_map(pool, same_chunk, 2), GPUOS_KV_OK);
  set_quota(UINT64_MAX);
  set_target(32 * kMiB, 500);
  EXPECT_EQ(gpuos_kv_map(pool, third_chunk, 2), GPUOS_KV_ERR_OUT_OF_MEMORY);
  reset();
  EXPECT_EQ(gpuos_kv_map(pool, third_chunk, 2), GPUOS_KV_OK);
  EXPECT_EQ(stats_of(pool).resident_bytes, 96 * kMiB);
  EXPECT_EQ(gpuos_kv_pool_destroy(pool), GPUOS_KV_OK);
}

struct PressureSeen {
  std::atomic<int> calls{0};
  std::atomic<uint64_t> target{0};
  std::atomic<uint32_t> deadline_ms{0};
  std::atomic<uint64_t> target_read_inside{0};
};

TEST(KvShim, PressureCallbackTargetAndQueue) {
  auto set_target = fake_control<void (*)(uint64_t, uint32_t)>("gpuos_kv_fake_set_target");
  auto queue = fake_control<uint32_t (*)()>("gpuos_kv_fake_queue");
  auto reset = fake_control<void (*)()>("gpuos_kv_fake_reset");
  uint64_t target = 0;
  uint32_t deadline = 7;
  ASSERT_EQ(gpuos_kv_target(&target, &deadline), GPUOS_KV_OK);
  EXPECT_EQ(target, GPUOS_KV_NO_TARGET);
  ASSERT_EQ(gpuos_kv_target(nullptr, nullptr), GPUOS_KV_OK);  // both outputs optional

  PressureSeen seen;
  auto on_pressure = [](void* user, uint64_t target_bytes, uint32_t deadline_ms) {
    auto* s = static_cast<PressureSeen*>(user);
    uint64_t now = 0;
    gpuos_kv_target(&now, nullptr);  // allowed from the callback
    s->target_read_inside = now;
    s->target = target_bytes;
    s->deadline_ms = deadline_ms;
    s->calls++;
  };
  ASSERT_EQ(gpuos_kv_set_pressure_callback(on_pressure, &seen), GPUOS_KV_OK);
  set_target(40 * kMiB, 250);
  EXPECT_EQ(seen.calls, 1);
  EXPECT_EQ(seen.target, 40 * kMiB);
  EXPECT_EQ(seen.deadline_ms, 250u);
  EXPECT_EQ(seen.target_read_inside, 40 * kMiB);
  ASSERT_EQ(gpuos_kv_target(&target, &deadline), GPUOS_KV_OK);
  EXPECT_EQ(target, 40 * kMiB);
  EXPECT_EQ(deadline, 250u);
  set_target(GPUOS_KV_NO_TARGET, 0);  // lifted
  EXPECT_EQ(seen.calls, 2);
  EXPECT_EQ(seen.target, GPUOS_KV_NO_TARGET);
  ASSERT_EQ(gpuos_kv_set_pressure_callback(nullptr, nullptr), GPUOS_KV_OK);
  set_target(1, 1);
  EXPECT_EQ(seen.calls, 2);  // removed: not called

  ASSERT_EQ(gpuos_kv_report_queue(17), GPUOS_KV_OK);
  EXPECT_EQ(queue(), 17u);
  reset();
}

// The engine's batch slots: forwarded as given; what cannot be a count of slots in use is refused.
TEST(KvShim, ReportSlots) {
  auto slots = fake_control<uint64_t (*)()>("gpuos_kv_fake_slots");
  auto reset = fake_control<void (*)()>("gpuos_kv_fake_reset");
  ASSERT_EQ(gpuos_kv_report_slots(12, 32), GPUOS_KV_OK);
  EXPECT_EQ(slots(), uint64_t{12} << 32 | 32);
  ASSERT_EQ(gpuos_kv_report_slots(0, 1), GPUOS_KV_OK);
  ASSERT_EQ(gpuos_kv_report_slots(GPUOS_KV_MAX_SLOTS, GPUOS_KV_MAX_SLOTS), GPUOS_KV_OK);
  EXPECT_EQ(gpuos_kv_report_slots(33, 32), GPUOS_KV_ERR_INVALID);  // more in use than there are
  EXPECT_EQ(gpuos_kv_report_slots(0, 0), GPUOS_KV_ERR_INVALID);
  EXPECT_EQ(gpuos_kv_report_slots(1, GPUOS_KV_MAX_SLOTS + 1), GPUOS_KV_ERR_INVALID);
  EXPECT_EQ(slots(), uint64_t{GPUOS_KV_MAX_SLOTS} << 32 | GPUOS_KV_MAX_SLOTS) << "refused: unchanged";
  reset();
}

// The engine's phase: steps or admissions, nothing else.
TEST(KvShim, ReportPhase) {
  auto phase = fake_control<uint32_t (*)()>("gpuos_kv_fake_phase");
  auto reset = fake_control<void (*)()>("gpuos_kv_fake_reset");
  ASSERT_EQ(gpuos_kv_report_phase(GPUOS_KV_PHASE_ADMISSION), GPUOS_KV_OK);
  EXPECT_EQ(phase(), GPUOS_KV_PHASE_ADMISSION);
  EXPECT_EQ(gpuos_kv_report_phase(2), GPUOS_KV_ERR_INVALID);
  EXPECT_EQ(phase(), GPUOS_KV_PHASE_ADMISSION) << "refused: unchanged";
  ASSERT_EQ(gpuos_kv_report_phase(GPUOS_KV_PHASE_STEP), GPUOS_KV_OK);
  EXPECT_EQ(phase(), GPUOS_KV_PHASE_STEP);
  reset();
}

// The interposer of the release before report_slots: everything else works, report_slots and
// report_phase are VERSION.
TEST(KvShimBeforeSlots, OnlyTheNewFunctionsAnswerVersion) {
  ASSERT_EQ(gpuos_kv_report_queue(4), GPUOS_KV_OK);
  EXPECT_EQ(gpuos_kv_report_slots(1, 2), GPUOS_KV_ERR_VERSION);
  EXPECT_EQ(gpuos_kv_report_phase(GPUOS_KV_PHASE_STEP), GPUOS_KV_ERR_VERSION);
  uint64_t target = 0;
  EXPECT_EQ(gpuos_kv_target(&target, nullptr), GPUOS_KV_OK);
}

// No interposer in the process: every call answers NOT_GOVERNED (is_mapped -1), nothing crashes.
TEST(KvShimNoInterposer, EverythingIsNotGoverned) {
  ASSERT_EQ(dlsym(RTLD_DEFAULT, GPUOS_KV_GET_INTERFACE_SYMBOL), nullptr) << "run without the fake preloaded";
  gpuos_kv_pool* pool = reinterpret_cast<gpuos_kv_pool*>(0x1);  // must be cleared
  uint64_t base = 0;
  const auto o = options(64 * kMiB);
  EXPECT_EQ(gpuos_kv_pool_create(&o, &pool, &base), GPUOS_KV_ERR_NOT_GOVERNED);
  EXPECT_EQ(pool, nullptr);
  EXPECT_EQ(gpuos_kv_pool_create(nullptr, nullptr, nullptr), GPUOS_KV_ERR_NOT_GOVERNED);
  const uint64_t page = 0;
  EXPECT_EQ(gpuos_kv_map(nullptr, &page, 1), GPUOS_KV_ERR_NOT_GOVERNED);
  EXPECT_EQ(gpuos_kv_unmap(nullptr, &page, 1), GPUOS_KV_ERR_NOT_GOVERNED);
  EXPECT_EQ(gpuos_kv_is_mapped(nullptr, 0), -1);
  gpuos_kv_stats s{};
  s.size = sizeof(s);
  EXPECT_EQ(gpuos_kv_stats_get(nullptr, &s), GPUOS_KV_ERR_NOT_GOVERNED);
  EXPECT_EQ(gpuos_kv_pool_destroy(nullptr), GPUOS_KV_ERR_NOT_GOVERNED);
  uint64_t target = 0;
  uint32_t deadline = 9;
  EXPECT_EQ(gpuos_kv_target(&target, &deadline), GPUOS_KV_ERR_NOT_GOVERNED);
  EXPECT_EQ(target, GPUOS_KV_NO_TARGET);
  EXPECT_EQ(deadline, 0u);
  EXPECT_EQ(gpuos_kv_set_pressure_callback(nullptr, nullptr), GPUOS_KV_ERR_NOT_GOVERNED);
  EXPECT_EQ(gpuos_kv_report_queue(3), GPUOS_KV_ERR_NOT_GOVERNED);
  EXPECT_EQ(gpuos_kv_report_slots(1, 2), GPUOS_KV_ERR_NOT_GOVERNED);
  EXPECT_EQ(gpuos_kv_report_phase(GPUOS_KV_PHASE_STEP), GPUOS_KV_ERR_NOT_GOVERNED);
  EXPECT_STREQ(gpuos_kv_result_text(GPUOS_KV_ERR_NOT_GOVERNED), "not running under gpuos");
}

// An interposer that returns no table for version 1 (GPUOS_KV_FAKE_MODE=null) or one too short
// (=old): VERSION, and the short table's functions are never called.
TEST(KvShimVersion, ATableItCannotUseIsRefused) {
  ASSERT_NE(dlsym(RTLD_DEFAULT, GPUOS_KV_GET_INTERFACE_SYMBOL), nullptr) << "run with the fake preloaded";
  gpuos_kv_pool* pool = nullptr;
  const auto o = options(64 * kMiB);
  EXPECT_EQ(gpuos_kv_pool_create(&o, &pool, nullptr), GPUOS_KV_ERR_VERSION);
  EXPECT_EQ(pool, nullptr);
  EXPECT_EQ(gpuos_kv_report_queue(3), GPUOS_KV_ERR_VERSION);
  EXPECT_EQ(gpuos_kv_report_slots(1, 2), GPUOS_KV_ERR_VERSION);
  EXPECT_EQ(gpuos_kv_report_phase(GPUOS_KV_PHASE_STEP), GPUOS_KV_ERR_VERSION);
  EXPECT_EQ(gpuos_kv_is_mapped(nullptr, 0), -1);
  uint64_t target = 0;
  EXPECT_EQ(gpuos_kv_target(&target, nullptr), GPUOS_KV_ERR_VERSION);
  EXPECT_EQ(target, GPUOS_KV_NO_TARGET);
  EXPECT_EQ(gpuos_kv_abi_version(), GPUOS_KV_ABI_VERSION);
}

}  // namespace
