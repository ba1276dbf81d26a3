// SPDX-License-Identifier: Apache-2.0
// Probe (no gpuos): which ways of building a CUDA graph make its kernels run on a green context's
// SMs? Spatial placement (src/interpose/spatial.cc) must know, because a graph's kernel nodes keep
// the context they were made in. Prints one JSON line with the distinct SMs each variant ran on
// (no MPS here, so %smid is physical) and the CUDA result of each step.
//
//   nvcc -O2 -arch=sm_90 -o graph_confine gpu/tests/graph_confine.cu -lcuda && ./graph_confine
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "probe.cuh"

namespace {

__global__ void work(int iters, float* sink, unsigned* seen) {
  float a = threadIdx.x, b = 1.0000001f;
  for (int i = 0; i < iters; ++i) a = a * b + 0.5f;
  if (a == -1.f) sink[0] = a;
  if (threadIdx.x == 0) seen[smid() % 1024] = 1;
}

std::string out = "{";
void put(const char* key, const std::string& v) {
  if (out.size() > 1) out += ", ";
  out += "\"" + std::string(key) + "\": " + v;
}
std::string res(CUresult r) {
  const char* n = nullptr;
  cuGetErrorName(r, &n);
  return "\"" + std::string(n ? n : "?") + "\"";
}
std::string rt(cudaError_t e) { return "\"" + std::string(cudaGetErrorName(e)) + "\""; }

float* sink;
unsigned* seen;
unsigned blocks;

// Distinct SMs touched by whatever `run` launches (then synchronised).
template <typename Run>
int sms_of(Run run) {
  cudaMemset(seen, 0, 1024 * sizeof(unsigned));
  cudaDeviceSynchronize();
  run();
  if (cudaDeviceSynchronize() != cudaSuccess) return -1;
  std::vector<unsigned> h(1024);
  cudaMemcpy(h.data(), seen, 1024 * sizeof(unsigned), cudaMemcpyDeviceToHost);
  int n = 0;
  for (unsigned v : h) n += v != 0;
  return n;
}

void launch(cudaStream_t s) { work<<<blocks, 128, 0, s>>>(20000, sink, seen); }

}  // namespace

