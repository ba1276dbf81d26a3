// SPDX-License-Identifier: Apache-2.0
// Graphs: built by stream capture or cuGraphAddKernelNode, replayed by cuGraphLaunch as one unit
// of stream work. Nodes run in insertion order (a valid topological order, since a node's
// dependencies must exist before it is added), a child graph's in its node's place; independent
// branches are not run concurrently.
#include <algorithm>

#include "driver_double/internal.h"

namespace dd {
namespace {

Registry<Graph>& graphs() {
  static auto* r = new Registry<Graph>();
  return *r;
}

struct GraphExec {
  Context* ctx = nullptr;
  std::vector<GraphNode> nodes;  // a snapshot: later edits of the graph do not affect it
  uint64_t id = 0;               // unique: a graph with memory nodes names its one exec by it
  Graph* graph = nullptr;        // instantiated from (it may be destroyed first)
  GraphExecMemPtr mem;           // graph memory it maps and allocates
};
Registry<GraphExec>& execs() {
  static auto* r = new Registry<GraphExec>();
  return *r;
}

bool is_mem_node(const GraphNode& n) {
  return n.type == GraphNode::Type::kMemAlloc || n.type == GraphNode::Type::kMemFree;
}

uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

// What an exec runs of g: its nodes, each child graph's in its node's place (under g's lock, then
// the child's). Adds to need what the graph memory pool maps for them (internal.h): each graph's
// allocations in whole chunks, a child graph that allocates one chunk more. Returns the devices
// g's subtree allocates on.
uint32_t flatten(Graph* g, bool child, std::vector<GraphNode>* out, uint64_t (&need)[kMaxDevices]) {
  std::lock_guard<std::mutex> l(g->mu);
  uint64_t pages[kMaxDevices] = {};
  uint32_t allocates = 0;
  for (auto& n : g->nodes) {
    if (n->type == GraphNode::Type::kGraph) {
      allocates |= flatten(n->child, true, out, need);
      continue;
    }
    if (n->type == GraphNode::Type::kMemAlloc) {
      pages[n->dev] += round_up(n->bytes, kGraphPageBytes);
      allocates |= 1u << n->dev;
    }
    out->push_back(*n);
  }
  for (int d = 0; d < kMaxDevices; ++d) {
    need[d] += round_up(pages[d], kGraphChunkBytes);
    if (child && (allocates >> d & 1u)) need[d] += kGraphChunkBytes;
  }
  return allocates;
}

// Memory nodes anywhere in g's tree (under no lock).
bool has_mem_nodes(Graph* g) {
  std::lock_guard<std::mutex> l(g->mu);
  for (auto& n : g->nodes) {
    if (is_mem_node(*n) || (n->type == GraphNode::Type::kGraph && has_mem_nodes(n->child))) return true;
  }
  return false;
}

// A deep copy of g (children too), registered; null if it has memory nodes (never cloned).
// Locks: the registry's before a graph's (find_node), so no graph's lock is held while the copies
// are registered.
Graph* clone_graph(Graph* g) {
  if (has_mem_nodes(g)) return nullptr;
  std::vector<std::unique_ptr<GraphNode>> nodes;
  {
    std::lock_guard<std::mutex> l(g->mu);
    for (auto& n : g->nodes) nodes.push_back(std::make_unique<GraphNode>(*n));
  }
  for (auto& n : nodes) {
    if (n->type == GraphNode::Type::kGraph) {
      n->child = clone_graph(n->child);
      n->child->owned = true;
    }
  }
  Graph* c = new_graph();
  std::lock_guard<std::mutex> l(c->mu);
  c->nodes = std::move(nodes);
  return c;
}

// g and its child graphs go (g already out of the registry).
void destroy_tree(Graph* g) {
  for (auto& n : g->nodes) {
    if (n->type == GraphNode::Type::kGraph && graphs().remove(n->child)) destroy_tree(n->child);
  }
  graph_mem_release(g);  // its addresses (allocations still allocated stay until freed)
  delete g;
}

// upload: CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD's stream (already resolved), or null.
CUresult instantiate(CUgraphExec* out, CUgraph hgraph, unsigned long long flags,
                     const StreamPtr& upload = nullptr) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* g = reinterpret_cast<Graph*>(hgraph);
  if (!graphs().has(g)) return CUDA_ERROR_INVALID_HANDLE;
  static std::atomic<uint64_t> next_id{1};
  auto x = std::make_unique<GraphExec>();
  x->ctx = c;
  x->id = next_id.fetch_add(1);
  x->graph = g;
  if (g->owned) return CUDA_ERROR_INVALID_VALUE;  // a child graph node's
  uint64_t need[kMaxDevices] = {};
  flatten(g, false, &x->nodes, need);
  if (std::any_of(x->nodes.begin(), x->nodes.end(), is_mem_node)) {
    // Documented: a graph with memory nodes has at most one executable graph at a time.
    std::lock_guard<std::mutex> l(g->mu);
    if (g->mem_exec_id != 0) return CUDA_ERROR_NOT_SUPPORTED;
    g->mem_exec_id = x->id;
  }
  x->mem = graph_exec_mem_new(x->nodes, need);
  x->mem->auto_free = (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
  if (upload != nullptr) {
    if (CUresult r = graph_exec_mem_map(x->mem, false); r != CUDA_SUCCESS) {
      graph_exec_mem_destroy(x->mem);
      std::lock_guard<std::mutex> l(g->mu);
      if (g->mem_exec_id == x->id) g->mem_exec_id = 0;
      return r;
    }
  }
  execs().add(x.get());
  *out = reinterpret_cast<CUgraphExec>(x.release());
  return CUDA_SUCCESS;
}

CUresult add_kernel_node(CUgraphNode* out, CUgraph hgraph, const CUgraphNode* deps, size_t ndeps,
                         CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, void** params, void** extra) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  if (out == nullptr || (ndeps > 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  auto* g = reinterpret_cast<Graph*>(hgraph);
  if (!graphs().has(g)) return CUDA_ERROR_INVALID_HANDLE;
  Function* fn = lookup_function(f);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
      uint64_t{bx} * by * bz > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  auto node = std::make_unique<GraphNode>();
  node->type = GraphNode::Type::kKernel;
  if (CUresult r = decode_launch(fn, params, extra, &node->kernel); r != CUDA_SUCCESS) return r;
  unsigned dims[6] = {gx, gy, gz, bx, by, bz};
  for (int i = 0; i < 3; ++i) node->kernel.grid[i] = dims[i], node->kernel.block[i] = dims[3 + i];
  std::lock_guard<std::mutex> l(g->mu);
  *out = reinterpret_cast<CUgraphNode>(node.get());
  g->nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}

// Graph memory nodes: the allocation is made (or, for a free node, marked freed) when the node is
// added; see graph_mem_alloc in internal.h.
CUresult check_add(CUgraphNode* out, CUgraph hgraph, const CUgraphNode* deps, size_t ndeps,
                   Graph** g) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  if (out == nullptr || (ndeps > 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  *g = reinterpret_cast<Graph*>(hgraph);
  return graphs().has(*g) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// P: CUDA_MEM_ALLOC_NODE_PARAMS (v1) or, from cuGraphAddNode, its twin CUDA_MEM_ALLOC_NODE_PARAMS_v2.
template <class P>
CUresult add_mem_alloc_node(CUgraphNode* out, CUgraph hgraph, const CUgraphNode* deps,
                            size_t ndeps, P* p) {
  Graph* g = nullptr;
  if (CUresult r = check_add(out, hgraph, deps, ndeps, &g); r != CUDA_SUCCESS) return r;
  if (p == nullptr || p->bytesize == 0 || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      p->poolProps.handleTypes != CU_MEM_HANDLE_TYPE_NONE ||  // IPC is not supported
      p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      p->poolProps.location.id < 0 || p->poolProps.location.id >= config().devices ||
      (p->accessDescCount > 0 && p->accessDescs == nullptr) ||
      p->accessDescCount > static_cast<size_t>(config().devices))
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t dptr = 0;
  const int dev = p->poolProps.location.id;
  if (CUresult r = graph_mem_alloc(g, dev, p->bytesize, &dptr); r != CUDA_SUCCESS) return r;
  p->dptr = dptr;
  *out = add_mem_node(g, GraphNode::Type::kMemAlloc, dptr, p->bytesize, dev);
  return CUDA_SUCCESS;
}

CUresult add_mem_free_node(CUgraphNode* out, CUgraph hgraph, const CUgraphNode* deps,
                           size_t ndeps, CUdeviceptr dptr) {
  Graph* g = nullptr;
  if (CUresult r = check_add(out, hgraph, deps, ndeps, &g); r != CUDA_SUCCESS) return r;
  if (CUresult r = graph_mem_free(g, dptr); r != CUDA_SUCCESS) return r;
  *out = add_mem_node(g, GraphNode::Type::kMemFree, dptr);
  return CUDA_SUCCESS;
}

// A child graph node of `child`, cloned or (move) taken over: a graph with memory nodes can only
// be moved (as documented; cloning it is CUDA_ERROR_NOT_SUPPORTED, as on the H200).
CUresult add_child_node(CUgraphNode* out, CUgraph hgraph, const CUgraphNode* deps, size_t ndeps,
                        Graph* child, bool move) {
  Graph* g = nullptr;
  if (CUresult r = check_add(out, hgraph, deps, ndeps, &g); r != CUDA_SUCCESS) return r;
  if (!graphs().has(child) || child == g || child->owned) return CUDA_ERROR_INVALID_VALUE;
  Graph* mine = child;
  if (move) {
    child->owned = true;
  } else if ((mine = clone_graph(child)) == nullptr) {
    return CUDA_ERROR_NOT_SUPPORTED;
  } else {
    mine->owned = true;
  }
  auto node = std::make_unique<GraphNode>();
  node->type = GraphNode::Type::kGraph;
  node->child = mine;
  std::lock_guard<std::mutex> l(g->mu);
  *out = reinterpret_cast<CUgraphNode>(node.get());
  g->nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}

// cuGraphAddNode: kernel, empty, memory and child graph nodes; other kinds are not modelled.
CUresult add_node(CUgraphNode* out, CUgraph hgraph, const CUgraphNode* deps, size_t ndeps,
                  CUgraphNodeParams* p) {
  if (p == nullptr) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS_v3& k = p->kernel;
      CUfunction f = k.func != nullptr ? k.func : reinterpret_cast<CUfunction>(k.kern);
      return add_kernel_node(out, hgraph, deps, ndeps, f, k.gridDimX, k.gridDimY, k.gridDimZ,
                             k.blockDimX, k.blockDimY, k.blockDimZ, k.kernelParams, k.extra);
    }
    case CU_GRAPH_NODE_TYPE_EMPTY: {
      Graph* g = nullptr;
      if (CUresult r = check_add(out, hgraph, deps, ndeps, &g); r != CUDA_SUCCESS) return r;
      *out = add_mem_node(g, GraphNode::Type::kEmpty, 0);
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return add_mem_alloc_node(out, hgraph, deps, ndeps, &p->alloc);
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return add_mem_free_node(out, hgraph, deps, ndeps, p->free.dptr);
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return add_child_node(out, hgraph, deps, ndeps, reinterpret_cast<Graph*>(p->graph.graph),
                            p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE);
    default:
      return initialized() ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
  }
}

// One launch of an exec's graph memory in flight (a trim leaves its memory alone): done when the
// launch has run, or when its op is dropped unrun.
struct InFlight {
  GraphExecMemPtr m;
  std::atomic<bool> done{false};
  void finish() {
    if (!done.exchange(true)) graph_exec_mem_done(m);
  }
  ~InFlight() { finish(); }
};

CUresult impl_cuGraphLaunch(CUgraphExec hexec, CUstream h, bool ptsz) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  auto* x = reinterpret_cast<GraphExec*>(hexec);
  if (!execs().has(x)) return CUDA_ERROR_INVALID_HANDLE;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (CUresult r = context_sticky(s->ctx); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // child graphs: not modelled
  }
  // Graph memory: mapped (and its unfreed allocations allocated) before anything is queued.
  if (CUresult r = graph_exec_mem_map(x->mem, true); r != CUDA_SUCCESS) return r;
  std::vector<GraphNode> nodes = x->nodes;
  for (auto& n : nodes)
    if (n.type == GraphNode::Type::kKernel) n.kernel.fault = next_launch_faults();
  Context* ctx = x->ctx;  // kernel nodes run in their own context, else the instantiating one
  auto flight = std::make_shared<InFlight>();
  flight->m = x->mem;
  enqueue(s, Op{[ctx, nodes = std::move(nodes), flight] {
                  for (const auto& n : nodes) {
                    if (ctx->sticky.load() != CUDA_SUCCESS) break;
                    if (n.type == GraphNode::Type::kKernel) run_kernel(n.ctx ? n.ctx : ctx, n.kernel);
                    else if (n.type == GraphNode::Type::kHost) n.host();
                  }
                  flight->finish();  // before the stream counts it complete: a sync then sees it done
                },
                true});
  return CUDA_SUCCESS;
}

}  // namespace

Graph* new_graph() {
  auto* g = new Graph();
  graphs().add(g);
  return g;
}

CUgraphNode add_mem_node(Graph* g, GraphNode::Type type, uint64_t dptr, uint64_t bytes, int dev) {
  auto node = std::make_unique<GraphNode>();
  node->type = type;
  node->dptr = dptr;
  node->bytes = bytes;
  node->dev = dev;
  std::lock_guard<std::mutex> l(g->mu);
  g->nodes.push_back(std::move(node));
  return reinterpret_cast<CUgraphNode>(g->nodes.back().get());
}

}  // namespace dd

using namespace dd;

DD_API cuGraphCreate(CUgraph* graph, unsigned int flags) {
  return guard([&] {
    Context* c = nullptr;
    if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
    if (graph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    *graph = reinterpret_cast<CUgraph>(new_graph());
    return CUDA_SUCCESS;
  });
}

DD_API cuGraphDestroy(CUgraph graph) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto* g = reinterpret_cast<Graph*>(graph);
    if (!graphs().has(g) || g->owned) return CUDA_ERROR_INVALID_VALUE;  // a child node's goes with it
    if (!graphs().remove(g)) return CUDA_ERROR_INVALID_VALUE;
    destroy_tree(g);
    return CUDA_SUCCESS;
  });
}

