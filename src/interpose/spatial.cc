// SPDX-License-Identifier: Apache-2.0
// Placement (spatial.h): where a launch goes, its joins to and from the app stream, and what the
// tenant tells gpuosd about it. Partitions and their streams: spatial_streams.cc; graph variants:
// spatial_graphs.cc; right-sizing samples: spatial_samples.cc; the prefetch helper:
// spatial_prefetch.cc; the tables they share: spatial_registry.cc.
#include "interpose/spatial.h"

#include <time.h>

#include <mutex>

#include "interpose/carry_over.h"
#include "interpose/runtime.h"
#include "interpose/spatial_graphs.h"
#include "interpose/spatial_prefetch.h"
#include "interpose/spatial_registry.h"
#include "interpose/spatial_samples.h"
#include "interpose/spatial_streams.h"
#include "interpose/stream_work.h"

namespace gpuos::interpose {
namespace spatial {
namespace {

// Per-thread cache of the contexts a thread launches in: with the stream and variant caches it
// makes the steady state lock-free.
struct CachedContext {
  CUcontext ctx = nullptr;
  int dev = -1;  // device if ctx is a primary context, else -1
  uint32_t device_sms = 0;  // SMs of that device (an unconfined launch runs on all of them)
  CUevent forward = nullptr;  // recorded on the app stream, waited for by the partition stream
  CUevent back = nullptr;     // recorded on the partition stream, waited for by the app stream
  SampleSlot sample;          // right-sizing: the timed launch of this thread in this context
};
constexpr int kContextCache = 4;
thread_local CachedContext t_contexts[kContextCache];
thread_local unsigned t_context_next = 0;

// The device whose primary context ctx is, or -1.
int primary_device_of(const GpuosDriverTable& d, CUcontext ctx) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (auto it = r.primary_device.find(ctx); it != r.primary_device.end()) return it->second;
  int result = -1;
  CUdevice dev = 0;
  CUcontext primary = nullptr;
  // ctx is current on this thread, so cuCtxGetDevice names its device. The retained reference to
  // the primary context is kept for the life of the process (its green contexts hold one too).
  if (d.cuCtxGetDevice != nullptr && d.cuDevicePrimaryCtxRetain != nullptr &&
      d.cuCtxGetDevice(&dev) == CUDA_SUCCESS &&
      d.cuDevicePrimaryCtxRetain(&primary, dev) == CUDA_SUCCESS && primary == ctx) {
    result = static_cast<int>(dev);
  }
  r.primary_device[ctx] = result;
  return result;
}

CachedContext* context_entry(const GpuosDriverTable& d, CUcontext ctx) {
  for (CachedContext& c : t_contexts) {
    if (c.ctx == ctx && ctx != nullptr) return &c;
  }
  CachedContext& c = t_contexts[t_context_next++ % kContextCache];
  // An evicted entry's events are left alive: a launch of this thread may still be joined through
  // them on the GPU. Four contexts per thread is the working set; evictions are rare.
  c = CachedContext{};
  c.ctx = ctx;
  c.dev = primary_device_of(d, ctx);
  if (c.dev >= 0 && d.cuEventCreate != nullptr) {
    if (d.cuEventCreate(&c.forward, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
        d.cuEventCreate(&c.back, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      c.forward = c.back = nullptr;
    }
    make_sample_events(d, &c.sample);
    int sms = 0;
    if (d.cuDeviceGetAttribute != nullptr &&
        d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c.dev) == CUDA_SUCCESS && sms > 0) {
      c.device_sms = static_cast<uint32_t>(sms);
    }
  }
  return &c;
}

// Whether a launch to the partition stream that noted `last` may skip its forward join: the
// stream work count still stands where that stream's previous launch left it, so nothing else was
// issued since, in any thread (stream_work.h). The launch is stream work itself either way: *work
// is the count it leaves. Others bracket their calls with counts before and after, so one whose
// work landed on the app stream after this launch's join back has moved the count past *work by
// the time it returns, and the next launch joins.
bool skip_forward_join(std::atomic<uint64_t>* last, uint64_t* work) {
  const uint64_t seen = last != nullptr ? last->load(std::memory_order_acquire) : 0;
  if (seen != 0 && !g_stream_work_unseen.load(std::memory_order_acquire)) {
    uint64_t expected = seen;
    if (g_stream_work.compare_exchange_strong(expected, seen + 1, std::memory_order_seq_cst)) {
      *work = seen + 1;
      return true;
    }
  }
  *work = g_stream_work.fetch_add(1, std::memory_order_seq_cst) + 1;
  return false;
}

Placement unplaced(gpuos_control_block* cb, CUstream stream, bool failure) {
  if (failure) add(cb->space_failures, 1);
  return Placement{stream, stream, nullptr, nullptr, false};
}

// Notes that the tenant launches on device ordinal dev: gpuosd plans a tenant's SMs only on the
// GPUs it uses, and one that has allocated nothing yet is known there by its launches alone.
// Returns true for the first.
bool note_device(gpuos_control_block* cb, int dev) {
  std::atomic_ref<uint32_t> bits(cb->space_devices);
  const uint32_t bit = 1u << dev;
  if ((bits.load(std::memory_order_relaxed) & bit) != 0) return false;
  return (bits.fetch_or(bit, std::memory_order_relaxed) & bit) == 0;
}

// Counts a placed launch and notes the mask it used.
void note_mask_in_use(gpuos_control_block* cb, int dev, uint64_t mask) {
  uint64_t& in_use = cb->space_mask_in_use[dev];
  if (std::atomic_ref<uint64_t>(in_use).load(std::memory_order_relaxed) != mask) {
    std::atomic_ref<uint64_t>(in_use).store(mask, std::memory_order_relaxed);
    add(cb->space_switches, 1);
  }
  if (std::atomic_ref<uint32_t>(cb->space_active).load(std::memory_order_relaxed) == 0) {
    std::atomic_ref<uint32_t>(cb->space_active).store(1, std::memory_order_relaxed);
  }
  add(cb->space_launches, 1);
}

// place_launch once the launching thread's context and device are known.
Placement place_on_device(const GpuosDriverTable& d, gpuos_control_block* cb, CUcontext ctx, CachedContext* c,
                          CUstream stream, bool ptsz, const LaunchShape& shape, CUgraphExec graph) {
  const uint64_t mask = grant_load(grants_of(cb)->space_mask[c->dev], std::memory_order_acquire);
  if (mask == 0) {  // the whole device: nothing to place, only perhaps a launch to time
    Placement p = unplaced(cb, stream, false);
    if (start_sample(d, cb, &c->sample, stream, ptsz, shape, c->device_sms, graph == nullptr ? 1 : 0, graph)) {
      p.timed_end = c->sample.end;
    }
    p.ptsz = ptsz;
    return p;
  }
  if (graph != nullptr) {  // a variant whose nodes name the partition, on the app's own stream
    uint32_t sms = 0, kernels = 0;
    CUgraphExec variant = graph_variant(d, cb, graph, c->dev, mask, &sms, &kernels);
    if (variant == nullptr) return unplaced(cb, stream, true);
    if (sms != c->sample.last_sms) prefetch_neighbours(d, cb, ctx, c->dev, mask);
    note_mask_in_use(cb, c->dev, mask);
    Placement p{stream, stream, nullptr, nullptr, ptsz, variant};
    if (start_sample(d, cb, &c->sample, stream, ptsz, shape, sms, kernels)) p.timed_end = c->sample.end;
    return p;
  }
  if (c->forward == nullptr || d.cuEventRecord == nullptr || d.cuStreamWaitEvent == nullptr) {
    return unplaced(cb, stream, true);
  }
  const PartitionStream ps = partition_stream(d, cb, key_of(ctx, c->dev, stream, ptsz, mask), stream, ptsz);
  CUstream part = ps.stream;
  if (part == nullptr) return unplaced(cb, stream, true);
  if (ps.sms != c->sample.last_sms) prefetch_neighbours(d, cb, ctx, c->dev, mask);
  uint64_t work = 0;
  if (skip_forward_join(ps.last_work, &work)) {
    add(cb->space_joins_skipped, 1);
  } else {
    auto record = ptsz && d.cuEventRecord_ptsz ? d.cuEventRecord_ptsz : d.cuEventRecord;
    if (record(c->forward, stream) != CUDA_SUCCESS || d.cuStreamWaitEvent(part, c->forward, 0) != CUDA_SUCCESS) {
      return unplaced(cb, stream, true);
    }
  }
  note_mask_in_use(cb, c->dev, mask);
  Placement p{part, stream, c->back, nullptr, ptsz};
  p.last_work = ps.last_work;
  p.work = work;
  if (start_sample(d, cb, &c->sample, part, false, shape, ps.sms, 1)) p.timed_end = c->sample.end;
  return p;
}

// Re-registration: the devices the tenant launched on. The rest of the spatial words are the
// daemon's (masks, epoch) or this process's own tallies of its placements, which start afresh.
void carry_devices(gpuos_control_block* from, gpuos_control_block* to) {
  std::atomic_ref<uint32_t>(to->space_devices).fetch_or(std::atomic_ref<uint32_t>(from->space_devices).load());
}

}  // namespace
}  // namespace spatial

constinit const CarryOver kSpatialCarryOver{"spatial", nullptr, &spatial::carry_devices};

void await_space_plan(gpuos_control_block* cb, uint32_t device_count) {
  const uint32_t& planned = grants_of(cb)->space_planned_devices;
  for (int i = 0; i < 200 && grant_load(planned) != device_count; ++i) {
    timespec ms{0, 1000 * 1000};
    nanosleep(&ms, nullptr);
  }
}

Placement place_launch(const GpuosDriverTable& d, gpuos_control_block* cb, CUstream stream, bool ptsz,
                       const LaunchShape& shape, CUgraphExec graph) {
  CUcontext ctx = nullptr;
  if (d.cuCtxGetCurrent == nullptr || d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) {
    return spatial::unplaced(cb, stream, false);  // the launch itself will fail with the driver's error
  }
  spatial::CachedContext* c = spatial::context_entry(d, ctx);
  if (c->dev < 0 || c->dev >= GPUOS_MAX_DEVICES) return spatial::unplaced(cb, stream, true);
  const bool first = spatial::note_device(cb, c->dev);
  Placement p = spatial::place_on_device(d, cb, ctx, c, stream, ptsz, shape, graph);
  p.first_on_device = first;
  return p;
}

void finish_placement(const GpuosDriverTable& d, const Placement& p, bool submitted) {
  if (p.timed_end != nullptr) spatial::end_sample(d, p, submitted);
  if (p.back == nullptr || !submitted) return;
  auto record = d.cuEventRecord;  // the partition stream is an ordinary stream: no _ptsz needed
  auto wait = p.ptsz && d.cuStreamWaitEvent_ptsz ? d.cuStreamWaitEvent_ptsz : d.cuStreamWaitEvent;
  if (record(p.back, p.target) == CUDA_SUCCESS && wait(p.origin, p.back, 0) == CUDA_SUCCESS) {
    if (p.last_work != nullptr) p.last_work->store(p.work, std::memory_order_release);
    return;
  }
  // The join back failed: keep stream order the slow way rather than let later work overtake it.
  log(LogLevel::kWarn, "spatial: joining a placed launch back to its stream failed; synchronising");
  if (d.cuStreamSynchronize != nullptr) d.cuStreamSynchronize(p.target);
}

}  // namespace gpuos::interpose
