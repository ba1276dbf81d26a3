// SPDX-License-Identifier: Apache-2.0
// Device memory: host memory in this process (a device pointer is a plain host address), with
// its size accounted in the shared segment so all processes see one device's capacity.
// VMM physical allocations are memfds mapped with MAP_FIXED into reserved ranges, so their data
// stays put across unmap/remap, as on the real device. An allocation exported with
// cuIpcGetMemHandle moves onto a memfd the same way (same address, same data), which another
// process maps through /proc/<pid>/fd. CUDA arrays take device memory but have no address.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "driver_double/internal.h"

namespace dd {
namespace {

struct Phys {  // one cuMemCreate allocation
  int fd = -1;
  uint64_t size = 0;
  int dev = 0;
  int maps = 0;
  bool released = false;
};

struct Alloc {
  // kRegistered: the caller's own host memory, registered with cuMemHostRegister (never unmapped
  // or accounted by the double). kGraph: the address of a graph allocation (graph_mem_alloc; its
  // memory is the graph memory pool's). kIpcImport: another process's allocation mapped in
  // (accounted to that process).
  enum class Kind { kDevice, kManaged, kHost, kVmmMap, kRegistered, kGraph, kIpcImport } kind = Kind::kDevice;
  uint64_t size = 0;      // as requested
  uint64_t map_size = 0;  // as mapped and accounted
  int dev = 0;
  Context* ctx = nullptr;
  Phys* phys = nullptr;  // kVmmMap
  // kGraph: the address lives while its graph (the node) does, an exec uses it, or it is allocated.
  Graph* graph = nullptr;       // its graph, until destroyed
  Graph* freed_by = nullptr;    // another graph whose free node frees it
  bool freed_in_graph = false;  // a free node of its own graph frees it
  bool live = false;            // not freed in its graph: allocated by a launch, not freed yet
  uint64_t held = 0;            // live, and its exec's mapping is gone: pool bytes it keeps in use
  int execs = 0;                // executable graphs that use it
  int ipc_fd = -1;            // kDevice after cuIpcGetMemHandle: the memfd backing it
  int32_t ipc_pid = 0;        // kIpcImport: the exporter; with ipc_serial, which export
  uint64_t ipc_serial = 0;    // kDevice exported, kIpcImport
  int ipc_opens = 0;          // kIpcImport: opens not yet closed (the driver counts references)
};

// A CUDA array or mipmapped array: device memory without an address (copies to and from arrays
// are not modelled). The handle is the object's address.
struct Array {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  unsigned levels = 0;   // 0: an array; else a mipmapped array of that many levels
  uint64_t size = 0;     // its memory requirement
  uint64_t charged = 0;  // device memory it holds (0 with CUDA_ARRAY3D_DEFERRED_MAPPING)
  int dev = 0;
  Context* ctx = nullptr;
};

struct Memory {
  std::mutex mu;
  std::map<uint64_t, Alloc> allocs;           // by base address
  std::map<uint64_t, uint64_t> reservations;  // base -> size (cuMemAddressReserve)
  std::unordered_set<Phys*> phys;
  std::unordered_set<Array*> arrays;
  uint64_t ipc_exports = 0;  // serial numbers of exports
};
Memory& mem() {
  static auto* m = new Memory();
  return *m;
}

uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }
uint64_t page() {
  static const uint64_t p = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return p;
}

// Under mem().mu: the allocation containing [p, p+n), or allocs.end().
std::map<uint64_t, Alloc>::iterator find_locked(uint64_t p, uint64_t n) {
  auto& a = mem().allocs;
  auto it = a.upper_bound(p);
  if (it == a.begin()) return a.end();
  --it;
  if (p >= it->first && p + n <= it->first + it->second.size && p + n >= p) return it;
  return a.end();
}

void destroy_phys_locked(Phys* ph) {
  mem().phys.erase(ph);
  close(ph->fd);
  mem_release(ph->dev, ph->size);
  delete ph;
}

// dev < 0: the current context's device.
CUresult alloc_memory(uint64_t* out, size_t bytes, Alloc::Kind kind, int dev = -1) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > (1ull << 62)) return CUDA_ERROR_OUT_OF_MEMORY;  // no device has that much
  if (dev < 0) dev = c->dev;
  const uint64_t map_size = round_up(bytes, page());
  const bool device = kind != Alloc::Kind::kHost;
  if (device) {
    if (CUresult r = mem_reserve(dev, map_size); r != CUDA_SUCCESS) return r;
  }
  void* p = mmap(nullptr, map_size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    if (device) mem_release(dev, map_size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Alloc a;
  a.kind = kind;
  a.size = bytes;
  a.map_size = map_size;
  a.dev = dev;
  a.ctx = c;
  std::lock_guard<std::mutex> l(mem().mu);
  mem().allocs[reinterpret_cast<uint64_t>(p)] = a;
  *out = reinterpret_cast<uint64_t>(p);
  return CUDA_SUCCESS;
}

// Unmaps and un-accounts an allocation that is already out of the table.
void release_alloc(uint64_t base, const Alloc& a) {
  if (a.kind == Alloc::Kind::kRegistered) return;  // the caller's memory: only forgotten
  munmap(reinterpret_cast<void*>(base), a.map_size);
  if (a.ipc_fd >= 0) close(a.ipc_fd);  // importers keep their own mappings of it
  if (a.kind != Alloc::Kind::kHost && a.kind != Alloc::Kind::kIpcImport && a.kind != Alloc::Kind::kGraph)
    mem_release(a.dev, a.map_size);
}

// Freeable with cuMemFree/cuMemFreeAsync: device memory, and graph allocations that a launch
// left allocated (not freed in their graph; before the launch, or after a free, there is nothing).
bool device_freeable(const Alloc& a) {
  return a.kind == Alloc::Kind::kDevice || a.kind == Alloc::Kind::kManaged ||
         (a.kind == Alloc::Kind::kGraph && a.live);
}

void graph_alloc_free_locked(std::map<uint64_t, Alloc>::iterator it);
void graph_alloc_forget_locked(Alloc& a);

CUresult free_memory(uint64_t p, bool host) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (p == 0) return CUDA_SUCCESS;
  Alloc a;
  {
    std::lock_guard<std::mutex> l(mem().mu);
    auto it = mem().allocs.find(p);
    if (it == mem().allocs.end() ||
        (host ? it->second.kind != Alloc::Kind::kHost : !device_freeable(it->second)))
      return CUDA_ERROR_INVALID_VALUE;
    a = it->second;
  }
  // cuMemFree synchronises with the device: work still using the memory finishes first.
  if (context_alive(a.ctx)) sync_context(a.ctx);
  if (a.kind == Alloc::Kind::kGraph) {  // back to the graph memory pool, which keeps it
    std::lock_guard<std::mutex> l(mem().mu);
    auto it = mem().allocs.find(p);
    if (it == mem().allocs.end() || !it->second.live) return CUDA_ERROR_INVALID_VALUE;
    graph_alloc_free_locked(it);
    return CUDA_SUCCESS;
  }
  {
    std::lock_guard<std::mutex> l(mem().mu);
    if (mem().allocs.erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;  // freed concurrently
  }
  release_alloc(p, a);
  return CUDA_SUCCESS;
}

// ---- copies and memsets ----
enum Check : unsigned { kNone = 0, kDst = 1, kSrc = 2 };

CUresult copy(uint64_t dst, uint64_t src, size_t n, unsigned check, CUstream h, bool async,
              bool per_thread) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  if (((check & kDst) && !valid_range(dst, n)) || ((check & kSrc) && !valid_range(src, n)))
    return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = resolve_stream(async ? h : nullptr, per_thread, &s); r != CUDA_SUCCESS) return r;
  if (CUresult r = context_sticky(s->ctx); r != CUDA_SUCCESS) return r;
  return submit_host_op(
      s, [dst, src, n] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), n); },
      !async);
}