DD_API cuGraphAddKernelNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                               size_t ndeps, const CUDA_KERNEL_NODE_PARAMS* p) {
  return guard([&] {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUfunction f = p->func != nullptr ? p->func : reinterpret_cast<CUfunction>(p->kern);
    return add_kernel_node(node, graph, deps, ndeps, f, p->gridDimX, p->gridDimY, p->gridDimZ,
                           p->blockDimX, p->blockDimY, p->blockDimZ, p->kernelParams, p->extra);
  });
}

DD_API cuGraphAddKernelNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                            size_t ndeps, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  return guard([&] {
    if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return add_kernel_node(node, graph, deps, ndeps, p->func, p->gridDimX, p->gridDimY,
                           p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ,
                           p->kernelParams, p->extra);
  });
}

DD_API cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  return guard([&] {
    // CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD needs a stream: cuGraphInstantiateWithParams only.
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) return CUDA_ERROR_INVALID_VALUE;
    return instantiate(exec, graph, flags);
  });
}

namespace {
CUresult impl_cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* p, bool ptsz) {
  if (p == nullptr) return initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
  StreamPtr upload;
  if (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
    if (CUresult r = resolve_stream(p->hUploadStream, ptsz, &upload); r != CUDA_SUCCESS) return r;
  }
  p->hErrNode_out = nullptr;
  CUresult r = instantiate(exec, graph, p->flags, upload);
  p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}

