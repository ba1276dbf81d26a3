// SPDX-License-Identifier: Apache-2.0
#include "interpose/spatial_streams.h"

#include <pthread.h>

#include <vector>

#include "common/sm_split.h"
#include "interpose/runtime.h"
#include "interpose/stream_work.h"

namespace gpuos::interpose::spatial {
namespace {

const CUstream kLegacyStream = reinterpret_cast<CUstream>(0x1);     // CU_STREAM_LEGACY
const CUstream kPerThreadStream = reinterpret_cast<CUstream>(0x2);  // CU_STREAM_PER_THREAD

// Per-thread cache: a launch on a stream it has seen with the same mask costs a lookup in a few
// entries, no lock.
struct CachedStream {
  StreamKey key;
  PartitionStream partition;
};
constexpr int kStreamCache = 8;
thread_local CachedStream t_streams[kStreamCache];
thread_local unsigned t_stream_next = 0;

}  // namespace

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

Partition make_partition(const GpuosDriverTable& d, gpuos_control_block* cb, int dev, uint64_t mask) {
  if (d.cuDevResourceGenerateDesc == nullptr || d.cuGreenCtxCreate == nullptr) {
    log(LogLevel::kError, "spatial: this driver has no green contexts; launches run unconfined");
    return {};
  }
  const uint64_t t0 = monotonic_ns();
  const uint32_t group_sms = grant_load(grants_of(cb)->space_group_sms, std::memory_order_relaxed);
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
    return {};
  }
  add(cb->space_partitions, 1);
  log(LogLevel::kInfo, "spatial: partition of %u SMs (groups 0x%llx of %u) on device %d in %.2f ms", sms,
      static_cast<unsigned long long>(mask), split.count(), dev, static_cast<double>(ns) / 1e6);
  return Partition{green, sms};
}

PartitionStream new_partition_stream(const GpuosDriverTable& d, const Partition& part, int priority) {
  // From now on stream work is counted: its first launch finds its note at 0 and joins anyway, and
  // whatever was issued before this is ordered before that join.
  g_stream_work_counted.store(true, std::memory_order_seq_cst);
  PartitionStream s;
  if (d.cuGreenCtxStreamCreate(&s.stream, part.green, CU_STREAM_NON_BLOCKING, priority) != CUDA_SUCCESS) {
    return PartitionStream{};
  }
  s.sms = part.sms;
  s.last_work = new std::atomic<uint64_t>(0);
  return s;
}

PartitionStream partition_stream(const GpuosDriverTable& d, gpuos_control_block* cb, const StreamKey& key,
                                 CUstream app_stream, bool ptsz) {
  for (const CachedStream& c : t_streams) {
    if (c.partition.stream != nullptr && c.key == key) return c.partition;
  }
  PartitionStream s;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    if (auto it = r.streams.find(key); it != r.streams.end()) {
      s = it->second;
    } else {
      auto [pit, fresh] = r.partitions.try_emplace({key.dev, key.mask});
      if (fresh) pit->second = make_partition(d, cb, key.dev, key.mask);
      if (pit->second.green != nullptr && d.cuGreenCtxStreamCreate != nullptr) {
        const uint64_t t0 = monotonic_ns();
        int priority = 0;  // the app stream's priority carries over to its partition stream
        auto get_priority = ptsz && d.cuStreamGetPriority_ptsz ? d.cuStreamGetPriority_ptsz : d.cuStreamGetPriority;
        if (get_priority == nullptr || get_priority(app_stream, &priority) != CUDA_SUCCESS) priority = 0;
        s = new_partition_stream(d, pit->second, priority);
        add(cb->space_setup_ns, monotonic_ns() - t0);
      }
      r.streams[key] = s;  // a failure is remembered: no retry (and no log) per launch
    }
  }
  if (s.stream != nullptr) t_streams[t_stream_next++ % kStreamCache] = CachedStream{key, s};
  return s;
}

}  // namespace gpuos::interpose::spatial