template <class T>
CUresult memset_n(uint64_t dst, T value, size_t n, CUstream h, bool async, bool per_thread) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst % sizeof(T) != 0 || !valid_range(dst, n * sizeof(T))) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = resolve_stream(async ? h : nullptr, per_thread, &s); r != CUDA_SUCCESS) return r;
  if (CUresult r = context_sticky(s->ctx); r != CUDA_SUCCESS) return r;
  return submit_host_op(
      s,
      [dst, value, n] {
        T* p = reinterpret_cast<T*>(dst);
        for (size_t i = 0; i < n; ++i) p[i] = value;
      },
      !async);
}

CUresult impl_cuMemcpyHtoD_v2(CUdeviceptr d, const void* h, size_t n, bool pt) {
  return copy(d, reinterpret_cast<uint64_t>(h), n, kDst, nullptr, false, pt);
}
CUresult impl_cuMemcpyDtoH_v2(void* h, CUdeviceptr d, size_t n, bool pt) {
  return copy(reinterpret_cast<uint64_t>(h), d, n, kSrc, nullptr, false, pt);
}
CUresult impl_cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n, bool pt) {
  return copy(d, s, n, kDst | kSrc, nullptr, false, pt);
}
CUresult impl_cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n, bool pt) {
  return copy(d, s, n, kNone, nullptr, false, pt);
}
CUresult impl_cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* h, size_t n, CUstream st, bool pt) {
  return copy(d, reinterpret_cast<uint64_t>(h), n, kDst, st, true, pt);
}
CUresult impl_cuMemcpyDtoHAsync_v2(void* h, CUdeviceptr d, size_t n, CUstream st, bool pt) {
  return copy(reinterpret_cast<uint64_t>(h), d, n, kSrc, st, true, pt);
}
CUresult impl_cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st, bool pt) {
  return copy(d, s, n, kDst | kSrc, st, true, pt);
}
CUresult impl_cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st, bool pt) {
  return copy(d, s, n, kNone, st, true, pt);
}
CUresult impl_cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n, bool pt) {
  return memset_n<unsigned char>(d, v, n, nullptr, false, pt);
}
CUresult impl_cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n, bool pt) {
  return memset_n<unsigned short>(d, v, n, nullptr, false, pt);
}
CUresult impl_cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n, bool pt) {
  return memset_n<unsigned int>(d, v, n, nullptr, false, pt);
}
CUresult impl_cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st, bool pt) {
  return memset_n<unsigned char>(d, v, n, st, true, pt);
}
CUresult impl_cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream st, bool pt) {
  return memset_n<unsigned short>(d, v, n, st, true, pt);
}
CUresult impl_cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream st, bool pt) {
  return memset_n<unsigned int>(d, v, n, st, true, pt);
}

// Peer copies: one address space for all devices here, so only the contexts' validity matters.
CUresult peer_copy(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st,
                   bool async, bool pt) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!context_alive(reinterpret_cast<Context*>(dc)) ||
      !context_alive(reinterpret_cast<Context*>(sc)))
    return CUDA_ERROR_INVALID_CONTEXT;
  return copy(d, s, n, kDst | kSrc, st, async, pt);
}
CUresult impl_cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n,
                           bool pt) {
  return peer_copy(d, dc, s, sc, n, nullptr, false, pt);
}
CUresult impl_cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n,
                                CUstream st, bool pt) {
  return peer_copy(d, dc, s, sc, n, st, true, pt);
}

// One side of a 2D copy: the address of its first byte, and whether it must lie in a live
// allocation (device memory; host and unified pointers may be any host memory). Arrays are not
// modelled.
CUresult copy2d_side(CUmemorytype type, const void* host, CUdeviceptr dev, size_t x, size_t y,
                     size_t pitch, size_t width, size_t height, uint64_t* addr, bool* check) {
  uint64_t base = 0;
  switch (type) {
    case CU_MEMORYTYPE_HOST: base = reinterpret_cast<uint64_t>(host), *check = false; break;
    case CU_MEMORYTYPE_DEVICE: base = dev, *check = true; break;
    case CU_MEMORYTYPE_UNIFIED: base = dev, *check = false; break;
    default: return CUDA_ERROR_INVALID_VALUE;  // CU_MEMORYTYPE_ARRAY and garbage
  }
  if (base == 0 || x + width < x || x + width > pitch) return CUDA_ERROR_INVALID_VALUE;
  uint64_t off = 0, extent = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(y), pitch, &off) ||
      __builtin_add_overflow(off, x, &off) || __builtin_add_overflow(base, off, addr) ||
      __builtin_mul_overflow(static_cast<uint64_t>(height - 1), pitch, &extent) ||
      __builtin_add_overflow(extent, width, &extent) || *addr + extent < *addr)
    return CUDA_ERROR_INVALID_VALUE;
  if (*check && !valid_range(*addr, extent)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult copy2d(const CUDA_MEMCPY2D* pc, CUstream h, bool async, bool per_thread) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  if (pc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t width = pc->WidthInBytes, height = pc->Height;
  const size_t spitch = pc->srcPitch, dpitch = pc->dstPitch;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  uint64_t src = 0, dst = 0;
  bool check = false;
  if (CUresult r = copy2d_side(pc->srcMemoryType, pc->srcHost, pc->srcDevice, pc->srcXInBytes,
                               pc->srcY, spitch, width, height, &src, &check);
      r != CUDA_SUCCESS)
    return r;
  if (CUresult r = copy2d_side(pc->dstMemoryType, pc->dstHost, pc->dstDevice, pc->dstXInBytes,
                               pc->dstY, dpitch, width, height, &dst, &check);
      r != CUDA_SUCCESS)
    return r;
  StreamPtr s;
  if (CUresult r = resolve_stream(async ? h : nullptr, per_thread, &s); r != CUDA_SUCCESS) return r;
  if (CUresult r = context_sticky(s->ctx); r != CUDA_SUCCESS) return r;
  return submit_host_op(
      s,
      [dst, src, width, height, spitch, dpitch] {
        for (size_t row = 0; row < height; ++row) {
          std::memmove(reinterpret_cast<void*>(dst + row * dpitch),
                       reinterpret_cast<const void*>(src + row * spitch), width);
        }
      },
      !async);
}
CUresult impl_cuMemcpy2D_v2(const CUDA_MEMCPY2D* pc, bool pt) {
  return copy2d(pc, nullptr, false, pt);
}
CUresult impl_cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* pc, CUstream st, bool pt) {
  return copy2d(pc, st, true, pt);
}