// Maps the exec's graph memory now, rather than at its first launch.
CUresult impl_cuGraphUpload(CUgraphExec hexec, CUstream h, bool ptsz) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  auto* x = reinterpret_cast<GraphExec*>(hexec);
  if (!execs().has(x)) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  return graph_exec_mem_map(x->mem, false);
}
}  // namespace

DD_PTSZ_PAIR(cuGraphInstantiateWithParams,
             (CUgraphExec * exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* p), exec, graph, p)
DD_PTSZ_PAIR(cuGraphUpload, (CUgraphExec exec, CUstream h), exec, h)

// The pre-12.0 signature (error node and log buffer). cuGetProcAddress hands out
// cuGraphInstantiate_v2 for "cuGraphInstantiate" at every version from 11.0 on, 12.0 and 13.0
// included (measured on the H200, driver 580.159.04), although cuda.h maps the name to
// cuGraphInstantiateWithFlags from CUDA 12.0 on.
DD_API cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* errNode, char* log,
                          size_t logSize) {
  return guard([&] {
    if (errNode != nullptr) *errNode = nullptr;
    if (log != nullptr && logSize > 0) log[0] = '\0';
    return instantiate(exec, graph, 0);
  });
}
DD_API cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* errNode, char* log,
                             size_t logSize) {
  return cuGraphInstantiate(exec, graph, errNode, log, logSize);
}

