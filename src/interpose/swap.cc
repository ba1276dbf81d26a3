// SPDX-License-Identifier: Apache-2.0
#include "interpose/swap.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/ipc.h"
#include "interpose/activity.h"
#include "interpose/carry_over.h"
#include "interpose/fast_path.h"
#include "interpose/runtime.h"

namespace gpuos::interpose {
namespace {

template <typename T>
std::atomic_ref<T> ref(T& x) {
  return std::atomic_ref<T>(x);
}

// A reservation of virtual addresses is cheap; one holds every allocation up to its size.
constexpr std::size_t kReserveBytes = std::size_t{1} << 40;
// The pool is pinned piece by piece: pinning tens of GiB in one call holds the driver for tens of
// seconds, and the tenant's own CUDA calls would wait that long. Copies never cross a piece.
constexpr uint64_t kPoolPiece = uint64_t{1} << 30;

struct Allocation {
  std::size_t bytes = 0;  // a multiple of the device's granularity
  int device = 0;
  CUcontext ctx = nullptr;
  CUmemGenericAllocationHandle handle = 0;  // 0 while swapped out
  uint64_t pool_offset = 0;                 // while swapped out: where its bytes are in the pool
  bool owns_va = true;                      // false: a KV pool's chunk, at an address the pool
                                            // reserved (never returned to free_va, never cuMemFree'd)
};

struct Reservation {
  CUdeviceptr base;
  std::size_t size;
};

struct Arena {
  std::mutex mu;  // guards everything below but the pool
  std::map<CUdeviceptr, Allocation> allocs;
  std::vector<Reservation> reservations;
  std::map<CUdeviceptr, std::size_t> free_va;  // unused address ranges: base -> size
  std::size_t granularity[GPUOS_MAX_DEVICES] = {};
  std::map<CUcontext, CUstream> streams;  // the swapper's own stream in each context
  bool enabled = false;