// ---- stream-ordered allocation (allocates at once; frees in stream order) ----
CUresult impl_cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream h, bool pt) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, pt, &s); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->capturing) {  // becomes a memory alloc node of the graph being captured
      if (s->capture_invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
      uint64_t p = 0;
      if (CUresult r = graph_mem_alloc(s->capture_graph, s->ctx->dev, bytes, &p); r != CUDA_SUCCESS)
        return r;
      add_mem_node(s->capture_graph, GraphNode::Type::kMemAlloc, p, bytes, s->ctx->dev);
      *dptr = p;
      return CUDA_SUCCESS;
    }
  }
  uint64_t p = 0;
  CUresult r = alloc_memory(dptr ? &p : nullptr, bytes, Alloc::Kind::kDevice);
  if (r == CUDA_SUCCESS) *dptr = p;
  return r;
}
CUresult impl_cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                      CUstream h, bool pt) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return impl_cuMemAllocAsync(dptr, bytes, h, pt);
}
CUresult impl_cuMemFreeAsync(CUdeviceptr p, CUstream h, bool pt) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, pt, &s); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->capturing) {  // becomes a memory free node of the graph being captured
      if (s->capture_invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      if (CUresult r = graph_mem_free(s->capture_graph, p); r != CUDA_SUCCESS) return r;
      add_mem_node(s->capture_graph, GraphNode::Type::kMemFree, p);
      return CUDA_SUCCESS;
    }
  }
  {
    std::lock_guard<std::mutex> l(mem().mu);
    auto it = mem().allocs.find(p);
    if (it == mem().allocs.end() ||
        (it->second.kind != Alloc::Kind::kDevice && !(it->second.kind == Alloc::Kind::kGraph && it->second.live)))
      return CUDA_ERROR_INVALID_VALUE;
    // A graph allocation goes back to the graph memory pool at the call, not in stream order (the
    // pool keeps the memory either way).
    if (it->second.kind == Alloc::Kind::kGraph) {
      graph_alloc_free_locked(it);
      return CUDA_SUCCESS;
    }
  }
  enqueue(s, Op{[p] {
                  Alloc a;
                  {
                    std::lock_guard<std::mutex> l(mem().mu);
                    auto it = mem().allocs.find(p);
                    if (it == mem().allocs.end()) return;
                    a = it->second;
                    mem().allocs.erase(it);
                  }
                  release_alloc(p, a);
                },
                false});
  return CUDA_SUCCESS;
}


// ---- CUDA arrays ----
constexpr uint64_t kArrayAlignment = 64 * 1024;  // sizes are whole 64 KiB units
constexpr unsigned kArrayFlags = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST |
                                 CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_TEXTURE_GATHER |
                                 CUDA_ARRAY3D_DEPTH_TEXTURE | CUDA_ARRAY3D_COLOR_ATTACHMENT |
                                 CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING;

// Bytes per channel of the formats the double models; 0 for the rest (video and block-compressed
// formats, garbage).
uint64_t channel_bytes(CUarray_format f, unsigned channels) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT:
      return 4;
    // The normalized formats name their channel count: NumChannels must match it.
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1: return channels == 1 ? 1 : 0;
    case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2: return channels == 2 ? 1 : 0;
    case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4: return channels == 4 ? 1 : 0;
    case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X1: return channels == 1 ? 2 : 0;
    case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X2: return channels == 2 ? 2 : 0;
    case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X4: return channels == 4 ? 2 : 0;
    default: return 0;
  }
}

// Device bytes of an array (levels == 0) or mipmapped array: each level's rows padded to 512
// bytes, the total to 64 KiB; false if it cannot be represented.
bool array_size(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels, uint64_t* out) {
  const uint64_t elem = channel_bytes(d.Format, d.NumChannels) * d.NumChannels;
  const bool layers = (d.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  uint64_t total = 0;
  for (unsigned i = 0; i < (levels == 0 ? 1 : levels); ++i) {
    auto half = [i](uint64_t x) -> uint64_t { return x == 0 ? 1 : (x >> i) == 0 ? 1 : x >> i; };
    uint64_t row = 0, bytes = 0;
    if (__builtin_mul_overflow(half(d.Width), elem, &row) || row > (1ull << 40) ||
        __builtin_mul_overflow(round_up(row, 512), half(d.Height), &bytes) ||
        __builtin_mul_overflow(bytes, layers ? (d.Depth == 0 ? 1 : d.Depth) : half(d.Depth), &bytes) ||
        __builtin_add_overflow(total, bytes, &total) || total > (1ull << 62))
      return false;
  }
  *out = round_up(total, kArrayAlignment);
  return true;
}

// The driver's checks of an array descriptor (levels: 0 for a plain array).
CUresult check_array(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels, bool mipmapped) {
  if (d.Width == 0 || (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4) ||
      (d.Flags & ~kArrayFlags) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  const bool layered = (d.Flags & CUDA_ARRAY3D_LAYERED) != 0;
  if (d.Height == 0 && d.Depth != 0 && !layered) return CUDA_ERROR_INVALID_VALUE;
  if ((d.Flags & CUDA_ARRAY3D_CUBEMAP) &&
      (d.Width != d.Height || d.Depth == 0 || d.Depth % 6 != 0 || (!layered && d.Depth != 6)))
    return CUDA_ERROR_INVALID_VALUE;
  if (mipmapped) {
    uint64_t largest = d.Width > d.Height ? d.Width : d.Height;
    if (!layered && !(d.Flags & CUDA_ARRAY3D_CUBEMAP) && d.Depth > largest) largest = d.Depth;
    unsigned max_levels = 1;
    while ((largest >>= 1) != 0) ++max_levels;
    if (levels == 0 || levels > max_levels) return CUDA_ERROR_INVALID_VALUE;
  }
  if (d.Flags & CUDA_ARRAY3D_SPARSE) return CUDA_ERROR_NOT_SUPPORTED;  // tile mapping: not modelled
  if (channel_bytes(d.Format, d.NumChannels) == 0) {
    return CUDA_ERROR_NOT_SUPPORTED;  // video and block-compressed formats: not modelled
  }
  return CUDA_SUCCESS;
}

CUresult create_array(void** out, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned levels,
                      bool mipmapped) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  if (out == nullptr || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_array(*desc, levels, mipmapped); r != CUDA_SUCCESS) return r;
  auto a = std::make_unique<Array>();
  a->desc = *desc;
  a->levels = mipmapped ? levels : 0;
  a->dev = c->dev;
  a->ctx = c;
  if (!array_size(*desc, a->levels, &a->size)) return CUDA_ERROR_OUT_OF_MEMORY;
  a->charged = (desc->Flags & CUDA_ARRAY3D_DEFERRED_MAPPING) ? 0 : a->size;
  if (a->charged != 0) {
    if (CUresult r = mem_reserve(a->dev, a->charged); r != CUDA_SUCCESS) return r;
  }
  std::lock_guard<std::mutex> l(mem().mu);
  mem().arrays.insert(a.get());
  *out = a.release();
  return CUDA_SUCCESS;
}

CUresult destroy_array(void* h, bool mipmapped) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  auto* a = static_cast<Array*>(h);
  {
    std::lock_guard<std::mutex> l(mem().mu);
    auto it = mem().arrays.find(a);
    if (it == mem().arrays.end() || (a->levels != 0) != mipmapped) return CUDA_ERROR_INVALID_HANDLE;
    mem().arrays.erase(it);
  }
  if (a->charged != 0) mem_release(a->dev, a->charged);
  delete a;
  return CUDA_SUCCESS;
}

