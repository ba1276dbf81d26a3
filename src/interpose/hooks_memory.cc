// SPDX-License-Identifier: Apache-2.0
// Exported allocation entry points. They account every device allocation path (plain, pitched,
// managed, async/pool, VMM physical handles, CUDA arrays and mipmapped arrays; graph memory is
// charged per executable graph, hooks_graph.cc) into the control block, and count memory imported
// from other processes (CUDA IPC) apart; quotas and the VMM-backed address space build on exactly
// these hooks.
#include "interpose/fast_path.h"
#include "interpose/graph_memory.h"
#include "interpose/memory_accounting.h"
#include "interpose/swap.h"

namespace gi = gpuos::interpose;
using gi::AllocKind;
using gi::array_bytes;
using gi::array_owns_memory;
using gi::mipmapped_array_bytes;

namespace {

int current_device(const GpuosDriverTable& d) {
  CUdevice dev = 0;
  if (d.cuCtxGetDevice == nullptr || d.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return 0;
  return static_cast<int>(dev);
}

// Runs an allocation call of `bytes` within the tenant's quota: the bytes are reserved first (over
// quota: CUDA_ERROR_OUT_OF_MEMORY without calling the driver), then committed under the key that
// `made` reports once the call succeeded: {key, actual bytes, device or -1 for the current
// context's device}. `bytes` must be what the call can take at most, so that the quota is checked
// before the driver allocates; should the driver still take more, the excess must fit the quota
// too, else `undo` frees the allocation again and the call fails with CUDA_ERROR_OUT_OF_MEMORY.
struct Made {
  uint64_t key;
  std::size_t bytes;
  int device;
};

template <typename Call, typename What, typename Undo>
CUresult governed_alloc(AllocKind kind, std::size_t bytes, Call&& call, What&& made, Undo&& undo) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gi::ControlBlockUse use;  // counts into the block until the call is accounted (quiescence.h)
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  if (!gi::reserve_within_quota(*d, cb, bytes)) {
    gi::account_alloc_failure(cb);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult r = call(*d);
  // The GPU is full: gpuosd may make room by swapping another tenant out (it answers at once when
  // it cannot). Bounded, so an allocation never spins against a daemon that keeps saying "retry".
  for (int tries = 0; r == CUDA_ERROR_OUT_OF_MEMORY && tries < 16 && gi::wait_for_room(cb, bytes); ++tries) {
    r = call(*d);
  }
  if (r != CUDA_SUCCESS) {
    gi::cancel_bytes(cb, bytes);
    gi::account_alloc_failure(cb);
    return r;
  }
  Made m = made();
  if (m.bytes > bytes && !gi::reserve_within_quota(*d, cb, m.bytes - bytes)) {
    undo(*d);  // it took more than it could: over quota after all
    gi::cancel_bytes(cb, bytes);
    gi::account_alloc_failure(cb);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (m.bytes < bytes) {
    gi::cancel_bytes(cb, bytes - m.bytes);
  }
  gi::commit_alloc(cb, kind, m.key, m.bytes, m.device >= 0 ? m.device : current_device(*d));
  return r;
}

// Undoing an allocation that took more than its quota allowed.
#define GPUOS_UNDO(name, ...) \
  [&](const GpuosDriverTable& d) { if (d.name) d.name(__VA_ARGS__); }

template <typename Call>
CUresult governed_free(AllocKind kind, uint64_t key, Call&& call) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gi::ControlBlockUse use;  // counts into the block until the call is accounted (quiescence.h)
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  CUresult r = call(*d);
  if (r == CUDA_SUCCESS && key != 0) gi::account_free(cb, kind, key);
  return r;
}

// ---- CUDA arrays ----
//
// The driver pads an array (its rows, and the whole), so the descriptor understates what it takes
// (on the H200 a row of a 1-byte-wide 2D or 3D array takes 64 bytes: a layered array described as
// 64 MiB takes 4 GiB; the double pads rows to 512 bytes). The driver tells an array's size only for
// arrays made with CUDA_ARRAY3D_DEFERRED_MAPPING (cu[Mipmapped]ArrayGetMemoryRequirements, CUDA 11.6; any other
// array is documented to get CUDA_ERROR_INVALID_VALUE), and those own no memory. So, before an
// array that owns memory is made, a deferred-mapping twin of its descriptor is made, asked and
// destroyed: its size is what the array is checked against the quota with and charged. 0 when the
// driver cannot tell (older drivers, devices without deferred mapping, a descriptor it refuses
// with that flag); the descriptor's estimate is used then. Not a fast path: arrays are made rarely.

// The size the driver gives the twin: `create(&handle, &twin)` makes it (false: it could not),
// `query` asks, `destroy` frees it; 0 when the driver cannot tell.
template <typename Handle, typename Create, typename Query, typename Destroy>
std::size_t twin_bytes(const GpuosDriverTable& d, const CUDA_ARRAY3D_DESCRIPTOR& desc, Create create, Query query,
                       Destroy destroy) {
  if (query == nullptr || destroy == nullptr) return 0;
  CUDA_ARRAY3D_DESCRIPTOR twin = desc;
  twin.Flags |= CUDA_ARRAY3D_DEFERRED_MAPPING;
  Handle h = nullptr;
  if (!create(&h, &twin)) return 0;
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  const bool told = query(&req, h, static_cast<CUdevice>(current_device(d))) == CUDA_SUCCESS;
  destroy(h);
  return told ? req.size : 0;
}

std::size_t array_twin_bytes(const GpuosDriverTable& d, const CUDA_ARRAY3D_DESCRIPTOR& desc) {
  auto create = [&](CUarray* a, const CUDA_ARRAY3D_DESCRIPTOR* t) {
    return d.cuArray3DCreate_v2 != nullptr && d.cuArray3DCreate_v2(a, t) == CUDA_SUCCESS;
  };
  return twin_bytes<CUarray>(d, desc, create, d.cuArrayGetMemoryRequirements, d.cuArrayDestroy);
}

std::size_t mipmapped_twin_bytes(const GpuosDriverTable& d, const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned levels) {
  auto create = [&](CUmipmappedArray* m, const CUDA_ARRAY3D_DESCRIPTOR* t) {
    return d.cuMipmappedArrayCreate != nullptr && d.cuMipmappedArrayCreate(m, t, levels) == CUDA_SUCCESS;
  };
  return twin_bytes<CUmipmappedArray>(d, desc, create, d.cuMipmappedArrayGetMemoryRequirements,
                                      d.cuMipmappedArrayDestroy);
}

// What an array that owns memory is checked against the quota with, before it is made: what the
// driver says (its twin's size), else the descriptor's estimate. 0 for one that owns none.
template <typename Twin>
std::size_t array_reserve_bytes(std::size_t estimate, bool owns, Twin&& twin) {
  if (!owns) return 0;
  const GpuosDriverTable* d = gi::real_driver();
  const std::size_t told = d != nullptr ? twin(*d) : 0;
  return told != 0 ? told : estimate;
}

// What the array made holds: the driver's size of the array itself where it tells (no driver does
// for arrays that own memory today), else what it was reserved with. Should that be more, the
// excess must fit the quota too, else the array is destroyed again (governed_alloc).
template <typename Query, typename Handle>
std::size_t array_made_bytes(const GpuosDriverTable& d, Query query, Handle h, bool owns,
                             std::size_t reserved) {
  if (!owns || query == nullptr) return owns ? reserved : 0;
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  if (query(&req, h, static_cast<CUdevice>(current_device(d))) == CUDA_SUCCESS && req.size != 0) {
    return req.size;
  }
  return reserved;
}

CUDA_ARRAY3D_DESCRIPTOR as_3d(const CUDA_ARRAY_DESCRIPTOR* desc) {
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = desc->Width;
  d3.Height = desc->Height;
  d3.Format = desc->Format;
  d3.NumChannels = desc->NumChannels;
  return d3;
}

// ---- CUDA IPC ----

// Maps another process's memory in (call: the real open). The memory is its exporter's, charged
// there; here it only counts in mem_imported_bytes, never against this tenant's quota.
template <typename Call>
CUresult governed_import(CUdeviceptr* dptr, Call&& call) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gi::ControlBlockUse use;  // counts into the block until the call is accounted (quiescence.h)
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  CUresult r = call(*d);
  if (r != CUDA_SUCCESS || dptr == nullptr) return r;
  CUdeviceptr base = 0;
  size_t bytes = 0;
  if (d->cuMemGetAddressRange_v2 == nullptr ||
      d->cuMemGetAddressRange_v2(&base, &bytes, *dptr) != CUDA_SUCCESS) {
    bytes = 0;  // still remembered, so that its close is not a stranger
  }
  gi::account_import(cb, *dptr, bytes);
  return r;
}

// ---- graph memory nodes ----
//
// Adding an alloc node (cuGraphAddMemAllocNode, cuGraphAddNode of a MEM_ALLOC node) or capturing
// a cuMemAllocAsync only fixes an address: the driver backs it from its graph memory pool when an
// executable graph is launched, and that is charged per executable graph from its instantiation
// (hooks_graph.cc, graph_memory.h). The address is recorded with 0 bytes (AllocKind::kPointer:
// it is reserved while the graph holds it, so it cannot meet another live allocation's), so that
// its frees (free nodes, cuMemFree / cuMemFreeAsync after a launch left it allocated) are known.
// Params: CUDA_MEM_ALLOC_NODE_PARAMS, or its twin CUDA_MEM_ALLOC_NODE_PARAMS_v2 (cuGraphAddNode).
template <typename Params, typename Call>
CUresult governed_graph_alloc(Params* params, Call&& call) {
  const bool on_device =
      params != nullptr && params->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  const int device = on_device ? params->poolProps.location.id : -1;
  return governed_alloc(AllocKind::kPointer, 0, call, [&] { return Made{params->dptr, 0, device}; },
                        [](const GpuosDriverTable&) {});
}

// A stream-ordered allocation (call: the real one). Under stream capture it is an alloc node of the
// captured graph (above): recorded with 0 bytes. It counts as captured only if the stream was in
// the same capture sequence before and after the call, so a capture ended (or begun) meanwhile by
// another thread can never pass a real allocation off as captured; its bytes are reserved against
// the quota either way until that is known.
template <typename Call>
CUresult governed_stream_alloc(CUdeviceptr* dptr, size_t bytes, CUstream stream, bool ptsz, Call&& call) {
  gi::StreamWorkCall work;  // stream-ordered: later work on the stream depends on it
  uint64_t capture = 0;
  auto captured_call = [&](const GpuosDriverTable& d) {
    capture = gi::capture_sequence(d, stream, ptsz);
    return call(d);
  };
  return governed_alloc(
      AllocKind::kPointer, bytes, captured_call,
      [&] {
        const bool captured = capture != 0 && gi::capture_sequence(*gi::real_driver(), stream, ptsz) == capture;
        return Made{*dptr, captured ? 0 : bytes, -1};
      },
      [](const GpuosDriverTable&) {});  // never more than asked
}

// cuGraphAddNode: memory alloc and free nodes are accounted; every other kind is only forwarded.
template <typename Call>
CUresult governed_add_node(CUgraphNodeParams* params, Call&& call) {
  if (params != nullptr && params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
    return governed_graph_alloc(&params->alloc, call);
  }
  if (params != nullptr && params->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
    return governed_free(AllocKind::kPointer, params->free.dptr, call);
  }
  const GpuosDriverTable* d = gi::real_driver();
  return d == nullptr ? CUDA_ERROR_NOT_INITIALIZED : call(*d);
}

}  // namespace

