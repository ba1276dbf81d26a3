// SPDX-License-Identifier: Apache-2.0
// Streams (one worker thread each, executing queued work in order), events, kernel launches and
// stream capture.
//
// Ordering model: each stream is a FIFO drained by its own worker. The legacy default stream
// synchronises with blocking streams the way the real one does: work queued on it first waits
// for everything already queued on the context's blocking streams, and work queued on a blocking
// stream first waits for what is already queued on the legacy stream. Kernels of all streams
// then contend for the SM slots of the device (device.cc): a kernel of an ordinary context holds
// all of them, so such kernels never overlap, even from different streams of one process (a
// simplification: a real GPU runs kernels of several streams side by side when they fit); a
// kernel of a green context holds only its partition's slots, so kernels of green contexts with
// disjoint partitions run side by side.
#include "driver_double/internal.h"

namespace dd {
namespace {

std::mutex& streams_mu() {
  static auto* m = new std::mutex();
  return *m;
}
std::unordered_map<Stream*, StreamPtr>& streams() {
  static auto* m = new std::unordered_map<Stream*, StreamPtr>();
  return *m;
}

void worker(StreamPtr s) {
  std::unique_lock<std::mutex> l(s->mu);
  for (;;) {
    s->cv.wait(l, [&] { return !s->queue.empty() || s->stopping; });
    if (s->queue.empty()) break;  // stopping, and drained
    Op op = std::move(s->queue.front());
    s->queue.pop_front();
    l.unlock();
    if (!op.device_work || s->ctx->sticky.load() == CUDA_SUCCESS) {
      try {
        op.run();
      } catch (...) {
        int ok = CUDA_SUCCESS;
        s->ctx->sticky.compare_exchange_strong(ok, CUDA_ERROR_UNKNOWN);
      }
    }
    l.lock();
    ++s->completed;
    s->cv.notify_all();
  }
}

// The dependency on dep's currently queued work, or 0 when it is already done.
uint64_t pending_of(const StreamPtr& dep) {
  std::lock_guard<std::mutex> l(dep->mu);
  return dep->completed >= dep->submitted ? 0 : dep->submitted;
}

bool reached(const StreamPtr& s, uint64_t seq) {
  std::lock_guard<std::mutex> l(s->mu);
  return s->completed >= seq;
}

uint64_t submitted_of(const StreamPtr& s) {
  std::lock_guard<std::mutex> l(s->mu);
  return s->submitted;
}

Op wait_op(StreamPtr dep, uint64_t seq) {
  return Op{[dep, seq] { wait_stream(dep, seq); }, false};
}

}  // namespace

StreamPtr new_stream(Context* ctx, Stream::Kind kind, unsigned flags, int priority) {
  auto s = std::make_shared<Stream>();
  s->ctx = ctx;
  s->kind = kind;
  s->flags = flags;
  s->priority = priority;
  std::thread(worker, s).detach();  // the worker owns a reference until it drains and exits
  if (kind == Stream::Kind::kUser) {
    std::lock_guard<std::mutex> l(streams_mu());
    streams()[s.get()] = s;
  }
  return s;
}

void stop_stream(const StreamPtr& s, bool keep_handle) {
  if (keep_handle) {
    s->ctx_destroyed.store(true);
  } else {
    std::lock_guard<std::mutex> l(streams_mu());
    streams().erase(s.get());
  }
  std::lock_guard<std::mutex> l(s->mu);
  s->stopping = true;
  s->cv.notify_all();
}

CUresult resolve_stream(CUstream h, bool ptsz, StreamPtr* out) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  const bool legacy = (h == nullptr && !ptsz) || h == CU_STREAM_LEGACY;
  const bool per_thread = (h == nullptr && ptsz) || h == CU_STREAM_PER_THREAD;
  if (legacy || per_thread) {
    Context* c = nullptr;
    if (CUresult r = current_context(&c, false); r != CUDA_SUCCESS) return r;
    std::lock_guard<std::mutex> l(c->mu);
    if (legacy) {
      *out = c->legacy;
    } else {
      StreamPtr& s = c->per_thread[std::this_thread::get_id()];
      if (!s) s = new_stream(c, Stream::Kind::kPerThread, 0, 0);
      *out = s;
    }
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::mutex> l(streams_mu());
  auto it = streams().find(reinterpret_cast<Stream*>(h));
  if (it == streams().end()) return CUDA_ERROR_INVALID_HANDLE;
  if (it->second->ctx_destroyed.load()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = it->second;
  return CUDA_SUCCESS;
}

uint64_t enqueue(const StreamPtr& s, Op op) {
  Context* c = s->ctx;
  std::vector<std::pair<StreamPtr, uint64_t>> deps;
  if (s->kind == Stream::Kind::kLegacy) {
    std::lock_guard<std::mutex> l(c->mu);
    for (auto& o : c->streams)
      if (o->blocking()) deps.emplace_back(o, pending_of(o));
    for (auto& [tid, o] : c->per_thread) deps.emplace_back(o, pending_of(o));
  } else if (s->blocking()) {
    StreamPtr legacy;
    {
      std::lock_guard<std::mutex> l(c->mu);
      legacy = c->legacy;
    }
    if (legacy && legacy != s) deps.emplace_back(legacy, pending_of(legacy));
  }
  if (c->has_waits.load() && s->kind != Stream::Kind::kInternal) {
    // cuGreenCtxWaitEvent: all later work of the context waits; forget what has completed.
    std::lock_guard<std::mutex> l(c->mu);
    auto& w = c->waits;
    for (auto it = w.begin(); it != w.end();) {
      if (reached(it->first, it->second)) {
        it = w.erase(it);
      } else {
        if (it->first != s) deps.push_back(*it);
        ++it;
      }
    }
    if (w.empty()) c->has_waits.store(false);
  }
  // Never hold two stream locks at once: queues are locked one at a time.
  std::lock_guard<std::mutex> l(s->mu);
  for (auto& [dep, seq] : deps) {
    if (seq == 0) continue;
    s->queue.push_back(wait_op(dep, seq));
    ++s->submitted;
  }
  s->queue.push_back(std::move(op));
  ++s->submitted;
  s->cv.notify_all();
  return s->submitted;
}

void wait_stream(const StreamPtr& s, uint64_t seq) {
  std::unique_lock<std::mutex> l(s->mu);
  s->cv.wait(l, [&] { return s->completed >= seq; });
}

void sync_context(Context* ctx) {
  std::vector<StreamPtr> all;
  std::vector<Context*> greens;
  {
    std::lock_guard<std::mutex> l(ctx->mu);
    all = ctx->streams;
    for (auto& [tid, s] : ctx->per_thread) all.push_back(s);
    if (ctx->legacy) all.push_back(ctx->legacy);
    if (ctx->internal) all.push_back(ctx->internal);
    greens = ctx->greens;
  }
  // A primary context's synchronisation includes its green contexts (cuCtxSynchronize).
  for (Context* g : greens) sync_context(g);
  for (auto& s : all) wait_stream(s, submitted_of(s));
}

bool next_launch_faults() {
  static std::atomic<long> launches{0};
  long n = launches.fetch_add(1) + 1;
  return config().fault_after > 0 && n == config().fault_after;
}

void run_kernel(Context* ctx, const KernelLaunch& k) {
  auto fault = [ctx] {
    int ok = CUDA_SUCCESS;
    ctx->sticky.compare_exchange_strong(ok, CUDA_ERROR_ILLEGAL_ADDRESS);
  };
  if (k.fault) return fault();
  const uint64_t blocks = uint64_t{k.grid[0]} * k.grid[1] * k.grid[2];
  const uint64_t threads = uint64_t{k.block[0]} * k.block[1] * k.block[2];
  // The kernel runs on its context's SMs (a green context's partition, or the whole device), and
  // its blocks fill only those: fewer SMs, more waves.
  const uint64_t sm_slots = context_slots(ctx);
  auto duration_ns = [&](uint64_t iters) {
    const uint64_t per_sm = threads >= 2048 ? 1 : 2048 / threads;
    const uint64_t resident = uint64_t{sms_of(sm_slots)} * per_sm;
    const uint64_t waves = (blocks + resident - 1) / resident;
    return static_cast<uint64_t>(double(iters) * config().ns_per_iter * double(waves));
  };
  switch (k.fn->kind) {
    case KernelKind::kFixedWork: {
      auto* done = reinterpret_cast<unsigned long long*>(k.args[1]);
      if (done != nullptr && !valid_range(k.args[1], sizeof(*done))) return fault();
      engine_run(ctx->dev, sm_slots, duration_ns(k.args[0]), [&] {
        if (done != nullptr) __atomic_fetch_add(done, blocks, __ATOMIC_SEQ_CST);
      });
      break;
    }
    case KernelKind::kSmMask: {
      auto* out = reinterpret_cast<unsigned long long*>(k.args[0]);
      if (out != nullptr && !valid_range(k.args[0], sizeof(*out))) return fault();
      engine_run(ctx->dev, sm_slots, duration_ns(k.args[1]), [&] {
        if (out != nullptr) __atomic_store_n(out, sm_slots, __ATOMIC_SEQ_CST);
      });
      break;
    }
    case KernelKind::kCollective: {
      // (group, ranks, iters, out): out[0..3] = rendezvous wait ns, arrival and release
      // (CLOCK_MONOTONIC ns), round.
      auto* out = reinterpret_cast<unsigned long long*>(k.args[3]);
      if (out != nullptr && !valid_range(k.args[3], 4 * sizeof(*out))) return fault();
      const CUresult r = collective_run(
          ctx->dev, sm_slots, k.args[0], static_cast<uint32_t>(k.args[1]), duration_ns(k.args[2]),
          [&](const CollectiveTimes& t) {
            if (out == nullptr) return;
            __atomic_store_n(&out[0], static_cast<unsigned long long>(t.release_ns - t.arrive_ns), __ATOMIC_SEQ_CST);
            __atomic_store_n(&out[1], static_cast<unsigned long long>(t.arrive_ns), __ATOMIC_SEQ_CST);
            __atomic_store_n(&out[2], static_cast<unsigned long long>(t.release_ns), __ATOMIC_SEQ_CST);
            __atomic_store_n(&out[3], static_cast<unsigned long long>(t.round), __ATOMIC_SEQ_CST);
          });
      if (r != CUDA_SUCCESS) {
        int ok = CUDA_SUCCESS;
        ctx->sticky.compare_exchange_strong(ok, r);
      }
      break;
    }
    case KernelKind::kFillU32: {
      auto* dst = reinterpret_cast<unsigned int*>(k.args[0]);
      const auto value = static_cast<unsigned int>(k.args[1]);
      const uint64_t n = k.args[2];
      if (n > 0 && !valid_range(k.args[0], n * sizeof(unsigned int))) return fault();
      engine_run(ctx->dev, sm_slots, 0, [&] {
        for (uint64_t i = 0; i < n; ++i) dst[i] = value ^ static_cast<unsigned int>(i);
      });
      break;
    }
  }
}

CUresult submit_kernel(const StreamPtr& s, KernelLaunch k) {
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->capturing) {  // recorded into the graph, not run
      if (s->capture_invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      auto node = std::make_unique<GraphNode>();
      node->type = GraphNode::Type::kKernel;
      node->kernel = k;
      std::lock_guard<std::mutex> gl(s->capture_graph->mu);
      s->capture_graph->nodes.push_back(std::move(node));
      return CUDA_SUCCESS;
    }
  }
  k.fault = next_launch_faults();
  Context* c = s->ctx;
  enqueue(s, Op{[c, k] { run_kernel(c, k); }, true});
  return CUDA_SUCCESS;
}

CUresult submit_host_op(const StreamPtr& s, std::function<void()> fn, bool sync) {
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->capturing) {
      if (sync) {  // synchronous work is illegal on a capturing stream and breaks the capture
        s->capture_invalidated = true;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      }
      if (s->capture_invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      auto node = std::make_unique<GraphNode>();
      node->type = GraphNode::Type::kHost;
      node->host = std::move(fn);
      std::lock_guard<std::mutex> gl(s->capture_graph->mu);
      s->capture_graph->nodes.push_back(std::move(node));
      return CUDA_SUCCESS;
    }
  }
  uint64_t seq = enqueue(s, Op{std::move(fn), true});
  if (!sync) return CUDA_SUCCESS;
  wait_stream(s, seq);
  return context_sticky(s->ctx);
}

}  // namespace dd

