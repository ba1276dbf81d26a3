#include "interpose/spatial.h"

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "common/sm_split.h"
#include "interpose/runtime.h"
#include "interpose/shape_table.h"
#include "interpose/stream_work.h"

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
std::atomic<uint64_t> g_source_version{0};
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

Registry* g_registry = nullptr;

// A child of fork has only the forking thread: a lock another thread (the prefetch helper, a
// launching thread) held at the fork is never released there. The child cannot use the parent's
// CUDA contexts anyway; its lock must merely not hang it.
void registry_after_fork_in_child() {
  new (&g_registry->mu) std::mutex();
  new (&g_registry->sample_mu) std::mutex();
}

Registry& registry() {
  static Registry* r = [] {
    g_registry = new Registry;
    pthread_atfork(nullptr, nullptr, &registry_after_fork_in_child);
    return g_registry;
  }();
  return *r;
}

// Per-thread caches make the steady state lock-free: a launch on a stream it has seen with the
// same mask costs two lookups in a few entries.
struct CachedStream {
  StreamKey key;
  PartitionStream partition;
};
struct CachedContext {
  CUcontext ctx = nullptr;
  int dev = -1;  // device if ctx is a primary context, else -1
  uint32_t device_sms = 0;  // SMs of that device (an unconfined launch runs on all of them)
  CUevent forward = nullptr;  // recorded on the app stream, waited for by the partition stream
  CUevent back = nullptr;     // recorded on the partition stream, waited for by the app stream
  // Right-sizing: the timed launch of this thread in this context (one at a time).
  CUevent sample_start = nullptr;
  CUevent sample_end = nullptr;
  bool sample_in_flight = false;
  uint64_t sample_key = 0;
  uint32_t sample_blocks = 0;  // blocks in its grid (0: a graph)
  uint32_t sample_sms = 0;
  uint32_t sample_kernels = 0;  // kernels in the timed launch (a graph's kernel nodes); 0 = not known
  CUgraphExec sample_graph = nullptr;  // ... then, the graph whose nodes to count once it is done
  unsigned sample_countdown = kSamplePeriod;
  uint32_t last_sms = 0;      // SM count of the last launch that could be timed
  unsigned burst_left = 0;    // after a change of size: launches timed back to back (see start_sample)
};
struct CachedVariant {
  CUgraphExec exec = nullptr;
  int dev = -1;
  uint64_t mask = 0;
  uint64_t generation = 0;
  CUgraphExec variant = nullptr;
  uint32_t sms = 0;
  uint32_t kernels = 0;  // the graph's kernel nodes
};
constexpr int kStreamCache = 8;
constexpr int kVariantCache = 8;
thread_local CachedVariant t_variants[kVariantCache];
thread_local unsigned t_variant_next = 0;
std::atomic<uint64_t> g_graph_generation{0};  // bumped when variants go away: thread caches are stale
constexpr int kContextCache = 4;
thread_local CachedStream t_streams[kStreamCache];
thread_local unsigned t_stream_next = 0;
thread_local CachedContext t_contexts[kContextCache];
thread_local unsigned t_context_next = 0;
thread_local CachedContext* t_timing = nullptr;  // place_launch -> finish_placement of one launch

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
    if (d.cuEventCreate(&c.sample_start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
        d.cuEventCreate(&c.sample_end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      c.sample_start = c.sample_end = nullptr;
    }
    int sms = 0;
    if (d.cuDeviceGetAttribute != nullptr &&
        d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, c.dev) == CUDA_SUCCESS && sms > 0) {
      c.device_sms = static_cast<uint32_t>(sms);
    }
  }
  return &c;
}

