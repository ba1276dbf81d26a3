// Graph instantiation, in-place edits and destruction of executable graphs: forwarded, and noted
// for spatial placement (spatial.h) when the tenant is in a spatial domain.
#include "interpose/fast_path.h"

namespace gi = gpuos::interpose;

namespace {

// The driver, and whether this tenant places its work (only then is any graph bookkeeping done).
const GpuosDriverTable* spatial_driver() {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return nullptr;
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr || std::atomic_ref<uint32_t>(cb->space_enabled).load(std::memory_order_relaxed) == 0) return nullptr;
  return d;
}

template <typename Call>
CUresult forward(Call&& call) {
  const GpuosDriverTable* d = gi::real_driver();
  return d == nullptr ? CUDA_ERROR_NOT_INITIALIZED : call(*d);
}

// An in-place edit of exec: its variants no longer match it.
template <typename Call>
CUresult edit(CUgraphExec exec, Call&& call) {
  CUresult r = forward(call);
  if (r == CUDA_SUCCESS) {
    if (const GpuosDriverTable* d = spatial_driver()) gi::note_graph_updated(*d, exec, nullptr);
  }
  return r;
}

CUresult instantiated(CUresult r, CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  if (r != CUDA_SUCCESS || exec == nullptr) return r;
  if (const GpuosDriverTable* d = spatial_driver()) {
    // Uploading needs the app's stream; a variant is uploaded by its first launch instead.
    gi::note_graph_instantiated(*d, *exec, graph, flags & ~static_cast<unsigned long long>(CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD));
  }
  return r;
}

}  // namespace

extern "C" {

CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  return instantiated(forward(GPUOS_FORWARD(cuGraphInstantiateWithFlags, exec, graph, flags)), exec, graph, flags);
}

CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return instantiated(forward(GPUOS_FORWARD(cuGraphInstantiateWithParams, exec, graph, params)), exec, graph,
                      params ? params->flags : 0);
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return instantiated(forward(GPUOS_FORWARD(cuGraphInstantiateWithParams_ptsz, exec, graph, params)), exec, graph,
                      params ? params->flags : 0);
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  if (const GpuosDriverTable* d = spatial_driver()) gi::note_graph_destroyed(*d, exec);
  return forward(GPUOS_FORWARD(cuGraphExecDestroy, exec));
}

CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  CUresult r = forward(GPUOS_FORWARD(cuGraphExecUpdate_v2, exec, graph, info));
  if (r == CUDA_SUCCESS) {
    if (const GpuosDriverTable* d = spatial_driver()) gi::note_graph_updated(*d, exec, graph);  // now matches graph
  }
  return r;
}

CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  return edit(exec, GPUOS_FORWARD(cuGraphExecKernelNodeSetParams_v2, exec, node, p));
}
CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* p) {
  return edit(exec, GPUOS_FORWARD(cuGraphExecNodeSetParams, exec, node, p));
}
CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* p, CUcontext ctx) {
  return edit(exec, GPUOS_FORWARD(cuGraphExecMemcpyNodeSetParams, exec, node, p, ctx));
}
CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p,
                                        CUcontext ctx) {
  return edit(exec, GPUOS_FORWARD(cuGraphExecMemsetNodeSetParams, exec, node, p, ctx));
}
CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_HOST_NODE_PARAMS* p) {
  return edit(exec, GPUOS_FORWARD(cuGraphExecHostNodeSetParams, exec, node, p));
}
CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child) {
  return edit(exec, GPUOS_FORWARD(cuGraphExecChildGraphNodeSetParams, exec, node, child));
}
CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent e) {
  return edit(exec, GPUOS_FORWARD(cuGraphExecEventRecordNodeSetEvent, exec, node, e));
}
CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent e) {
  return edit(exec, GPUOS_FORWARD(cuGraphExecEventWaitNodeSetEvent, exec, node, e));
}
CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int on) {
  return edit(exec, GPUOS_FORWARD(cuGraphNodeSetEnabled, exec, node, on));
}

}  // extern "C"