#define GPUOS_MADE(ptr, bytes, device) [&] { return Made{static_cast<uint64_t>(*(ptr)), (bytes), (device)}; }

// What a pitched allocation can take: width rounded up to the device's pitch alignment (the
// larger of what it reports and kPitchAlignFloor), times height.
static std::size_t pitched_estimate(size_t width, size_t height) {
  uint64_t align = gi::kPitchAlignFloor;
  const GpuosDriverTable* d = gi::real_driver();
  int reported = 0;
  if (d != nullptr && d->cuDeviceGetAttribute != nullptr &&
      d->cuDeviceGetAttribute(&reported, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT,
                              static_cast<CUdevice>(current_device(*d))) == CUDA_SUCCESS &&
      static_cast<uint64_t>(reported) > align) {
    align = static_cast<uint64_t>(reported);
  }
  return gi::pitched_bytes(width, height, align);
}

extern "C" {

// A swappable tenant's allocations (but small ones) come from the arena (swap.h): the same API,
// backed by virtual memory that can move to host and back at the same address.
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  std::size_t granted = bytes;
  bool arena = false;
  auto call = [&](const GpuosDriverTable& d) {
    gpuos_control_block* cb = gi::control_block();
    arena = bytes >= gi::kArenaMinBytes && gi::swap_requested(cb);
    if (arena) return gi::arena_alloc(d, cb, dptr, bytes, &granted);
    return d.cuMemAlloc_v2 ? d.cuMemAlloc_v2(dptr, bytes) : CUDA_ERROR_NOT_FOUND;
  };
  // The arena rounds up to its granularity (2 MiB on the H200; should a device's be coarser, the
  // excess must still fit the quota, else the allocation is undone).
  auto undo = [&](const GpuosDriverTable& d) {
    CUresult r = CUDA_SUCCESS;
    if (!(arena && gi::arena_free(d, *dptr, &r)) && d.cuMemFree_v2) d.cuMemFree_v2(*dptr);
  };
  constexpr std::size_t kArenaGranularity = 2u << 20;
  const bool to_arena = bytes >= gi::kArenaMinBytes && gi::swap_requested(gi::control_block());
  const std::size_t estimate = to_arena && bytes <= SIZE_MAX - kArenaGranularity
                                   ? (bytes + kArenaGranularity - 1) / kArenaGranularity * kArenaGranularity
                                   : bytes;
  return governed_alloc(AllocKind::kPointer, estimate, call, [&] { return Made{*dptr, granted, -1}; }, undo);
}