// The memory requirements of a deferred-mapping array (the only kind the driver answers for).
CUresult array_requirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, void* h, CUdevice dev,
                            bool mipmapped) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (req == nullptr || dev < 0 || dev >= config().devices) return CUDA_ERROR_INVALID_VALUE;
  auto* a = static_cast<Array*>(h);
  std::lock_guard<std::mutex> l(mem().mu);
  if (mem().arrays.count(a) == 0 || (a->levels != 0) != mipmapped ||
      (a->desc.Flags & CUDA_ARRAY3D_DEFERRED_MAPPING) == 0)
    return CUDA_ERROR_INVALID_VALUE;
  std::memset(req, 0, sizeof(*req));
  req->size = a->size;
  req->alignment = kArrayAlignment;
  return CUDA_SUCCESS;
}

// ---- CUDA IPC ----
// A handle names the exporter's memfd by pid and descriptor number, and the export by a serial
// number that is also in the memfd's name, so a stale handle (freed memory, a reused descriptor, a
// dead exporter) is refused instead of mapping something else.
constexpr uint64_t kIpcMagic = 0x6770756f73495043ull;  // "gpuosIPC"
struct IpcBlob {
  uint64_t magic;
  int32_t pid;
  int32_t fd;
  uint64_t size;      // as allocated
  uint64_t map_size;  // as mapped
  uint64_t serial;
  int32_t dev;
};
static_assert(sizeof(IpcBlob) <= sizeof(CUipcMemHandle), "an IPC handle holds the blob");

void ipc_name(char* buf, size_t len, int32_t pid, uint64_t serial) {
  std::snprintf(buf, len, "gpuos-sim-ipc-%d-%llu", static_cast<int>(pid),
                static_cast<unsigned long long>(serial));
}

