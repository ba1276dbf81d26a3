// SPDX-License-Identifier: Apache-2.0
#include "interpose/graph_memory.h"

#include <atomic>
#include <mutex>
#include <vector>

#include "interpose/runtime.h"

namespace gpuos::interpose {
namespace {

// Driver functions gpuos needs here but does not govern (so they are not in the driver table):
// asked of the real driver's cuGetProcAddress once; null when it has none.
template <typename Fn>
Fn resolve(const GpuosDriverTable& d, std::atomic<void*>& slot, const char* name, int version,
           cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
  static char kMissing;
  void* p = slot.load(std::memory_order_acquire);
  if (p == nullptr) {
    CUdriverProcAddressQueryResult status{};
    if (d.cuGetProcAddress_v2 == nullptr || d.cuGetProcAddress_v2(name, &p, version, flags, &status) != CUDA_SUCCESS ||
        status != CU_GET_PROC_ADDRESS_SUCCESS || p == nullptr) {
      p = &kMissing;
    }
    slot.store(p, std::memory_order_release);
  }
  return p == &kMissing ? nullptr : reinterpret_cast<Fn>(p);
}

using AllocParamsFn = CUresult (*)(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS*);
using TrimFn = CUresult (*)(CUdevice);
using GraphMemAttrFn = CUresult (*)(CUdevice, CUgraphMem_attribute, void*);
using CaptureInfoFn = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*,
                                   const CUgraphNode**, const CUgraphEdgeData**, size_t*);
std::atomic<void*> g_alloc_params{nullptr}, g_trim{nullptr}, g_attr{nullptr}, g_capture_info{nullptr};

// Reclaims one at a time, so that a settle sees only retirements since its own trim began.
std::mutex& reclaim_mutex() {
  static std::mutex* m = new std::mutex();  // never destroyed: calls may come during exit
  return *m;
}

}  // namespace

CUresult graph_footprint(const GpuosDriverTable& d, CUgraph graph, GraphFootprint* out) {
  *out = GraphFootprint{};
  if (d.cuGraphGetNodes == nullptr || d.cuGraphNodeGetType == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  auto params = resolve<AllocParamsFn>(d, g_alloc_params, "cuGraphMemAllocNodeGetParams", 11040);
  // The tree of graphs, breadth first: child graphs hold alloc nodes too.
  std::vector<GraphLevel> tree(1);
  std::vector<CUgraph> graphs{graph};
  std::vector<CUgraphNode> nodes;
  for (size_t i = 0; i < graphs.size(); ++i) {
    size_t n = 0;
    if (CUresult r = d.cuGraphGetNodes(graphs[i], nullptr, &n); r != CUDA_SUCCESS) return r;
    nodes.assign(n, nullptr);
    if (n != 0) {
      if (CUresult r = d.cuGraphGetNodes(graphs[i], nodes.data(), &n); r != CUDA_SUCCESS) return r;
      nodes.resize(n);
    }
    for (CUgraphNode node : nodes) {
      CUgraphNodeType type;
      if (CUresult r = d.cuGraphNodeGetType(node, &type); r != CUDA_SUCCESS) return r;
      if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
        CUgraph child = nullptr;
        if (d.cuGraphChildGraphNodeGetGraph == nullptr ||
            d.cuGraphChildGraphNodeGetGraph(node, &child) != CUDA_SUCCESS) {
          return CUDA_ERROR_NOT_SUPPORTED;
        }
        graphs.push_back(child);
        tree.push_back(GraphLevel{});
        tree.back().parent = i;
      } else if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        CUDA_MEM_ALLOC_NODE_PARAMS p{};
        if (params == nullptr || params(node, &p) != CUDA_SUCCESS) return CUDA_ERROR_NOT_SUPPORTED;
        const bool on_device = p.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
                               p.poolProps.location.id >= 0 && p.poolProps.location.id < GPUOS_MAX_DEVICES;
        uint64_t& pages = tree[i].pages[on_device ? p.poolProps.location.id : 0];
        const uint64_t more = graph_pages(p.bytesize);
        pages = pages > UINT64_MAX - more ? UINT64_MAX : pages + more;
      }
    }
  }
  *out = graph_tree_footprint(tree.data(), tree.size());
  return CUDA_SUCCESS;
}

bool reclaim_graph_memory(const GpuosDriverTable& d, gpuos_control_block* cb) {
  auto trim = resolve<TrimFn>(d, g_trim, "cuDeviceGraphMemTrim", 11040);
  auto attr = resolve<GraphMemAttrFn>(d, g_attr, "cuDeviceGetGraphMemAttribute", 11040);
  if (trim == nullptr || attr == nullptr) return false;
  std::lock_guard<std::mutex> lock(reclaim_mutex());
  bool released = false;
  for (int dev = 0; dev < GPUOS_MAX_DEVICES; ++dev) {
    const uint64_t before = graph_retained(dev);
    if (before == 0) continue;
    cuuint64_t reserved = 0;
    if (trim(static_cast<CUdevice>(dev)) != CUDA_SUCCESS ||
        attr(static_cast<CUdevice>(dev), CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS) {
      continue;  // the pool's state is unknown: keep the charge
    }
    released |= settle_graph_retained(cb, dev, before, reserved) != 0;
  }
  return released;
}

bool reserve_within_quota(const GpuosDriverTable& d, gpuos_control_block* cb, uint64_t bytes) {
  if (bytes == 0 || reserve_bytes(cb, bytes)) return true;  // nothing to reserve is never refused
  return graph_retained_total() != 0 && reclaim_graph_memory(d, cb) && reserve_bytes(cb, bytes);
}

uint64_t capture_sequence(const GpuosDriverTable& d, CUstream stream, bool ptsz) {
  if (g_active_captures.load(std::memory_order_relaxed) <= 0) return 0;
  auto info = resolve<CaptureInfoFn>(d, g_capture_info, "cuStreamGetCaptureInfo", 12030);
  if (info == nullptr) return 0;
  if (ptsz && stream == nullptr) stream = CU_STREAM_PER_THREAD;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (info(stream, &status, &id, nullptr, nullptr, nullptr, nullptr) != CUDA_SUCCESS) return 0;
  return status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? id : 0;
}

}  // namespace gpuos::interpose
