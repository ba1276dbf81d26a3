// SPDX-License-Identifier: Apache-2.0
#include "interpose/memory_accounting.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "interpose/blocks.h"
#include "interpose/carry_over.h"

namespace gpuos::interpose {
namespace {

struct Allocation {
  std::size_t bytes;
  int device;
};

struct Import {
  std::size_t bytes;
  uint64_t opens;  // cuIpcOpenMemHandle calls not yet closed
};

struct Tables {
  std::mutex mu;
  std::unordered_map<uint64_t, Allocation> by_kind[kAllocKindCount];
  std::unordered_map<uint64_t, Import> imports;
  std::unordered_map<uint64_t, GraphFootprint> graph_execs;  // live executable graphs
  uint64_t graph_retained[GPUOS_MAX_DEVICES] = {};           // charge of destroyed ones
};

Tables& tables() {
  static Tables* t = new Tables();  // never destroyed: frees may arrive during process exit
  return *t;
}

std::unordered_map<uint64_t, Allocation>& table(Tables& t, AllocKind kind) {
  return t.by_kind[static_cast<int>(kind)];
}

int clamp_device(int device) { return device >= 0 && device < GPUOS_MAX_DEVICES ? device : 0; }

uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// What this process holds, as its quota check counts it: in the process's own memory, never in the
// control block. The block's mem_used_bytes is only a mirror for gpuosd: the tenant can rewrite that
// word (issue #42: zeroing it after each allocation got 1024 MiB on a 64 MiB quota), and no
// decision here reads it back. One count for the process, whichever block is current: calls still
// on the old block during a re-registration count the same.
constinit std::atomic<uint64_t> g_used{0};
constinit std::mutex g_publish_mu;  // (trivially destructible: frees may arrive during process exit)

// Mirrors the count into cb. Under a lock, so that the last store is the newest count: two threads
// storing what each computed could leave the older one there.
void publish_used(gpuos_control_block* cb) {
  std::lock_guard<std::mutex> lock(g_publish_mu);
  std::atomic_ref<uint64_t>(cb->mem_used_bytes).store(g_used.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

// Takes bytes off the count (never below 0) and mirrors it.
void release_used(gpuos_control_block* cb, uint64_t bytes) {
  uint64_t now = g_used.load(std::memory_order_relaxed);
  while (!g_used.compare_exchange_weak(now, now > bytes ? now - bytes : 0, std::memory_order_relaxed)) {
  }
  publish_used(cb);
}

}  // namespace

uint64_t memory_used(const gpuos_control_block*) { return g_used.load(std::memory_order_relaxed); }

void forget_memory_usage() { g_used.store(0, std::memory_order_relaxed); }

uint64_t memory_limit(const gpuos_control_block* cb) {
  const gpuos_grant_block* g = grants_of(cb);
  const uint64_t quota = grant_load(g->mem_quota_bytes, std::memory_order_relaxed);
  if (quota == 0) return 0;
  const uint64_t borrow = grant_load(g->mem_borrow_bytes, std::memory_order_relaxed);
  return borrow > UINT64_MAX - quota ? UINT64_MAX : quota + borrow;
}

bool reserve_bytes(gpuos_control_block* cb, std::size_t bytes, bool enforce_quota) {
  const uint64_t quota = enforce_quota ? memory_limit(cb) : 0;
  uint64_t now = g_used.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    if (bytes > UINT64_MAX - now) return false;
    next = now + bytes;
    if (quota != 0 && next > quota) return false;
  } while (!g_used.compare_exchange_weak(now, next, std::memory_order_relaxed));
  publish_used(cb);
  std::atomic_ref<uint64_t> peak(cb->mem_peak_bytes);
  uint64_t old = peak.load(std::memory_order_relaxed);
  while (next > old && !peak.compare_exchange_weak(old, next, std::memory_order_relaxed)) {
  }
  return true;
}

void cancel_bytes(gpuos_control_block* cb, std::size_t bytes) { release_used(cb, bytes); }

void commit_alloc(gpuos_control_block* cb, AllocKind kind, uint64_t key, std::size_t bytes,
                  int device) {
  device = clamp_device(device);
  Allocation stale{0, 0};
  bool replaced = false;
  Tables& t = tables();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    auto [it, inserted] = table(t, kind).try_emplace(key, Allocation{bytes, device});
    if (!inserted) {
      stale = it->second;
      it->second = Allocation{bytes, device};
      replaced = true;
    }
  }
  std::atomic_ref<uint64_t>(cb->alloc_calls).fetch_add(1, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(cb->mem_used_per_device[device]).fetch_add(bytes, std::memory_order_relaxed);
  if (replaced) {
    std::atomic_ref<uint64_t>(cb->mem_used_per_device[stale.device])
        .fetch_sub(stale.bytes, std::memory_order_relaxed);
    release_used(cb, stale.bytes);
  }
}

void account_alloc_failure(gpuos_control_block* cb) {
  std::atomic_ref<uint64_t>(cb->alloc_calls).fetch_add(1, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(cb->alloc_failures).fetch_add(1, std::memory_order_relaxed);
}

void account_free(gpuos_control_block* cb, AllocKind kind, uint64_t key) {
  Allocation a{0, 0};
  bool found = false;
  Tables& t = tables();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    auto& m = table(t, kind);
    auto it = m.find(key);
    if (it != m.end()) {
      a = it->second;
      m.erase(it);
      found = true;
    }
  }
  std::atomic_ref<uint64_t>(cb->free_calls).fetch_add(1, std::memory_order_relaxed);
  if (!found) {
    std::atomic_ref<uint64_t>(cb->untracked_frees).fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::atomic_ref<uint64_t>(cb->mem_used_per_device[a.device]).fetch_sub(a.bytes, std::memory_order_relaxed);
  release_used(cb, a.bytes);
}

// ---- the device malloc heap ----

uint64_t malloc_heap_bytes(uint64_t ctx) {
  Tables& t = tables();
  std::lock_guard<std::mutex> lock(t.mu);
  auto& m = table(t, AllocKind::kMallocHeap);
  auto it = m.find(ctx);
  return it == m.end() ? 0 : it->second.bytes;
}

void set_malloc_heap(gpuos_control_block* cb, uint64_t ctx, uint64_t bytes, int device, uint64_t before) {
  device = clamp_device(device);
  Allocation old{0, device};
  Tables& t = tables();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    auto& m = table(t, AllocKind::kMallocHeap);
    if (auto it = m.find(ctx); it != m.end()) old = it->second;
    m[ctx] = Allocation{bytes, device};
  }
  std::atomic_ref<uint64_t>(cb->mem_used_per_device[old.device]).fetch_sub(old.bytes, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(cb->mem_used_per_device[device]).fetch_add(bytes, std::memory_order_relaxed);
  // The count holds `old` (the heap as recorded) and this call's growth over `before` (reserved);
  // it should hold `bytes` instead: min(bytes, before) - old more (old == before but for another
  // thread's set in between).
  const uint64_t keep = std::min<uint64_t>(bytes, before);
  if (keep < old.bytes) {
    release_used(cb, old.bytes - keep);
  } else if (keep > old.bytes) {
    reserve_bytes(cb, keep - old.bytes, /*enforce_quota=*/false);
  }
}

// ---- pitched allocations ----

uint64_t pitched_bytes(uint64_t width, uint64_t height, uint64_t align) {
  if (align == 0) align = 1;
  const uint64_t rows = width / align + (width % align != 0);
  return sat_mul(sat_mul(rows, align), height);
}

// ---- CUDA graph memory ----

namespace {
uint64_t round_up(uint64_t x, uint64_t to) { return sat_mul(x / to + (x % to != 0), to); }

void sub_used(gpuos_control_block* cb, int device, uint64_t bytes) {
  std::atomic_ref<uint64_t>(cb->mem_used_per_device[device]).fetch_sub(bytes, std::memory_order_relaxed);
  release_used(cb, bytes);
}
}  // namespace

uint64_t graph_pages(uint64_t bytesize) { return round_up(bytesize, kGraphPageBytes); }

GraphFootprint graph_tree_footprint(const GraphLevel* levels, std::size_t count) {
  GraphFootprint fp;
  // Bottom up: on which devices each graph's subtree allocates (a child's index is its parent's
  // and more, so children are done first going backwards).
  std::vector<uint32_t> allocates(count, 0);  // device bit mask
  for (std::size_t i = count; i-- > 0;) {
    for (int d = 0; d < GPUOS_MAX_DEVICES; ++d) {
      if (levels[i].pages[d] != 0) allocates[i] |= 1u << d;
    }
    if (i != 0 && levels[i].parent < i) allocates[levels[i].parent] |= allocates[i];
  }
  for (std::size_t i = 0; i < count; ++i) {
    for (int d = 0; d < GPUOS_MAX_DEVICES; ++d) {
      fp.bytes[d] = sat_add(fp.bytes[d], round_up(levels[i].pages[d], kGraphChunkBytes));
      if (i != 0 && (allocates[i] >> d & 1u)) fp.bytes[d] = sat_add(fp.bytes[d], kGraphChunkBytes);
    }
  }
  return fp;
}

uint64_t GraphFootprint::on(int device) const {
  return device >= 0 && device < GPUOS_MAX_DEVICES ? bytes[device] : 0;
}

uint64_t GraphFootprint::total() const {
  uint64_t t = 0;
  for (int i = 0; i < GPUOS_MAX_DEVICES; ++i) t = sat_add(t, on(i));
  return t;
}

void commit_graph_exec(gpuos_control_block* cb, uint64_t exec, const GraphFootprint& fp) {
  Tables& t = tables();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    auto [it, inserted] = t.graph_execs.try_emplace(exec, fp);
    if (!inserted) {  // its destruction went by unseen: what it mapped may still be in the pool
      for (int i = 0; i < GPUOS_MAX_DEVICES; ++i) t.graph_retained[i] += it->second.on(i);
      it->second = fp;
    }
  }
  std::atomic_ref<uint64_t>(cb->alloc_calls).fetch_add(1, std::memory_order_relaxed);
  for (int i = 0; i < GPUOS_MAX_DEVICES; ++i) {
    if (fp.on(i) != 0) {
      std::atomic_ref<uint64_t>(cb->mem_used_per_device[i]).fetch_add(fp.on(i), std::memory_order_relaxed);
    }
  }
}

void retire_graph_exec(gpuos_control_block* cb, uint64_t exec) {
  Tables& t = tables();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.graph_execs.find(exec);
  if (it == t.graph_execs.end()) return;
  for (int i = 0; i < GPUOS_MAX_DEVICES; ++i) t.graph_retained[i] += it->second.on(i);
  t.graph_execs.erase(it);
  std::atomic_ref<uint64_t>(cb->free_calls).fetch_add(1, std::memory_order_relaxed);
}

uint64_t graph_retained(int device) {
  if (device < 0 || device >= GPUOS_MAX_DEVICES) return 0;
  Tables& t = tables();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.graph_retained[device];
}

uint64_t graph_retained_total() {
  Tables& t = tables();
  std::lock_guard<std::mutex> lock(t.mu);
  uint64_t total = 0;
  for (uint64_t r : t.graph_retained) total += r;
  return total;
}

uint64_t settle_graph_retained(gpuos_control_block* cb, int device, uint64_t before, uint64_t reserved) {
  if (device < 0 || device >= GPUOS_MAX_DEVICES) return 0;
  uint64_t released = 0;
  Tables& t = tables();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    uint64_t& now = t.graph_retained[device];
    // Only what was retained when the trim began can have been released by it; retirements since
    // (now - before) stay. Settles are serialised by the caller, so `now` only grew meanwhile.
    const uint64_t keep = std::min(before, reserved);
    if (now >= before && before > keep) {
      released = before - keep;
      now -= released;
    }
  }
  if (released != 0) sub_used(cb, device, released);
  return released;
}

// ---- CUDA arrays ----

uint64_t array_level_bytes(uint64_t w, uint64_t h, uint64_t depth, CUarray_format format,
                           unsigned channels) {
  h = h == 0 ? 1 : h;
  depth = depth == 0 ? 1 : depth;
  uint64_t per_channel = 0, half_bytes_per_pixel = 0, per_block = 0;
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8:
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X4:
      per_channel = 1;
      break;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF:
    case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X4:
      per_channel = 2;
      break;
    case CU_AD_FORMAT_NV12: half_bytes_per_pixel = 3; break;
    case CU_AD_FORMAT_NV16: case CU_AD_FORMAT_YUY2: half_bytes_per_pixel = 4; break;
    case CU_AD_FORMAT_P010: case CU_AD_FORMAT_P016: case CU_AD_FORMAT_Y444_PLANAR8:
    case CU_AD_FORMAT_YUV444_8bit_SemiPlanar:
      half_bytes_per_pixel = 6;
      break;
    case CU_AD_FORMAT_P210: case CU_AD_FORMAT_P216: case CU_AD_FORMAT_Y210: case CU_AD_FORMAT_Y216:
    case CU_AD_FORMAT_AYUV: case CU_AD_FORMAT_Y410: case CU_AD_FORMAT_UNORM_INT_101010_2:
      half_bytes_per_pixel = 8;
      break;
    case CU_AD_FORMAT_Y444_PLANAR10: case CU_AD_FORMAT_YUV444_16bit_SemiPlanar:
      half_bytes_per_pixel = 12;
      break;
    case CU_AD_FORMAT_Y416: half_bytes_per_pixel = 16; break;
    case CU_AD_FORMAT_BC1_UNORM: case CU_AD_FORMAT_BC1_UNORM_SRGB: case CU_AD_FORMAT_BC4_UNORM:
    case CU_AD_FORMAT_BC4_SNORM:
      per_block = 8;
      break;
    case CU_AD_FORMAT_BC2_UNORM: case CU_AD_FORMAT_BC2_UNORM_SRGB: case CU_AD_FORMAT_BC3_UNORM:
    case CU_AD_FORMAT_BC3_UNORM_SRGB: case CU_AD_FORMAT_BC5_UNORM: case CU_AD_FORMAT_BC5_SNORM:
    case CU_AD_FORMAT_BC6H_UF16: case CU_AD_FORMAT_BC6H_SF16: case CU_AD_FORMAT_BC7_UNORM:
    case CU_AD_FORMAT_BC7_UNORM_SRGB:
      per_block = 16;
      break;
    default: per_channel = 4; break;  // UNSIGNED_INT32, SIGNED_INT32, FLOAT and anything newer
  }
  if (per_block != 0) {
    return sat_mul(sat_mul(sat_mul(w / 4 + (w % 4 != 0), h / 4 + (h % 4 != 0)), depth), per_block);
  }
  const uint64_t pixels = sat_mul(sat_mul(w, h), depth);
  if (half_bytes_per_pixel != 0) {
    const uint64_t halves = sat_mul(pixels, half_bytes_per_pixel);
    return halves == UINT64_MAX ? halves : halves / 2 + (halves % 2);
  }
  return sat_mul(pixels, sat_mul(channels, per_channel));
}