// Under mem().mu: moves allocation a (at base) onto a memfd, keeping its address and data.
CUresult export_locked(uint64_t base, Alloc& a) {
  if (a.ipc_fd >= 0) return CUDA_SUCCESS;
  const uint64_t serial = ++mem().ipc_exports;
  char name[64];
  ipc_name(name, sizeof name, getpid(), serial);
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  bool ok = ftruncate(fd, static_cast<off_t>(a.map_size)) == 0;
  for (uint64_t off = 0; ok && off < a.map_size;) {
    ssize_t n = pwrite(fd, reinterpret_cast<const char*>(base) + off, a.map_size - off,
                       static_cast<off_t>(off));
    ok = n > 0;
    off += ok ? static_cast<uint64_t>(n) : 0;
  }
  if (!ok || mmap(reinterpret_cast<void*>(base), a.map_size, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_MAP_FAILED;
  }
  a.ipc_fd = fd;
  a.ipc_serial = serial;
  return CUDA_SUCCESS;
}

CUresult ipc_open(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned flags) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  if (pdptr == nullptr || (flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  IpcBlob b;
  std::memcpy(&b, handle.reserved, sizeof b);
  if (b.magic != kIpcMagic || b.pid <= 0 || b.fd < 0 || b.map_size == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (b.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;  // only another process may open it
  std::lock_guard<std::mutex> l(mem().mu);
  for (auto& [base, a] : mem().allocs) {  // opened before: the same pointer, one more reference
    if (a.kind == Alloc::Kind::kIpcImport && a.ipc_pid == b.pid && a.ipc_serial == b.serial) {
      ++a.ipc_opens;
      *pdptr = base;
      return CUDA_SUCCESS;
    }
  }
  char path[64], want[80], got[128];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", static_cast<int>(b.pid), static_cast<int>(b.fd));
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;  // the exporter or its memory is gone
  // What was opened must be that export's memfd (checked on our own descriptor: no race).
  char self[64];
  std::snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(self, got, sizeof got - 1);
  got[n > 0 ? n : 0] = '\0';
  char name[64];
  ipc_name(name, sizeof name, b.pid, b.serial);
  std::snprintf(want, sizeof want, "/memfd:%s ", name);
  struct stat st{};
  if (std::strncmp(got, want, std::strlen(want)) != 0 || fstat(fd, &st) != 0 ||
      static_cast<uint64_t>(st.st_size) < b.map_size) {
    close(fd);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  void* p = mmap(nullptr, b.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return CUDA_ERROR_MAP_FAILED;
  Alloc a;
  a.kind = Alloc::Kind::kIpcImport;
  a.size = b.size;
  a.map_size = b.map_size;
  a.dev = c->dev;
  a.ctx = c;
  a.ipc_pid = b.pid;
  a.ipc_serial = b.serial;
  a.ipc_opens = 1;
  mem().allocs[reinterpret_cast<uint64_t>(p)] = a;
  *pdptr = reinterpret_cast<uint64_t>(p);
  return CUDA_SUCCESS;
}
}  // namespace

bool valid_range(uint64_t p, uint64_t n) {
  // Inside one allocation, or across back-to-back ones (e.g. VMM chunks mapped side by side).
  const uint64_t end = p + n;
  if (end < p) return false;
  std::lock_guard<std::mutex> l(mem().mu);
  auto& a = mem().allocs;
  auto it = a.upper_bound(p);
  if (it == a.begin()) return false;
  --it;
  if (p > it->first + it->second.size) return false;
  for (;;) {
    const uint64_t e = it->first + it->second.size;
    if (end <= e) return true;
    ++it;
    if (it == a.end() || it->first != e) return false;
  }
}

void free_context_allocations(Context* ctx) {
  std::vector<std::pair<uint64_t, Alloc>> gone;
  {
    std::lock_guard<std::mutex> l(mem().mu);
    auto& a = mem().allocs;
    for (auto it = a.begin(); it != a.end();) {
      if (it->second.ctx == ctx && it->second.kind != Alloc::Kind::kVmmMap) {
        if (it->second.kind == Alloc::Kind::kGraph) graph_alloc_forget_locked(it->second);
        gone.emplace_back(*it);
        it = a.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [base, al] : gone) release_alloc(base, al);
  std::vector<Array*> arrays;
  {
    std::lock_guard<std::mutex> l(mem().mu);
    for (auto it = mem().arrays.begin(); it != mem().arrays.end();) {
      if ((*it)->ctx == ctx) {
        arrays.push_back(*it);
        it = mem().arrays.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Array* a : arrays) {
    if (a->charged != 0) mem_release(a->dev, a->charged);
    delete a;
  }
}

// ---- graph memory (see internal.h) ----
namespace {

struct GraphPool {  // one device's graph memory pool; under mem().mu
  uint64_t reserved = 0;  // taken from the device, in chunks
  uint64_t in_use = 0;    // mapped by execs, or kept by live allocations whose exec let go
  uint64_t reserved_high = 0, used_high = 0;
};
GraphPool& pool(int dev) {
  static auto* p = new GraphPool[kMaxDevices];
  return p[dev];
}
std::unordered_set<GraphExecMem*>& exec_mems() {  // live ones, for trimming
  static auto* s = new std::unordered_set<GraphExecMem*>();
  return *s;
}

uint64_t graph_pages(uint64_t bytes) { return round_up(bytes, kGraphPageBytes); }

// Under mem().mu: the graph allocation at p, or allocs.end() (also when its context went and the
// address now holds something else).
std::map<uint64_t, Alloc>::iterator find_graph(uint64_t p) {
  auto it = mem().allocs.find(p);
  return it != mem().allocs.end() && it->second.kind == Alloc::Kind::kGraph ? it : mem().allocs.end();
}

// Under mem().mu: drops the address if nothing needs it any more.
void graph_addr_maybe_release(std::map<uint64_t, Alloc>::iterator it) {
  const Alloc& a = it->second;
  if (a.graph != nullptr || a.execs > 0 || a.live) return;
  munmap(reinterpret_cast<void*>(it->first), a.map_size);
  mem().allocs.erase(it);
}

// Under mem().mu: the exec's mapping goes back to the pool (which keeps it). Its unfreed
// allocations that are still allocated keep their pages in use.
void unmap_locked(GraphExecMem& m) {
  if (!m.mapped) return;
  m.mapped = false;
  for (int d = 0; d < kMaxDevices; ++d) pool(d).in_use -= m.need[d];
  for (const auto& u : m.allocs) {
    auto it = find_graph(u.dptr);
    if (!u.unfreed || it == mem().allocs.end() || !it->second.live) continue;
    it->second.held = graph_pages(it->second.size);
    pool(it->second.dev).in_use += it->second.held;
  }
}

// Under mem().mu: exec m is gone for good.
void exec_mem_release_locked(GraphExecMem& m) {
  unmap_locked(m);
  exec_mems().erase(&m);
  for (const auto& u : m.allocs) {
    auto it = find_graph(u.dptr);
    if (it == mem().allocs.end()) continue;
    --it->second.execs;
    graph_addr_maybe_release(it);
  }
}

void note_highs(GraphPool& p) {
  p.reserved_high = std::max(p.reserved_high, p.reserved);
  p.used_high = std::max(p.used_high, p.reserved);
}

// Under mem().mu: a graph allocation goes with its context; what it kept in use goes back.
void graph_alloc_forget_locked(Alloc& a) {
  pool(a.dev).in_use -= a.held;
  a.held = 0;
}

// Under mem().mu: a live graph allocation is freed (its memory stays in the pool).
void graph_alloc_free_locked(std::map<uint64_t, Alloc>::iterator it) {
  Alloc& a = it->second;
  a.live = false;
  pool(a.dev).in_use -= a.held;
  a.held = 0;
  graph_addr_maybe_release(it);
}

}  // namespace

CUresult graph_mem_alloc(Graph* g, int dev, size_t bytes, uint64_t* out) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > (1ull << 62)) return CUDA_ERROR_OUT_OF_MEMORY;  // no device has that much
  // The address only: host memory reserved, never charged to the device (the pool is).
  const uint64_t map_size = round_up(bytes, page());
  void* p = mmap(nullptr, map_size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Alloc a;
  a.kind = Alloc::Kind::kGraph;
  a.size = bytes;
  a.map_size = map_size;
  a.dev = dev;
  a.ctx = c;
  a.graph = g;
  std::lock_guard<std::mutex> l(mem().mu);
  mem().allocs[reinterpret_cast<uint64_t>(p)] = a;
  *out = reinterpret_cast<uint64_t>(p);
  return CUDA_SUCCESS;
}

CUresult graph_mem_free(Graph* g, uint64_t dptr) {
  std::lock_guard<std::mutex> l(mem().mu);
  auto it = mem().allocs.find(dptr);
  if (it == mem().allocs.end() || it->second.kind != Alloc::Kind::kGraph ||
      it->second.freed_in_graph || it->second.freed_by != nullptr)
    return CUDA_ERROR_INVALID_VALUE;  // not a graph allocation, or freed by a node already
  if (it->second.graph == g) {
    it->second.freed_in_graph = true;
  } else {
    it->second.freed_by = g;
  }
  return CUDA_SUCCESS;
}

void graph_mem_release(Graph* g) {
  std::lock_guard<std::mutex> l(mem().mu);
  auto& a = mem().allocs;
  for (auto it = a.begin(); it != a.end();) {
    auto next = std::next(it);
    if (it->second.kind == Alloc::Kind::kGraph) {
      if (it->second.freed_by == g) it->second.freed_by = nullptr;
      if (it->second.graph == g) {
        it->second.graph = nullptr;
        graph_addr_maybe_release(it);
      }
    }
    it = next;
  }
}

GraphExecMemPtr graph_exec_mem_new(const std::vector<GraphNode>& nodes, const uint64_t (&need)[kMaxDevices]) {
  auto m = std::make_shared<GraphExecMem>();
  std::copy(std::begin(need), std::end(need), m->need);
  std::lock_guard<std::mutex> l(mem().mu);
  for (const GraphNode& n : nodes) {
    auto it = find_graph(n.dptr);
    if (it == mem().allocs.end()) continue;
    if (n.type == GraphNode::Type::kMemAlloc) {
      m->allocs.push_back({n.dptr, !it->second.freed_in_graph});
      ++it->second.execs;
    } else if (n.type == GraphNode::Type::kMemFree && !it->second.freed_in_graph) {
      m->frees.push_back(n.dptr);
    }
  }
  exec_mems().insert(m.get());
  return m;
}

CUresult graph_exec_mem_map(const GraphExecMemPtr& m, bool launch) {
  std::lock_guard<std::mutex> l(mem().mu);
  auto& allocs = mem().allocs;
  if (launch) {
    for (const auto& u : m->allocs) {
      auto it = find_graph(u.dptr);
      if (!u.unfreed || it == allocs.end() || !it->second.live) continue;
      if (!m->auto_free) return CUDA_ERROR_INVALID_VALUE;  // still allocated by the last launch
    }
    for (uint64_t p : m->frees) {
      auto it = find_graph(p);
      if (it == allocs.end() || !it->second.live) return CUDA_ERROR_INVALID_VALUE;  // nothing to free
    }
  }
  if (!m->mapped) {
    uint64_t grown[kMaxDevices] = {};
    for (int d = 0; d < kMaxDevices; ++d) {
      GraphPool& p = pool(d);
      if (m->need[d] == 0 || p.in_use + m->need[d] <= p.reserved) continue;
      grown[d] = round_up(p.in_use + m->need[d] - p.reserved, kGraphChunkBytes);
      if (mem_reserve(d, grown[d]) != CUDA_SUCCESS) {
        for (int e = 0; e < d; ++e) {
          if (grown[e] != 0) mem_release(e, grown[e]), pool(e).reserved -= grown[e];
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      p.reserved += grown[d];
    }
    for (int d = 0; d < kMaxDevices; ++d) {
      pool(d).in_use += m->need[d];
      note_highs(pool(d));
    }
    m->mapped = true;
  }
  if (!launch) return CUDA_SUCCESS;
  for (const auto& u : m->allocs) {
    auto it = find_graph(u.dptr);
    if (!u.unfreed || it == allocs.end()) continue;
    if (it->second.live) graph_alloc_free_locked(it);  // auto_free: as if cuMemFreeAsync'd first
    it = find_graph(u.dptr);
    if (it != allocs.end()) it->second.live = true;
  }
  for (uint64_t p : m->frees) {
    auto it = find_graph(p);
    if (it != allocs.end()) graph_alloc_free_locked(it);
  }
  ++m->inflight;
  return CUDA_SUCCESS;
}

void graph_exec_mem_done(const GraphExecMemPtr& m) {
  std::lock_guard<std::mutex> l(mem().mu);
  if (--m->inflight == 0 && m->destroyed) exec_mem_release_locked(*m);
}

void graph_exec_mem_destroy(const GraphExecMemPtr& m) {
  std::lock_guard<std::mutex> l(mem().mu);
  m->destroyed = true;
  if (m->inflight == 0) exec_mem_release_locked(*m);  // else when its last launch is done
}

CUresult graph_mem_attribute(int dev, int attr, void* value, bool set) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(mem().mu);
  GraphPool& p = pool(dev);
  auto* v = static_cast<cuuint64_t*>(value);
  // The pool keeps freed blocks mapped, so "used" is what it holds (as the H200 reports).
  uint64_t* high = nullptr;
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      if (set) return CUDA_ERROR_INVALID_VALUE;
      *v = p.reserved;
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: high = &p.used_high; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: high = &p.reserved_high; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  if (!set) {
    *v = *high;
  } else if (*v != 0) {
    return CUDA_ERROR_INVALID_VALUE;  // a high watermark can only be reset to zero
  } else {
    *high = 0;
  }
  return CUDA_SUCCESS;
}

void graph_mem_trim(int dev) {
  std::lock_guard<std::mutex> l(mem().mu);
  for (GraphExecMem* m : exec_mems()) {
    if (m->inflight == 0 && m->need[dev] != 0) unmap_locked(*m);  // idle: remapped at its next launch
  }
  GraphPool& p = pool(dev);
  const uint64_t keep = round_up(p.in_use, kGraphChunkBytes);
  if (p.reserved > keep) {
    mem_release(dev, p.reserved - keep);
    p.reserved = keep;
  }
}

}  // namespace dd

using namespace dd;

DD_API cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  return guard([&] {
    Context* c = nullptr;
    if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
    if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    uint64_t used = 0, total = 0;
    mem_info(c->dev, &used, &total);
    *free_bytes = used < total ? total - used : 0;
    *total_bytes = total;
    return CUDA_SUCCESS;
  });
}

DD_API cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  return guard([&] {
    uint64_t p = 0;
    CUresult r = alloc_memory(dptr ? &p : nullptr, bytes, Alloc::Kind::kDevice);
    if (r == CUDA_SUCCESS) *dptr = p;
    return r;
  });
}

DD_API cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                          unsigned int elemSize) {
  return guard([&] {
    if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0) {
      return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    }
    if (elemSize != 4 && elemSize != 8 && elemSize != 16) return CUDA_ERROR_INVALID_VALUE;
    // Rows padded to 512 bytes whatever elemSize, as on the H200 (driver 13.0): width 1 or 512
    // gives pitch 512, 513 gives 1024; all of pitch * height is taken.
    if (width > UINT64_MAX - 511) return CUDA_ERROR_INVALID_VALUE;
    const size_t p = round_up(width, 512);
    if (height > (1ull << 62) / p) return CUDA_ERROR_OUT_OF_MEMORY;  // no device has that much
    uint64_t out = 0;
    CUresult r = alloc_memory(&out, p * height, Alloc::Kind::kDevice);
    if (r == CUDA_SUCCESS) *dptr = out, *pitch = p;
    return r;
  });
}

DD_API cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  return guard([&] {
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) {
      return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    }
    uint64_t p = 0;
    CUresult r = alloc_memory(dptr ? &p : nullptr, bytes, Alloc::Kind::kManaged);
    if (r == CUDA_SUCCESS) *dptr = p;
    return r;
  });
}

DD_API cuMemFree_v2(CUdeviceptr dptr) { return guard([&] { return free_memory(dptr, false); }); }

DD_API cuMemAllocHost_v2(void** pp, size_t bytes) {
  return guard([&] {
    uint64_t p = 0;
    CUresult r = alloc_memory(pp == nullptr ? nullptr : &p, bytes, Alloc::Kind::kHost);
    if (r == CUDA_SUCCESS) *pp = reinterpret_cast<void*>(p);
    return r;
  });
}

DD_API cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  return cuMemAllocHost_v2(pp, bytes);  // portable/mapped/write-combined: all the same here
}

DD_API cuMemFreeHost(void* p) {
  return guard([&] { return free_memory(reinterpret_cast<uint64_t>(p), true); });
}

DD_API cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  return guard([&] {
    Context* c = nullptr;
    if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
    std::lock_guard<std::mutex> l(mem().mu);
    auto it = find_locked(dptr, 0);
    if (it == mem().allocs.end()) return CUDA_ERROR_NOT_FOUND;
    // A graph allocation is only one while a launch left it allocated (as on the H200).
    if (it->second.kind == Alloc::Kind::kGraph && !it->second.live) return CUDA_ERROR_NOT_FOUND;
    if (pbase) *pbase = it->first;
    if (psize) *psize = it->second.size;
    return CUDA_SUCCESS;
  });
}

