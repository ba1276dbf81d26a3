// SPDX-License-Identifier: Apache-2.0
// Exported entry points for initialisation, context and stream creation, and stream capture.
// cuInit is where a tenant normally registers with gpuosd. Capture begin/end keep the hint that
// lets the launch path tell recorded launches from submitted ones.
#include <cstdint>

#include "interpose/fast_path.h"
#include "interpose/memory_accounting.h"
#include "interpose/swap.h"

namespace gi = gpuos::interpose;

namespace {

// Forwards a call that needs the tenant registered, counting successes in `counter` if given.
template <typename Call>
CUresult governed(uint64_t gpuos_control_block::*counter, Call&& call) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gi::ControlBlockUse use;  // until the count is in the block (quiescence.h)
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  CUresult r = call(*d);
  if (r == CUDA_SUCCESS && counter != nullptr) gi::count(cb->*counter);
  return r;
}

// Creating a context takes device memory of its own (~0.5 GiB on an H200) outside any allocation
// call: on a full GPU it fails with out-of-memory like an allocation, and like one it asks gpuosd
// for room (a guaranteed tenant arriving beside a best-effort one that filled the GPU).
constexpr uint64_t kContextRoomBytes = 1ull << 30;

template <typename Call>
CUresult governed_context(CUdevice dev, Call&& call) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gi::ControlBlockUse use;  // until the count is in the block (quiescence.h)
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  CUresult r = call(*d);
  for (int tries = 0; r == CUDA_ERROR_OUT_OF_MEMORY && tries < 16; ++tries) {
    // What it waits for is in its report while it waits, as an allocation's reservation is (gpuosd
    // refuses a request for room the report does not back); not against the quota: a context's
    // memory is not charged.
    gi::reserve_bytes(cb, kContextRoomBytes, /*enforce_quota=*/false);
    const bool retry = gi::wait_for_room(cb, kContextRoomBytes, static_cast<int>(dev));
    gi::cancel_bytes(cb, kContextRoomBytes);
    if (!retry) break;
    r = call(*d);
  }
  if (r == CUDA_SUCCESS) gi::count(cb->contexts_created);
  return r;
}

template <typename Call>
CUresult begin_capture(Call&& call) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gi::StreamWorkCall work;
  // Raise the hint before the capture exists so no launch into it is ever taken as a submission.
  gi::g_active_captures.fetch_add(1, std::memory_order_relaxed);
  CUresult r = call(*d);
  if (r != CUDA_SUCCESS) gi::g_active_captures.fetch_sub(1, std::memory_order_relaxed);
  return r;
}

template <typename Call>
CUresult end_capture(Call&& call) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gi::StreamWorkCall work;
  CUresult r = call(*d);
  // The capture is over whether it produced a graph or was invalidated; only a call that never
  // matched a capture (not capturing, wrong thread) leaves the count alone.
  if (r != CUDA_ERROR_ILLEGAL_STATE && r != CUDA_ERROR_INVALID_VALUE &&
      r != CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD) {
    int n = gi::g_active_captures.load(std::memory_order_relaxed);
    while (n > 0 && !gi::g_active_captures.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
    }
  }
  return r;
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned int flags) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NO_DEVICE;
  gi::ControlBlockUse use;  // until the device map is in the block (quiescence.h)
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  CUresult r = d->cuInit(flags);
  // Once: which GPU each of this process's device ordinals is (CUDA_VISIBLE_DEVICES may differ
  // from gpuosd's view).
  if (r == CUDA_SUCCESS && std::atomic_ref<uint32_t>(cb->device_count).load(std::memory_order_acquire) == 0) {
    gi::publish_devices(cb);
    // gpuosd planned this tenant's SMs at registration with ordinal = GPU index; let it plan again
    // with the real map before the first launch reads its mask.
    gi::notify_activity(cb);
    const uint32_t n = std::atomic_ref<uint32_t>(cb->device_count).load(std::memory_order_acquire);
    if (n != 0 && gi::grant_load(gi::grants_of(cb)->space_enabled, std::memory_order_acquire) != 0) {
      gi::await_space_plan(cb, n);
    }
  }
  return r;
}

CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice dev) {
  return governed_context(dev, GPUOS_FORWARD(cuCtxCreate_v2, ctx, flags, dev));
}

CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* params, int numParams,
                        unsigned int flags, CUdevice dev) {
  return governed_context(dev, GPUOS_FORWARD(cuCtxCreate_v3, ctx, params, numParams, flags, dev));
}

CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev) {
  return governed_context(dev, GPUOS_FORWARD(cuCtxCreate_v4, ctx, params, flags, dev));
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  return governed_context(dev, GPUOS_FORWARD(cuDevicePrimaryCtxRetain, ctx, dev));
}

// The device malloc heap (CU_LIMIT_MALLOC_HEAP_SIZE) is device memory the driver reserves for the
// current context: counted against the quota like an allocation, refused beyond it with
// CUDA_ERROR_OUT_OF_MEMORY before the driver is asked. Other limits pass through.
CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (d->cuCtxSetLimit == nullptr) return CUDA_ERROR_NOT_FOUND;
  gpuos_control_block* cb = limit == CU_LIMIT_MALLOC_HEAP_SIZE ? gi::control_block() : nullptr;
  CUcontext ctx = nullptr;
  if (cb == nullptr || d->cuCtxGetCurrent == nullptr || d->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS ||
      ctx == nullptr) {
    return d->cuCtxSetLimit(limit, value);  // (no context: the driver says so)
  }
  CUdevice dev = 0;
  if (d->cuCtxGetDevice == nullptr || d->cuCtxGetDevice(&dev) != CUDA_SUCCESS) dev = 0;
  const uint64_t key = reinterpret_cast<uintptr_t>(ctx);
  const uint64_t before = gi::malloc_heap_bytes(key);
  const uint64_t grow = value > before ? value - before : 0;
  if (grow != 0 && !gi::reserve_bytes(cb, grow)) {
    gi::account_alloc_failure(cb);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult r = d->cuCtxSetLimit(limit, value);
  if (r != CUDA_SUCCESS) {
    if (grow != 0) gi::cancel_bytes(cb, grow);
    return r;
  }
  gi::set_malloc_heap(cb, key, value, static_cast<int>(dev), before);
  return r;
}

CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  return governed(&gpuos_control_block::streams_created, GPUOS_FORWARD(cuStreamCreate, stream, flags));
}

CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  return governed(&gpuos_control_block::streams_created,
                  GPUOS_FORWARD(cuStreamCreateWithPriority, stream, flags, priority));
}

CUresult cuStreamBeginCapture(CUstream stream) {
  return begin_capture(GPUOS_FORWARD(cuStreamBeginCapture, stream));
}

CUresult cuStreamBeginCapture_ptsz(CUstream stream) {
  return begin_capture(GPUOS_FORWARD(cuStreamBeginCapture_ptsz, stream));
}

CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  return begin_capture(GPUOS_FORWARD(cuStreamBeginCapture_v2, stream, mode));
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode) {
  return begin_capture(GPUOS_FORWARD(cuStreamBeginCapture_v2_ptsz, stream, mode));
}

CUresult cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode* deps,
                                     const CUgraphEdgeData* edges, size_t n, CUstreamCaptureMode mode) {
  return begin_capture(GPUOS_FORWARD(cuStreamBeginCaptureToGraph, stream, graph, deps, edges, n, mode));
}

CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph, const CUgraphNode* deps,
                                          const CUgraphEdgeData* edges, size_t n, CUstreamCaptureMode mode) {
  return begin_capture(GPUOS_FORWARD(cuStreamBeginCaptureToGraph_ptsz, stream, graph, deps, edges, n, mode));
}

CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  return end_capture(GPUOS_FORWARD(cuStreamEndCapture, stream, graph));
}

CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph) {
  return end_capture(GPUOS_FORWARD(cuStreamEndCapture_ptsz, stream, graph));
}

}  // extern "C"
