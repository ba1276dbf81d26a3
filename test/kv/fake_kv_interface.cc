// SPDX-License-Identifier: Apache-2.0
// libgpuos_kv_fake.so: a stand-in for the interposer's KV pools, for tests only. Preloaded, it
// exports gpuos_kv_get_interface like libgpuos.so does, with pools over host memory: a pool reserves
// an anonymous mapping (MAP_NORESERVE, so a large range costs nothing until touched), map/unmap
// keep a bitmap of pages and count chunks like the real pools (a chunk's memory is dropped with
// madvise when its last page goes), and the same arguments are refused (2 MiB granularity).
//
// Test-only controls (exported, found with dlsym or ctypes):
//   gpuos_kv_fake_set_target(bytes, deadline_ms)  sets the target and calls the pressure callback
//                                                 on the caller's thread (deterministic);
//   gpuos_kv_fake_set_quota(bytes)                resident bytes of all pools; UINT64_MAX: none;
//   gpuos_kv_fake_queue()                         the last gpuos_kv_report_queue value;
//   gpuos_kv_fake_slots()                         the last gpuos_kv_report_slots values
//                                                 (active << 32 | capacity);
//   gpuos_kv_fake_phase()                         the last gpuos_kv_report_phase value;
//   gpuos_kv_fake_pools()                         pools alive;
//   gpuos_kv_fake_reset()                         no target, no quota, no callback, queue, slots, phase 0.
// GPUOS_KV_FAKE_MODE=null makes gpuos_kv_get_interface return NULL, =old a table of a smaller size
// (both: the shim must answer VERSION), =noslots the table of the release before report_slots
// (every call works but report_slots and report_phase, which answer VERSION).
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "gpuos/kv.h"
#include "gpuos/result_text.h"

struct gpuos_kv_pool {
  uint8_t* memory = nullptr;
  uint64_t reserved_bytes = 0, page_bytes = 0, chunk_bytes = 0, pages = 0;
  std::vector<bool> mapped;              // per page
  std::vector<uint32_t> chunk_mapped;    // mapped pages per chunk
  gpuos_kv_stats stats{};
  uint64_t pages_per_chunk() const { return chunk_bytes / page_bytes; }
};

namespace {

constexpr uint64_t kGranularity = 2ull << 20;

struct FakeState {
  std::mutex mutex;
  std::set<gpuos_kv_pool*> pools;
  uint64_t target = GPUOS_KV_NO_TARGET;
  uint32_t deadline_ms = 0;
  uint64_t quota = UINT64_MAX;
  uint32_t queue = 0;
  uint64_t slots = 0;
  uint32_t phase = 0;
  gpuos_kv_pressure_fn callback = nullptr;
  void* callback_user = nullptr;
};

FakeState& state() {
  static FakeState s;
  return s;
}

uint64_t resident_bytes_locked(const FakeState& s) {
  uint64_t bytes = 0;
  for (const gpuos_kv_pool* pool : s.pools) bytes += pool->stats.resident_bytes;
  return bytes;
}

int pool_create(const gpuos_kv_pool_options* options, gpuos_kv_pool** out, uint64_t* base) {
  if (options == nullptr || out == nullptr) return GPUOS_KV_ERR_INVALID;
  *out = nullptr;
  if (options->abi_version != GPUOS_KV_ABI_VERSION || options->size < sizeof(gpuos_kv_pool_options) ||
      options->flags != 0 || options->device < 0 || options->max_bytes == 0)
    return GPUOS_KV_ERR_INVALID;
  const uint64_t page = options->page_bytes ? options->page_bytes : GPUOS_KV_DEFAULT_PAGE_BYTES;
  const uint64_t chunk = options->chunk_bytes ? options->chunk_bytes : GPUOS_KV_DEFAULT_CHUNK_BYTES;
  if (page % kGranularity != 0 || chunk % page != 0 || options->max_bytes > (1ull << 46))
    return GPUOS_KV_ERR_INVALID;
  const uint64_t reserved = (options->max_bytes + chunk - 1) / chunk * chunk;
  void* memory = mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) return GPUOS_KV_ERR_OUT_OF_MEMORY;
  auto* pool = new gpuos_kv_pool;
  pool->memory = static_cast<uint8_t*>(memory);
  pool->reserved_bytes = reserved;
  pool->page_bytes = page;
  pool->chunk_bytes = chunk;
  pool->pages = reserved / page;
  pool->mapped.assign(pool->pages, false);
  pool->chunk_mapped.assign(reserved / chunk, 0);
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  s.pools.insert(pool);
  *out = pool;
  if (base != nullptr) *base = reinterpret_cast<uintptr_t>(memory);
  return GPUOS_KV_OK;
}