using namespace dd;

namespace {

// A launch's stream, with the context's sticky error (a faulted context rejects new work).
CUresult launch_stream(CUstream h, bool ptsz, StreamPtr* s) {
  if (CUresult r = resolve_stream(h, ptsz, s); r != CUDA_SUCCESS) return r;
  return context_sticky((*s)->ctx);
}

CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, CUstream h, void** params, void** extra, bool ptsz) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  Function* fn = lookup_function(f);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (bx > 1024 || by > 1024 || bz > 64 || uint64_t{bx} * by * bz > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if (gy > 65535 || gz > 65535 || gx > 2147483647u) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = launch_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  KernelLaunch k;
  if (CUresult r = decode_launch(fn, params, extra, &k); r != CUDA_SUCCESS) return r;
  k.grid[0] = gx, k.grid[1] = gy, k.grid[2] = gz;
  k.block[0] = bx, k.block[1] = by, k.block[2] = bz;
  return submit_kernel(s, k);
}

CUresult impl_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shmem, CUstream h, void** params,
                             void** extra, bool ptsz) {
  return launch(f, gx, gy, gz, bx, by, bz, h, params, extra, ptsz);
}

CUresult impl_cuLaunchKernelEx(const CUlaunchConfig* cfg, CUfunction f, void** params,
                               void** extra, bool ptsz) {
  if (cfg == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return launch(f, cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ, cfg->blockDimX, cfg->blockDimY,
                cfg->blockDimZ, cfg->hStream, params, extra, ptsz);
}

CUresult impl_cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                        CUstream h, void** params, bool ptsz) {
  return launch(f, gx, gy, gz, bx, by, bz, h, params, nullptr, ptsz);
}

