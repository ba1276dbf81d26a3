// Exported allocation entry points. They account every device allocation path (plain, pitched,
// managed, async/pool, VMM physical handles, CUDA arrays and mipmapped arrays, graph memory nodes)
// into the control block, and count memory imported from other processes (CUDA IPC) apart; quotas
// and the VMM-backed address space build on exactly these hooks.
#include "interpose/fast_path.h"
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
// context's device}. An actual size above the estimate (pitch padding) is added on top.
struct Made {
  uint64_t key;
  std::size_t bytes;
  int device;
};

template <typename Call, typename What>
CUresult governed_alloc(AllocKind kind, std::size_t bytes, Call&& call, What&& made) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gi::ControlBlockUse use;  // counts into the block until the call is accounted (quiescence.h)
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  if (!gi::reserve_bytes(cb, bytes)) {
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
  if (m.bytes > bytes) {
    gi::reserve_bytes(cb, m.bytes - bytes, /*enforce_quota=*/false);  // padding the driver chose
  } else if (m.bytes < bytes) {
    gi::cancel_bytes(cb, bytes - m.bytes);
  }
  gi::commit_alloc(cb, kind, m.key, m.bytes, m.device >= 0 ? m.device : current_device(*d));
  return r;
}

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

// What an array that owns memory holds: the driver's exact size where it tells (today's drivers
// only answer for deferred-mapping arrays, which own none), else the estimate it was reserved with.
template <typename Query, typename Handle>
std::size_t array_made_bytes(const GpuosDriverTable& d, Query query, Handle h, bool owns,
                             std::size_t estimate) {
  if (!owns || query == nullptr) return owns ? estimate : 0;
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  if (query(&req, h, static_cast<CUdevice>(current_device(d))) == CUDA_SUCCESS && req.size != 0) {
    return req.size;
  }
  return estimate;
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
// A graph allocation is accounted once, when its address is handed out, under that device pointer
// (AllocKind::kPointer, the key space of every other device pointer; a graph allocation's address
// is reserved for as long as the graph holds it, so it cannot meet another live allocation's): by
// cuGraphAddMemAllocNode (or cuGraphAddNode of a MEM_ALLOC node) for graphs built by hand, by
// cuMemAllocAsync for a stream capture. The driver builds a captured allocation's node itself,
// inside the library, so that never comes through cuGraphAddMemAllocNode as well: no address is
// counted twice. It is taken off by whichever free of it gpuos sees first: a free node added to a
// graph (cuGraphAddMemFreeNode, cuGraphAddNode of a MEM_FREE node, a captured cuMemFreeAsync), or
// cuMemFree / cuMemFreeAsync after a launch left it allocated. Between launches the graph's pool
// may keep the physical memory of an allocation freed inside the graph; that is not counted.
// Params: CUDA_MEM_ALLOC_NODE_PARAMS, or its twin CUDA_MEM_ALLOC_NODE_PARAMS_v2 (cuGraphAddNode).
template <typename Params, typename Call>
CUresult governed_graph_alloc(Params* params, Call&& call) {
  const bool on_device =
      params != nullptr && params->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  const int device = on_device ? params->poolProps.location.id : -1;
  return governed_alloc(AllocKind::kPointer, params != nullptr ? params->bytesize : 0, call,
                        [&] { return Made{params->dptr, params->bytesize, device}; });
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

extern "C" {

// A swappable tenant's allocations (but small ones) come from the arena (swap.h): the same API,
// backed by virtual memory that can move to host and back at the same address.
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  std::size_t granted = bytes;
  auto call = [&](const GpuosDriverTable& d) {
    gpuos_control_block* cb = gi::control_block();
    if (bytes >= gi::kArenaMinBytes && gi::swap_requested(cb)) return gi::arena_alloc(d, cb, dptr, bytes, &granted);
    return d.cuMemAlloc_v2 ? d.cuMemAlloc_v2(dptr, bytes) : CUDA_ERROR_NOT_FOUND;
  };
  return governed_alloc(AllocKind::kPointer, bytes, call, [&] { return Made{*dptr, granted, -1}; });
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int elemSize) {
  return governed_alloc(AllocKind::kPointer, width * height,
                        GPUOS_FORWARD(cuMemAllocPitch_v2, dptr, pitch, width, height, elemSize),
                        GPUOS_MADE(dptr, *pitch * height, -1));
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags) {
  return governed_alloc(AllocKind::kPointer, bytes, GPUOS_FORWARD(cuMemAllocManaged, dptr, bytes, flags),
                        GPUOS_MADE(dptr, bytes, -1));
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  return governed_free(AllocKind::kPointer, dptr, [&](const GpuosDriverTable& d) {
    CUresult r = CUDA_SUCCESS;
    if (gi::arena_free(d, dptr, &r)) return r;
    return d.cuMemFree_v2 ? d.cuMemFree_v2(dptr) : CUDA_ERROR_NOT_FOUND;
  });
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  gi::StreamWorkCall work;  // stream-ordered: later work on the stream depends on it
  return governed_alloc(AllocKind::kPointer, bytes, GPUOS_FORWARD(cuMemAllocAsync, dptr, bytes, stream),
                        GPUOS_MADE(dptr, bytes, -1));
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  gi::StreamWorkCall work;  // stream-ordered: later work on the stream depends on it
  return governed_alloc(AllocKind::kPointer, bytes, GPUOS_FORWARD(cuMemAllocAsync_ptsz, dptr, bytes, stream),
                        GPUOS_MADE(dptr, bytes, -1));
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                 CUstream stream) {
  gi::StreamWorkCall work;  // stream-ordered: later work on the stream depends on it
  return governed_alloc(AllocKind::kPointer, bytes, GPUOS_FORWARD(cuMemAllocFromPoolAsync, dptr, bytes, pool, stream),
                        GPUOS_MADE(dptr, bytes, -1));
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                      CUstream stream) {
  gi::StreamWorkCall work;  // stream-ordered: later work on the stream depends on it
  return governed_alloc(AllocKind::kPointer, bytes, GPUOS_FORWARD(cuMemAllocFromPoolAsync_ptsz, dptr, bytes, pool, stream),
                        GPUOS_MADE(dptr, bytes, -1));
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
                        GPUOS_MADE(handle, bytes, device));
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return governed_free(AllocKind::kVmmHandle, handle, GPUOS_FORWARD(cuMemRelease, handle));
}

CUresult cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  const CUDA_ARRAY3D_DESCRIPTOR d3 = desc != nullptr ? as_3d(desc) : CUDA_ARRAY3D_DESCRIPTOR{};
  const std::size_t estimate = desc != nullptr ? array_bytes(&d3) : 0;
  auto call = GPUOS_FORWARD(cuArrayCreate_v2, handle, desc);
  return governed_alloc(AllocKind::kArray, estimate, call, [&] {
    const GpuosDriverTable& d = *gi::real_driver();
    return Made{reinterpret_cast<uint64_t>(*handle),
                array_made_bytes(d, d.cuArrayGetMemoryRequirements, *handle, true, estimate), -1};
  });
}