// Registered host memory counts as pinned host memory: a live range for copies and kernels (one
// address space here, so the device pointer is the host pointer). Nothing is page-locked.
DD_API cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int flags) {
  return guard([&] {
    Context* c = nullptr;
    if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
    const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                           CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
    const uint64_t base = reinterpret_cast<uint64_t>(p);
    if (p == nullptr || bytesize == 0 || (flags & ~known) != 0 || base + bytesize < base)
      return CUDA_ERROR_INVALID_VALUE;
    // No I/O memory here, and CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED is 0.
    if (flags & (CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY))
      return CUDA_ERROR_NOT_SUPPORTED;
    std::lock_guard<std::mutex> l(mem().mu);
    auto& a = mem().allocs;
    auto it = a.upper_bound(base);
    if (it != a.begin()) --it;
    for (; it != a.end() && it->first < base + bytesize; ++it) {
      if (it->first + it->second.size <= base) continue;
      const bool host = it->second.kind == Alloc::Kind::kHost ||
                        it->second.kind == Alloc::Kind::kRegistered;
      return host ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED : CUDA_ERROR_INVALID_VALUE;
    }
    Alloc r;
    r.kind = Alloc::Kind::kRegistered;
    r.size = r.map_size = bytesize;
    r.dev = c->dev;
    r.ctx = c;
    a[base] = r;
    return CUDA_SUCCESS;
  });
}