// The green context holding exactly the SM groups of `mask` on device dev (the groups of one split
// of the device's SMs in groups of group_sms; the highest group takes the split's remainder), or
// null when it cannot be made. Touches no table: callers hold the registry lock, or (prefetch) add
// the result under it.
Partition make_partition(const GpuosDriverTable& d, gpuos_control_block* cb, int dev, uint64_t mask) {
  if (d.cuDevResourceGenerateDesc == nullptr || d.cuGreenCtxCreate == nullptr) {
    log(LogLevel::kError, "spatial: this driver has no green contexts; launches run unconfined");
    return {};
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
    return {};
  }
  add(cb->space_partitions, 1);
  log(LogLevel::kInfo, "spatial: partition of %u SMs (groups 0x%llx of %u) on device %d in %.2f ms", sms,
      static_cast<unsigned long long>(mask), split.count(), dev, static_cast<double>(ns) / 1e6);
  return Partition{green, sms};
}

// A stream of partition `part` (null stream if it cannot be made). Never destroyed, like its note.
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

// Points the kernel nodes of `graph` (and of its child graphs) at context ctx by CUkernel, so they
// run there; counts them in *placed. A node without a CUkernel (a kernel of a module loaded with
// cuModuleLoad*, whose CUfunction belongs to one context) is left as it is and counted in *left:
// it runs unconfined. False on a driver error, or for conditional nodes, whose bodies are not
// reached here.
bool retarget_graph(const GpuosDriverTable& d, CUgraph graph, CUcontext ctx, int depth, unsigned* placed, unsigned* left) {
  if (depth > 8 || d.cuGraphGetNodes == nullptr || d.cuGraphNodeGetType == nullptr ||
      d.cuGraphKernelNodeGetParams_v2 == nullptr || d.cuGraphKernelNodeSetParams_v2 == nullptr) {
    return false;
  }
  size_t n = 0;
  if (d.cuGraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS) return false;
  std::vector<CUgraphNode> nodes(n);
  if (n > 0 && d.cuGraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return false;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    if (d.cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) return false;
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
      CUDA_KERNEL_NODE_PARAMS p{};
      if (d.cuGraphKernelNodeGetParams_v2(node, &p) != CUDA_SUCCESS) return false;
      if (p.kern == nullptr) {
        ++*left;
        continue;
      }
      p.func = nullptr;
      p.ctx = ctx;
      if (d.cuGraphKernelNodeSetParams_v2(node, &p) != CUDA_SUCCESS) return false;
      ++*placed;
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
      CUgraph child = nullptr;  // owned by the node: edits show in it
      if (d.cuGraphChildGraphNodeGetGraph == nullptr || d.cuGraphChildGraphNodeGetGraph(node, &child) != CUDA_SUCCESS ||
          !retarget_graph(d, child, ctx, depth + 1, placed, left)) {
        return false;
      }
    } else if (type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      return false;
    }
  }
  return true;
}

// The kernel nodes of `graph` and of its child graphs (0 when the driver cannot say).
uint32_t count_kernels(const GpuosDriverTable& d, CUgraph graph, int depth = 0) {
  size_t n = 0;
  if (depth > 8 || d.cuGraphGetNodes == nullptr || d.cuGraphNodeGetType == nullptr ||
      d.cuGraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS) {
    return 0;
  }
  std::vector<CUgraphNode> nodes(n);
  if (n > 0 && d.cuGraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return 0;
  uint32_t kernels = 0;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    if (d.cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) return 0;
    CUgraph child = nullptr;
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
      ++kernels;
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH && d.cuGraphChildGraphNodeGetGraph != nullptr &&
               d.cuGraphChildGraphNodeGetGraph(node, &child) == CUDA_SUCCESS) {
      kernels += count_kernels(d, child, depth + 1);
    }
  }
  return kernels;
}