// Rows are padded to the pitch alignment (a 1-byte row takes 512 bytes on the H200): charged, and
// checked against the quota, for the padded rows before the driver is asked.
CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int elemSize) {
  return governed_alloc(AllocKind::kPointer, pitched_estimate(width, height),
                        GPUOS_FORWARD(cuMemAllocPitch_v2, dptr, pitch, width, height, elemSize),
                        [&] { return Made{*dptr, gi::pitched_bytes(*pitch, height, 1), -1}; },
                        GPUOS_UNDO(cuMemFree_v2, *dptr));
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  return governed_alloc(AllocKind::kPointer, bytes, GPUOS_FORWARD(cuMemAllocManaged, dptr, bytes, flags),
                        GPUOS_MADE(dptr, bytes, -1), GPUOS_UNDO(cuMemFree_v2, *dptr));
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  return governed_free(AllocKind::kPointer, dptr, [&](const GpuosDriverTable& d) {
    CUresult r = CUDA_SUCCESS;
    if (gi::arena_free(d, dptr, &r)) return r;
    return d.cuMemFree_v2 ? d.cuMemFree_v2(dptr) : CUDA_ERROR_NOT_FOUND;
  });
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return governed_stream_alloc(dptr, bytes, stream, false, GPUOS_FORWARD(cuMemAllocAsync, dptr, bytes, stream));
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return governed_stream_alloc(dptr, bytes, stream, true, GPUOS_FORWARD(cuMemAllocAsync_ptsz, dptr, bytes, stream));
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                 CUstream stream) {
  return governed_stream_alloc(dptr, bytes, stream, false,
                               GPUOS_FORWARD(cuMemAllocFromPoolAsync, dptr, bytes, pool, stream));
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                      CUstream stream) {
  return governed_stream_alloc(dptr, bytes, stream, true,
                               GPUOS_FORWARD(cuMemAllocFromPoolAsync_ptsz, dptr, bytes, pool, stream));
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  gi::StreamWorkCall work;  // stream-ordered: later work on the stream depends on it
  return governed_free(AllocKind::kPointer, dptr, GPUOS_FORWARD(cuMemFreeAsync, dptr, stream));
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  gi::StreamWorkCall work;  // stream-ordered: later work on the stream depends on it
  return governed_free(AllocKind::kPointer, dptr, GPUOS_FORWARD(cuMemFreeAsync_ptsz, dptr, stream));
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  int device = prop != nullptr && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                   ? prop->location.id
                   : -1;
  return governed_alloc(AllocKind::kVmmHandle, bytes, GPUOS_FORWARD(cuMemCreate, handle, bytes, prop, flags),
                        GPUOS_MADE(handle, bytes, device), GPUOS_UNDO(cuMemRelease, *handle));
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return governed_free(AllocKind::kVmmHandle, handle, GPUOS_FORWARD(cuMemRelease, handle));
}

