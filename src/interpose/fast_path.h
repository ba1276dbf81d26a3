// The launch path of a governed kernel or graph launch. It runs on every launch of every tenant,
// so it is lock-free and syscall-free when nothing blocks: a load of the control-block pointer, a
// load of the gate word, a load of the capture hint, the real call, one relaxed counter increment.
#pragma once

#include <atomic>

#include "interpose/activity.h"
#include "interpose/runtime.h"

namespace gpuos::interpose {

#define GPUOS_LIKELY(x) __builtin_expect(!!(x), 1)
#define GPUOS_UNLIKELY(x) __builtin_expect(!!(x), 0)

inline gpuos_control_block* control_block() {
  gpuos_control_block* cb = g_control.load(std::memory_order_acquire);
  if (GPUOS_UNLIKELY(cb == nullptr)) cb = ensure_registered();
  return cb;  // null only when refused by configuration
}

inline void count(uint64_t& counter) {
  std::atomic_ref<uint64_t>(counter).fetch_add(1, std::memory_order_relaxed);
}

// True if `stream` is under stream capture, so the launch is recorded into a graph rather than
// submitted (never gated, counted apart). ptsz: the launch came through a _ptsz entry point, where
// stream 0 means the per-thread default stream.
inline bool launch_is_captured(const GpuosDriverTable& d, CUstream stream, bool ptsz) {
  if (GPUOS_LIKELY(g_active_captures.load(std::memory_order_relaxed) <= 0)) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  auto query = ptsz && d.cuStreamIsCapturing_ptsz ? d.cuStreamIsCapturing_ptsz : d.cuStreamIsCapturing;
  if (query == nullptr || query(stream, &status) != CUDA_SUCCESS) return false;
  return status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

// A lambda that calls the real `name` from the table, or fails cleanly when this driver lacks it.
#define GPUOS_FORWARD(name, ...) \
  [&](const GpuosDriverTable& d) { return d.name ? d.name(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND; }

enum class LaunchKind { kKernel, kGraph };

// Gates, forwards and counts one launch. `call` performs the real driver call.
template <typename Call>
inline CUresult governed_launch(LaunchKind kind, CUstream stream, bool ptsz, Call&& call) {
  const GpuosDriverTable* d = real_driver();
  if (GPUOS_UNLIKELY(d == nullptr)) return CUDA_ERROR_NOT_INITIALIZED;
  gpuos_control_block* cb = control_block();
  if (GPUOS_UNLIKELY(cb == nullptr)) return CUDA_ERROR_NOT_PERMITTED;
  if (GPUOS_UNLIKELY(launch_is_captured(*d, stream, ptsz))) {
    CUresult r = call(*d);
    if (r == CUDA_SUCCESS) count(cb->captured_launches);
    return r;
  }
  if (GPUOS_UNLIKELY(std::atomic_ref<uint32_t>(cb->gate).load(std::memory_order_acquire) !=
                     GPUOS_GATE_OPEN)) {
    wait_at_gate(cb);
  }
  // Best-effort tenants get a bound on unfinished launches so that a closed gate drains fast.
  const uint32_t max_inflight = std::atomic_ref<uint32_t>(cb->max_inflight).load(std::memory_order_relaxed);
  if (GPUOS_UNLIKELY(max_inflight != 0)) inflight_before_submit(*d, cb, max_inflight);
  CUresult r = call(*d);
  if (GPUOS_LIKELY(r == CUDA_SUCCESS)) {
    // seq_cst: pairs with the activity monitor (see note_submission).
    std::atomic_ref<uint64_t>(kind == LaunchKind::kKernel ? cb->launches : cb->graph_launches)
        .fetch_add(1, std::memory_order_seq_cst);
    note_submission(*d, cb, stream, ptsz);
  }
  if (GPUOS_UNLIKELY(max_inflight != 0)) inflight_after_submit(*d, stream, ptsz, r == CUDA_SUCCESS);
  return r;
}

}  // namespace gpuos::interpose
