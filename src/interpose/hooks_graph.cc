// SPDX-License-Identifier: Apache-2.0
// Graph instantiation, in-place edits and destruction of executable graphs: forwarded, noted for
// spatial placement (spatial.h) when the tenant is in a spatial domain, and charged for the graph
// memory an executable graph can take (graph_memory.h).
#include <cstdio>

#include "interpose/fast_path.h"
#include "interpose/graph_memory.h"

namespace gi = gpuos::interpose;

namespace {

// The driver, and whether this tenant places its work (only then is any graph bookkeeping done).
const GpuosDriverTable* spatial_driver() {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return nullptr;
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr || gi::grant_load(gi::grants_of(cb)->space_enabled, std::memory_order_relaxed) == 0) return nullptr;
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

// An instantiation (call: the real one) is charged what the driver's graph memory pool can take
// for the exec (its alloc nodes, graph_memory.h) from now until the exec is destroyed and a trim
// shows the pool gave it back. The driver takes it only at the first launch or upload, but the
// launch path is not the place to refuse: over quota, the instantiation fails with
// CUDA_ERROR_OUT_OF_MEMORY (one of its documented errors) without calling the driver.
template <typename Call>
CUresult governed_instantiate(CUgraphExec* exec, CUgraph graph, Call&& call) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gi::ControlBlockUse use;  // counts into the block until the call is accounted (quiescence.h)
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  gi::GraphFootprint fp;
  if (CUresult r = gi::graph_footprint(*d, graph, &fp); r != CUDA_SUCCESS) return r;
  const uint64_t bytes = fp.total();
  if (bytes == 0) return call(*d);
  if (!gi::reserve_within_quota(*d, cb, bytes)) {
    gi::account_alloc_failure(cb);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult r = call(*d);
  if (r != CUDA_SUCCESS || exec == nullptr) {
    gi::cancel_bytes(cb, bytes);
    return r;
  }
  gi::commit_graph_exec(cb, reinterpret_cast<uint64_t>(*exec), fp);
  return r;
}

// An update (call: the real cuGraphExecUpdate) can give the exec other alloc nodes: on the H200 an
// exec instantiated with 32 MiB, updated with a graph of 512 MiB, takes 512 MiB at its next
// launch. So the new graph's memory is charged like an instantiation, before the driver is asked;
// what the exec was charged so far is retained (the pool may still hold its old mapping). Over
// quota, `refused` writes the outputs the driver would have for a failed update.
template <typename Call, typename Refused>
CUresult governed_update(CUgraphExec exec, CUgraph graph, Call&& call, Refused&& refused) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  gi::ControlBlockUse use;  // counts into the block until the call is accounted (quiescence.h)
  gpuos_control_block* cb = gi::control_block();
  if (cb == nullptr) return CUDA_ERROR_NOT_PERMITTED;
  gi::GraphFootprint fp;
  if (CUresult r = gi::graph_footprint(*d, graph, &fp); r != CUDA_SUCCESS) return r;
  const uint64_t bytes = fp.total();
  if (bytes != 0 && !gi::reserve_within_quota(*d, cb, bytes)) {
    gi::account_alloc_failure(cb);
    refused();
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult r = call(*d);
  if (r != CUDA_SUCCESS) {
    gi::cancel_bytes(cb, bytes);
    return r;
  }
  gi::retire_graph_exec(cb, reinterpret_cast<uint64_t>(exec));
  if (bytes != 0) gi::commit_graph_exec(cb, reinterpret_cast<uint64_t>(exec), fp);
  return r;
}

// The pre-12.0 instantiations (error node and log buffer) when gpuos answered without asking the
// driver: no error node, and the log says why (an over-quota refusal) or is left empty.
void answered_here(CUresult r, CUgraphNode* err_node, char* log, size_t log_size) {
  if (err_node != nullptr) *err_node = nullptr;
  if (log == nullptr || log_size == 0) return;
  log[0] = '\0';
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    std::snprintf(log, log_size, "gpuos: the graph's memory nodes exceed the tenant's memory quota");
  }
}

