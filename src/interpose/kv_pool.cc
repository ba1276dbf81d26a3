// SPDX-License-Identifier: Apache-2.0
// KV pools (include/gpuos/kv.h) inside the tenant: a reserved range per pool, backed chunk by
// chunk with physical memory that is accounted against the tenant's quota and movable by the swap
// path (swap.h: arena_map_at), and the watcher thread that tells the engine about gpuosd's targets.
//
// Not a fast path: one mutex guards every pool. Growing is batched (all of a call's new chunks in
// one arena_map_at) because the driver's cost is per physical allocation.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "gpuos/kv.h"
#include "gpuos/result_text.h"
#include "interpose/activity.h"
#include "interpose/carry_over.h"
#include "interpose/fast_path.h"
#include "interpose/graph_memory.h"
#include "interpose/memory_accounting.h"
#include "interpose/quiescence.h"
#include "interpose/runtime.h"
#include "interpose/swap.h"

struct gpuos_kv_pool {
  uint64_t base = 0;
  uint64_t reserved = 0;  // bytes of the range: a whole number of chunks
  uint64_t page = 0;
  uint64_t chunk = 0;
  int device = 0;
  CUcontext ctx = nullptr;
  std::vector<uint8_t> page_mapped;     // per page: 1 when mapped
  std::vector<uint32_t> chunk_pages;    // per chunk: its mapped pages (> 0: it has memory)
  uint64_t mapped_pages = 0;
  uint64_t resident = 0;  // bytes of chunks with memory
  gpuos_kv_stats counters{};
};