int pool_destroy(gpuos_kv_pool* pool) {
  FakeState& s = state();
  {
    std::lock_guard lock(s.mutex);
    if (s.pools.erase(pool) == 0) return GPUOS_KV_ERR_INVALID;
  }
  munmap(pool->memory, pool->reserved_bytes);
  delete pool;
  return GPUOS_KV_OK;
}

// The pages of a batch, checked against the pool: INVALID for one out of range.
bool pages_in_range(const gpuos_kv_pool* pool, const uint64_t* pages, size_t count) {
  if (count != 0 && pages == nullptr) return false;
  for (size_t i = 0; i < count; ++i)
    if (pages[i] >= pool->pages) return false;
  return true;
}

int map(gpuos_kv_pool* pool, const uint64_t* pages, size_t count) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.pools.count(pool) || !pages_in_range(pool, pages, count)) return GPUOS_KV_ERR_INVALID;
  // Chunks that get memory (a page may appear twice in a batch: count each chunk once).
  std::set<uint64_t> new_chunks;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t chunk = pages[i] / pool->pages_per_chunk();
    if (pool->chunk_mapped[chunk] == 0) new_chunks.insert(chunk);
  }
  const uint64_t growth = new_chunks.size() * pool->chunk_bytes;
  const uint64_t limit = s.quota < s.target ? s.quota : s.target;
  if (resident_bytes_locked(s) + growth > limit) return GPUOS_KV_ERR_OUT_OF_MEMORY;
  uint64_t newly_mapped = 0;
  for (size_t i = 0; i < count; ++i) {
    if (pool->mapped[pages[i]]) continue;
    pool->mapped[pages[i]] = true;
    ++pool->chunk_mapped[pages[i] / pool->pages_per_chunk()];
    ++newly_mapped;
  }
  pool->stats.map_calls++;
  pool->stats.mapped_pages += newly_mapped;
  pool->stats.pages_mapped += newly_mapped;
  pool->stats.resident_bytes += growth;
  pool->stats.chunks_created += new_chunks.size();
  pool->stats.grown_bytes += growth;
  return GPUOS_KV_OK;
}

int unmap(gpuos_kv_pool* pool, const uint64_t* pages, size_t count) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.pools.count(pool) || !pages_in_range(pool, pages, count)) return GPUOS_KV_ERR_INVALID;
  std::set<uint64_t> batch;
  for (size_t i = 0; i < count; ++i) {
    if (!pool->mapped[pages[i]]) return GPUOS_KV_ERR_NOT_MAPPED;  // all or nothing
    if (!batch.insert(pages[i]).second) return GPUOS_KV_ERR_INVALID;  // the same page twice
  }
  for (uint64_t page : batch) {
    pool->mapped[page] = false;
    const uint64_t chunk = page / pool->pages_per_chunk();
    if (--pool->chunk_mapped[chunk] == 0) {
      madvise(pool->memory + chunk * pool->chunk_bytes, pool->chunk_bytes, MADV_DONTNEED);
      pool->stats.resident_bytes -= pool->chunk_bytes;
      pool->stats.chunks_released++;
    }
  }
  pool->stats.mapped_pages -= batch.size();
  pool->stats.pages_unmapped += batch.size();
  return GPUOS_KV_OK;
}

int is_mapped(gpuos_kv_pool* pool, uint64_t page) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.pools.count(pool) || page >= pool->pages) return -1;
  return pool->mapped[page] ? 1 : 0;
}

int stats_get(gpuos_kv_pool* pool, gpuos_kv_stats* out) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.pools.count(pool) || out == nullptr || out->size < 2 * sizeof(uint32_t)) return GPUOS_KV_ERR_INVALID;
  gpuos_kv_stats full = pool->stats;
  full.abi_version = GPUOS_KV_ABI_VERSION;
  full.size = out->size;
  full.base = reinterpret_cast<uintptr_t>(pool->memory);
  full.reserved_bytes = pool->reserved_bytes;
  full.page_bytes = pool->page_bytes;
  full.chunk_bytes = pool->chunk_bytes;
  full.pages = pool->pages;
  const size_t bytes = out->size < sizeof(full) ? out->size : sizeof(full);
  std::memcpy(out, &full, bytes);
  return GPUOS_KV_OK;
}

