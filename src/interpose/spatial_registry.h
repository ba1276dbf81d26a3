// SPDX-License-Identifier: Apache-2.0
// The process-wide tables of spatial placement (spatial.h), shared by the spatial_*.cc files: the
// partitions (green contexts), their streams, the primary contexts, the graphs' copies and their
// variants, and the lock that guards them. Filled on first use of each partition or stream (slow
// path, under the lock; creating a green context costs ~1.7 ms anyway). Never destroyed: worker
// threads may still launch while the process exits.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "gpuos/abi.h"
#include "gpuos/driver_api.h"

namespace gpuos::interpose::spatial {

inline void add(uint64_t& counter, uint64_t n) {
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

struct Partition {
  CUgreenCtx green = nullptr;  // null = could not be made
  uint32_t sms = 0;
};

struct PartitionStream {
  CUstream stream = nullptr;  // null = could not be made
  uint32_t sms = 0;
  // The stream work count its last placed launch left (0: none yet), shared by every thread that
  // launches there (stream_work.h, skip_forward_join).
  std::atomic<uint64_t>* last_work = nullptr;
};

// An instantiated graph of a spatial tenant: a private copy of the graph it came from.
struct GraphSource {
  CUgraph copy = nullptr;  // null: unplaceable (edited in place, or could not be copied)
  unsigned long long flags = 0;
  uint64_t version = 0;    // new for every instantiation or update (a variant is made from one)
  uint32_t kernels = 0;    // its kernel nodes (child graphs included); 0 = not known
};

struct Registry {
  std::mutex mu;
  std::map<std::pair<int, uint64_t>, Partition> partitions;  // (device, mask)
  std::map<StreamKey, PartitionStream> streams;
  std::map<CUcontext, int> primary_device;                   // -1: not a primary context
  std::map<CUgraphExec, GraphSource> graphs;
  std::map<std::tuple<CUgraphExec, int, uint64_t>, CUgraphExec> variants;  // (exec, dev, mask); null = failed
  std::set<std::pair<int, uint64_t>> prefetched;             // (device, mask) whose neighbours were made
  std::mutex sample_mu;  // one writer of the shape table at a time (not nested with mu)
};

// The tables, made on first use.
Registry& registry();

}  // namespace gpuos::interpose::spatial