DD_API cuMemHostUnregister(void* p) {
  return guard([&] {
    Context* c = nullptr;
    if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> l(mem().mu);
    auto it = mem().allocs.find(reinterpret_cast<uint64_t>(p));
    if (it == mem().allocs.end() || it->second.kind != Alloc::Kind::kRegistered)
      return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;  // the base must be the one registered
    mem().allocs.erase(it);
    return CUDA_SUCCESS;
  });
}

DD_PTDS_PAIR(cuMemcpyHtoD_v2, (CUdeviceptr d, const void* h, size_t n), d, h, n)
DD_PTDS_PAIR(cuMemcpyDtoH_v2, (void* h, CUdeviceptr d, size_t n), h, d, n)
DD_PTDS_PAIR(cuMemcpyDtoD_v2, (CUdeviceptr d, CUdeviceptr s, size_t n), d, s, n)
DD_PTDS_PAIR(cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n), d, s, n)
DD_PTSZ_PAIR(cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void* h, size_t n, CUstream st), d, h, n,
             st)
DD_PTSZ_PAIR(cuMemcpyDtoHAsync_v2, (void* h, CUdeviceptr d, size_t n, CUstream st), h, d, n, st)
DD_PTSZ_PAIR(cuMemcpyDtoDAsync_v2, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), d, s,
             n, st)
DD_PTSZ_PAIR(cuMemcpyAsync, (CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st), d, s, n, st)
DD_PTDS_PAIR(cuMemsetD8_v2, (CUdeviceptr d, unsigned char v, size_t n), d, v, n)
DD_PTDS_PAIR(cuMemsetD16_v2, (CUdeviceptr d, unsigned short v, size_t n), d, v, n)
DD_PTDS_PAIR(cuMemsetD32_v2, (CUdeviceptr d, unsigned int v, size_t n), d, v, n)
DD_PTSZ_PAIR(cuMemsetD8Async, (CUdeviceptr d, unsigned char v, size_t n, CUstream st), d, v, n, st)
DD_PTSZ_PAIR(cuMemsetD16Async, (CUdeviceptr d, unsigned short v, size_t n, CUstream st), d, v,
             n, st)
DD_PTSZ_PAIR(cuMemsetD32Async, (CUdeviceptr d, unsigned int v, size_t n, CUstream st), d, v, n,
             st)
DD_PTDS_PAIR(cuMemcpyPeer,
             (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n), d, dc, s, sc, n)
DD_PTSZ_PAIR(cuMemcpyPeerAsync,
             (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st), d,
             dc, s, sc, n, st)
DD_PTDS_PAIR(cuMemcpy2D_v2, (const CUDA_MEMCPY2D* pc), pc)
DD_PTSZ_PAIR(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D* pc, CUstream st), pc, st)
DD_PTSZ_PAIR(cuMemAllocAsync, (CUdeviceptr * dptr, size_t bytes, CUstream h), dptr, bytes, h)
DD_PTSZ_PAIR(cuMemAllocFromPoolAsync,
             (CUdeviceptr * dptr, size_t bytes, CUmemoryPool pool, CUstream h), dptr, bytes, pool,
             h)
DD_PTSZ_PAIR(cuMemFreeAsync, (CUdeviceptr p, CUstream h), p, h)

// ---- virtual memory management ----
DD_API cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                     CUmemAllocationGranularity_flags option) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

DD_API cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                   const CUmemAllocationProp* prop, unsigned long long flags) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (handle == nullptr || prop == nullptr || bytes == 0 || bytes % kVmmGranularity != 0)
      return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
      return CUDA_ERROR_INVALID_VALUE;
    const int dev = prop->location.id;
    if (dev < 0 || dev >= config().devices) return CUDA_ERROR_INVALID_DEVICE;
    if (CUresult r = mem_reserve(dev, bytes); r != CUDA_SUCCESS) return r;
    int fd = memfd_create("gpuos-sim-vmm", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      if (fd >= 0) close(fd);
      mem_release(dev, bytes);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    auto* ph = new Phys{fd, bytes, dev, 0, false};
    std::lock_guard<std::mutex> l(mem().mu);
    mem().phys.insert(ph);
    *handle = reinterpret_cast<CUmemGenericAllocationHandle>(ph);
    return CUDA_SUCCESS;
  });
}

DD_API cuMemRelease(CUmemGenericAllocationHandle handle) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto* ph = reinterpret_cast<Phys*>(handle);
    std::lock_guard<std::mutex> l(mem().mu);
    if (mem().phys.count(ph) == 0 || ph->released) return CUDA_ERROR_INVALID_VALUE;
    ph->released = true;
    if (ph->maps == 0) destroy_phys_locked(ph);  // else freed at its last unmap, as documented
    return CUDA_SUCCESS;
  });
}

DD_API cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                           unsigned long long flags) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (ptr == nullptr || size == 0 || size % kVmmGranularity != 0)
      return CUDA_ERROR_INVALID_VALUE;
    if (alignment == 0) alignment = kVmmGranularity;
    if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
    // Over-reserve, then trim to the requested alignment. The address hint is ignored.
    const size_t raw_size = size + alignment;
    void* raw = mmap(nullptr, raw_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                     0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    const uint64_t r = reinterpret_cast<uint64_t>(raw);
    const uint64_t base = round_up(r, alignment);
    if (base > r) munmap(raw, base - r);
    if (r + raw_size > base + size) munmap(reinterpret_cast<void*>(base + size), r + raw_size - base - size);
    std::lock_guard<std::mutex> l(mem().mu);
    mem().reservations[base] = size;
    *ptr = base;
    return CUDA_SUCCESS;
  });
}

