// SPDX-License-Identifier: Apache-2.0
// Internal model of the driver test double (a stand-in libcuda.so.1 for CI without a GPU).
//
// Everything here lives in namespace dd and is hidden (only cu* names are exported, see
// exports.map). Global state is heap-allocated on first use and never freed: worker threads may
// still be running while the process exits, so no global may have a destructor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gpuos/cuda_internal.h"

#define DD_API extern "C" CUresult CUDAAPI

// Defines NAME and NAME##SFX (_ptsz / _ptds) over one implementation, impl_NAME, that takes the
// same arguments plus a trailing `bool per_thread` (stream 0 means the per-thread stream).
#define DD_VARIANT_PAIR(NAME, SFX, PARAMS, ...)                                              \
  DD_API NAME PARAMS { return dd::guard([&] { return impl_##NAME(__VA_ARGS__, false); }); } \
  DD_API NAME##SFX PARAMS { return dd::guard([&] { return impl_##NAME(__VA_ARGS__, true); }); }
#define DD_PTSZ_PAIR(NAME, PARAMS, ...) DD_VARIANT_PAIR(NAME, _ptsz, PARAMS, __VA_ARGS__)
#define DD_PTDS_PAIR(NAME, PARAMS, ...) DD_VARIANT_PAIR(NAME, _ptds, PARAMS, __VA_ARGS__)

namespace dd {

constexpr int kMaxDevices = 16;
constexpr uint64_t kVmmGranularity = 2ull << 20;
// SMs are modelled in slots of kSlotSms (the SM partition granularity of compute capability 9.0);
// a 64-bit mask names a set of slots, so a device has at most kMaxSlots of them (device.cc makes
// slots wider on devices of more than 512 SMs).
constexpr int kSlotSms = 8;
constexpr int kMaxSlots = 64;

// Settings read once at cuInit from GPUOS_SIM_* (see docs/CONTRACTS.md).
struct Config {
  int devices = 1;  // visible to this process (CUDA_VISIBLE_DEVICES), the range of CUdevice ordinals
  int physical_devices = 1;        // simulated GPUs in the segment (GPUOS_SIM_DEVICES)
  std::vector<int> visible;        // ordinal -> simulated GPU
  int sms = 132;
  uint64_t mem_bytes = 16384ull << 20;
  double ns_per_iter = 1.0;
  uint64_t timeslice_ns = 2'000'000;
  long fault_after = 0;  // 0 = no fault injection
  uint64_t collective_timeout_ns = 120'000'000'000;  // a gpuos_collective's longest rendezvous wait
  uint64_t unmap_delay_ns = 0;  // each cuMemUnmap of this process takes this long (a slow driver)
  std::string shm_name;
};

// Runs f, turning any exception into CUDA_ERROR_UNKNOWN: nothing may unwind through extern "C".
template <class F>
CUresult guard(F&& f) noexcept {
  try {
    return f();
  } catch (...) {
    return CUDA_ERROR_UNKNOWN;
  }
}

// What a caller passed for an enum parameter, as an integer: a value outside the enum's range is
// the caller's mistake to report (an error code), and reading it as the enum type is undefined.
template <class E>
int enum_value(const E& e) noexcept {
  static_assert(sizeof(E) == sizeof(int));
  int v = 0;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// ---- device.cc: process-wide init, shared segment (memory accounting, execution engine) ----
bool initialized();
CUresult init_once();  // idempotent; CUDA_SUCCESS or the first failure
const Config& config();
CUresult mem_reserve(int dev, uint64_t bytes);  // CUDA_ERROR_OUT_OF_MEMORY when full
void mem_release(int dev, uint64_t bytes);
void mem_info(int dev, uint64_t* used, uint64_t* total);  // reclaims dead processes first
// The simulated GPU behind ordinal dev (a CUdevice of this process): CUDA_VISIBLE_DEVICES may hide
// and reorder GPUs, as on a real machine. Shared state (memory, engines) is kept per simulated GPU.
int physical_device(int dev);
// The UUID of simulated GPU `physical` (stable across runs), raw and as "GPU-" + 32 hex digits.
void sim_uuid(int physical, unsigned char out[16]);
std::string sim_uuid_text(int physical);
// SM slots of every device (the same for all processes of a segment).
int slot_width();                // SMs per full slot (kSlotSms unless the device is very large)
uint64_t all_slots();            // mask of every slot
unsigned sms_of(uint64_t slots); // SMs in a set of slots
// Occupies the given SM slots of device dev for ns of simulated work, in time slices shared with
// every other process and stream using the same segment: a kernel holds all its slots at once
// (taken in increasing order), so kernels on disjoint slots run concurrently and kernels that
// share a slot take turns.
void engine_run(int dev, uint64_t slots, uint64_t ns, const std::function<void()>& body);
// Occupies the slots like engine_run, for as long as spin() returns true (asked at once and about
// every 100 us while the slots are held; slots are handed over between time slices as usual): a
// kernel spinning on the device, e.g. a collective waiting for its peers. The time counts as busy
// kernel time (NVML), as a spinning kernel's does on a GPU.
void engine_spin(int dev, uint64_t slots, const std::function<bool()>& spin);
void sleep_ns(uint64_t ns);
int64_t now_ns();

// ---- modules and kernels ----
enum class KernelKind { kFixedWork, kFillU32, kSmMask, kCollective };
constexpr int kMaxKernelArgs = 4;
struct Module;
struct Function {
  KernelKind kind;
  const char* name;
  Module* module;
};
struct Module {
  std::vector<std::unique_ptr<Function>> functions;
};
Function* lookup_function(CUfunction f);  // nullptr if not a live function handle

// One decoded kernel launch; the arguments are copied at launch time, as the real driver does.
struct KernelLaunch {
  Function* fn = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  uint64_t args[kMaxKernelArgs] = {};
  bool fault = false;  // fault injection: this launch "faults" with CUDA_ERROR_ILLEGAL_ADDRESS
};
CUresult decode_launch(Function* fn, void** params, void** extra, KernelLaunch* out);

// ---- collective.cc: gpuos_collective's rendezvous (docs/CONTRACTS.md) ----
struct CollectiveTimes {
  uint64_t round = 0;      // this rank's k-th collective of the group: round k
  int64_t arrive_ns = 0;   // CLOCK_MONOTONIC when it counted itself in
  int64_t release_ns = 0;  // when it saw every rank of the round arrived
};
// Runs one gpuos_collective on device dev's `slots`: counts in at the group's rendezvous in the
// segment, spins on the slots until all `ranks` ranks of the round arrived, then runs work_ns of
// work and calls body (with the slots held, as engine_run does). CUDA_SUCCESS, or the sticky error
// the kernel fails with: CUDA_ERROR_LAUNCH_TIMEOUT after Config::collective_timeout_ns of waiting,
// CUDA_ERROR_LAUNCH_FAILED when the group is broken (a rank timed out, or died before arriving),
// full, or its ranks disagree on `ranks`.
CUresult collective_run(int dev, uint64_t slots, uint64_t group, uint32_t ranks, uint64_t work_ns,
                        const std::function<void(const CollectiveTimes&)>& body);

// ---- contexts and streams ----
struct Context;
struct Graph;
struct GreenCtx;

// A unit of queued work. device_work is skipped (but still completed) once the context has a
// sticky error, as work on a faulted real context never runs.
struct Op {
  std::function<void()> run;
  bool device_work = true;
};

struct Stream : std::enable_shared_from_this<Stream> {
  // kInternal: the double's own helper stream (cuGreenCtxRecordEvent), never seen by the caller.
  enum class Kind { kUser, kLegacy, kPerThread, kInternal };
  Context* ctx = nullptr;
  Kind kind = Kind::kUser;
  unsigned flags = 0;
  int priority = 0;

  std::mutex mu;
  std::condition_variable cv;  // signalled when work is queued or completed
  std::deque<Op> queue;
  uint64_t submitted = 0;  // ops ever queued
  uint64_t completed = 0;  // ops finished, in order
  bool stopping = false;
  // Its green context was destroyed: the handle stays known but every call on it fails with
  // CUDA_ERROR_CONTEXT_IS_DESTROYED (cuGreenCtxDestroy does not destroy streams).
  std::atomic<bool> ctx_destroyed{false};

  // Stream capture: while capturing, work is appended to capture_graph instead of queued.
  bool capturing = false;
  bool capture_invalidated = false;
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  Graph* capture_graph = nullptr;
  uint64_t capture_id = 0;  // of the current capture sequence: unique in the process

  bool blocking() const {
    return kind == Kind::kLegacy || kind == Kind::kPerThread ||
           (kind == Kind::kUser && (flags & CU_STREAM_NON_BLOCKING) == 0);
  }
};
using StreamPtr = std::shared_ptr<Stream>;

struct Context {
  int dev = 0;
  unsigned flags = 0;
  bool primary = false;
  int primary_refs = 0;  // primary contexts only
  std::atomic<int> sticky{CUDA_SUCCESS};
  // Set on the CUcontext of a green context (cuCtxFromGreenCtx): its kernels occupy only the
  // green context's SM slots. Never changes after creation.
  GreenCtx* green = nullptr;
  std::atomic<bool> has_waits{false};  // waits is not empty
  // cuCtxSetLimit / cuCtxGetLimit: the limits as set (0: the default, kDefaultLimits in context.cc).
  std::atomic<size_t> limits[CU_LIMIT_MAX] = {};

  std::mutex mu;  // guards the members below
  StreamPtr legacy;
  std::vector<StreamPtr> streams;  // user streams
  std::unordered_map<std::thread::id, StreamPtr> per_thread;
  StreamPtr internal;  // lazily created helper stream (Stream::Kind::kInternal)
  // cuGreenCtxWaitEvent: work queued on any stream of this context waits for these first.
  std::vector<std::pair<StreamPtr, uint64_t>> waits;
  // A primary context: its live green contexts' contexts (cuCtxSynchronize waits for them too).
  std::vector<Context*> greens;
};

// A green context (CUgreenCtx): a partition of a device's SM slots. Never freed, so a stale
// handle stays safe to look up.
struct GreenCtx {
  int dev = 0;
  uint64_t slots = 0;
  unsigned long long id = 0;  // cuGreenCtxGetId
  Context* ctx = nullptr;      // its CUcontext (cuCtxFromGreenCtx)
  Context* primary = nullptr;  // the device's primary context, retained while this lives
  std::atomic<bool> destroyed{false};
};
// CUDA_SUCCESS with *out, CUDA_ERROR_INVALID_CONTEXT for an unknown handle, or
// CUDA_ERROR_CONTEXT_IS_DESTROYED for a destroyed one.
CUresult lookup_green(CUgreenCtx h, GreenCtx** out);
// The SM slots a kernel of ctx occupies: its green context's, or all of them.
inline uint64_t context_slots(const Context* ctx) {
  return ctx->green != nullptr ? ctx->green->slots : all_slots();
}

// Current-context checks shared by entry points: NOT_INITIALIZED, INVALID_CONTEXT, and (when
// check_sticky) the context's sticky error.
CUresult current_context(Context** out, bool check_sticky = true);
bool context_alive(Context* ctx);
CUresult context_sticky(Context* ctx);
// Green contexts (context.cc): the CUcontext of a new green context on device dev (registered,
// with its own legacy stream), and its teardown at cuGreenCtxDestroy.
Context* make_green_context(int dev, unsigned flags, GreenCtx* g);
void destroy_green_context(Context* c);

StreamPtr new_stream(Context* ctx, Stream::Kind kind, unsigned flags, int priority);
// The worker drains the queue, then exits. keep_handle: the handle stays known and fails with
// CUDA_ERROR_CONTEXT_IS_DESTROYED (streams of a destroyed green context).
void stop_stream(const StreamPtr& s, bool keep_handle = false);
// A user stream of ctx (cuStreamCreate, cuGreenCtxStreamCreate).
CUresult create_stream(Context* ctx, unsigned flags, int priority, CUstream* out);
// Resolves a stream handle: 0 / CU_STREAM_LEGACY / CU_STREAM_PER_THREAD (0 means per-thread
// when ptsz) or a live user stream. Fails with NOT_INITIALIZED/INVALID_CONTEXT/INVALID_HANDLE,
// or CONTEXT_IS_DESTROYED for a stream of a destroyed green context.
CUresult resolve_stream(CUstream h, bool ptsz, StreamPtr* out);
// Queues op on s after the implicit legacy-stream dependencies. Returns the op's sequence number.
uint64_t enqueue(const StreamPtr& s, Op op);
void wait_stream(const StreamPtr& s, uint64_t seq);  // until s->completed >= seq
void sync_context(Context* ctx);  // all streams of ctx (and of its green contexts) idle
// Runs a kernel (on a worker thread): engine time, then the kernel's effect.
void run_kernel(Context* ctx, const KernelLaunch& k);
// Kernel launch after validation of everything but the stream.
CUresult submit_kernel(const StreamPtr& s, KernelLaunch k);
bool next_launch_faults();  // fault-injection counter, one tick per kernel run submitted
// Queues a host-side operation (copy, memset) honoring capture. sync: wait for it to finish.
CUresult submit_host_op(const StreamPtr& s, std::function<void()> fn, bool sync);

// ---- graphs ----
struct GraphNode {
  // Memory alloc and free nodes do nothing at replay: the graph memory pool maps their memory at
  // the launch (graph_exec_mem_map). A child graph node (kGraph) owns its graph, whose nodes an
  // exec runs in its place.
  enum class Type { kKernel, kHost, kEmpty, kMemAlloc, kMemFree, kGraph } type = Type::kEmpty;
  KernelLaunch kernel;
  // The context a kernel node runs in. Null: the context the graph is instantiated in, whatever
  // stream launches it (as on the H200: a captured graph replayed on a green-context stream, or one
  // captured on such a stream, still runs on every SM). Set only by cuGraphKernelNodeSetParams with
  // func null and a CUkernel: the one way a node is made to run in a (green) context.
  Context* ctx = nullptr;
  void* arg_ptrs[kMaxKernelArgs] = {};  // kernelParams handed out by GetParams
  std::function<void()> host;
  uint64_t dptr = 0;   // kMemAlloc, kMemFree
  uint64_t bytes = 0;  // kMemAlloc: its bytesize
  int dev = 0;         // kMemAlloc: the device it is on
  Graph* child = nullptr;  // kGraph: owned, destroyed with this node's graph
};
struct Graph {
  std::mutex mu;
  std::vector<std::unique_ptr<GraphNode>> nodes;
  // Graphs with memory nodes have at most one executable graph at a time (as documented):
  // mem_exec_id is the id of the one that exists, 0 when none.
  uint64_t mem_exec_id = 0;
  bool owned = false;  // a child graph node's: not destroyed, cloned or instantiated on its own
};
Graph* new_graph();
// Appends a memory alloc or free node of dptr to g; returns the node's handle.
CUgraphNode add_mem_node(Graph* g, GraphNode::Type type, uint64_t dptr, uint64_t bytes = 0, int dev = 0);

// ---- memory ----
// Range check used before touching device memory on the caller's behalf: is [p, p+n) inside one
// live allocation (device, managed, pinned host or mapped VMM range)?
bool valid_range(uint64_t p, uint64_t n);
void free_context_allocations(Context* ctx);
// Graph memory (alloc nodes, and cuMemAllocAsync under capture), as measured on the H200 (driver
// 13.0): adding an alloc node only fixes the allocation's address (for the node's lifetime);
// instantiation takes nothing. Physical memory comes from the device's graph memory pool when an
// executable graph is launched or uploaded: the pool maps the exec's allocations (each rounded to
// kGraphPageBytes; each graph of the exec's tree rounded to kGraphChunkBytes, a child graph that
// allocates one chunk more), growing in chunks of kGraphChunkBytes, and the exec keeps that
// mapping between launches. Neither destroying the exec nor the graph, nor any
// free, gives memory back: the pool keeps it (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) until
// cuDeviceGraphMemTrim, which releases all of it but what executing (or queued) graphs and live
// allocations (not freed in their graph, allocated by a launch, not freed yet) use. Graphs never
// share mappings here (the real driver shares them between graphs that cannot run concurrently),
// so the double reserves at least as much as the driver would.
constexpr uint64_t kGraphPageBytes = 2ull << 20;
constexpr uint64_t kGraphChunkBytes = 32ull << 20;
// An alloc node of `bytes` on device dev added to g: its address (no memory yet).
CUresult graph_mem_alloc(Graph* g, int dev, size_t bytes, uint64_t* out);
// A free node of dptr added to g: INVALID_VALUE unless dptr is a graph allocation that no free
// node frees yet (an allocation is freed either in its own graph or in one other graph).
CUresult graph_mem_free(Graph* g, uint64_t dptr);
void graph_mem_release(Graph* g);  // g is being destroyed: its addresses go unless still used
// What an executable graph uses of graph memory; guarded by memory.cc's lock.
struct GraphExecMem {
  struct Use {
    uint64_t dptr;
    bool unfreed;  // not freed in its graph: a launch leaves it allocated
  };
  std::vector<Use> allocs;      // its alloc nodes
  std::vector<uint64_t> frees;  // free nodes of other graphs' allocations
  uint64_t need[kMaxDevices] = {};  // what a mapping takes from each device's pool
  bool auto_free = false;           // CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
  bool mapped = false;
  int inflight = 0;  // launches queued or running
  bool destroyed = false;
};
using GraphExecMemPtr = std::shared_ptr<GraphExecMem>;
// At instantiation: the exec's use of the graph's nodes (its addresses stay while it lives), and
// what a mapping takes from each device's pool (computed from the graph tree by graph.cc).
GraphExecMemPtr graph_exec_mem_new(const std::vector<GraphNode>& nodes, const uint64_t (&need)[kMaxDevices]);
// At launch (launch = true) or upload: maps the exec's memory from the pool (OUT_OF_MEMORY when
// the device is full); a launch also allocates its unfreed allocations (INVALID_VALUE while one is
// still allocated, unless auto_free) and frees what its free nodes free (INVALID_VALUE unless
// allocated). A launch counts as in flight until graph_exec_mem_done.
CUresult graph_exec_mem_map(const GraphExecMemPtr& m, bool launch);
void graph_exec_mem_done(const GraphExecMemPtr& m);
void graph_exec_mem_destroy(const GraphExecMemPtr& m);  // its mapping stays in the pool
// CU_GRAPH_MEM_ATTR_* of device dev (checked by the caller), and cuDeviceGraphMemTrim.
CUresult graph_mem_attribute(int dev, int attr, void* value, bool set);  // attr: a CUgraphMem_attribute
void graph_mem_trim(int dev);

// ---- misc ----
template <class T>
struct Registry {  // set of live handles, so stale/bogus handles are rejected without a deref
  std::mutex mu;
  std::unordered_set<T*> live;
  void add(T* p) {
    std::lock_guard<std::mutex> l(mu);
    live.insert(p);
  }
  bool remove(T* p) {
    std::lock_guard<std::mutex> l(mu);
    return live.erase(p) != 0;
  }
  bool has(T* p) {
    std::lock_guard<std::mutex> l(mu);
    return live.count(p) != 0;
  }
  template <class F>
  void for_each(F&& f) {
    std::lock_guard<std::mutex> l(mu);
    for (T* p : live) f(p);
  }
};

}  // namespace dd