CUresult impl_cuLaunchHostFunc(CUstream h, CUhostFn fn, void* data, bool ptsz) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  StreamPtr s;
  if (CUresult r = launch_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  return submit_host_op(s, [fn, data] { fn(data); }, false);
}

// ---- stream queries ----
CUresult impl_cuStreamQuery(CUstream h, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> l(s->mu);
  if (s->capturing) {
    s->capture_invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (CUresult r = context_sticky(s->ctx); r != CUDA_SUCCESS) return r;
  return s->completed == s->submitted ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult impl_cuStreamSynchronize(CUstream h, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->capturing) {
      s->capture_invalidated = true;
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    seq = s->submitted;
  }
  wait_stream(s, seq);
  return context_sticky(s->ctx);
}

CUresult impl_cuStreamGetPriority(CUstream h, int* priority, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *priority = s->priority;
  return CUDA_SUCCESS;
}

CUresult impl_cuStreamGetFlags(CUstream h, unsigned int* flags, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = s->flags;
  return CUDA_SUCCESS;
}

// ---- capture ----
CUresult impl_cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* status, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(s->mu);
  *status = !s->capturing            ? CU_STREAM_CAPTURE_STATUS_NONE
            : s->capture_invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                     : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}

CUresult impl_cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  if (s->kind == Stream::Kind::kLegacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  std::lock_guard<std::mutex> l(s->mu);
  if (s->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  s->capturing = true;
  s->capture_invalidated = false;
  s->capture_mode = mode;
  s->capture_graph = new_graph();
  static std::atomic<uint64_t> next_capture_id{1};
  s->capture_id = next_capture_id.fetch_add(1);
  return CUDA_SUCCESS;
}

// cuStreamGetCaptureInfo (v1), _v2 and _v3 in one: the status, and while capturing the id and
// graph of the capture sequence. Dependency tracking is not modelled (nodes run in insertion
// order): no dependencies are reported.
CUresult capture_info(CUstream h, bool ptsz, CUstreamCaptureStatus* status, cuuint64_t* id,
                      CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                      size_t* ndeps) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(s->mu);
  *status = !s->capturing            ? CU_STREAM_CAPTURE_STATUS_NONE
            : s->capture_invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                     : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (!s->capturing) return CUDA_SUCCESS;  // the other outputs are only set while capturing
  if (id != nullptr) *id = s->capture_id;
  if (graph != nullptr) *graph = reinterpret_cast<CUgraph>(s->capture_graph);
  if (deps != nullptr) *deps = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (ndeps != nullptr) *ndeps = 0;
  return CUDA_SUCCESS;
}
CUresult impl_cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id, bool pt) {
  return capture_info(h, pt, st, id, nullptr, nullptr, nullptr, nullptr);
}
CUresult impl_cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g,
                                        const CUgraphNode** deps, size_t* n, bool pt) {
  return capture_info(h, pt, st, id, g, deps, nullptr, n);
}
CUresult impl_cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g,
                                        const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* n,
                                        bool pt) {
  return capture_info(h, pt, st, id, g, deps, edges, n);
}

