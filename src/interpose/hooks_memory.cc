// Exported allocation entry points. Today they account every device allocation path (plain,
// pitched, managed, async/pool, VMM physical handles) into the control block; quotas and the
// VMM-backed address space build on exactly these hooks.
#include "interpose/fast_path.h"
#include "interpose/memory_accounting.h"
#include "interpose/swap.h"

namespace gi = gpuos::interpose;
using gi::AllocKind;

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
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  CUresult r = call(*d);
  if (r == CUDA_SUCCESS && key != 0) gi::account_free(cb, kind, key);
  return r;
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
  return governed_alloc(AllocKind::kPointer, bytes, GPUOS_FORWARD(cuMemAllocAsync, dptr, bytes, stream),
                        GPUOS_MADE(dptr, bytes, -1));
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return governed_alloc(AllocKind::kPointer, bytes, GPUOS_FORWARD(cuMemAllocAsync_ptsz, dptr, bytes, stream),
                        GPUOS_MADE(dptr, bytes, -1));
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                 CUstream stream) {
  return governed_alloc(AllocKind::kPointer, bytes, GPUOS_FORWARD(cuMemAllocFromPoolAsync, dptr, bytes, pool, stream),
                        GPUOS_MADE(dptr, bytes, -1));
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                      CUstream stream) {
  return governed_alloc(AllocKind::kPointer, bytes, GPUOS_FORWARD(cuMemAllocFromPoolAsync_ptsz, dptr, bytes, pool, stream),
                        GPUOS_MADE(dptr, bytes, -1));
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return governed_free(AllocKind::kPointer, dptr, GPUOS_FORWARD(cuMemFreeAsync, dptr, stream));
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
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

// A tenant with a quota sees its own device: total = its quota, free = what it may still allocate
// (never more than the device really has free), so frameworks that size themselves from
// cuMemGetInfo (caching allocators, KV-cache sizing) stay inside it.
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  if (d->cuMemGetInfo_v2 == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = d->cuMemGetInfo_v2(free_bytes, total_bytes);
  const uint64_t quota = std::atomic_ref<uint64_t>(cb->mem_quota_bytes).load(std::memory_order_relaxed);
  if (r != CUDA_SUCCESS || quota == 0 || free_bytes == nullptr || total_bytes == nullptr) return r;
  const uint64_t used = std::atomic_ref<uint64_t>(cb->mem_used_bytes).load(std::memory_order_relaxed);
  const uint64_t left = used >= quota ? 0 : quota - used;
  *total_bytes = quota < *total_bytes ? quota : *total_bytes;
  *free_bytes = left < *free_bytes ? left : *free_bytes;
  return r;
}

}  // extern "C"
