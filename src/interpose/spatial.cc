#include "interpose/spatial.h"

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "common/sm_split.h"
#include "interpose/runtime.h"

namespace gpuos::interpose {
namespace {

const CUstream kLegacyStream = reinterpret_cast<CUstream>(0x1);     // CU_STREAM_LEGACY
const CUstream kPerThreadStream = reinterpret_cast<CUstream>(0x2);  // CU_STREAM_PER_THREAD

void add(uint64_t& counter, uint64_t n) {
  std::atomic_ref<uint64_t>(counter).fetch_add(n, std::memory_order_relaxed);
}

// Which stream a launch names, independent of how it was spelled: the legacy and per-thread
// default streams are per context (and per thread), so their key carries those.
struct StreamKey {
  uintptr_t stream = 0;  // the handle; 1 = legacy default stream, 2 = per-thread default stream
  uintptr_t ctx = 0;     // for the default streams: their context
  uintptr_t thread = 0;  // for the per-thread default stream: its thread
  uint64_t mask = 0;
  int dev = 0;
  auto tie() const { return std::tie(stream, ctx, thread, mask, dev); }
  bool operator<(const StreamKey& o) const { return tie() < o.tie(); }
  bool operator==(const StreamKey& o) const { return tie() == o.tie(); }
};

StreamKey key_of(CUcontext ctx, int dev, CUstream stream, bool ptsz, uint64_t mask) {
  StreamKey k;
  k.mask = mask;
  k.dev = dev;
  if (stream == nullptr) stream = ptsz ? kPerThreadStream : kLegacyStream;
  k.stream = reinterpret_cast<uintptr_t>(stream);
  if (stream == kLegacyStream || stream == kPerThreadStream) k.ctx = reinterpret_cast<uintptr_t>(ctx);
  if (stream == kPerThreadStream) k.thread = static_cast<uintptr_t>(pthread_self());
  return k;
}

// Process-wide tables, filled on first use of each partition or stream (slow path, under a mutex;
// creating a green context costs ~1.7 ms anyway). Never destroyed: worker threads may still launch
// while the process exits.
struct Registry {
  std::mutex mu;
  std::map<std::pair<int, uint64_t>, CUgreenCtx> partitions;  // (device, mask); null = failed
  std::map<StreamKey, CUstream> streams;                      // null = failed
  std::map<CUcontext, int> primary_device;                    // -1: not a primary context
};

Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// Per-thread caches make the steady state lock-free: a launch on a stream it has seen with the
// same mask costs two lookups in a few entries.
struct CachedStream {
  StreamKey key;
  CUstream partition = nullptr;
};
struct CachedContext {
  CUcontext ctx = nullptr;
  int dev = -1;  // device if ctx is a primary context, else -1
  CUevent forward = nullptr;  // recorded on the app stream, waited for by the partition stream
  CUevent back = nullptr;     // recorded on the partition stream, waited for by the app stream
};
constexpr int kStreamCache = 8;
constexpr int kContextCache = 4;
thread_local CachedStream t_streams[kStreamCache];
thread_local unsigned t_stream_next = 0;
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
  }
  return &c;
}

// The green context holding exactly the SM groups of `mask` on device dev (the groups of one split
// of the device's SMs in groups of group_sms; the highest group takes the split's remainder), or
// null when it cannot be made. Called with the registry lock held.
CUgreenCtx make_partition(const GpuosDriverTable& d, gpuos_control_block* cb, int dev, uint64_t mask) {
  if (d.cuDevResourceGenerateDesc == nullptr || d.cuGreenCtxCreate == nullptr) {
    log(LogLevel::kError, "spatial: this driver has no green contexts; launches run unconfined");
    return nullptr;
  }
  const uint64_t t0 = monotonic_ns();
  const uint32_t group_sms = std::atomic_ref<uint32_t>(cb->space_group_sms).load(std::memory_order_relaxed);
  SmSplit split;
  CUresult r = split_sms(d, dev, group_sms, &split);
  std::vector<CUdevResource> chosen;
  unsigned sms = 0;
  for (unsigned i = 0; r == CUDA_SUCCESS && i < split.count(); ++i) {
    if ((mask >> i & 1u) != 0) sms += split.append_group(i, &chosen);
  }
  CUgreenCtx green = nullptr;
  if (r == CUDA_SUCCESS && !chosen.empty()) {
    CUdevResourceDesc desc = nullptr;
    r = d.cuDevResourceGenerateDesc(&desc, chosen.data(), static_cast<unsigned>(chosen.size()));
    if (r == CUDA_SUCCESS) r = d.cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
  }
  const uint64_t ns = monotonic_ns() - t0;
  add(cb->space_setup_ns, ns);
  if (r != CUDA_SUCCESS || green == nullptr) {
    log(LogLevel::kError, "spatial: no partition for SM groups 0x%llx of device %d (%s, %u groups of %u); "
        "its launches run unconfined", static_cast<unsigned long long>(mask), dev, cu_result_name(r),
        split.count(), split.min_count);
    return nullptr;
  }
  add(cb->space_partitions, 1);
  log(LogLevel::kInfo, "spatial: partition of %u SMs (groups 0x%llx of %u) on device %d in %.2f ms", sms,
      static_cast<unsigned long long>(mask), split.count(), dev, static_cast<double>(ns) / 1e6);
  return green;
}