CUresult impl_cuStreamBeginCapture(CUstream h, bool ptsz) {
  return impl_cuStreamBeginCapture_v2(h, CU_STREAM_CAPTURE_MODE_GLOBAL, ptsz);
}

CUresult impl_cuStreamEndCapture(CUstream h, CUgraph* graph, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(s->mu);
  if (!s->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  s->capturing = false;
  Graph* g = s->capture_graph;
  s->capture_graph = nullptr;
  if (s->capture_invalidated) {
    *graph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;  // the partial graph is discarded
  }
  *graph = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

// ---- events ----
struct EventRecord {
  StreamPtr stream;
  uint64_t seq = 0;
  std::atomic<int64_t> ts{0};  // completion time (ns), 0 while pending
};
struct Event {
  unsigned flags = 0;
  int dev = 0;  // of the context it was created in (cuGreenCtxRecordEvent checks it)
  std::mutex mu;
  std::shared_ptr<EventRecord> rec;  // latest record, null if never recorded
};
Registry<Event>& events() {
  static auto* r = new Registry<Event>();
  return *r;
}

std::shared_ptr<EventRecord> latest(Event* e) {
  std::lock_guard<std::mutex> l(e->mu);
  return e->rec;
}

CUresult impl_cuEventRecord(CUevent ev, CUstream h, bool ptsz) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  auto* e = reinterpret_cast<Event*>(ev);
  if (!events().has(e)) return CUDA_ERROR_INVALID_HANDLE;
  StreamPtr s;
  if (CUresult r = launch_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->capturing) return CUDA_SUCCESS;  // event-record nodes are not modelled (README.md)
  }
  auto rec = std::make_shared<EventRecord>();
  rec->stream = s;
  rec->seq = enqueue(s, Op{[rec] { rec->ts.store(now_ns()); }, false});
  std::lock_guard<std::mutex> l(e->mu);
  e->rec = rec;
  return CUDA_SUCCESS;
}