bool array_owns_memory(unsigned flags) {
  return (flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) == 0;
}

uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (desc == nullptr || !array_owns_memory(desc->Flags)) return 0;
  return array_level_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels);
}

uint64_t mipmapped_array_bytes(const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned levels) {
  if (desc == nullptr || !array_owns_memory(desc->Flags)) return 0;
  const bool layers = (desc->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  auto half = [](uint64_t x, unsigned i) -> uint64_t {
    return x == 0 ? 0 : (x >> i) == 0 ? 1 : x >> i;
  };
  uint64_t total = 0;
  for (unsigned i = 0; i < levels && i < 64; ++i) {
    total = sat_add(total, array_level_bytes(half(desc->Width, i), half(desc->Height, i),
                                             layers ? desc->Depth : half(desc->Depth, i),
                                             desc->Format, desc->NumChannels));
  }
  return total;
}

void account_import(gpuos_control_block* cb, uint64_t key, std::size_t bytes) {
  Tables& t = tables();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    auto [it, inserted] = t.imports.try_emplace(key, Import{bytes, 1});
    if (!inserted) {
      ++it->second.opens;  // the same mapping again: the driver counts references
      return;
    }
  }
  std::atomic_ref<uint64_t>(cb->mem_imported_bytes).fetch_add(bytes, std::memory_order_relaxed);
}