// A variant of a graph for partition `green`, made from `copy` (a clone of its source, which this
// consumes): its kernel nodes name the partition's context. Null when it cannot be placed. Slow
// (instantiation): called without the registry lock.
CUgraphExec make_variant(const GpuosDriverTable& d, gpuos_control_block* cb, CUgraph copy, unsigned long long flags,
                         CUgreenCtx green) {
  if (copy == nullptr) return nullptr;
  const uint64_t t0 = monotonic_ns();
  CUcontext ctx = nullptr;
  CUgraphExec variant = nullptr;
  CUresult r = d.cuCtxFromGreenCtx != nullptr && d.cuGraphInstantiateWithFlags != nullptr
                   ? d.cuCtxFromGreenCtx(&ctx, green)
                   : CUDA_ERROR_NOT_SUPPORTED;
  unsigned placed = 0, left = 0;
  if (r == CUDA_SUCCESS && (!retarget_graph(d, copy, ctx, 0, &placed, &left) || placed == 0)) {
    r = CUDA_ERROR_NOT_SUPPORTED;
  }
  if (r == CUDA_SUCCESS) r = d.cuGraphInstantiateWithFlags(&variant, copy, flags);
  if (d.cuGraphDestroy != nullptr) d.cuGraphDestroy(copy);  // the exec stands alone
  add(cb->space_setup_ns, monotonic_ns() - t0);
  if (r != CUDA_SUCCESS) {
    log(LogLevel::kWarn, "spatial: a graph could not be placed on its partition (%s); it runs unconfined",
        cu_result_name(r));
    return nullptr;
  }
  if (left != 0) {
    log(LogLevel::kWarn, "spatial: %u of a graph's %u kernels name no CUkernel (module kernels) and run unconfined",
        left, left + placed);
  }
  return variant;
}

// What make_variant needs, taken under the registry lock: a clone of exec's source graph (null if
// it has none or cannot be cloned), its flags and the version of the source it was cloned from.
struct VariantSource {
  CUgraph copy = nullptr;
  unsigned long long flags = 0;
  uint64_t version = 0;
};
VariantSource clone_source(const GpuosDriverTable& d, const Registry& r, CUgraphExec exec) {
  VariantSource v;
  auto src = r.graphs.find(exec);
  if (src == r.graphs.end() || src->second.copy == nullptr || d.cuGraphClone == nullptr) return v;
  if (d.cuGraphClone(&v.copy, src->second.copy) != CUDA_SUCCESS) v.copy = nullptr;
  v.flags = src->second.flags;
  v.version = src->second.version;
  return v;
}

// Files a variant of exec made from source `version` (registry lock held) and returns the one
// filed. A variant whose source was updated or destroyed meanwhile, or that another thread beat
// to it, is destroyed (then the other's is returned, or null).
CUgraphExec file_variant(const GpuosDriverTable& d, Registry& r, CUgraphExec exec, int dev, uint64_t mask,
                         uint64_t version, CUgraphExec made) {
  auto src = r.graphs.find(exec);
  if (src != r.graphs.end() && src->second.version == version) {
    auto [it, fresh] = r.variants.try_emplace({exec, dev, mask}, made);
    if (fresh) return made;
    if (made != nullptr && d.cuGraphExecDestroy != nullptr) d.cuGraphExecDestroy(made);
    return it->second;
  }
  if (made != nullptr && d.cuGraphExecDestroy != nullptr) d.cuGraphExecDestroy(made);
  return nullptr;
}

// Drops exec's variants (registry lock held). They may still be running: the driver defers the
// destruction of an executable graph until its launches are done.
void drop_variants(const GpuosDriverTable& d, Registry& r, CUgraphExec exec) {
  auto it = r.variants.lower_bound({exec, INT32_MIN, 0});
  while (it != r.variants.end() && std::get<0>(it->first) == exec) {
    if (it->second != nullptr && d.cuGraphExecDestroy != nullptr) d.cuGraphExecDestroy(it->second);
    it = r.variants.erase(it);
  }
  g_graph_generation.fetch_add(1, std::memory_order_release);
}