CUresult cuArray3DCreate_v2(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  const std::size_t estimate = array_bytes(desc);
  const bool owns = desc != nullptr && array_owns_memory(desc->Flags);
  auto call = GPUOS_FORWARD(cuArray3DCreate_v2, handle, desc);
  return governed_alloc(AllocKind::kArray, estimate, call, [&] {
    const GpuosDriverTable& d = *gi::real_driver();
    return Made{reinterpret_cast<uint64_t>(*handle),
                array_made_bytes(d, d.cuArrayGetMemoryRequirements, *handle, owns, estimate), -1};
  });
}

CUresult cuArrayDestroy(CUarray array) {
  return governed_free(AllocKind::kArray, reinterpret_cast<uint64_t>(array),
                       GPUOS_FORWARD(cuArrayDestroy, array));
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                unsigned int numMipmapLevels) {
  const std::size_t estimate = mipmapped_array_bytes(desc, numMipmapLevels);
  const bool owns = desc != nullptr && array_owns_memory(desc->Flags);
  auto call = GPUOS_FORWARD(cuMipmappedArrayCreate, handle, desc, numMipmapLevels);
  return governed_alloc(AllocKind::kMipmappedArray, estimate, call, [&] {
    const GpuosDriverTable& d = *gi::real_driver();
    return Made{reinterpret_cast<uint64_t>(*handle),
                array_made_bytes(d, d.cuMipmappedArrayGetMemoryRequirements, *handle, owns, estimate),
                -1};
  });
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray mipmap) {
  return governed_free(AllocKind::kMipmappedArray, reinterpret_cast<uint64_t>(mipmap),
                       GPUOS_FORWARD(cuMipmappedArrayDestroy, mipmap));
}

// Graph memory nodes: see governed_graph_alloc for what is counted when.
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
  CUresult r = d->cuMemGetInfo_v2(free_bytes, total_bytes);
  const uint64_t quota = gi::memory_limit(cb);  // quota + borrowable bytes
  if (r != CUDA_SUCCESS || quota == 0 || free_bytes == nullptr || total_bytes == nullptr) return r;
  const uint64_t used = std::atomic_ref<uint64_t>(cb->mem_used_bytes).load(std::memory_order_relaxed);
  const uint64_t left = used >= quota ? 0 : quota - used;
  *total_bytes = quota < *total_bytes ? quota : *total_bytes;
  *free_bytes = left < *free_bytes ? left : *free_bytes;
  return r;
}

}  // extern "C"