CUresult impl_cuStreamWaitEvent(CUstream h, CUevent ev, unsigned int flags, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  auto* e = reinterpret_cast<Event*>(ev);
  if (!events().has(e)) return CUDA_ERROR_INVALID_HANDLE;
  auto rec = latest(e);
  if (!rec) return CUDA_SUCCESS;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->capturing) return CUDA_SUCCESS;  // cross-stream capture joins are not modelled
  }
  if (rec->stream != s) enqueue(s, wait_op(rec->stream, rec->seq));
  return CUDA_SUCCESS;
}

// ---- green contexts: events over a whole green context, the contexts of a stream ----
// Every stream of c, and whether one of them is capturing (its capture is then invalidated, as
// the driver does when a green context's event calls meet a capture).
bool context_streams(Context* c, std::vector<StreamPtr>* all) {
  {
    std::lock_guard<std::mutex> l(c->mu);
    *all = c->streams;
    for (auto& [tid, s] : c->per_thread) all->push_back(s);
    if (c->legacy) all->push_back(c->legacy);
  }
  bool capturing = false;
  for (auto& s : *all) {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->capturing) {
      s->capture_invalidated = true;
      capturing = true;
    }
  }
  return capturing;
}

CUresult green_event(CUgreenCtx h, CUevent ev, GreenCtx** g, Event** e) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (CUresult r = lookup_green(h, g); r != CUDA_SUCCESS) return r;
  *e = reinterpret_cast<Event*>(ev);
  return events().has(*e) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult green_record_event(CUgreenCtx h, CUevent ev) {
  GreenCtx* g = nullptr;
  Event* e = nullptr;
  if (CUresult r = green_event(h, ev, &g, &e); r != CUDA_SUCCESS) return r;
  if (e->dev != g->dev) return CUDA_ERROR_INVALID_HANDLE;  // not of the same primary context
  Context* c = g->ctx;
  std::vector<StreamPtr> all;
  if (context_streams(c, &all)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  std::vector<std::pair<StreamPtr, uint64_t>> deps;
  for (auto& s : all)
    if (uint64_t seq = pending_of(s); seq != 0) deps.emplace_back(s, seq);
  StreamPtr helper;
  {
    std::lock_guard<std::mutex> l(c->mu);
    if (!c->internal) c->internal = new_stream(c, Stream::Kind::kInternal, 0, 0);
    helper = c->internal;
  }
  // The record completes once everything the green context had queued at this call has, which
  // one op on a helper stream expresses without delaying any of the context's own streams.
  auto rec = std::make_shared<EventRecord>();
  rec->stream = helper;
  rec->seq = enqueue(helper, Op{[deps, rec] {
                                  for (auto& [d, seq] : deps) wait_stream(d, seq);
                                  rec->ts.store(now_ns());
                                },
                                false});
  std::lock_guard<std::mutex> l(e->mu);
  e->rec = rec;
  return CUDA_SUCCESS;
}

CUresult green_wait_event(CUgreenCtx h, CUevent ev) {
  GreenCtx* g = nullptr;
  Event* e = nullptr;
  if (CUresult r = green_event(h, ev, &g, &e); r != CUDA_SUCCESS) return r;
  Context* c = g->ctx;
  std::vector<StreamPtr> all;
  if (context_streams(c, &all)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  auto rec = latest(e);
  if (!rec) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> l(c->mu);  // enqueue() turns this into waits on every stream
  c->waits.emplace_back(rec->stream, rec->seq);
  c->has_waits.store(true);
  return CUDA_SUCCESS;
}

bool per_thread_handle(CUstream h, bool ptsz) {
  return h == CU_STREAM_PER_THREAD || (h == nullptr && ptsz);
}

CUresult impl_cuStreamGetCtx(CUstream h, CUcontext* pctx, bool ptsz) {
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(s->ctx);  // a green stream: its green context's CUcontext
  return CUDA_SUCCESS;
}

CUresult impl_cuStreamGetCtx_v2(CUstream h, CUcontext* pctx, CUgreenCtx* pgreen, bool ptsz) {
  if (per_thread_handle(h, ptsz)) {  // not available while a green context is current
    Context* c = nullptr;
    if (CUresult r = current_context(&c, false); r != CUDA_SUCCESS) return r;
    if (c->green != nullptr) return CUDA_ERROR_INVALID_HANDLE;
  }
  StreamPtr s;
  if (CUresult r = resolve_stream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (pctx == nullptr || pgreen == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GreenCtx* g = s->ctx->green;
  *pctx = reinterpret_cast<CUcontext>(g != nullptr ? g->primary : s->ctx);
  *pgreen = reinterpret_cast<CUgreenCtx>(g);
  return CUDA_SUCCESS;
}

}  // namespace

DD_PTSZ_PAIR(cuLaunchKernel,
             (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
              unsigned int by, unsigned int bz, unsigned int shmem, CUstream h, void** params,
              void** extra),
             f, gx, gy, gz, bx, by, bz, shmem, h, params, extra)
DD_PTSZ_PAIR(cuLaunchKernelEx,
             (const CUlaunchConfig* config, CUfunction f, void** params, void** extra), config, f,
             params, extra)
DD_PTSZ_PAIR(cuLaunchCooperativeKernel,
             (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
              unsigned int by, unsigned int bz, unsigned int shmem, CUstream h, void** params),
             f, gx, gy, gz, bx, by, bz, shmem, h, params)
DD_PTSZ_PAIR(cuLaunchHostFunc, (CUstream h, CUhostFn fn, void* data), h, fn, data)
DD_PTSZ_PAIR(cuStreamQuery, (CUstream h), h)
DD_PTSZ_PAIR(cuStreamSynchronize, (CUstream h), h)
DD_PTSZ_PAIR(cuStreamGetPriority, (CUstream h, int* priority), h, priority)
DD_PTSZ_PAIR(cuStreamGetFlags, (CUstream h, unsigned int* flags), h, flags)
DD_PTSZ_PAIR(cuStreamIsCapturing, (CUstream h, CUstreamCaptureStatus* status), h, status)
DD_PTSZ_PAIR(cuStreamGetCaptureInfo, (CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id), h, st, id)
DD_PTSZ_PAIR(cuStreamGetCaptureInfo_v2,
             (CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g, const CUgraphNode** deps,
              size_t* n),
             h, st, id, g, deps, n)
DD_PTSZ_PAIR(cuStreamGetCaptureInfo_v3,
             (CUstream h, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g, const CUgraphNode** deps,
              const CUgraphEdgeData** edges, size_t* n),
             h, st, id, g, deps, edges, n)
DD_PTSZ_PAIR(cuStreamBeginCapture, (CUstream h), h)
DD_PTSZ_PAIR(cuStreamBeginCapture_v2, (CUstream h, CUstreamCaptureMode mode), h, mode)
DD_PTSZ_PAIR(cuStreamEndCapture, (CUstream h, CUgraph* graph), h, graph)
DD_PTSZ_PAIR(cuEventRecord, (CUevent ev, CUstream h), ev, h)
DD_PTSZ_PAIR(cuStreamWaitEvent, (CUstream h, CUevent ev, unsigned int flags), h, ev, flags)
DD_PTSZ_PAIR(cuStreamGetCtx, (CUstream h, CUcontext* pctx), h, pctx)
DD_PTSZ_PAIR(cuStreamGetCtx_v2, (CUstream h, CUcontext* pctx, CUgreenCtx* pGreenCtx), h, pctx,
             pGreenCtx)

DD_API cuStreamGetGreenCtx(CUstream h, CUgreenCtx* phCtx) {
  return guard([&] {
    StreamPtr s;
    if (CUresult r = resolve_stream(h, false, &s); r != CUDA_SUCCESS) return r;
    if (phCtx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *phCtx = reinterpret_cast<CUgreenCtx>(s->ctx->green);  // null: not a green context's stream
    return CUDA_SUCCESS;
  });
}

DD_API cuGreenCtxRecordEvent(CUgreenCtx hCtx, CUevent hEvent) {
  return guard([&] { return green_record_event(hCtx, hEvent); });
}

DD_API cuGreenCtxWaitEvent(CUgreenCtx hCtx, CUevent hEvent) {
  return guard([&] { return green_wait_event(hCtx, hEvent); });
}

CUresult dd::create_stream(Context* c, unsigned flags, int priority, CUstream* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~unsigned{CU_STREAM_NON_BLOCKING}) != 0) return CUDA_ERROR_INVALID_VALUE;
  priority = priority > 0 ? 0 : (priority < -5 ? -5 : priority);  // clamp like the driver
  StreamPtr s = new_stream(c, Stream::Kind::kUser, flags, priority);
  {
    std::lock_guard<std::mutex> l(c->mu);
    c->streams.push_back(s);
  }
  *out = reinterpret_cast<CUstream>(s.get());
  return CUDA_SUCCESS;
}

static CUresult stream_create(CUstream* out, unsigned flags, int priority) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  return create_stream(c, flags, priority, out);
}

DD_API cuStreamCreate(CUstream* stream, unsigned int flags) {
  return guard([&] { return stream_create(stream, flags, 0); });
}

DD_API cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  return guard([&] { return stream_create(stream, flags, priority); });
}