CUresult cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  const CUDA_ARRAY3D_DESCRIPTOR d3 = desc != nullptr ? as_3d(desc) : CUDA_ARRAY3D_DESCRIPTOR{};
  const std::size_t bytes = array_reserve_bytes(desc != nullptr ? array_bytes(&d3) : 0, desc != nullptr,
                                                [&](const GpuosDriverTable& d) { return array_twin_bytes(d, d3); });
  auto call = GPUOS_FORWARD(cuArrayCreate_v2, handle, desc);
  return governed_alloc(
      AllocKind::kArray, bytes, call,
      [&] {
        const GpuosDriverTable& d = *gi::real_driver();
        return Made{reinterpret_cast<uint64_t>(*handle),
                    array_made_bytes(d, d.cuArrayGetMemoryRequirements, *handle, true, bytes), -1};
      },
      GPUOS_UNDO(cuArrayDestroy, *handle));
}

CUresult cuArray3DCreate_v2(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  const bool owns = desc != nullptr && array_owns_memory(desc->Flags);
  const std::size_t bytes = array_reserve_bytes(array_bytes(desc), owns,
                                                [&](const GpuosDriverTable& d) { return array_twin_bytes(d, *desc); });
  auto call = GPUOS_FORWARD(cuArray3DCreate_v2, handle, desc);
  return governed_alloc(
      AllocKind::kArray, bytes, call,
      [&] {
        const GpuosDriverTable& d = *gi::real_driver();
        return Made{reinterpret_cast<uint64_t>(*handle),
                    array_made_bytes(d, d.cuArrayGetMemoryRequirements, *handle, owns, bytes), -1};
      },
      GPUOS_UNDO(cuArrayDestroy, *handle));
}