// The variant of exec for partition (dev, mask), its SMs and kernels, or null.
CUgraphExec graph_variant(const GpuosDriverTable& d, gpuos_control_block* cb, CUgraphExec exec, int dev, uint64_t mask,
                          uint32_t* sms, uint32_t* kernels) {
  const uint64_t gen = g_graph_generation.load(std::memory_order_acquire);
  for (const CachedVariant& v : t_variants) {
    if (v.exec == exec && v.dev == dev && v.mask == mask && v.generation == gen && v.variant != nullptr) {
      *sms = v.sms;
      *kernels = v.kernels;
      return v.variant;
    }
  }
  Registry& r = registry();
  CUgraphExec variant = nullptr;
  VariantSource source;
  CUgreenCtx green = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto [pit, new_partition] = r.partitions.try_emplace({dev, mask});
    if (new_partition) pit->second = make_partition(d, cb, dev, mask);
    *sms = pit->second.sms;
    green = pit->second.green;
    auto src = r.graphs.find(exec);
    *kernels = src != r.graphs.end() ? src->second.kernels : 0;
    if (auto vit = r.variants.find({exec, dev, mask}); vit != r.variants.end()) {
      variant = vit->second;
    } else if (green != nullptr) {
      source = clone_source(d, r, exec);
      // No source to copy: unplaceable, remembered (no retry per launch).
      if (source.copy == nullptr) r.variants.try_emplace({exec, dev, mask}, nullptr);
    }
  }
  if (source.copy != nullptr) {
    // Instantiated outside the lock: other threads' first launches at a new size do not wait on it.
    CUgraphExec made = make_variant(d, cb, source.copy, source.flags, green);
    std::lock_guard<std::mutex> lock(r.mu);
    variant = file_variant(d, r, exec, dev, mask, source.version, made);
  }
  if (variant != nullptr) {
    t_variants[t_variant_next++ % kVariantCache] = CachedVariant{exec, dev, mask, gen, variant, *sms, *kernels};
  }
  return variant;
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

uint64_t shape_key(const LaunchShape& s) {
  uint64_t h = reinterpret_cast<uintptr_t>(s.fn) * 0x9E3779B97F4A7C15ull;
  for (unsigned v : {s.grid[0], s.grid[1], s.grid[2], s.block[0], s.block[1], s.block[2]}) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  }
  return h != 0 ? h : 1;  // 0 marks an unused slot
}

// Adds one timed launch to the control block's shape table (shape_table.h); one writer at a time
// in the process.
void record_sample(gpuos_control_block* cb, uint64_t key, uint32_t blocks, uint32_t sms, uint64_t ns) {
  std::lock_guard<std::mutex> lock(registry().sample_mu);
  shape_table_add(cb, key, blocks, sms, ns);
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

// The kernel nodes of an instantiated graph (0 = not known).
uint32_t kernels_of(CUgraphExec exec) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.graphs.find(exec);
  return it != r.graphs.end() ? it->second.kernels : 0;
}

// Collects this thread's timed launch in context c once it has finished (never waits).
void collect_sample(const GpuosDriverTable& d, gpuos_control_block* cb, CachedContext* c) {
  if (!c->sample_in_flight || d.cuEventQuery == nullptr) return;
  const CUresult q = d.cuEventQuery(c->sample_end);
  if (q == CUDA_ERROR_NOT_READY) return;
  c->sample_in_flight = false;
  float ms = 0;
  if (q != CUDA_SUCCESS || d.cuEventElapsedTime_v2 == nullptr ||
      d.cuEventElapsedTime_v2(&ms, c->sample_start, c->sample_end) != CUDA_SUCCESS || ms < 0) {
    return;
  }
  const uint64_t ns = static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
  record_sample(cb, c->sample_key, c->sample_blocks, c->sample_sms, ns);
  uint32_t kernels = c->sample_kernels;
  if (kernels == 0 && c->sample_graph != nullptr) kernels = kernels_of(c->sample_graph);
  if (kernels != 0) {
    add(cb->space_timed_kernels, kernels);
    add(cb->space_timed_ns, ns);
  }
}