DD_API cuStreamDestroy_v2(CUstream h) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
      return CUDA_ERROR_INVALID_HANDLE;
    StreamPtr s;
    if (CUresult r = resolve_stream(h, false, &s); r != CUDA_SUCCESS) return r;
    {
      std::lock_guard<std::mutex> l(s->ctx->mu);
      auto& v = s->ctx->streams;
      for (auto it = v.begin(); it != v.end(); ++it)
        if (*it == s) {
          v.erase(it);
          break;
        }
    }
    stop_stream(s);  // returns at once; queued work still completes, as on the real driver
    return CUDA_SUCCESS;
  });
}

DD_API cuEventCreate(CUevent* ev, unsigned int flags) {
  return guard([&] {
    Context* c = nullptr;
    if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
    if (ev == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if ((flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
      return CUDA_ERROR_INVALID_VALUE;
    auto* e = new Event();
    e->flags = flags;
    e->dev = c->dev;
    events().add(e);
    *ev = reinterpret_cast<CUevent>(e);
    return CUDA_SUCCESS;
  });
}

DD_API cuEventDestroy_v2(CUevent ev) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto* e = reinterpret_cast<Event*>(ev);
    if (!events().remove(e)) return CUDA_ERROR_INVALID_HANDLE;
    delete e;
    return CUDA_SUCCESS;
  });
}