// cuGraphInstantiate (CUDA 10.0) and cuGraphInstantiate_v2 (11.0): what programs built against
// CUDA 11 headers call, and what cuGetProcAddress hands out for "cuGraphInstantiate" (_v2 at every
// version from 11.0 on, 13.0 included, on the H200 with driver 580.159.04). Charged exactly as
// cuGraphInstantiateWithFlags(.., 0), else they would be a way around the quota.
template <typename Call>
CUresult instantiate_pre12(CUgraphExec* exec, CUgraph graph, CUgraphNode* err_node, char* log, size_t log_size,
                           Call&& call) {
  bool asked = false;
  CUresult r = governed_instantiate(exec, graph, [&](const GpuosDriverTable& d) {
    asked = true;
    return call(d);
  });
  if (!asked && r != CUDA_SUCCESS) answered_here(r, err_node, log, log_size);
  return instantiated(r, exec, graph, 0);
}

}  // namespace

extern "C" {

CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  return instantiated(governed_instantiate(exec, graph, GPUOS_FORWARD(cuGraphInstantiateWithFlags, exec, graph, flags)),
                      exec, graph, flags);
}

// Refused over quota before the driver saw it: the result it would have reported.
static CUresult with_result(CUresult r, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (r == CUDA_ERROR_OUT_OF_MEMORY && params != nullptr) params->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}

CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return instantiated(
      with_result(governed_instantiate(exec, graph, GPUOS_FORWARD(cuGraphInstantiateWithParams, exec, graph, params)),
                  params),
      exec, graph, params ? params->flags : 0);
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return instantiated(
      with_result(governed_instantiate(exec, graph, GPUOS_FORWARD(cuGraphInstantiateWithParams_ptsz, exec, graph, params)),
                  params),
      exec, graph, params ? params->flags : 0);
}

CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* errNode, char* log, size_t logSize) {
  return instantiate_pre12(exec, graph, errNode, log, logSize,
                           GPUOS_FORWARD(cuGraphInstantiate, exec, graph, errNode, log, logSize));
}

CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* errNode, char* log, size_t logSize) {
  return instantiate_pre12(exec, graph, errNode, log, logSize,
                           GPUOS_FORWARD(cuGraphInstantiate_v2, exec, graph, errNode, log, logSize));
}

// The exec's graph memory stays in the driver's pool: its charge is retained (graph_memory.h).
// Retired before the driver frees the handle, which another thread's instantiation may get next.
CUresult cuGraphExecDestroy(CUgraphExec exec) {
  if (const GpuosDriverTable* d = spatial_driver()) gi::note_graph_destroyed(*d, exec);
  gi::ControlBlockUse use;  // counts into the block until the call is accounted (quiescence.h)
  if (gpuos_control_block* cb = gi::control_block()) gi::retire_graph_exec(cb, reinterpret_cast<uint64_t>(exec));
  return forward(GPUOS_FORWARD(cuGraphExecDestroy, exec));
}

CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  CUresult r = governed_update(exec, graph, GPUOS_FORWARD(cuGraphExecUpdate_v2, exec, graph, info), [&] {
    if (info != nullptr) *info = CUgraphExecUpdateResultInfo{CU_GRAPH_EXEC_UPDATE_ERROR, nullptr, nullptr};
  });
  if (r == CUDA_SUCCESS) {
    if (const GpuosDriverTable* d = spatial_driver()) gi::note_graph_updated(*d, exec, graph);  // now matches graph
  }
  return r;
}

// The pre-12.0 update (CUDA 10.2; cuGetProcAddress below 12000): charged like cuGraphExecUpdate_v2.
CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphNode* errNode, CUgraphExecUpdateResult* result) {
  CUresult r = governed_update(exec, graph, GPUOS_FORWARD(cuGraphExecUpdate, exec, graph, errNode, result), [&] {
    if (errNode != nullptr) *errNode = nullptr;
    if (result != nullptr) *result = CU_GRAPH_EXEC_UPDATE_ERROR;
  });
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