// Whether this launch is timed: one in kSamplePeriod of the thread's launches in this context,
// while no earlier one is still running. Records the start event on `target` if so. kernels: in
// the launch, or 0 for a graph's that are looked up when it is collected (outside the timing).
bool start_sample(const GpuosDriverTable& d, gpuos_control_block* cb, CachedContext* c, CUstream target,
                  bool ptsz, const LaunchShape& shape, uint32_t sms, uint32_t kernels, CUgraphExec graph = nullptr) {
  collect_sample(d, cb, c);
  if (sms != c->last_sms) {
    // A new size: gpuosd's sizer waits for samples here, and the tenant may be too slow here, so
    // time every launch (one in flight at a time) until kBurstSamples have been taken.
    c->last_sms = sms;
    c->burst_left = kBurstSamples;
  }
  if (c->burst_left == 0) {
    if (--c->sample_countdown != 0) return false;
    c->sample_countdown = next_sample_gap();
  }
  if (c->sample_in_flight || c->sample_start == nullptr || sms == 0) return false;
  if (c->burst_left > 0) --c->burst_left;
  auto record = ptsz && d.cuEventRecord_ptsz ? d.cuEventRecord_ptsz : d.cuEventRecord;
  if (record(c->sample_start, target) != CUDA_SUCCESS) return false;
  if (std::atomic_ref<uint32_t>(cb->space_sample_period).load(std::memory_order_relaxed) != kSamplePeriod) {
    std::atomic_ref<uint32_t>(cb->space_sample_period).store(kSamplePeriod, std::memory_order_relaxed);
  }
  c->sample_key = shape_key(shape);
  const uint64_t blocks = uint64_t{shape.grid[0]} * shape.grid[1] * shape.grid[2];
  c->sample_blocks = blocks > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(blocks);
  c->sample_sms = sms;
  c->sample_kernels = kernels;
  c->sample_graph = kernels == 0 ? graph : nullptr;
  t_timing = c;
  return true;
}

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
  const uint32_t group_sms = std::atomic_ref<uint32_t>(job.cb->space_group_sms).load(std::memory_order_relaxed);
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

// Starts prefetch_main for (dev, mask) once per process.
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

// place_launch once the launching thread's context and device are known.
Placement place_on_device(const GpuosDriverTable& d, gpuos_control_block* cb, CUcontext ctx, CachedContext* c,
                          CUstream stream, bool ptsz, const LaunchShape& shape, CUgraphExec graph) {
  const uint64_t mask = std::atomic_ref<uint64_t>(cb->space_mask[c->dev]).load(std::memory_order_acquire);
  if (mask == 0) {  // the whole device: nothing to place, only perhaps a launch to time
    Placement p = unplaced(cb, stream, false);
    if (start_sample(d, cb, c, stream, ptsz, shape, c->device_sms, graph == nullptr ? 1 : 0, graph)) {
      p.timed_end = c->sample_end;
    }
    p.ptsz = ptsz;
    return p;
  }
  if (graph != nullptr) {  // a variant whose nodes name the partition, on the app's own stream
    uint32_t sms = 0, kernels = 0;
    CUgraphExec variant = graph_variant(d, cb, graph, c->dev, mask, &sms, &kernels);
    if (variant == nullptr) return unplaced(cb, stream, true);
    if (sms != c->last_sms) prefetch_neighbours(d, cb, ctx, c->dev, mask);
    note_mask_in_use(cb, c->dev, mask);
    Placement p{stream, stream, nullptr, nullptr, ptsz, variant};
    if (start_sample(d, cb, c, stream, ptsz, shape, sms, kernels)) p.timed_end = c->sample_end;
    return p;
  }
  if (c->forward == nullptr || d.cuEventRecord == nullptr || d.cuStreamWaitEvent == nullptr) {
    return unplaced(cb, stream, true);
  }
  const PartitionStream ps = partition_stream(d, cb, key_of(ctx, c->dev, stream, ptsz, mask), stream, ptsz);
  CUstream part = ps.stream;
  if (part == nullptr) return unplaced(cb, stream, true);
  if (ps.sms != c->last_sms) prefetch_neighbours(d, cb, ctx, c->dev, mask);
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
  if (start_sample(d, cb, c, part, false, shape, ps.sms, 1)) p.timed_end = c->sample_end;
  return p;
}

}  // namespace

std::mutex& TEST_registry_mutex() { return registry().mu; }

void await_space_plan(gpuos_control_block* cb, uint32_t device_count) {
  std::atomic_ref<uint32_t> planned(cb->space_planned_devices);
  for (int i = 0; i < 200 && planned.load(std::memory_order_acquire) != device_count; ++i) {
    timespec ms{0, 1000 * 1000};
    nanosleep(&ms, nullptr);
  }
}