namespace gpuos::interpose {
namespace {

template <typename T>
std::atomic_ref<T> ref(T& x) {
  return std::atomic_ref<T>(x);
}

struct Pools {
  std::mutex mu;  // the pools (a map may hold it while the tenant waits to be swapped back in)
  std::vector<gpuos_kv_pool*> live;
  bool watcher_started = false;
  std::mutex callback_mu;  // apart, so that the watcher never waits for a map
  gpuos_kv_pressure_fn callback = nullptr;
  void* callback_user = nullptr;
};

// Never destroyed: the watcher thread may still run while the process exits.
Pools& pools() {
  static Pools* p = new Pools;
  return *p;
}

bool known(Pools& ps, gpuos_kv_pool* pool) {
  return pool != nullptr && std::find(ps.live.begin(), ps.live.end(), pool) != ps.live.end();
}

// The target gpuosd set this tenant (GPUOS_KV_NO_TARGET: none).
uint64_t current_target(const gpuos_control_block* cb, uint32_t* deadline_ms) {
  const gpuos_grant_block* g = grants_of(cb);
  if (deadline_ms != nullptr) *deadline_ms = grant_load(g->kv_deadline_ms);
  if (grant_load(g->kv_target_on, std::memory_order_acquire) == 0) return GPUOS_KV_NO_TARGET;
  return grant_load(g->kv_target_bytes);
}

uint64_t resident_of_all(Pools& ps) {
  uint64_t sum = 0;
  for (const gpuos_kv_pool* p : ps.live) sum += p->resident;
  return sum;
}

// Tells the engine every change of its target (the callback runs on this thread, without the
// pools' lock, so it may read stats and the target).
void* watcher_main(void*) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  Pools& ps = pools();
  for (;;) {
    gpuos_control_block* cb = g_control.load(std::memory_order_acquire);
    const uint32_t seq = grant_load(grants_of(cb)->kv_target_seq, std::memory_order_acquire);
    if (seq != ref(cb->kv_target_seen_seq).load()) {
      uint32_t deadline = 0;
      const uint64_t target = current_target(cb, &deadline);
      gpuos_kv_pressure_fn fn = nullptr;
      void* user = nullptr;
      {
        std::lock_guard<std::mutex> lock(ps.callback_mu);
        fn = ps.callback;
        user = ps.callback_user;
      }
      if (target == GPUOS_KV_NO_TARGET) {
        log(LogLevel::kInfo, "kv: gpuosd lifted the target of this tenant's pools");
      } else {
        log(LogLevel::kInfo, "kv: gpuosd asks this tenant's pools to hold at most %llu MiB within %u ms",
            static_cast<unsigned long long>(target >> 20), deadline);
      }
      if (fn != nullptr) fn(user, target, deadline);
      ref(cb->kv_target_seen_seq).store(seq, std::memory_order_release);
      continue;
    }
    futex_wait(&grants_of(cb)->kv_target_seq, seq, 200);
  }
}

void start_watcher_locked(Pools& ps) {
  if (ps.watcher_started) return;
  pthread_t thread;
  if (pthread_create(&thread, nullptr, &watcher_main, nullptr) == 0) {
    pthread_detach(thread);
    ps.watcher_started = true;
  } else {
    log(LogLevel::kError, "kv: cannot start the target watcher; the engine is not told of gpuosd's targets");
  }
}

bool multiple_of(uint64_t x, uint64_t of) { return of != 0 && x != 0 && x % of == 0; }

int pool_create(const gpuos_kv_pool_options* o, gpuos_kv_pool** out, uint64_t* base_out) {
  if (o == nullptr || out == nullptr) return GPUOS_KV_ERR_INVALID;
  if (o->abi_version != GPUOS_KV_ABI_VERSION) return GPUOS_KV_ERR_VERSION;
  if (o->size < sizeof(gpuos_kv_pool_options) || o->flags != 0 || o->max_bytes == 0) return GPUOS_KV_ERR_INVALID;
  const GpuosDriverTable* d = real_driver();
  gpuos_control_block* cb = ensure_registered();
  if (d == nullptr || cb == nullptr || refused()) return GPUOS_KV_ERR_NOT_GOVERNED;
  if (!d->cuDevicePrimaryCtxRetain || !d->cuDeviceGet || !d->cuMemGetAllocationGranularity ||
      !d->cuMemAddressReserve || !d->cuMemAddressFree || !d->cuCtxPushCurrent_v2 || !d->cuCtxPopCurrent_v2) {
    return GPUOS_KV_ERR_DRIVER;
  }
  const uint64_t page = o->page_bytes != 0 ? o->page_bytes : GPUOS_KV_DEFAULT_PAGE_BYTES;
  const uint64_t chunk = o->chunk_bytes != 0 ? o->chunk_bytes : std::max<uint64_t>(page, GPUOS_KV_DEFAULT_CHUNK_BYTES);
  if (!multiple_of(chunk, page) || chunk / page > UINT32_MAX) return GPUOS_KV_ERR_INVALID;
  CUdevice dev = 0;
  // Before cuInit every driver call answers NOT_INITIALIZED: say so, not "invalid argument" (the
  // pool does not initialise CUDA itself: that is the engine's choice, e.g. after its fork()s).
  if (const CUresult r = d->cuDeviceGet(&dev, o->device); r != CUDA_SUCCESS) {
    return r == CUDA_ERROR_NOT_INITIALIZED ? GPUOS_KV_ERR_NOT_INITIALIZED : GPUOS_KV_ERR_INVALID;
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  std::size_t gran = 0;
  if (d->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || gran == 0) {
    return GPUOS_KV_ERR_DRIVER;
  }
  if (!multiple_of(page, gran)) return GPUOS_KV_ERR_INVALID;
  if (o->max_bytes > (uint64_t{1} << 50)) return GPUOS_KV_ERR_INVALID;  // 1 PiB: no GPU has that
  const uint64_t chunks = (o->max_bytes + chunk - 1) / chunk;
  auto* pool = new (std::nothrow) gpuos_kv_pool;
  if (pool == nullptr) return GPUOS_KV_ERR_OUT_OF_MEMORY;
  pool->reserved = chunks * chunk;
  pool->page = page;
  pool->chunk = chunk;
  pool->device = dev;
  // The device's primary context (the one CUDA runtimes use). Its retain is kept for the process's
  // life, like the runtime's own.
  if (d->cuDevicePrimaryCtxRetain(&pool->ctx, dev) != CUDA_SUCCESS) {
    delete pool;
    return GPUOS_KV_ERR_DRIVER;
  }
  CUdeviceptr base = 0;
  if (d->cuMemAddressReserve(&base, pool->reserved, chunk, 0, 0) != CUDA_SUCCESS) {
    delete pool;
    return GPUOS_KV_ERR_OUT_OF_MEMORY;
  }
  pool->base = base;
  pool->page_mapped.assign(pool->reserved / page, 0);
  pool->chunk_pages.assign(chunks, 0);
  Pools& ps = pools();
  std::lock_guard<std::mutex> lock(ps.mu);
  ps.live.push_back(pool);
  ref(cb->kv_reserved_bytes).fetch_add(pool->reserved);
  start_watcher_locked(ps);
  *out = pool;
  if (base_out != nullptr) *base_out = base;
  log(LogLevel::kInfo, "kv: pool of %llu MiB reserved on device %d (pages of %llu KiB, chunks of %llu MiB)",
      static_cast<unsigned long long>(pool->reserved >> 20), o->device,
      static_cast<unsigned long long>(page >> 10), static_cast<unsigned long long>(chunk >> 20));
  return GPUOS_KV_OK;
}

// Gives back the memory of `chunks` (indices) of `pool` (pools' lock held).
int release_chunks(const GpuosDriverTable& d, gpuos_control_block* cb, gpuos_kv_pool* pool,
                   const std::vector<uint64_t>& chunks) {
  if (chunks.empty()) return GPUOS_KV_OK;
  std::vector<CUdeviceptr> vas;
  for (uint64_t c : chunks) vas.push_back(pool->base + c * pool->chunk);
  // Each chunk is counted as it goes: on the H200 a batch of 22 GiB took 2.1 s to unmap, and
  // gpuosd, seeing no progress before the deadline, swapped out the engine that was obeying.
  struct Progress {
    gpuos_control_block* cb;
    const std::vector<CUdeviceptr>& vas;
    uint64_t chunk;
  } progress{cb, vas, pool->chunk};
  const ArenaReleased released = [](void* p, std::size_t i) {
    auto* pr = static_cast<Progress*>(p);
    account_free(pr->cb, AllocKind::kPointer, pr->vas[i]);
    ref(pr->cb->kv_resident_bytes).fetch_sub(pr->chunk);
  };
  if (arena_unmap_at(d, cb, vas.data(), vas.size(), released, &progress) != CUDA_SUCCESS) return GPUOS_KV_ERR_DRIVER;
  pool->resident -= chunks.size() * pool->chunk;
  pool->counters.chunks_released += chunks.size();
  return GPUOS_KV_OK;
}

int pool_destroy(gpuos_kv_pool* pool) {
  Pools& ps = pools();
  std::lock_guard<std::mutex> lock(ps.mu);
  if (!known(ps, pool)) return GPUOS_KV_ERR_INVALID;
  const GpuosDriverTable* d = real_driver();
  ControlBlockUse use;
  gpuos_control_block* cb = control_block();
  std::vector<uint64_t> with_memory;
  for (uint64_t c = 0; c < pool->chunk_pages.size(); ++c) {
    if (pool->chunk_pages[c] > 0) with_memory.push_back(c);
  }
  if (int r = release_chunks(*d, cb, pool, with_memory); r != GPUOS_KV_OK) return r;
  d->cuMemAddressFree(pool->base, pool->reserved);
  ref(cb->kv_reserved_bytes).fetch_sub(pool->reserved);
  ps.live.erase(std::find(ps.live.begin(), ps.live.end(), pool));
  delete pool;
  return GPUOS_KV_OK;
}

int map_pages(gpuos_kv_pool* pool, const uint64_t* pages, size_t count) {
  Pools& ps = pools();
  std::lock_guard<std::mutex> lock(ps.mu);
  if (!known(ps, pool) || (pages == nullptr && count != 0)) return GPUOS_KV_ERR_INVALID;
  const uint64_t per_chunk = pool->chunk / pool->page;
  std::vector<uint64_t> new_chunks;
  for (size_t i = 0; i < count; ++i) {
    if (pages[i] >= pool->page_mapped.size()) return GPUOS_KV_ERR_INVALID;
    const uint64_t c = pages[i] / per_chunk;
    if (pool->chunk_pages[c] == 0 && std::find(new_chunks.begin(), new_chunks.end(), c) == new_chunks.end()) {
      new_chunks.push_back(c);
    }
  }
  std::sort(new_chunks.begin(), new_chunks.end());
  const GpuosDriverTable* d = real_driver();
  ControlBlockUse use;
  gpuos_control_block* cb = control_block();
  if (d == nullptr || cb == nullptr) return GPUOS_KV_ERR_NOT_GOVERNED;
  if (!new_chunks.empty()) {
    const uint64_t bytes = new_chunks.size() * pool->chunk;
    // gpuosd's target binds the growth of all pools together; it asks for room only within it.
    const uint64_t target = current_target(cb, nullptr);
    if (target != GPUOS_KV_NO_TARGET && resident_of_all(ps) + bytes > target) return GPUOS_KV_ERR_OUT_OF_MEMORY;
    if (!reserve_within_quota(*d, cb, bytes)) {
      account_alloc_failure(cb);
      return GPUOS_KV_ERR_OUT_OF_MEMORY;
    }
    std::vector<CUdeviceptr> vas;
    for (uint64_t c : new_chunks) vas.push_back(pool->base + c * pool->chunk);
    const uint64_t t0 = monotonic_ns();
    uint64_t waited = 0;
    CUresult r = arena_map_at(*d, cb, pool->ctx, pool->device, vas.data(), vas.size(), pool->chunk);
    // The GPU is full: gpuosd may make room (a target for another tenant's pools, or a swap). The
    // pools stay locked meanwhile (the watcher does not need the lock, and a pool must not change
    // under a map), so other pool calls of this process wait too.
    for (int tries = 0; r == CUDA_ERROR_OUT_OF_MEMORY && tries < 16; ++tries) {
      const uint64_t w0 = monotonic_ns();
      const bool retry = wait_for_room(cb, bytes, pool->device);
      waited += monotonic_ns() - w0;
      pool->counters.room_waits += 1;
      if (!retry) break;
      r = arena_map_at(*d, cb, pool->ctx, pool->device, vas.data(), vas.size(), pool->chunk);
    }
    if (r != CUDA_SUCCESS) {
      cancel_bytes(cb, bytes);
      account_alloc_failure(cb);
      return r == CUDA_ERROR_OUT_OF_MEMORY ? GPUOS_KV_ERR_OUT_OF_MEMORY : GPUOS_KV_ERR_DRIVER;
    }
    const uint64_t ns = monotonic_ns() - t0 - waited;
    for (CUdeviceptr va : vas) commit_alloc(cb, AllocKind::kPointer, va, pool->chunk, pool->device);
    pool->resident += bytes;
    pool->counters.chunks_created += new_chunks.size();
    pool->counters.grow_ns += ns;
    pool->counters.grown_bytes += bytes;
    ref(cb->kv_resident_bytes).fetch_add(bytes);
    ref(cb->kv_grow_ns).fetch_add(ns);
    ref(cb->kv_grown_bytes).fetch_add(bytes);
  }
  uint64_t newly = 0;
  for (size_t i = 0; i < count; ++i) {
    if (pool->page_mapped[pages[i]] != 0) continue;
    pool->page_mapped[pages[i]] = 1;
    pool->chunk_pages[pages[i] / per_chunk] += 1;
    ++newly;
  }
  pool->mapped_pages += newly;
  pool->counters.pages_mapped += newly;
  pool->counters.map_calls += 1;
  return GPUOS_KV_OK;
}

int unmap_pages(gpuos_kv_pool* pool, const uint64_t* pages, size_t count) {
  Pools& ps = pools();
  std::lock_guard<std::mutex> lock(ps.mu);
  if (!known(ps, pool) || (pages == nullptr && count != 0)) return GPUOS_KV_ERR_INVALID;
  // All or nothing: check every page first (a page listed twice is unmapped once, so it counts as
  // not mapped the second time).
  std::vector<uint64_t> sorted(pages, pages + count);
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] >= pool->page_mapped.size()) return GPUOS_KV_ERR_INVALID;
    if (pool->page_mapped[sorted[i]] == 0 || (i > 0 && sorted[i] == sorted[i - 1])) return GPUOS_KV_ERR_NOT_MAPPED;
  }
  const uint64_t per_chunk = pool->chunk / pool->page;
  const GpuosDriverTable* d = real_driver();
  ControlBlockUse use;
  gpuos_control_block* cb = control_block();
  if (d == nullptr || cb == nullptr) return GPUOS_KV_ERR_NOT_GOVERNED;
  // Chunks whose every mapped page is in this batch lose their memory (pages are sorted, so a
  // chunk's pages are consecutive).
  std::vector<uint64_t> emptied;
  for (size_t i = 0; i < sorted.size();) {
    const uint64_t c = sorted[i] / per_chunk;
    size_t j = i;
    while (j < sorted.size() && sorted[j] / per_chunk == c) ++j;
    if (j - i == pool->chunk_pages[c]) emptied.push_back(c);
    i = j;
  }
  if (int r = release_chunks(*d, cb, pool, emptied); r != GPUOS_KV_OK) return r;
  for (uint64_t p : sorted) {
    pool->page_mapped[p] = 0;
    pool->chunk_pages[p / per_chunk] -= 1;
  }
  pool->mapped_pages -= sorted.size();
  pool->counters.pages_unmapped += sorted.size();
  ref(cb->kv_pages_unmapped).fetch_add(sorted.size());
  if (!emptied.empty()) notify_activity(cb);  // room was made: gpuosd may answer a waiting tenant
  return GPUOS_KV_OK;
}