// Graph inspection and editing: the node API spatial placement uses to make a graph's kernels run
// in a green context (clone, list nodes, read and rewrite kernel node parameters).
DD_API cuGraphClone(CUgraph* clone, CUgraph original) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto* g = reinterpret_cast<Graph*>(original);
    if (clone == nullptr || !graphs().has(g)) return CUDA_ERROR_INVALID_VALUE;
    Graph* c = clone_graph(g);  // documented: graphs with memory nodes cannot be cloned
    if (c == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
    *clone = reinterpret_cast<CUgraph>(c);
    return CUDA_SUCCESS;
  });
}

DD_API cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto* g = reinterpret_cast<Graph*>(graph);
    if (count == nullptr || !graphs().has(g)) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> l(g->mu);
    if (nodes == nullptr) {
      *count = g->nodes.size();
      return CUDA_SUCCESS;
    }
    const size_t n = std::min(*count, g->nodes.size());
    for (size_t i = 0; i < n; ++i) nodes[i] = reinterpret_cast<CUgraphNode>(g->nodes[i].get());
    for (size_t i = n; i < *count; ++i) nodes[i] = nullptr;
    *count = n;
    return CUDA_SUCCESS;
  });
}

namespace {
// The node behind a handle, if it belongs to a live graph.
GraphNode* find_node(CUgraphNode h) {
  GraphNode* found = nullptr;
  graphs().for_each([&](Graph* g) {
    std::lock_guard<std::mutex> l(g->mu);
    for (auto& n : g->nodes)
      if (reinterpret_cast<CUgraphNode>(n.get()) == h) found = n.get();
  });
  return found;
}
}  // namespace