unsigned next_sample_gap() {
  // xorshift64*, one state per thread (seeded from its address and the clock): no lock, no libc
  // state shared with the app.
  thread_local uint64_t state = 0;
  if (state == 0) {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    state = (reinterpret_cast<uintptr_t>(&state) ^ (static_cast<uint64_t>(ts.tv_nsec) << 20) ^
             static_cast<uint64_t>(ts.tv_sec)) | 1;
  }
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  const uint64_t r = (state * 0x2545F4914F6CDD1Dull) >> 32;
  return 1 + static_cast<unsigned>(r % (2 * kSamplePeriod - 1));
}

Placement place_launch(const GpuosDriverTable& d, gpuos_control_block* cb, CUstream stream, bool ptsz,
                       const LaunchShape& shape, CUgraphExec graph) {
  CUcontext ctx = nullptr;
  if (d.cuCtxGetCurrent == nullptr || d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) {
    return unplaced(cb, stream, false);  // the launch itself will fail with the driver's error
  }
  CachedContext* c = context_entry(d, ctx);
  if (c->dev < 0 || c->dev >= GPUOS_MAX_DEVICES) return unplaced(cb, stream, true);
  const bool first = note_device(cb, c->dev);
  Placement p = place_on_device(d, cb, ctx, c, stream, ptsz, shape, graph);
  p.first_on_device = first;
  return p;
}

void finish_placement(const GpuosDriverTable& d, const Placement& p, bool submitted) {
  if (p.timed_end != nullptr) {
    CachedContext* c = t_timing;
    t_timing = nullptr;
    // The end event goes on the stream the launch went to (the app's own, _ptsz-aware, when it was
    // not placed); a launch that failed leaves no sample.
    auto record = p.back == nullptr && p.ptsz && d.cuEventRecord_ptsz ? d.cuEventRecord_ptsz : d.cuEventRecord;
    if (c != nullptr && submitted && record(p.timed_end, p.target) == CUDA_SUCCESS) c->sample_in_flight = true;
  }
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

void note_graph_instantiated(const GpuosDriverTable& d, CUgraphExec exec, CUgraph graph, unsigned long long flags) {
  if (exec == nullptr || graph == nullptr) return;
  GraphSource src;
  src.flags = flags;
  src.version = g_source_version.fetch_add(1, std::memory_order_relaxed) + 1;
  if (d.cuGraphClone == nullptr || d.cuGraphClone(&src.copy, graph) != CUDA_SUCCESS) src.copy = nullptr;
  src.kernels = count_kernels(d, graph);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.graphs.find(exec);
  if (it != r.graphs.end()) {  // a handle reused after a destroy we did not see
    if (it->second.copy != nullptr && d.cuGraphDestroy != nullptr) d.cuGraphDestroy(it->second.copy);
    drop_variants(d, r, exec);
  }
  r.graphs[exec] = src;
}

void note_graph_updated(const GpuosDriverTable& d, CUgraphExec exec, CUgraph graph) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.graphs.find(exec);
  if (it == r.graphs.end()) return;
  if (it->second.copy != nullptr && d.cuGraphDestroy != nullptr) d.cuGraphDestroy(it->second.copy);
  it->second.copy = nullptr;
  it->second.version = g_source_version.fetch_add(1, std::memory_order_relaxed) + 1;
  if (graph != nullptr && d.cuGraphClone != nullptr && d.cuGraphClone(&it->second.copy, graph) != CUDA_SUCCESS) {
    it->second.copy = nullptr;
  }
  if (graph != nullptr) it->second.kernels = count_kernels(d, graph);
  drop_variants(d, r, exec);
}

void note_graph_destroyed(const GpuosDriverTable& d, CUgraphExec exec) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.graphs.find(exec);
  if (it == r.graphs.end()) return;
  if (it->second.copy != nullptr && d.cuGraphDestroy != nullptr) d.cuGraphDestroy(it->second.copy);
  r.graphs.erase(it);
  drop_variants(d, r, exec);
}

}  // namespace gpuos::interpose