DD_API cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    std::lock_guard<std::mutex> l(mem().mu);
    auto it = mem().reservations.find(ptr);
    if (it == mem().reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
    auto m = mem().allocs.lower_bound(ptr);
    if (m != mem().allocs.end() && m->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // mapped
    munmap(reinterpret_cast<void*>(ptr), size);
    mem().reservations.erase(it);
    return CUDA_SUCCESS;
  });
}

DD_API cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                unsigned long long flags) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (flags != 0 || size == 0 || ptr % kVmmGranularity || size % kVmmGranularity ||
        offset % kVmmGranularity)
      return CUDA_ERROR_INVALID_VALUE;
    auto* ph = reinterpret_cast<Phys*>(handle);
    std::lock_guard<std::mutex> l(mem().mu);
    if (mem().phys.count(ph) == 0 || ph->released) return CUDA_ERROR_INVALID_HANDLE;
    if (offset + size > ph->size) return CUDA_ERROR_INVALID_VALUE;
    auto& res = mem().reservations;
    auto r = res.upper_bound(ptr);
    if (r == res.begin()) return CUDA_ERROR_INVALID_VALUE;
    --r;
    if (ptr + size > r->first + r->second) return CUDA_ERROR_INVALID_VALUE;  // not reserved
    auto& a = mem().allocs;
    auto next = a.lower_bound(ptr);
    if (next != a.end() && next->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
    if (next != a.begin() && std::prev(next)->first + std::prev(next)->second.map_size > ptr)
      return CUDA_ERROR_INVALID_VALUE;  // overlaps an existing mapping
    void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, ph->fd, static_cast<off_t>(offset));
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    Alloc m;
    m.kind = Alloc::Kind::kVmmMap;
    m.size = m.map_size = size;
    m.dev = ph->dev;
    m.phys = ph;
    a[ptr] = m;
    ++ph->maps;
    return CUDA_SUCCESS;
  });
}

DD_API cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (config().unmap_delay_ns != 0) std::this_thread::sleep_for(std::chrono::nanoseconds(config().unmap_delay_ns));
    std::lock_guard<std::mutex> l(mem().mu);
    auto& a = mem().allocs;
    auto it = a.find(ptr);
    if (it == a.end() || it->second.kind != Alloc::Kind::kVmmMap) return CUDA_ERROR_INVALID_VALUE;
    // Unmap every whole mapping in [ptr, ptr+size); the range goes back to reserved-only.
    while (it != a.end() && it->first < ptr + size) {
      if (it->second.kind != Alloc::Kind::kVmmMap ||
          it->first + it->second.map_size > ptr + size)
        return CUDA_ERROR_INVALID_VALUE;
      mmap(reinterpret_cast<void*>(it->first), it->second.map_size, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
      Phys* ph = it->second.phys;
      it = a.erase(it);
      if (--ph->maps == 0 && ph->released) destroy_phys_locked(ph);
    }
    return CUDA_SUCCESS;
  });
}

DD_API cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_range(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    // Mappings are readable and writable from cuMemMap on (device and host share the address
    // space here); only an explicit PROT_NONE/READ revokes access.
    int prot = PROT_READ | PROT_WRITE;
    if (desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) prot = PROT_NONE;
    if (desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READ) prot = PROT_READ;
    mprotect(reinterpret_cast<void*>(ptr), size, prot);
    return CUDA_SUCCESS;
  });
}

// ---- CUDA arrays ----
DD_API cuArray3DCreate_v2(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  return guard([&] { return create_array(reinterpret_cast<void**>(handle), desc, 0, false); });
}

DD_API cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  return guard([&] {
    if (desc == nullptr) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUDA_ARRAY3D_DESCRIPTOR d3{};
    d3.Width = desc->Width;
    d3.Height = desc->Height;
    d3.Format = desc->Format;
    d3.NumChannels = desc->NumChannels;
    return create_array(reinterpret_cast<void**>(handle), &d3, 0, false);
  });
}

DD_API cuArrayDestroy(CUarray array) { return guard([&] { return destroy_array(array, false); }); }

DD_API cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req, CUarray array,
                                    CUdevice device) {
  return guard([&] { return array_requirements(req, array, device, false); });
}

DD_API cuMipmappedArrayCreate(CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                              unsigned int numMipmapLevels) {
  return guard(
      [&] { return create_array(reinterpret_cast<void**>(handle), desc, numMipmapLevels, true); });
}

DD_API cuMipmappedArrayDestroy(CUmipmappedArray mipmap) {
  return guard([&] { return destroy_array(mipmap, true); });
}

DD_API cuMipmappedArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS* req,
                                             CUmipmappedArray mipmap, CUdevice device) {
  return guard([&] { return array_requirements(req, mipmap, device, true); });
}

// ---- CUDA IPC (between processes; see export_locked) ----
DD_API cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  return guard([&] {
    Context* c = nullptr;
    if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Context* owner = nullptr;
    {
      std::lock_guard<std::mutex> l(mem().mu);
      auto it = mem().allocs.find(dptr);
      if (it == mem().allocs.end() || it->second.kind != Alloc::Kind::kDevice)
        return CUDA_ERROR_INVALID_VALUE;  // only the base of a cuMemAlloc allocation
      owner = it->second.ctx;
    }
    if (context_alive(owner)) sync_context(owner);  // no kernel writes it while it moves
    std::lock_guard<std::mutex> l(mem().mu);
    auto it = mem().allocs.find(dptr);
    if (it == mem().allocs.end() || it->second.kind != Alloc::Kind::kDevice)
      return CUDA_ERROR_INVALID_VALUE;  // freed meanwhile
    if (CUresult r = export_locked(dptr, it->second); r != CUDA_SUCCESS) return r;
    IpcBlob b{};
    b.magic = kIpcMagic;
    b.pid = getpid();
    b.fd = it->second.ipc_fd;
    b.size = it->second.size;
    b.map_size = it->second.map_size;
    b.serial = it->second.ipc_serial;
    b.dev = it->second.dev;
    std::memset(handle, 0, sizeof(*handle));
    std::memcpy(handle->reserved, &b, sizeof b);
    return CUDA_SUCCESS;
  });
}

DD_API cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return guard([&] { return ipc_open(pdptr, handle, flags); });
}

DD_API cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return guard([&] { return ipc_open(pdptr, handle, flags); });
}

DD_API cuIpcCloseMemHandle(CUdeviceptr dptr) {
  return guard([&] {
    Context* c = nullptr;
    if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
    Alloc a;
    {
      std::lock_guard<std::mutex> l(mem().mu);
      auto it = mem().allocs.find(dptr);
      if (it == mem().allocs.end() || it->second.kind != Alloc::Kind::kIpcImport)
        return CUDA_ERROR_INVALID_VALUE;
      if (--it->second.ipc_opens > 0) return CUDA_SUCCESS;
      a = it->second;
      mem().allocs.erase(it);
    }
    release_alloc(dptr, a);  // unmaps; the exporter's allocation is untouched
    return CUDA_SUCCESS;
  });
}