DD_API cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    GraphNode* n = find_node(node);
    if (n == nullptr || type == nullptr) return CUDA_ERROR_INVALID_VALUE;
    switch (n->type) {
      case GraphNode::Type::kKernel: *type = CU_GRAPH_NODE_TYPE_KERNEL; break;
      case GraphNode::Type::kHost: *type = CU_GRAPH_NODE_TYPE_HOST; break;
      case GraphNode::Type::kEmpty: *type = CU_GRAPH_NODE_TYPE_EMPTY; break;
      case GraphNode::Type::kMemAlloc: *type = CU_GRAPH_NODE_TYPE_MEM_ALLOC; break;
      case GraphNode::Type::kMemFree: *type = CU_GRAPH_NODE_TYPE_MEM_FREE; break;
      case GraphNode::Type::kGraph: *type = CU_GRAPH_NODE_TYPE_GRAPH; break;
    }
    return CUDA_SUCCESS;
  });
}

DD_API cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    GraphNode* n = find_node(node);
    if (n == nullptr || p == nullptr || n->type != GraphNode::Type::kKernel) return CUDA_ERROR_INVALID_VALUE;
    *p = CUDA_KERNEL_NODE_PARAMS{};
    auto f = reinterpret_cast<CUfunction>(n->kernel.fn);
    p->func = n->ctx ? nullptr : f;
    p->kern = reinterpret_cast<CUkernel>(f);  // this double's CUkernel is its CUfunction
    p->ctx = reinterpret_cast<CUcontext>(n->ctx);
    p->gridDimX = n->kernel.grid[0], p->gridDimY = n->kernel.grid[1], p->gridDimZ = n->kernel.grid[2];
    p->blockDimX = n->kernel.block[0], p->blockDimY = n->kernel.block[1], p->blockDimZ = n->kernel.block[2];
    for (int i = 0; i < kMaxKernelArgs; ++i) n->arg_ptrs[i] = &n->kernel.args[i];
    p->kernelParams = n->arg_ptrs;
    return CUDA_SUCCESS;
  });
}