int target(uint64_t* target_bytes, uint32_t* deadline_ms) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  if (target_bytes != nullptr) *target_bytes = s.target;
  if (deadline_ms != nullptr) *deadline_ms = s.deadline_ms;
  return GPUOS_KV_OK;
}

int set_pressure_callback(gpuos_kv_pressure_fn fn, void* user) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  s.callback = fn;
  s.callback_user = user;
  return GPUOS_KV_OK;
}

int report_queue(uint32_t waiting_requests) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  s.queue = waiting_requests;
  return GPUOS_KV_OK;
}

int report_slots(uint32_t active, uint32_t capacity) {
  if (capacity == 0 || capacity > GPUOS_KV_MAX_SLOTS || active > capacity) return GPUOS_KV_ERR_INVALID;
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  s.slots = uint64_t{active} << 32 | capacity;
  return GPUOS_KV_OK;
}

int report_phase(uint32_t phase) {
  if (phase != GPUOS_KV_PHASE_STEP && phase != GPUOS_KV_PHASE_ADMISSION) return GPUOS_KV_ERR_INVALID;
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  s.phase = phase;
  return GPUOS_KV_OK;
}

const char* result_text(int result) { return gpuos::kv::result_text(result); }

constexpr gpuos_kv_interface kTable = {
    GPUOS_KV_ABI_VERSION, sizeof(gpuos_kv_interface), result_text, pool_create, pool_destroy, map, unmap,
    is_mapped,           stats_get,                   target,      set_pressure_callback,       report_queue,
    report_slots,        report_phase};

// The table of the release before report_slots (GPUOS_KV_FAKE_MODE=noslots).
constexpr gpuos_kv_interface kTableBeforeSlots = {
    GPUOS_KV_ABI_VERSION, offsetof(gpuos_kv_interface, report_slots), result_text, pool_create, pool_destroy, map,
    unmap, is_mapped, stats_get, target, set_pressure_callback, report_queue, nullptr, nullptr};

// The table of an older, shorter ABI (GPUOS_KV_FAKE_MODE=old): its size stops before report_queue.
constexpr gpuos_kv_interface kShortTable = {
    GPUOS_KV_ABI_VERSION, offsetof(gpuos_kv_interface, report_queue), result_text, pool_create, pool_destroy, map,
    unmap, is_mapped, stats_get, target, set_pressure_callback, nullptr, nullptr, nullptr};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) const gpuos_kv_interface* gpuos_kv_get_interface(uint32_t abi_version) {
  const char* mode = std::getenv("GPUOS_KV_FAKE_MODE");
  if (mode != nullptr && std::strcmp(mode, "null") == 0) return nullptr;
  if (mode != nullptr && std::strcmp(mode, "old") == 0) return &kShortTable;
  if (mode != nullptr && std::strcmp(mode, "noslots") == 0) return &kTableBeforeSlots;
  return abi_version == GPUOS_KV_ABI_VERSION ? &kTable : nullptr;
}

__attribute__((visibility("default"))) void gpuos_kv_fake_set_target(uint64_t target_bytes, uint32_t deadline_ms) {
  FakeState& s = state();
  gpuos_kv_pressure_fn fn;
  void* user;
  {
    std::lock_guard lock(s.mutex);
    s.target = target_bytes;
    s.deadline_ms = deadline_ms;
    fn = s.callback;
    user = s.callback_user;
  }
  // Outside the lock: the callback may call gpuos_kv_target and gpuos_kv_stats_get.
  if (fn != nullptr) fn(user, target_bytes, deadline_ms);
}

__attribute__((visibility("default"))) void gpuos_kv_fake_set_quota(uint64_t bytes) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  s.quota = bytes;
}

__attribute__((visibility("default"))) uint32_t gpuos_kv_fake_queue(void) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  return s.queue;
}

__attribute__((visibility("default"))) uint64_t gpuos_kv_fake_slots(void) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  return s.slots;
}

__attribute__((visibility("default"))) uint32_t gpuos_kv_fake_phase(void) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  return s.phase;
}

__attribute__((visibility("default"))) uint32_t gpuos_kv_fake_pools(void) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  return static_cast<uint32_t>(s.pools.size());
}

__attribute__((visibility("default"))) void gpuos_kv_fake_reset(void) {
  FakeState& s = state();
  std::lock_guard lock(s.mutex);
  s.target = GPUOS_KV_NO_TARGET;
  s.deadline_ms = 0;
  s.quota = UINT64_MAX;
  s.queue = 0;
  s.slots = 0;
  s.phase = 0;
  s.callback = nullptr;
  s.callback_user = nullptr;
}

}  // extern "C"