int is_mapped(gpuos_kv_pool* pool, uint64_t page) {
  Pools& ps = pools();
  std::lock_guard<std::mutex> lock(ps.mu);
  if (!known(ps, pool) || page >= pool->page_mapped.size()) return -1;
  return pool->page_mapped[page] != 0 ? 1 : 0;
}

int stats_get(gpuos_kv_pool* pool, gpuos_kv_stats* out) {
  if (out == nullptr || out->size < 2 * sizeof(uint32_t)) return GPUOS_KV_ERR_INVALID;
  Pools& ps = pools();
  std::lock_guard<std::mutex> lock(ps.mu);
  if (!known(ps, pool)) return GPUOS_KV_ERR_INVALID;
  gpuos_kv_stats s = pool->counters;
  s.abi_version = GPUOS_KV_ABI_VERSION;
  s.size = out->size;
  s.base = pool->base;
  s.reserved_bytes = pool->reserved;
  s.page_bytes = pool->page;
  s.chunk_bytes = pool->chunk;
  s.pages = pool->page_mapped.size();
  s.mapped_pages = pool->mapped_pages;
  s.resident_bytes = pool->resident;
  s.swapped_bytes = arena_swapped_in(pool->base, pool->reserved);
  std::memcpy(out, &s, std::min<std::size_t>(out->size, sizeof(s)));
  return GPUOS_KV_OK;
}