DD_API cuEventQuery(CUevent ev) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto* e = reinterpret_cast<Event*>(ev);
    if (!events().has(e)) return CUDA_ERROR_INVALID_HANDLE;
    auto rec = latest(e);
    if (!rec) return CUDA_SUCCESS;
    if (CUresult r = context_sticky(rec->stream->ctx); r != CUDA_SUCCESS) return r;
    return rec->ts.load() != 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  });
}

DD_API cuEventSynchronize(CUevent ev) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto* e = reinterpret_cast<Event*>(ev);
    if (!events().has(e)) return CUDA_ERROR_INVALID_HANDLE;
    auto rec = latest(e);
    if (!rec) return CUDA_SUCCESS;
    wait_stream(rec->stream, rec->seq);
    return context_sticky(rec->stream->ctx);
  });
}

DD_API cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto* a = reinterpret_cast<Event*>(start);
    auto* b = reinterpret_cast<Event*>(end);
    if (!events().has(a) || !events().has(b)) return CUDA_ERROR_INVALID_HANDLE;
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    auto ra = latest(a), rb = latest(b);
    if (!ra || !rb) return CUDA_ERROR_INVALID_HANDLE;
    int64_t ta = ra->ts.load(), tb = rb->ts.load();
    if (ta == 0 || tb == 0) return CUDA_ERROR_NOT_READY;
    *ms = static_cast<float>(double(tb - ta) / 1e6);
    return CUDA_SUCCESS;
  });
}

DD_API cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  return cuEventElapsedTime_v2(ms, start, end);
}

// Capture interaction mode is per thread. The double does not enforce capture modes (see README),
// but keeps and exchanges the value faithfully.
namespace {
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
}  // namespace

DD_API cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode previous = t_capture_mode;
  t_capture_mode = *mode;
  *mode = previous;
  return CUDA_SUCCESS;
}