DD_API cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    GraphNode* n = find_node(node);
    if (n == nullptr || p == nullptr || n->type != GraphNode::Type::kKernel) return CUDA_ERROR_INVALID_VALUE;
    // func wins over kern, and then ctx is ignored (as documented); kern needs a live ctx.
    Context* ctx = nullptr;
    CUfunction f = p->func;
    if (f == nullptr) {
      f = reinterpret_cast<CUfunction>(p->kern);
      ctx = reinterpret_cast<Context*>(p->ctx);
      if (ctx != nullptr && !context_alive(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    }
    Function* fn = lookup_function(f);
    if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    KernelLaunch k;
    if (CUresult r = decode_launch(fn, p->kernelParams, p->extra, &k); r != CUDA_SUCCESS) return r;
    const unsigned dims[6] = {p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ};
    for (unsigned d : dims)
      if (d == 0) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 3; ++i) k.grid[i] = dims[i], k.block[i] = dims[3 + i];
    n->kernel = k;
    n->ctx = ctx;
    return CUDA_SUCCESS;
  });
}

DD_API cuGraphExecDestroy(CUgraphExec exec) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto* x = reinterpret_cast<GraphExec*>(exec);
    if (!execs().remove(x)) return CUDA_ERROR_INVALID_VALUE;
    graph_exec_mem_destroy(x->mem);  // its mapping stays in the pool (until a trim)
    graphs().for_each([&](Graph* g) {
      if (g != x->graph) return;
      std::lock_guard<std::mutex> l(g->mu);
      if (g->mem_exec_id == x->id) g->mem_exec_id = 0;
    });
    delete x;  // queued launches hold their own copy of the nodes
    return CUDA_SUCCESS;
  });
}

DD_API cuGraphLaunch(CUgraphExec exec, CUstream h) {
  return guard([&] { return impl_cuGraphLaunch(exec, h, false); });
}
DD_API cuGraphLaunch_ptsz(CUgraphExec exec, CUstream h) {
  return guard([&] { return impl_cuGraphLaunch(exec, h, true); });
}

DD_API cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                              size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  return guard([&] { return add_mem_alloc_node(node, graph, deps, ndeps, params); });
}

DD_API cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                             size_t ndeps, CUdeviceptr dptr) {
  return guard([&] { return add_mem_free_node(node, graph, deps, ndeps, dptr); });
}

DD_API cuGraphAddNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t ndeps,
                      CUgraphNodeParams* params) {
  return guard([&] { return add_node(node, graph, deps, ndeps, params); });
}

// Edge data (ports, edge types) is not modelled: every edge is a plain full dependency.
DD_API cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                         const CUgraphEdgeData* edges, size_t ndeps, CUgraphNodeParams* params) {
  return guard([&] { return add_node(node, graph, deps, ndeps, params); });
}

