// SPDX-License-Identifier: Apache-2.0
#include "interpose/spatial_prefetch.h"

#include <pthread.h>

#include <new>
#include <utility>
#include <vector>

#include "common/sm_split.h"
#include "interpose/runtime.h"
#include "interpose/spatial_graphs.h"
#include "interpose/spatial_registry.h"
#include "interpose/spatial_streams.h"

namespace gpuos::interpose::spatial {
namespace {

struct PrefetchJob {
  const GpuosDriverTable* d;
  gpuos_control_block* cb;
  CUcontext ctx;  // the launching thread's (the device's primary context)
  int dev;
  uint64_t mask;
};

// Makes the neighbours of a partition, their streams for every app stream that has one on it and
// the variants of the tenant's placed graphs, off the launch path: a green context costs ~1.7 ms to
// create and a graph variant an instantiation, which a launch would otherwise wait for at the
// tenant's next change of size. A launch that needs one first makes its own (the registry keeps
// whichever came first).
void* prefetch_main(void* arg) {
  const PrefetchJob job = *static_cast<PrefetchJob*>(arg);
  delete static_cast<PrefetchJob*>(arg);
  const GpuosDriverTable& d = *job.d;
  // Graph work (cloning, instantiating) happens in the current context, as on the launching thread.
  if (d.cuCtxSetCurrent == nullptr || d.cuCtxSetCurrent(job.ctx) != CUDA_SUCCESS) return nullptr;
  const uint32_t group_sms = grant_load(grants_of(job.cb)->space_group_sms, std::memory_order_relaxed);
  SmSplit split;
  if (split_sms(d, job.dev, group_sms, &split) != CUDA_SUCCESS) return nullptr;
  Registry& r = registry();
  const std::vector<uint64_t> neighbours = neighbour_partitions(job.mask, split.count());
  for (uint64_t mask : neighbours) {
    bool have = false;
    {
      std::lock_guard<std::mutex> lock(r.mu);
      have = r.partitions.count({job.dev, mask}) != 0;
    }
    if (!have) {
      Partition made = make_partition(d, job.cb, job.dev, mask);
      std::lock_guard<std::mutex> lock(r.mu);
      auto [it, fresh] = r.partitions.try_emplace({job.dev, mask}, made);
      if (!fresh && made.green != nullptr && d.cuGreenCtxDestroy != nullptr) d.cuGreenCtxDestroy(made.green);
    }
    // Streams: one per app stream already placed on job.mask. Created under the lock (tens of us).
    std::lock_guard<std::mutex> lock(r.mu);
    const Partition& part = r.partitions[{job.dev, mask}];
    if (part.green == nullptr || d.cuGreenCtxStreamCreate == nullptr) continue;
    std::vector<std::pair<StreamKey, CUstream>> wanted;
    for (const auto& [key, ps] : r.streams) {
      if (key.dev != job.dev || key.mask != job.mask || ps.stream == nullptr) continue;
      StreamKey k = key;
      k.mask = mask;
      if (r.streams.count(k) == 0) wanted.emplace_back(k, ps.stream);
    }
    for (const auto& [k, like] : wanted) {
      int priority = 0;  // as the partition stream it stands in for (the app stream's)
      if (d.cuStreamGetPriority == nullptr || d.cuStreamGetPriority(like, &priority) != CUDA_SUCCESS) priority = 0;
      const uint64_t t0 = monotonic_ns();
      if (PartitionStream ps = new_partition_stream(d, part, priority); ps.stream != nullptr) r.streams[k] = ps;
      add(job.cb->space_setup_ns, monotonic_ns() - t0);
    }
  }
  // Graph variants, for each neighbour: one per graph the tenant launches in its partitions (that
  // has a variant for one of them already).
  for (uint64_t mask : neighbours) {
    std::vector<CUgraphExec> graphs;
    CUgreenCtx green = nullptr;
    {
      std::lock_guard<std::mutex> lock(r.mu);
      auto pit = r.partitions.find({job.dev, mask});
      if (pit == r.partitions.end() || pit->second.green == nullptr) continue;
      green = pit->second.green;
      for (const auto& [key, variant] : r.variants) {
        const auto& [exec, dev, m] = key;
        if (dev == job.dev && variant != nullptr && r.variants.count({exec, dev, mask}) == 0 &&
            (graphs.empty() || graphs.back() != exec)) {  // the map is ordered by exec first
          graphs.push_back(exec);
        }
      }
    }
    for (CUgraphExec exec : graphs) {
      VariantSource source;
      {
        std::lock_guard<std::mutex> lock(r.mu);
        if (r.variants.count({exec, job.dev, mask}) != 0) continue;  // a launch made it meanwhile
        source = clone_source(d, r, exec);
      }
      if (source.copy == nullptr) continue;
      CUgraphExec made = make_variant(d, job.cb, source.copy, source.flags, green);
      if (made == nullptr) continue;  // not filed: the launch that needs it tries itself
      std::lock_guard<std::mutex> lock(r.mu);
      file_variant(d, r, exec, job.dev, mask, source.version, made);
    }
  }
  return nullptr;
}

}  // namespace

void prefetch_neighbours(const GpuosDriverTable& d, gpuos_control_block* cb, CUcontext ctx, int dev, uint64_t mask) {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.prefetched.insert({dev, mask}).second) return;
  }
  auto* job = new (std::nothrow) PrefetchJob{&d, cb, ctx, dev, mask};
  if (job == nullptr) return;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, &prefetch_main, job) == 0) {
    pthread_setname_np(t, "gpuos-prefetch");
  } else {
    delete job;  // no thread: the next change of size makes its partition in the launch path
  }
  pthread_attr_destroy(&attr);
}

}  // namespace gpuos::interpose::spatial