CUresult cuArrayDestroy(CUarray array) {
  return governed_free(AllocKind::kArray, reinterpret_cast<uint64_t>(array),
                       GPUOS_FORWARD(cuArrayDestroy, array));
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                unsigned int numMipmapLevels) {
  const bool owns = desc != nullptr && array_owns_memory(desc->Flags);
  const std::size_t bytes =
      array_reserve_bytes(mipmapped_array_bytes(desc, numMipmapLevels), owns,
                          [&](const GpuosDriverTable& d) { return mipmapped_twin_bytes(d, *desc, numMipmapLevels); });
  auto call = GPUOS_FORWARD(cuMipmappedArrayCreate, handle, desc, numMipmapLevels);
  return governed_alloc(
      AllocKind::kMipmappedArray, bytes, call,
      [&] {
        const GpuosDriverTable& d = *gi::real_driver();
        return Made{reinterpret_cast<uint64_t>(*handle),
                    array_made_bytes(d, d.cuMipmappedArrayGetMemoryRequirements, *handle, owns, bytes), -1};
      },
      GPUOS_UNDO(cuMipmappedArrayDestroy, *handle));
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray mipmap) {
  return governed_free(AllocKind::kMipmappedArray, reinterpret_cast<uint64_t>(mipmap),
                       GPUOS_FORWARD(cuMipmappedArrayDestroy, mipmap));
}