DD_API cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* out) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    GraphNode* n = find_node(node);
    if (n == nullptr || out == nullptr || n->type != GraphNode::Type::kMemAlloc) return CUDA_ERROR_INVALID_VALUE;
    *out = CUDA_MEM_ALLOC_NODE_PARAMS{};
    out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    out->poolProps.location.id = n->dev;
    out->bytesize = n->bytes;
    out->dptr = n->dptr;
    return CUDA_SUCCESS;  // access descriptors are not modelled: none
  });
}

DD_API cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* out) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    GraphNode* n = find_node(node);
    if (n == nullptr || out == nullptr || n->type != GraphNode::Type::kMemFree) return CUDA_ERROR_INVALID_VALUE;
    *out = n->dptr;
    return CUDA_SUCCESS;
  });
}

namespace {
CUresult check_graph_mem_device(CUdevice dev) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  return dev >= 0 && dev < config().devices ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
}  // namespace

DD_API cuDeviceGraphMemTrim(CUdevice dev) {
  return guard([&] {
    if (CUresult r = check_graph_mem_device(dev); r != CUDA_SUCCESS) return r;
    graph_mem_trim(dev);
    return CUDA_SUCCESS;
  });
}

DD_API cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  return guard([&] {
    if (CUresult r = check_graph_mem_device(dev); r != CUDA_SUCCESS) return r;
    return graph_mem_attribute(dev, enum_value(attr), value, false);
  });
}

DD_API cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void* value) {
  return guard([&] {
    if (CUresult r = check_graph_mem_device(dev); r != CUDA_SUCCESS) return r;
    return graph_mem_attribute(dev, enum_value(attr), value, true);
  });
}

DD_API cuGraphAddChildGraphNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps, size_t ndeps,
                                CUgraph child) {
  return guard([&] { return add_child_node(node, graph, deps, ndeps, reinterpret_cast<Graph*>(child), false); });
}

DD_API cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* out) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    GraphNode* n = find_node(node);
    if (n == nullptr || out == nullptr || n->type != GraphNode::Type::kGraph) return CUDA_ERROR_INVALID_VALUE;
    *out = reinterpret_cast<CUgraph>(n->child);
    return CUDA_SUCCESS;
  });
}

// The exec takes the nodes of a graph of the same shape (the same count and types of nodes, child
// graphs flattened): their parameters, and their graph memory, which is mapped anew at the next
// launch (on the H200 an update from a 32 MiB to a 512 MiB allocation succeeds, and the launch
// then takes 512 MiB). What the exec mapped before stays in the pool.
namespace {
CUresult exec_update(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  *info = CUgraphExecUpdateResultInfo{};
  info->result = CU_GRAPH_EXEC_UPDATE_ERROR;
  auto* x = reinterpret_cast<GraphExec*>(exec);
  auto* g = reinterpret_cast<Graph*>(graph);
  if (!execs().has(x) || !graphs().has(g)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<GraphNode> nodes;
  uint64_t need[kMaxDevices] = {};
  flatten(g, false, &nodes, need);
  if (nodes.size() != x->nodes.size()) {
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].type != x->nodes[i].type) {
      info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
  }
  const bool auto_free = x->mem->auto_free;
  graph_exec_mem_destroy(x->mem);
  x->mem = graph_exec_mem_new(nodes, need);
  x->mem->auto_free = auto_free;
  x->nodes = std::move(nodes);
  info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}
}  // namespace

DD_API cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (info == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return exec_update(exec, graph, info);
  });
}

// The pre-12.0 signature (CUDA 10.2; "cuGraphExecUpdate" below version 12000): the same update
// and result codes, the error node and result as separate outputs (the error node may be null).
DD_API cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphNode* errNode, CUgraphExecUpdateResult* result) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUgraphExecUpdateResultInfo info{};
    CUresult r = exec_update(exec, graph, &info);
    *result = info.result;
    if (errNode != nullptr) *errNode = info.errorNode;
    return r;
  });
}