int main() {
  cudaFree(nullptr);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  blocks = sms * 8;
  cudaMalloc(&sink, 4);
  cudaMalloc(&seen, 1024 * sizeof(unsigned));
  CUdevice dev = 0;
  CUdevResource all{};
  cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM);
  unsigned n = 16;
  std::vector<CUdevResource> groups(16);
  CUdevResource rest{};
  put("split", res(cuDevSmResourceSplitByCount(groups.data(), &n, &all, &rest, 0, 8)));
  // Partition A: groups 0-3 (32 SMs); partition B: groups 4-5 (16 SMs).
  auto make = [&](unsigned first, unsigned count, CUgreenCtx* g, CUstream* s) {
    CUdevResourceDesc desc;
    CUresult r = cuDevResourceGenerateDesc(&desc, &groups[first], count);
    if (r == CUDA_SUCCESS) r = cuGreenCtxCreate(g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
    if (r == CUDA_SUCCESS) r = cuGreenCtxStreamCreate(s, *g, CU_STREAM_NON_BLOCKING, 0);
    return r;
  };
  CUgreenCtx ga, gb;
  CUstream sa, sb;
  put("make_a", res(make(0, 4, &ga, &sa)));
  put("make_b", res(make(4, 2, &gb, &sb)));
  cudaStream_t s0;
  cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking);

  put("sms_plain", std::to_string(sms_of([&] { launch(s0); })));
  put("sms_kernel_on_a", std::to_string(sms_of([&] { launch((cudaStream_t)sa); })));

  // (1) captured on an ordinary stream, replayed on A's stream.
  cudaGraph_t g1;
  cudaGraphExec_t e1;
  cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal);
  launch(s0);
  put("capture_plain", rt(cudaStreamEndCapture(s0, &g1)));
  put("inst_plain", rt(cudaGraphInstantiate(&e1, g1, 0)));
  put("sms_plain_graph_on_a", std::to_string(sms_of([&] { cudaGraphLaunch(e1, (cudaStream_t)sa); })));

  // (2) captured with the kernel on A's stream, forked from and joined back to the capture stream.
  cudaGraph_t g2;
  cudaGraphExec_t e2;
  cudaEvent_t fork, join;
  cudaEventCreateWithFlags(&fork, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&join, cudaEventDisableTiming);
  cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal);
  cudaEventRecord(fork, s0);
  put("fork_wait", rt(cudaStreamWaitEvent((cudaStream_t)sa, fork, 0)));
  launch((cudaStream_t)sa);
  put("fork_launch", rt(cudaGetLastError()));
  cudaEventRecord(join, (cudaStream_t)sa);
  cudaStreamWaitEvent(s0, join, 0);
  put("capture_forked", rt(cudaStreamEndCapture(s0, &g2)));
  put("inst_forked", rt(cudaGraphInstantiate(&e2, g2, 0)));
  put("sms_forked_graph_on_plain", std::to_string(sms_of([&] { cudaGraphLaunch(e2, s0); })));
  put("sms_forked_graph_on_b", std::to_string(sms_of([&] { cudaGraphLaunch(e2, (cudaStream_t)sb); })));

  // (3) the plain graph's kernel node given A's context (func kept), then instantiated.
  CUgraph c3;
  cuGraphClone(&c3, (CUgraph)g1);
  size_t count = 0;
  cuGraphGetNodes(c3, nullptr, &count);
  std::vector<CUgraphNode> nodes(count);
  cuGraphGetNodes(c3, nodes.data(), &count);
  CUcontext actx = nullptr;
  put("ctx_from_green", res(cuCtxFromGreenCtx(&actx, ga)));
  CUresult set = CUDA_ERROR_NOT_FOUND;
  CUresult getp = CUDA_ERROR_NOT_FOUND;
  bool had_func = false, had_kern = false, had_ctx = false;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType t;
    cuGraphNodeGetType(node, &t);
    if (t != CU_GRAPH_NODE_TYPE_KERNEL) continue;
    CUDA_KERNEL_NODE_PARAMS p{};
    getp = cuGraphKernelNodeGetParams(node, &p);
    had_func = p.func != nullptr;
    had_kern = p.kern != nullptr;
    had_ctx = p.ctx != nullptr;
    p.ctx = actx;
    set = cuGraphKernelNodeSetParams(node, &p);
  }
  put("node_get", res(getp));
  put("node_had_func", had_func ? "true" : "false");
  put("node_had_kern", had_kern ? "true" : "false");
  put("node_had_ctx", had_ctx ? "true" : "false");
  put("node_set_ctx", res(set));
  CUgraphExec e3 = nullptr;
  put("inst_ctx", res(cuGraphInstantiate(&e3, c3, 0)));
  if (e3) put("sms_ctx_graph_on_plain", std::to_string(sms_of([&] { cuGraphLaunch(e3, (CUstream)s0); })));

  // (4) the same, with func cleared and the kernel named by its CUkernel (if the node had one).
  CUgraph c4;
  cuGraphClone(&c4, (CUgraph)g1);
  cuGraphGetNodes(c4, nodes.data(), &count);
  CUresult set4 = CUDA_ERROR_NOT_FOUND;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType t;
    cuGraphNodeGetType(node, &t);
    if (t != CU_GRAPH_NODE_TYPE_KERNEL) continue;
    CUDA_KERNEL_NODE_PARAMS p{};
    cuGraphKernelNodeGetParams(node, &p);
    if (p.kern == nullptr) {
      cudaKernel_t k = nullptr;
      if (cudaGetKernel(&k, work) == cudaSuccess) p.kern = (CUkernel)k;
    }
    p.func = nullptr;
    p.ctx = actx;
    set4 = cuGraphKernelNodeSetParams(node, &p);
  }
  put("node_set_kern_ctx", res(set4));
  CUgraphExec e4 = nullptr;
  put("inst_kern_ctx", res(cuGraphInstantiate(&e4, c4, 0)));
  if (e4) put("sms_kern_ctx_graph_on_plain", std::to_string(sms_of([&] { cuGraphLaunch(e4, (CUstream)s0); })));

  // (5) the exec of (1) updated in place with A's context.
  CUresult upd = CUDA_ERROR_NOT_FOUND;
  cuGraphGetNodes((CUgraph)g1, nodes.data(), &count);
  for (CUgraphNode node : nodes) {
    CUgraphNodeType t;
    cuGraphNodeGetType(node, &t);
    if (t != CU_GRAPH_NODE_TYPE_KERNEL) continue;
    CUDA_KERNEL_NODE_PARAMS p{};
    cuGraphKernelNodeGetParams(node, &p);
    p.ctx = actx;
    upd = cuGraphExecKernelNodeSetParams((CUgraphExec)e1, node, &p);
  }
  put("exec_set_ctx", res(upd));
  put("sms_exec_updated_on_plain", std::to_string(sms_of([&] { cudaGraphLaunch(e1, s0); })));
  put("final", rt(cudaDeviceSynchronize()));
  std::printf("%s}\n", out.c_str());
  return 0;
}