int target(uint64_t* bytes, uint32_t* deadline_ms) {
  if (bytes == nullptr) return GPUOS_KV_ERR_INVALID;
  // Registers if this is the process's first gpuos call: gpuos.kv.available() asks this before any
  // CUDA call, and pools work from then on.
  gpuos_control_block* cb = ensure_registered();
  if (cb == nullptr || refused()) return GPUOS_KV_ERR_NOT_GOVERNED;
  *bytes = current_target(cb, deadline_ms);
  return GPUOS_KV_OK;
}

int set_pressure_callback(gpuos_kv_pressure_fn fn, void* user) {
  Pools& ps = pools();
  std::lock_guard<std::mutex> lock(ps.callback_mu);
  ps.callback = fn;
  ps.callback_user = user;
  return GPUOS_KV_OK;
}

int report_queue(uint32_t waiting) {
  gpuos_control_block* cb = ensure_registered();
  if (cb == nullptr) return GPUOS_KV_ERR_NOT_GOVERNED;
  ref(cb->kv_queue_depth).store(waiting, std::memory_order_relaxed);
  return GPUOS_KV_OK;
}

int report_slots(uint32_t active, uint32_t capacity) {
  if (capacity == 0 || capacity > GPUOS_KV_MAX_SLOTS || active > capacity) return GPUOS_KV_ERR_INVALID;
  gpuos_control_block* cb = ensure_registered();
  if (cb == nullptr) return GPUOS_KV_ERR_NOT_GOVERNED;
  ref(cb->engine_slots_active).store(active, std::memory_order_relaxed);
  ref(cb->engine_slots_capacity).store(capacity, std::memory_order_relaxed);
  return GPUOS_KV_OK;
}