  std::mutex pool_mu;  // the swap pool of the daemon we are registered with
  int pool_socket = -1;
  char* pool = nullptr;
  uint64_t pool_bytes = 0;
  bool pool_refused = false;
};

// Never destroyed: the swapper thread may still run while the process exits.
Arena& arena() {
  static Arena* a = new Arena;
  return *a;
}

// Runs f with ctx current on this thread.
template <typename F>
CUresult in_context(const GpuosDriverTable& d, CUcontext ctx, F&& f) {
  if (d.cuCtxPushCurrent_v2 == nullptr || d.cuCtxPopCurrent_v2 == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = d.cuCtxPushCurrent_v2(ctx);
  if (r != CUDA_SUCCESS) return r;
  r = f();
  CUcontext popped = nullptr;
  d.cuCtxPopCurrent_v2(&popped);
  return r;
}

bool same_reservation(const Arena& a, CUdeviceptr x, CUdeviceptr y) {
  for (const Reservation& r : a.reservations) {
    bool in_x = x >= r.base && x < r.base + r.size;
    bool in_y = y >= r.base && y < r.base + r.size;
    if (in_x || in_y) return in_x && in_y;
  }
  return false;
}

void give_va(Arena& a, CUdeviceptr base, std::size_t bytes) {
  auto it = a.free_va.emplace(base, bytes).first;
  auto next = std::next(it);
  if (next != a.free_va.end() && it->first + it->second == next->first && same_reservation(a, it->first, next->first)) {
    it->second += next->second;
    a.free_va.erase(next);
  }
  if (it != a.free_va.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first && same_reservation(a, prev->first, it->first)) {
      prev->second += it->second;
      a.free_va.erase(it);
    }
  }
}

CUresult take_va(const GpuosDriverTable& d, Arena& a, std::size_t bytes, CUdeviceptr* out) {
  for (auto it = a.free_va.begin(); it != a.free_va.end(); ++it) {
    if (it->second < bytes) continue;
    CUdeviceptr base = it->first;
    std::size_t size = it->second;
    a.free_va.erase(it);
    if (size > bytes) a.free_va.emplace(base + bytes, size - bytes);
    *out = base;
    return CUDA_SUCCESS;
  }
  std::size_t size = std::max(kReserveBytes, bytes);
  CUdeviceptr base = 0;
  CUresult r = d.cuMemAddressReserve(&base, size, 0, 0, 0);
  if (r != CUDA_SUCCESS) return r;
  a.reservations.push_back({base, size});
  a.free_va.emplace(base, size);
  return take_va(d, a, bytes, out);
}

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// Backs [va, va+bytes) with new physical memory on `device`, read-write for that device.
CUresult map_physical(const GpuosDriverTable& d, CUdeviceptr va, std::size_t bytes, int device,
                      CUmemGenericAllocationHandle* out) {
  CUmemAllocationProp prop = device_prop(device);
  CUmemGenericAllocationHandle h = 0;
  CUresult r = d.cuMemCreate(&h, bytes, &prop, 0);
  if (r != CUDA_SUCCESS) return r;
  r = d.cuMemMap(va, bytes, 0, h, 0);
  if (r != CUDA_SUCCESS) {
    d.cuMemRelease(h);
    return r;
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = d.cuMemSetAccess(va, bytes, &access, 1);
  if (r != CUDA_SUCCESS) {
    d.cuMemUnmap(va, bytes);
    d.cuMemRelease(h);
    return r;
  }
  *out = h;
  return CUDA_SUCCESS;
}

void unmap_physical(const GpuosDriverTable& d, CUdeviceptr va, const Allocation& al) {
  d.cuMemUnmap(va, al.bytes);
  d.cuMemRelease(al.handle);
}

bool vmm_available(const GpuosDriverTable& d) {
  return d.cuMemCreate && d.cuMemRelease && d.cuMemMap && d.cuMemUnmap && d.cuMemSetAccess &&
         d.cuMemAddressReserve && d.cuMemGetAllocationGranularity && d.cuCtxGetCurrent && d.cuCtxGetDevice &&
         d.cuCtxPushCurrent_v2 && d.cuCtxPopCurrent_v2 && d.cuCtxSynchronize && d.cuStreamCreate &&
         d.cuStreamSynchronize && d.cuMemcpyDtoHAsync_v2 && d.cuMemcpyHtoDAsync_v2 && d.cuMemHostRegister_v2 &&
         d.cuMemHostUnregister;
}

// ---- the swap pool ---------------------------------------------------------------------------

// Maps and pins the daemon's swap pool (once per daemon connection). Runs on the swapper thread,
// without the arena lock: pinning tens of GiB takes seconds.
bool ensure_pool(const GpuosDriverTable& d, CUcontext ctx) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.pool_mu);
  const int sock = daemon_socket();
  if (sock < 0) return a.pool != nullptr;
  if (a.pool_socket == sock) return a.pool != nullptr;
  // A new daemon connection. A pool that may still hold swapped memory stays (swap_in_locally
  // brought it back before we re-registered, so the old pool is free to go).
  gpuos_msg_header req{};
  init_header(&req, GPUOS_MSG_SWAP_POOL, sizeof(req), 1);
  if (send_message(sock, &req, sizeof(req)) != 0) return a.pool != nullptr;
  alignas(8) unsigned char buf[GPUOS_MSG_MAX_SIZE + 1];
  int fd = -1;
  long n = receive_message(sock, buf, sizeof(buf), &fd, 10000);
  char why[GPUOS_TEXT_MAX];
  gpuos_msg_swap_pool_reply rep{};
  if (n <= 0 || validate_message(buf, static_cast<std::size_t>(n), why, sizeof(why)) != GPUOS_OK ||
      reinterpret_cast<gpuos_msg_header*>(buf)->type != GPUOS_MSG_SWAP_POOL_REPLY) {
    if (fd >= 0) close(fd);
    log(LogLevel::kWarn, "swap: no usable answer to SWAP_POOL (%ld)", n);
    a.pool_socket = sock;
    return false;
  }
  std::memcpy(&rep, buf, sizeof(rep));
  a.pool_socket = sock;
  if (rep.status != GPUOS_OK || fd < 0 || rep.pool_bytes == 0) {
    if (fd >= 0) close(fd);
    if (!a.pool_refused) log(LogLevel::kInfo, "swap: gpuosd has no swap pool; this tenant's memory stays resident");
    a.pool_refused = true;
    return false;
  }
  void* p = mmap(nullptr, rep.pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    log(LogLevel::kError, "swap: cannot map the %llu-byte swap pool: %s",
        static_cast<unsigned long long>(rep.pool_bytes), std::strerror(errno));
    return false;
  }
  const uint64_t t0 = monotonic_ns();
  for (uint64_t off = 0; off < rep.pool_bytes; off += kPoolPiece) {
    const uint64_t n = std::min(kPoolPiece, rep.pool_bytes - off);
    CUresult r = in_context(d, ctx, [&] {
      return d.cuMemHostRegister_v2(static_cast<char*>(p) + off, n, CU_MEMHOSTREGISTER_PORTABLE);
    });
    // Let the app's own driver calls in between pieces (the driver's lock is not fair).
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (r != CUDA_SUCCESS) {
      log(LogLevel::kError, "swap: cannot pin the swap pool (%s)", cu_result_name(r));
      for (uint64_t u = 0; u < off; u += kPoolPiece) {
        in_context(d, ctx, [&] { return d.cuMemHostUnregister(static_cast<char*>(p) + u); });
      }
      munmap(p, rep.pool_bytes);
      return false;
    }
  }
  log(LogLevel::kInfo, "swap: pool of %llu MiB mapped and pinned in %.1f ms",
      static_cast<unsigned long long>(rep.pool_bytes >> 20), static_cast<double>(monotonic_ns() - t0) / 1e6);
  // The previous pool (an earlier daemon's) holds nothing now: the tenant brought its memory back
  // before it re-registered, and this runs on the swapper thread before any command of the new
  // daemon. Unpin and unmap it: pinned host memory is precious.
  if (a.pool != nullptr) {
    for (uint64_t off = 0; off < a.pool_bytes; off += kPoolPiece) {
      in_context(d, ctx, [&] { return d.cuMemHostUnregister(a.pool + off); });
    }
    munmap(a.pool, a.pool_bytes);
  }
  a.pool = static_cast<char*>(p);
  a.pool_bytes = rep.pool_bytes;
  return true;
}

CUresult swapper_stream(const GpuosDriverTable& d, Arena& a, CUcontext ctx, CUstream* out) {
  auto it = a.streams.find(ctx);
  if (it != a.streams.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  CUstream s = nullptr;
  CUresult r = in_context(d, ctx, [&] { return d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING); });
  if (r == CUDA_SUCCESS) a.streams.emplace(ctx, s), *out = s;
  return r;
}

// Queues a copy between device memory and the pool on s, split where the pool's pinned pieces end.
CUresult pool_copy(const GpuosDriverTable& d, Arena& a, CUcontext ctx, CUstream s, CUdeviceptr va,
                   uint64_t pool_off, uint64_t bytes, bool to_host) {
  return in_context(d, ctx, [&] {
    uint64_t done = 0;
    while (done < bytes) {
      const uint64_t at = pool_off + done;
      const uint64_t n = std::min(bytes - done, kPoolPiece - at % kPoolPiece);
      CUresult r = to_host ? d.cuMemcpyDtoHAsync_v2(a.pool + at, va + done, n, s)
                           : d.cuMemcpyHtoDAsync_v2(va + done, a.pool + at, n, s);
      if (r != CUDA_SUCCESS) return r;
      done += n;
    }
    return CUDA_SUCCESS;
  });
}

CUresult sync_streams(const GpuosDriverTable& d, Arena& a) {
  CUresult first = CUDA_SUCCESS;
  for (auto& kv : a.streams) {
    CUstream s = kv.second;  // (no structured binding: clang 14 cannot capture one)
    CUresult r = in_context(d, kv.first, [&] { return d.cuStreamSynchronize(s); });
    if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) first = r;
  }
  return first;
}

