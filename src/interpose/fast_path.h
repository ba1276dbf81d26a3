// SPDX-License-Identifier: Apache-2.0
// The launch path of a governed kernel or graph launch. It runs on every launch of every tenant,
// so it is lock-free and syscall-free when nothing blocks: entering and leaving the control block's
// users (quiescence.h), a load of the control-block pointer, a load of the gate word, a load of the
// capture hint, the real call, one counter increment.
#pragma once

#include <atomic>

#include "interpose/activity.h"
#include "interpose/launch_phase.h"
#include "interpose/pacing.h"
#include "interpose/quiescence.h"
#include "interpose/runtime.h"
#include "interpose/spatial.h"
#include "interpose/stream_work.h"

namespace gpuos::interpose {

#define GPUOS_LIKELY(x) __builtin_expect(!!(x), 1)
#define GPUOS_UNLIKELY(x) __builtin_expect(!!(x), 0)

// The tenant's control block. A call that writes to it holds a ControlBlockUse from before this
// until it is done with the block, so that re-registration carries what it wrote over; the load is
// seq_cst for that (quiescence.h; on x86 the same plain load as acquire).
inline gpuos_control_block* control_block() {
  gpuos_control_block* cb = g_control.load(std::memory_order_seq_cst);
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

// Calls that touch a swappable tenant's device memory (launches, copies, memsets) are bracketed:
// they pass the gate and count themselves in g_device_access until the real call returned, so the
// swapper (swap.cc), once the daemon closed the gate, knows when no such call is still on its way
// into the driver and can drain and move the memory. Dekker-style: the caller increments, then
// reads the gate; the daemon closes the gate before commanding a swap, then the swapper reads the
// counter; both seq_cst. Tenants that are not swappable skip all of it (one relaxed load).
extern std::atomic<bool> g_swappable;
extern std::atomic<int64_t> g_device_access;

class DeviceAccess {
 public:
  DeviceAccess(gpuos_control_block* cb, LaunchDevice* device)
      : tracked_(g_swappable.load(std::memory_order_relaxed)) {
    if (GPUOS_UNLIKELY(tracked_)) enter(cb, device);
  }
  ~DeviceAccess() {
    if (GPUOS_UNLIKELY(tracked_)) g_device_access.fetch_sub(1, std::memory_order_seq_cst);
  }
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;

 private:
  static void enter(gpuos_control_block* cb, LaunchDevice* device) {
    for (;;) {
      g_device_access.fetch_add(1, std::memory_order_seq_cst);
      // (A partial gate is never a swap's: gpuosd closes the whole gate before it moves memory.)
      const gpuos_grant_block* g = grants_of(cb);
      if (gate_lets_through(g, grant_load(g->gate, std::memory_order_seq_cst), device)) return;
      g_device_access.fetch_sub(1, std::memory_order_seq_cst);
      if (wait_at_gate(cb, device)) {  // the gate no longer binds (gpuosd gone) and the memory is back
        g_device_access.fetch_add(1, std::memory_order_seq_cst);
        return;
      }
    }
  }
  bool tracked_;
};

// Forwards a call that issues stream work or touches device memory but is not a launch (copies,
// memsets, stream waits, memory operations...): for a swappable tenant it waits while the gate is
// closed (its memory may be in host memory then); for spatial placement it is counted as stream
// work (stream_work.h).
template <typename Call>
inline CUresult governed_copy(Call&& call) {
  const GpuosDriverTable* d = real_driver();
  if (GPUOS_UNLIKELY(d == nullptr)) return CUDA_ERROR_NOT_INITIALIZED;
  StreamWorkCall work;
  if (GPUOS_LIKELY(!g_swappable.load(std::memory_order_relaxed))) return call(*d);
  ControlBlockUse use;  // the gate wait counts into the block
  gpuos_control_block* cb = control_block();
  if (GPUOS_UNLIKELY(cb == nullptr)) return CUDA_ERROR_NOT_PERMITTED;
  LaunchDevice device;
  DeviceAccess access(cb, &device);
  return call(*d);
}

enum class LaunchKind { kKernel, kGraph };

// Gates, places, forwards and counts one launch. `call(driver, placement)` performs the real driver
// call on placement.target (the app's own stream, or the partition stream of spatial placement)
// and, for a graph, launches placement.graph when set (its partition's variant) instead of `graph`;
// `shape` names the launch for right-sizing samples (read only when the tenant is in a domain).
template <typename Call>
inline CUresult governed_launch(LaunchKind kind, CUstream stream, bool ptsz, const LaunchShape& shape, Call&& call,
                                CUgraphExec graph = nullptr) {
  const GpuosDriverTable* d = real_driver();
  if (GPUOS_UNLIKELY(d == nullptr)) return CUDA_ERROR_NOT_INITIALIZED;
  ControlBlockUse use;  // until the last counter is written into the block loaded below
  gpuos_control_block* cb = control_block();
  if (GPUOS_UNLIKELY(cb == nullptr)) return CUDA_ERROR_NOT_PERMITTED;
  if (GPUOS_UNLIKELY(launch_is_captured(*d, stream, ptsz))) {
    StreamWorkCall work;
    CUresult r = call(*d, Placement{stream, stream, nullptr, nullptr, ptsz, nullptr});
    if (r == CUDA_SUCCESS) count(cb->captured_launches);
    return r;
  }
  LaunchDevice device;  // resolved only at a partial gate (closed on some of its devices)
  DeviceAccess access(cb, &device);  // swappable tenants only: waits at the gate itself
  for (;;) {
    if (GPUOS_UNLIKELY(grant_load(grants_of(cb)->gate, std::memory_order_acquire) != GPUOS_GATE_OPEN)) {
      wait_at_gate(cb, &device);
    }
    // A best-effort tenant beside a guaranteed tenant's latency budget spreads its launches out.
    const uint32_t pace = grant_load(grants_of(cb)->pace_permille, std::memory_order_relaxed);
    if (GPUOS_LIKELY(pace == 0) || pace_before_launch(cb, shape_key(shape), kind == LaunchKind::kGraph, pace, &device)) break;
  }
  // Best-effort tenants get a bound on unfinished launches so that a closed gate drains fast.
  const uint32_t max_inflight = grant_load(grants_of(cb)->max_inflight, std::memory_order_relaxed);
  if (GPUOS_UNLIKELY(max_inflight != 0)) inflight_before_submit(*d, cb, max_inflight);
  // Spatial sharing, or the timing of a latency budget (an unconfined placement only times): two
  // relaxed loads when the tenant has neither.
  Placement placed{stream, stream, nullptr, nullptr, ptsz};
  const uint32_t sample_period = grant_load(grants_of(cb)->sample_period, std::memory_order_relaxed);
  if (GPUOS_UNLIKELY(grant_load(grants_of(cb)->space_enabled, std::memory_order_relaxed) != 0 || sample_period != 0)) {
    // A latency budget's own tenant: whether this launch is one of its long ones (launch_phase.h),
    // before it is placed, so that its timing is marked with it.
    if (sample_period != 0 &&
        grant_load(grants_of(cb)->tenant_class, std::memory_order_relaxed) == GPUOS_CLASS_GUARANTEED) {
      note_launch_phase(cb, shape_key(shape), kind == LaunchKind::kGraph);
    }
    placed = place_launch(*d, cb, stream, ptsz, shape, graph);
    if (GPUOS_UNLIKELY(placed.first_on_device)) notify_activity(cb);
  }
  // A launch on the app's own stream is stream work like a copy (stream_work.h); one placed on a
  // partition stream is counted by place_launch.
  const bool on_app_stream = placed.back == nullptr;
  if (GPUOS_LIKELY(on_app_stream)) note_stream_work();
  CUresult r = call(*d, placed);
  // Joined back before the activity monitor looks at the app stream, so its fences cover the launch.
  if (GPUOS_UNLIKELY(placed.back != nullptr || placed.timed_end != nullptr)) {
    finish_placement(*d, placed, r == CUDA_SUCCESS);
  }
  if (GPUOS_LIKELY(on_app_stream)) note_stream_work();
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