int report_phase(uint32_t phase) {
  if (phase != GPUOS_KV_PHASE_STEP && phase != GPUOS_KV_PHASE_ADMISSION) return GPUOS_KV_ERR_INVALID;
  gpuos_control_block* cb = ensure_registered();
  if (cb == nullptr) return GPUOS_KV_ERR_NOT_GOVERNED;
  // A change wakes gpuosd: a latency budget lends nothing while its tenant admits requests.
  set_word_and_notify(cb, cb->engine_phase, phase);
  return GPUOS_KV_OK;
}

constexpr gpuos_kv_interface kInterface{
    GPUOS_KV_ABI_VERSION, sizeof(gpuos_kv_interface), &gpuos::kv::result_text, &pool_create, &pool_destroy,
    &map_pages,           &unmap_pages,               &is_mapped,                &stats_get,   &target,
    &set_pressure_callback, &report_queue,            &report_slots,             &report_phase,
};

// Re-registration: what the pools hold moves to the new block (its target starts unset: a new
// daemon sets its own); counters are added.
void carry_kv_state(gpuos_control_block* from, gpuos_control_block* to) {
  ref(to->kv_resident_bytes).store(ref(from->kv_resident_bytes).load());
  ref(to->kv_reserved_bytes).store(ref(from->kv_reserved_bytes).load());
  ref(to->kv_queue_depth).store(ref(from->kv_queue_depth).load());
  ref(to->engine_slots_active).store(ref(from->engine_slots_active).load());
  ref(to->engine_slots_capacity).store(ref(from->engine_slots_capacity).load());
  ref(to->engine_phase).store(ref(from->engine_phase).load());
  ref(to->kv_grow_ns).fetch_add(ref(from->kv_grow_ns).load());
  ref(to->kv_grown_bytes).fetch_add(ref(from->kv_grown_bytes).load());
  ref(to->kv_pages_unmapped).fetch_add(ref(from->kv_pages_unmapped).load());
  ref(to->kv_target_seen_seq).store(grant_load(grants_of(to)->kv_target_seq));
}

}  // namespace

constinit const CarryOver kKvCarryOver{"kv pools", nullptr, &carry_kv_state};

}  // namespace gpuos::interpose

extern "C" __attribute__((visibility("default"))) const gpuos_kv_interface* gpuos_kv_get_interface(uint32_t abi_version) {
  return abi_version == GPUOS_KV_ABI_VERSION ? &gpuos::interpose::kInterface : nullptr;
}