// ---- swapping (arena lock held) ---------------------------------------------------------------

// Moves whole allocations, largest first, until at least swap_want_bytes are out (as far as the
// slice allows). Repeatable: a tenant already partly out can be asked for more.
void swap_out_locked(const GpuosDriverTable& d, gpuos_control_block* cb, Arena& a) {
  auto state = ref(cb->swap_state);
  const uint32_t before = state.load();
  if (before != GPUOS_SWAP_RESIDENT && before != GPUOS_SWAP_SWAPPED_OUT) return;
  if (grant_load(grants_of(cb)->gate, std::memory_order_seq_cst) != GPUOS_GATE_CLOSED) {
    log(LogLevel::kWarn, "swap: SWAP_OUT with the gate open (on some device at least); ignored");
    return;
  }
  if (a.pool == nullptr) {
    log(LogLevel::kWarn, "swap: SWAP_OUT without a swap pool; ignored");
    return;
  }
  state.store(GPUOS_SWAP_SWAPPING_OUT);
  auto abort = [&](const char* why, CUresult r) {
    log(LogLevel::kError, "swap: swap-out abandoned, memory stays where it was: %s (%s)", why, cu_result_name(r));
    state.store(before);
  };
  // 1. No governed call is still on its way into the driver (they wait at the closed gate now).
  while (g_device_access.load(std::memory_order_seq_cst) != 0) {
    if (grant_load(grants_of(cb)->gate, std::memory_order_seq_cst) != GPUOS_GATE_CLOSED) {
      return abort("gate reopened", CUDA_SUCCESS);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // 2. Everything submitted has finished.
  std::vector<CUcontext> ctxs;
  for (auto& [va, al] : a.allocs) {
    if (std::find(ctxs.begin(), ctxs.end(), al.ctx) == ctxs.end()) ctxs.push_back(al.ctx);
  }
  for (CUcontext c : ctxs) {
    CUresult r = in_context(d, c, [&] { return d.cuCtxSynchronize(); });
    if (r != CUDA_SUCCESS) return abort("cannot drain the tenant's context", r);
  }
  // 3. Choose, copy into our slice of the pool, then release the physical memory.
  const uint64_t slice_off = grant_load(grants_of(cb)->swap_slice_offset);
  const uint64_t slice_bytes = grant_load(grants_of(cb)->swap_slice_bytes);
  const uint64_t want = grant_load(grants_of(cb)->swap_want_bytes);
  if (slice_off > a.pool_bytes || slice_bytes > a.pool_bytes - slice_off) {
    return abort("the pool slice lies outside the pool", CUDA_ERROR_INVALID_VALUE);
  }
  std::vector<std::pair<CUdeviceptr, Allocation*>> chosen;
  {
    std::vector<std::pair<CUdeviceptr, Allocation*>> resident;
    for (auto& [va, al] : a.allocs) {
      if (al.handle != 0) resident.emplace_back(va, &al);
    }
    std::stable_sort(resident.begin(), resident.end(),
                     [](const auto& x, const auto& y) { return x.second->bytes > y.second->bytes; });
    uint64_t room = slice_bytes, moved = 0;
    for (auto& c : resident) {
      if (moved >= want) break;
      if (c.second->bytes > room) continue;
      chosen.push_back(c);
      room -= c.second->bytes;
      moved += c.second->bytes;
    }
  }
  if (chosen.empty()) return abort("no allocation fits the pool slice", CUDA_ERROR_OUT_OF_MEMORY);
  const uint64_t t0 = monotonic_ns();
  uint64_t pos = slice_off;
  for (auto& [va, al] : chosen) {
    CUstream s = nullptr;
    CUresult r = swapper_stream(d, a, al->ctx, &s);
    if (r == CUDA_SUCCESS) r = pool_copy(d, a, al->ctx, s, va, pos, al->bytes, /*to_host=*/true);
    if (r != CUDA_SUCCESS) return abort("copy to host failed", r);
    al->pool_offset = pos;
    pos += al->bytes;
  }
  if (CUresult r = sync_streams(d, a); r != CUDA_SUCCESS) return abort("copy to host failed", r);
  for (auto& [va, al] : chosen) {
    unmap_physical(d, va, *al);
    al->handle = 0;
  }
  const uint64_t total = pos - slice_off;
  const uint64_t ns = monotonic_ns() - t0;
  ref(cb->swapped_bytes).fetch_add(total);
  ref(cb->swap_out_bytes).fetch_add(total);
  ref(cb->swap_out_ns).fetch_add(ns);
  ref(cb->swap_outs).fetch_add(1);
  state.store(GPUOS_SWAP_SWAPPED_OUT);
  log(LogLevel::kInfo, "swap: out %llu MiB (%zu allocations) in %.1f ms (%.1f GB/s)",
      static_cast<unsigned long long>(total >> 20), chosen.size(), static_cast<double>(ns) / 1e6,
      ns ? static_cast<double>(total) / static_cast<double>(ns) : 0.0);
}

bool swap_in_locked(const GpuosDriverTable& d, gpuos_control_block* cb, Arena& a) {
  auto state = ref(cb->swap_state);
  if (state.load() == GPUOS_SWAP_RESIDENT) return true;
  if (state.load() != GPUOS_SWAP_SWAPPED_OUT) return false;
  state.store(GPUOS_SWAP_SWAPPING_IN);
  const uint64_t t0 = monotonic_ns();
  std::vector<CUdeviceptr> mapped;
  CUresult r = CUDA_SUCCESS;
  for (auto& kv : a.allocs) {
    const CUdeviceptr va = kv.first;  // (no structured binding: clang 14 cannot capture one)
    Allocation& al = kv.second;
    if (al.handle != 0) continue;
    r = in_context(d, al.ctx, [&] { return map_physical(d, va, al.bytes, al.device, &al.handle); });
    if (r != CUDA_SUCCESS) break;
    mapped.push_back(va);
  }
  if (r == CUDA_SUCCESS) {
    for (auto& [va, al] : a.allocs) {
      if (std::find(mapped.begin(), mapped.end(), va) == mapped.end()) continue;
      CUstream s = nullptr;
      r = swapper_stream(d, a, al.ctx, &s);
      if (r == CUDA_SUCCESS) r = pool_copy(d, a, al.ctx, s, va, al.pool_offset, al.bytes, /*to_host=*/false);
      if (r != CUDA_SUCCESS) break;
    }
    if (r == CUDA_SUCCESS) r = sync_streams(d, a);
  }
  if (r != CUDA_SUCCESS) {
    // Give the memory back and stay out: the data is still in the pool, nothing is lost.
    for (CUdeviceptr va : mapped) {
      Allocation& al = a.allocs[va];
      unmap_physical(d, va, al);
      al.handle = 0;
    }
    state.store(GPUOS_SWAP_SWAPPED_OUT);
    log(LogLevel::kWarn, "swap: swap-in failed (%s); staying out until there is room", cu_result_name(r));
    return false;
  }
  uint64_t total = 0;
  for (CUdeviceptr va : mapped) total += a.allocs[va].bytes;
  const uint64_t ns = monotonic_ns() - t0;
  ref(cb->swapped_bytes).store(0);
  ref(cb->swap_in_bytes).fetch_add(total);
  ref(cb->swap_in_ns).fetch_add(ns);
  ref(cb->swap_ins).fetch_add(1);
  uint64_t old = ref(cb->max_swap_in_ns).load();
  while (ns > old && !ref(cb->max_swap_in_ns).compare_exchange_weak(old, ns)) {
  }
  state.store(GPUOS_SWAP_RESIDENT);
  log(LogLevel::kInfo, "swap: in %llu MiB in %.1f ms (%.1f GB/s)", static_cast<unsigned long long>(total >> 20),
      static_cast<double>(ns) / 1e6, ns ? static_cast<double>(total) / static_cast<double>(ns) : 0.0);
  return true;
}

// ---- the swapper thread -------------------------------------------------------------------------

void* swapper_main(void*) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  const GpuosDriverTable* d = real_driver();
  Arena& a = arena();
  for (;;) {
    gpuos_control_block* cb = g_control.load(std::memory_order_acquire);
    const uint32_t seq = grant_load(grants_of(cb)->swap_command_seq, std::memory_order_acquire);
    CUcontext ctx = nullptr;
    {
      std::lock_guard<std::mutex> lock(a.mu);
      if (!a.allocs.empty()) ctx = a.allocs.begin()->second.ctx;
    }
    // Best-effort tenants are the likely victims: pin the pool in the background right away, so
    // their first swap-out is fast. A guaranteed tenant is swapped out only for another guaranteed
    // one; it pins the pool when first asked (pinning tens of GiB slows its own start-up).
    const bool eager = grant_load(grants_of(cb)->tenant_class) != GPUOS_CLASS_GUARANTEED;
    if (ctx != nullptr && eager) ensure_pool(*d, ctx);
    if (seq != ref(cb->swap_done_seq).load()) {
      const uint32_t cmd = grant_load(grants_of(cb)->swap_command, std::memory_order_acquire);
      if (ctx != nullptr && cmd == GPUOS_SWAP_OUT) ensure_pool(*d, ctx);
      {
        std::lock_guard<std::mutex> lock(a.mu);
        if (cmd == GPUOS_SWAP_OUT) swap_out_locked(*d, cb, a);
        if (cmd == GPUOS_SWAP_IN) swap_in_locked(*d, cb, a);
      }
      ref(cb->swap_done_seq).store(seq, std::memory_order_release);
      notify_activity(cb);
      continue;
    }
    futex_wait(&grants_of(cb)->swap_command_seq, seq, 200);
  }
}

// Waits (arena lock released meanwhile) until the tenant's memory is on the GPU.
void wait_resident(gpuos_control_block* cb, std::unique_lock<std::mutex>& lock) {
  while (ref(cb->swap_state).load() != GPUOS_SWAP_RESIDENT) {
    lock.unlock();
    if (grant_load(grants_of(cb)->gate, std::memory_order_acquire) == GPUOS_GATE_CLOSED) {
      LaunchDevice device;  // (the whole gate reopens as a partial one once the memory is back)
      wait_at_gate(cb, &device);  // says "waiting": the daemon brings the memory back before it opens the gate
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    lock.lock();
  }
}

std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

// The first movable allocation: from now on every call that touches device memory is bracketed
// (fast_path.h), and the daemon may command swaps.
void enable_locked(Arena& a, gpuos_control_block* cb) {
  if (a.enabled) return;
  a.enabled = true;
  g_swappable.store(true, std::memory_order_seq_cst);
  ref(cb->swappable).store(1);
  pthread_t thread;
  if (pthread_create(&thread, nullptr, &swapper_main, nullptr) == 0) {
    pthread_detach(thread);
  } else {
    log(LogLevel::kError, "swap: cannot start the swapper thread; this tenant's memory stays resident");
  }
  notify_activity(cb);
}

}  // namespace

bool swap_requested(const gpuos_control_block* cb) {
  static const bool wanted = [] {
    const char* v = std::getenv("GPUOS_SWAP");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return wanted && cb != nullptr && daemon_socket() >= 0;
}

CUresult arena_alloc(const GpuosDriverTable& d, gpuos_control_block* cb, CUdeviceptr* dptr,
                     std::size_t bytes, std::size_t* granted) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!vmm_available(d)) return CUDA_ERROR_NOT_SUPPORTED;
  CUcontext ctx = nullptr;
  if (CUresult r = d.cuCtxGetCurrent(&ctx); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  CUdevice dev = 0;
  if (CUresult r = d.cuCtxGetDevice(&dev); r != CUDA_SUCCESS) return r;
  if (dev < 0 || dev >= GPUOS_MAX_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
  Arena& a = arena();
  std::unique_lock<std::mutex> lock(a.mu);
  wait_resident(cb, lock);
  std::size_t& gran = a.granularity[dev];
  if (gran == 0) {
    CUmemAllocationProp prop = device_prop(dev);
    if (CUresult r = d.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        r != CUDA_SUCCESS || gran == 0) {
      gran = 0;
      return r != CUDA_SUCCESS ? r : CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  const std::size_t size = round_up(bytes, gran);
  CUdeviceptr va = 0;
  if (CUresult r = take_va(d, a, size, &va); r != CUDA_SUCCESS) return r;
  Allocation al;
  al.bytes = size;
  al.device = dev;
  al.ctx = ctx;
  if (CUresult r = map_physical(d, va, size, dev, &al.handle); r != CUDA_SUCCESS) {
    give_va(a, va, size);
    return r;
  }
  a.allocs.emplace(va, al);
  ref(cb->swappable_bytes).fetch_add(size);
  enable_locked(a, cb);
  *dptr = va;
  *granted = size;
  return CUDA_SUCCESS;
}

bool arena_free(const GpuosDriverTable& d, CUdeviceptr ptr, CUresult* result) {
  Arena& a = arena();
  std::unique_lock<std::mutex> lock(a.mu);
  auto it = a.allocs.find(ptr);
  if (it == a.allocs.end() || !it->second.owns_va) return false;
  Allocation al = it->second;
  gpuos_control_block* cb = g_control.load(std::memory_order_acquire);
  if (al.handle != 0) {
    // Like cuMemFree: work still queued may use the memory; wait for it before unmapping.
    CUresult r = in_context(d, al.ctx, [&] { return d.cuCtxSynchronize(); });
    if (r != CUDA_SUCCESS) {
      *result = r;
      return true;
    }
    unmap_physical(d, ptr, al);
  } else if (cb != nullptr) {
    ref(cb->swapped_bytes).fetch_sub(al.bytes);
  }
  if (cb != nullptr) ref(cb->swappable_bytes).fetch_sub(al.bytes);
  a.allocs.erase(it);
  give_va(a, ptr, al.bytes);
  *result = CUDA_SUCCESS;
  return true;
}

CUresult arena_map_at(const GpuosDriverTable& d, gpuos_control_block* cb, CUcontext ctx, int device,
                      const CUdeviceptr* vas, std::size_t count, std::size_t bytes_each) {
  if (!vmm_available(d)) return CUDA_ERROR_NOT_SUPPORTED;
  if (count == 0) return CUDA_SUCCESS;
  Arena& a = arena();
  std::unique_lock<std::mutex> lock(a.mu);
  wait_resident(cb, lock);
  // Batched: every handle first, then every mapping, then one cuMemSetAccess per contiguous run of
  // addresses (the driver's cost is per physical allocation either way; batching saves the calls).
  std::vector<CUmemGenericAllocationHandle> handles(count, 0);
  CUmemAllocationProp prop = device_prop(device);
  std::size_t mapped = 0;
  auto unwind = [&](CUresult r) {
    for (std::size_t i = 0; i < count; ++i) {
      if (i < mapped) d.cuMemUnmap(vas[i], bytes_each);
      if (handles[i] != 0) d.cuMemRelease(handles[i]);
    }
    return r;
  };
  return in_context(d, ctx, [&]() -> CUresult {
    for (std::size_t i = 0; i < count; ++i) {
      if (CUresult r = d.cuMemCreate(&handles[i], bytes_each, &prop, 0); r != CUDA_SUCCESS) {
        handles[i] = 0;
        return unwind(r);
      }
    }
    for (; mapped < count; ++mapped) {
      if (CUresult r = d.cuMemMap(vas[mapped], bytes_each, 0, handles[mapped], 0); r != CUDA_SUCCESS) return unwind(r);
    }
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (std::size_t i = 0; i < count;) {
      std::size_t j = i + 1;
      while (j < count && vas[j] == vas[j - 1] + bytes_each) ++j;
      if (CUresult r = d.cuMemSetAccess(vas[i], (j - i) * bytes_each, &access, 1); r != CUDA_SUCCESS) return unwind(r);
      i = j;
    }
    for (std::size_t i = 0; i < count; ++i) {
      Allocation al;
      al.bytes = bytes_each;
      al.device = device;
      al.ctx = ctx;
      al.handle = handles[i];
      al.owns_va = false;
      a.allocs[vas[i]] = al;
    }
    ref(cb->swappable_bytes).fetch_add(count * bytes_each);
    enable_locked(a, cb);
    return CUDA_SUCCESS;
  });
}

CUresult arena_unmap_at(const GpuosDriverTable& d, gpuos_control_block* cb, const CUdeviceptr* vas, std::size_t count,
                        ArenaReleased released, void* ctx) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  std::vector<CUcontext> synced;
  for (std::size_t i = 0; i < count; ++i) {
    auto it = a.allocs.find(vas[i]);
    if (it == a.allocs.end() || it->second.owns_va) return CUDA_ERROR_INVALID_VALUE;
    const Allocation& al = it->second;
    // Like cuMemFree: work still queued may read the memory; wait for it before unmapping (once
    // per context).
    if (al.handle != 0 && std::find(synced.begin(), synced.end(), al.ctx) == synced.end()) {
      if (CUresult r = in_context(d, al.ctx, [&] { return d.cuCtxSynchronize(); }); r != CUDA_SUCCESS) return r;
      synced.push_back(al.ctx);
    }
  }
  for (std::size_t i = 0; i < count; ++i) {
    auto it = a.allocs.find(vas[i]);
    const Allocation al = it->second;
    if (al.handle != 0) {
      unmap_physical(d, vas[i], al);
    } else {
      ref(cb->swapped_bytes).fetch_sub(al.bytes);  // its bytes in the pool are simply dropped
    }
    ref(cb->swappable_bytes).fetch_sub(al.bytes);
    a.allocs.erase(it);
    if (released != nullptr) released(ctx, i);
  }
  return CUDA_SUCCESS;
}

uint64_t arena_swapped_in(CUdeviceptr base, std::size_t size) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  uint64_t out = 0;
  for (auto it = a.allocs.lower_bound(base); it != a.allocs.end() && it->first < base + size; ++it) {
    if (it->second.handle == 0) out += it->second.bytes;
  }
  return out;
}

bool wait_for_room(gpuos_control_block* cb, uint64_t bytes, int device) {
  if (cb == nullptr || daemon_socket() < 0 || grant_load(grants_of(cb)->daemon_alive) == 0) return false;
  const uint64_t t0 = monotonic_ns();
  ref(cb->mem_wanted_bytes).store(bytes);
  CUdevice dev = device;
  const GpuosDriverTable* d = real_driver();
  if (dev < 0 && (d == nullptr || d->cuCtxGetDevice == nullptr || d->cuCtxGetDevice(&dev) != CUDA_SUCCESS)) dev = 0;
  ref(cb->mem_wanted_device).store(static_cast<int32_t>(dev));
  const uint32_t seq = ref(cb->mem_request_seq).fetch_add(1, std::memory_order_seq_cst) + 1;
  notify_activity(cb);
  bool answered = false;
  for (;;) {
    const uint32_t ans = grant_load(grants_of(cb)->mem_answer_seq, std::memory_order_acquire);
    if (static_cast<int32_t>(ans - seq) >= 0) {
      answered = true;
      break;
    }
    if (grant_load(grants_of(cb)->daemon_alive) == 0 || daemon_connection_lost()) break;
    if (futex_wait(&grants_of(cb)->mem_answer_seq, ans, 100)) note_signalled(cb);
  }
  ref(cb->signalled).store(0);
  ref(cb->mem_waits).fetch_add(1);
  ref(cb->mem_wait_ns).fetch_add(monotonic_ns() - t0);
  return answered && grant_load(grants_of(cb)->mem_answer, std::memory_order_acquire) == GPUOS_MEM_RETRY;
}

bool swap_in_locally(gpuos_control_block* cb) {
  if (cb == nullptr || ref(cb->swap_state).load() == GPUOS_SWAP_RESIDENT) return true;
  const GpuosDriverTable* d = real_driver();
  if (d == nullptr) return false;
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  if (ref(cb->swap_state).load() == GPUOS_SWAP_RESIDENT) return true;
  return swap_in_locked(*d, cb, a);
}

namespace {

// Re-registration: the memory is resident then (swap_in_locally ran before the old gate was opened),
// so what moves is whether the tenant is swappable, how much of it could move, and the counters.
void carry_swap_state(gpuos_control_block* from, gpuos_control_block* to) {
  ref(to->swappable_bytes).store(ref(from->swappable_bytes).load());
  auto add = [](uint64_t& src, uint64_t& dst) { ref(dst).fetch_add(ref(src).load()); };
  add(from->swap_outs, to->swap_outs);
  add(from->swap_ins, to->swap_ins);
  add(from->swap_out_bytes, to->swap_out_bytes);
  add(from->swap_in_bytes, to->swap_in_bytes);
  add(from->swap_out_ns, to->swap_out_ns);
  add(from->swap_in_ns, to->swap_in_ns);
  add(from->mem_waits, to->mem_waits);
  add(from->mem_wait_ns, to->mem_wait_ns);
  ref(to->max_swap_in_ns).store(ref(from->max_swap_in_ns).load());
  ref(to->swappable).store(ref(from->swappable).load());
}

}  // namespace

constinit const CarryOver kSwapCarryOver{"swap", nullptr, &carry_swap_state};

}  // namespace gpuos::interpose
