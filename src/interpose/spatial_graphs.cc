// SPDX-License-Identifier: Apache-2.0
#include "interpose/spatial_graphs.h"

#include <climits>
#include <vector>

#include "interpose/runtime.h"
#include "interpose/spatial.h"
#include "interpose/spatial_streams.h"

namespace gpuos::interpose {
namespace spatial {
namespace {

std::atomic<uint64_t> g_source_version{0};
std::atomic<uint64_t> g_graph_generation{0};  // bumped when variants go away: thread caches are stale

// Per-thread cache: a launch of a graph it has placed at the same mask costs a lookup in a few
// entries, no lock.
struct CachedVariant {
  CUgraphExec exec = nullptr;
  int dev = -1;
  uint64_t mask = 0;
  uint64_t generation = 0;
  CUgraphExec variant = nullptr;
  uint32_t sms = 0;
  uint32_t kernels = 0;  // the graph's kernel nodes
};
constexpr int kVariantCache = 8;
thread_local CachedVariant t_variants[kVariantCache];
thread_local unsigned t_variant_next = 0;

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

}  // namespace

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

VariantSource clone_source(const GpuosDriverTable& d, const Registry& r, CUgraphExec exec) {
  VariantSource v;
  auto src = r.graphs.find(exec);
  if (src == r.graphs.end() || src->second.copy == nullptr || d.cuGraphClone == nullptr) return v;
  if (d.cuGraphClone(&v.copy, src->second.copy) != CUDA_SUCCESS) v.copy = nullptr;
  v.flags = src->second.flags;
  v.version = src->second.version;
  return v;
}

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

uint32_t kernels_of(CUgraphExec exec) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.graphs.find(exec);
  return it != r.graphs.end() ? it->second.kernels : 0;
}

}  // namespace spatial

using spatial::Registry;
using spatial::registry;

void note_graph_instantiated(const GpuosDriverTable& d, CUgraphExec exec, CUgraph graph, unsigned long long flags) {
  if (exec == nullptr || graph == nullptr) return;
  spatial::GraphSource src;
  src.flags = flags;
  src.version = spatial::g_source_version.fetch_add(1, std::memory_order_relaxed) + 1;
  if (d.cuGraphClone == nullptr || d.cuGraphClone(&src.copy, graph) != CUDA_SUCCESS) src.copy = nullptr;
  src.kernels = spatial::count_kernels(d, graph);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.graphs.find(exec);
  if (it != r.graphs.end()) {  // a handle reused after a destroy we did not see
    if (it->second.copy != nullptr && d.cuGraphDestroy != nullptr) d.cuGraphDestroy(it->second.copy);
    spatial::drop_variants(d, r, exec);
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
  it->second.version = spatial::g_source_version.fetch_add(1, std::memory_order_relaxed) + 1;
  if (graph != nullptr && d.cuGraphClone != nullptr && d.cuGraphClone(&it->second.copy, graph) != CUDA_SUCCESS) {
    it->second.copy = nullptr;
  }
  if (graph != nullptr) it->second.kernels = spatial::count_kernels(d, graph);
  spatial::drop_variants(d, r, exec);
}

void note_graph_destroyed(const GpuosDriverTable& d, CUgraphExec exec) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.graphs.find(exec);
  if (it == r.graphs.end()) return;
  if (it->second.copy != nullptr && d.cuGraphDestroy != nullptr) d.cuGraphDestroy(it->second.copy);
  r.graphs.erase(it);
  spatial::drop_variants(d, r, exec);
}

}  // namespace gpuos::interpose