// Graph memory nodes: see governed_graph_alloc for what is recorded when.
CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                size_t numDeps, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  return governed_graph_alloc(
      params, GPUOS_FORWARD(cuGraphAddMemAllocNode, node, graph, deps, numDeps, params));
}

CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                               size_t numDeps, CUdeviceptr dptr) {
  return governed_free(AllocKind::kPointer, dptr,
                       GPUOS_FORWARD(cuGraphAddMemFreeNode, node, graph, deps, numDeps, dptr));
}

CUresult cuGraphAddNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t numDeps,
                        CUgraphNodeParams* params) {
  return governed_add_node(params,
                           GPUOS_FORWARD(cuGraphAddNode, node, graph, deps, numDeps, params));
}

CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                           const CUgraphEdgeData* edges, size_t numDeps,
                           CUgraphNodeParams* params) {
  return governed_add_node(
      params, GPUOS_FORWARD(cuGraphAddNode_v2, node, graph, deps, edges, numDeps, params));
}

// CUDA IPC: the exporter's memory (cuIpcGetMemHandle needs nothing and is not wrapped).
CUresult cuIpcOpenMemHandle(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  return governed_import(dptr, GPUOS_FORWARD(cuIpcOpenMemHandle, dptr, handle, flags));
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  return governed_import(dptr, GPUOS_FORWARD(cuIpcOpenMemHandle_v2, dptr, handle, flags));
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gi::ControlBlockUse use;  // counts into the block until the call is accounted (quiescence.h)
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  CUresult r = d->cuIpcCloseMemHandle ? d->cuIpcCloseMemHandle(dptr) : CUDA_ERROR_NOT_FOUND;
  if (r == CUDA_SUCCESS) gi::account_unimport(cb, dptr);
  return r;
}

// A tenant with a quota sees its own device: total = its quota plus what it may borrow, free = what
// it may still allocate
// (never more than the device really has free), so frameworks that size themselves from
// cuMemGetInfo (caching allocators, KV-cache sizing) stay inside it.
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  if (d->cuMemGetInfo_v2 == nullptr) return CUDA_ERROR_NOT_FOUND;
  const uint64_t quota = gi::memory_limit(cb);  // quota + borrowable bytes
  // Memory retained for destroyed graphs is what the tenant may allocate once reclaimed: shown so.
  if (quota != 0 && gi::graph_retained_total() != 0) gi::reclaim_graph_memory(*d, cb);
  CUresult r = d->cuMemGetInfo_v2(free_bytes, total_bytes);
  if (r != CUDA_SUCCESS || quota == 0 || free_bytes == nullptr || total_bytes == nullptr) return r;
  const uint64_t used = gi::memory_used(cb);  // never the block's word: the tenant can write it
  const uint64_t left = used >= quota ? 0 : quota - used;
  *total_bytes = quota < *total_bytes ? quota : *total_bytes;
  *free_bytes = left < *free_bytes ? left : *free_bytes;
  return r;
}

}  // extern "C"