CUstream partition_stream(const GpuosDriverTable& d, gpuos_control_block* cb, const StreamKey& key,
                          CUstream app_stream, bool ptsz) {
  for (const CachedStream& c : t_streams) {
    if (c.partition != nullptr && c.key == key) return c.partition;
  }
  CUstream s = nullptr;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    if (auto it = r.streams.find(key); it != r.streams.end()) {
      s = it->second;
    } else {
      auto [pit, fresh] = r.partitions.try_emplace({key.dev, key.mask}, nullptr);
      if (fresh) pit->second = make_partition(d, cb, key.dev, key.mask);
      if (pit->second != nullptr && d.cuGreenCtxStreamCreate != nullptr) {
        const uint64_t t0 = monotonic_ns();
        int priority = 0;  // the app stream's priority carries over to its partition stream
        auto get_priority = ptsz && d.cuStreamGetPriority_ptsz ? d.cuStreamGetPriority_ptsz : d.cuStreamGetPriority;
        if (get_priority == nullptr || get_priority(app_stream, &priority) != CUDA_SUCCESS) priority = 0;
        if (d.cuGreenCtxStreamCreate(&s, pit->second, CU_STREAM_NON_BLOCKING, priority) != CUDA_SUCCESS) {
          s = nullptr;
        }
        add(cb->space_setup_ns, monotonic_ns() - t0);
      }
      r.streams[key] = s;  // a failure is remembered: no retry (and no log) per launch
    }
  }
  if (s != nullptr) t_streams[t_stream_next++ % kStreamCache] = CachedStream{key, s};
  return s;
}

Placement unplaced(gpuos_control_block* cb, CUstream stream, bool failure) {
  if (failure) add(cb->space_failures, 1);
  return Placement{stream, stream, nullptr, false};
}

}  // namespace

Placement place_launch(const GpuosDriverTable& d, gpuos_control_block* cb, CUstream stream, bool ptsz) {
  CUcontext ctx = nullptr;
  if (d.cuCtxGetCurrent == nullptr || d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) {
    return unplaced(cb, stream, false);  // the launch itself will fail with the driver's error
  }
  CachedContext* c = context_entry(d, ctx);
  if (c->dev < 0 || c->dev >= GPUOS_MAX_DEVICES) return unplaced(cb, stream, true);
  const uint64_t mask = std::atomic_ref<uint64_t>(cb->space_mask[c->dev]).load(std::memory_order_acquire);
  if (mask == 0) return unplaced(cb, stream, false);  // the whole device: nothing to do
  if (c->forward == nullptr || d.cuEventRecord == nullptr || d.cuStreamWaitEvent == nullptr) {
    return unplaced(cb, stream, true);
  }
  CUstream part = partition_stream(d, cb, key_of(ctx, c->dev, stream, ptsz, mask), stream, ptsz);
  if (part == nullptr) return unplaced(cb, stream, true);
  auto record = ptsz && d.cuEventRecord_ptsz ? d.cuEventRecord_ptsz : d.cuEventRecord;
  if (record(c->forward, stream) != CUDA_SUCCESS || d.cuStreamWaitEvent(part, c->forward, 0) != CUDA_SUCCESS) {
    return unplaced(cb, stream, true);
  }
  uint64_t& in_use = cb->space_mask_in_use[c->dev];
  if (std::atomic_ref<uint64_t>(in_use).load(std::memory_order_relaxed) != mask) {
    std::atomic_ref<uint64_t>(in_use).store(mask, std::memory_order_relaxed);
    add(cb->space_switches, 1);
  }
  if (std::atomic_ref<uint32_t>(cb->space_active).load(std::memory_order_relaxed) == 0) {
    std::atomic_ref<uint32_t>(cb->space_active).store(1, std::memory_order_relaxed);
  }
  add(cb->space_launches, 1);
  return Placement{part, stream, c->back, ptsz};
}

void finish_placement(const GpuosDriverTable& d, const Placement& p, bool submitted) {
  if (p.back == nullptr || !submitted) return;
  auto record = d.cuEventRecord;  // the partition stream is an ordinary stream: no _ptsz needed
  auto wait = p.ptsz && d.cuStreamWaitEvent_ptsz ? d.cuStreamWaitEvent_ptsz : d.cuStreamWaitEvent;
  if (record(p.back, p.target) == CUDA_SUCCESS && wait(p.origin, p.back, 0) == CUDA_SUCCESS) return;
  // The join back failed: keep stream order the slow way rather than let later work overtake it.
  log(LogLevel::kWarn, "spatial: joining a placed launch back to its stream failed; synchronising");
  if (d.cuStreamSynchronize != nullptr) d.cuStreamSynchronize(p.target);
}

}  // namespace gpuos::interpose