void account_unimport(gpuos_control_block* cb, uint64_t key) {
  std::size_t bytes = 0;
  Tables& t = tables();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    auto it = t.imports.find(key);
    if (it == t.imports.end() || --it->second.opens > 0) return;
    bytes = it->second.bytes;
    t.imports.erase(it);
  }
  std::atomic_ref<uint64_t>(cb->mem_imported_bytes).fetch_sub(bytes, std::memory_order_relaxed);
}

namespace {

// Re-registration: the usage is this process's (its allocation tables stay as they are), so it is
// added to the new block (what it holds: its own count); the peak is the larger of the old peak
// and what is held now.
void carry_memory(gpuos_control_block* from, gpuos_control_block* to) {
  carry_add(from->alloc_calls, to->alloc_calls);
  carry_add(from->free_calls, to->free_calls);
  carry_add(from->alloc_failures, to->alloc_failures);
  publish_used(to);  // the process's own count, not the old block's word (the tenant could write it)
  for (int i = 0; i < GPUOS_MAX_DEVICES; ++i) carry_add(from->mem_used_per_device[i], to->mem_used_per_device[i]);
  carry_add(from->untracked_frees, to->untracked_frees);
  carry_add(from->mem_imported_bytes, to->mem_imported_bytes);
  std::atomic_ref<uint64_t> peak(to->mem_peak_bytes);
  uint64_t want = std::max(std::atomic_ref<uint64_t>(from->mem_peak_bytes).load(),
                           std::atomic_ref<uint64_t>(to->mem_used_bytes).load());
  uint64_t old = peak.load();
  while (want > old && !peak.compare_exchange_weak(old, want)) {
  }
}

}  // namespace

constinit const CarryOver kMemoryCarryOver{"memory", nullptr, &carry_memory};

}  // namespace gpuos::interpose
