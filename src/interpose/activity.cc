// SPDX-License-Identifier: Apache-2.0
#include "interpose/activity.h"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "common/ipc.h"
#include "interpose/carry_over.h"

namespace gpuos::interpose {

std::atomic<CUstream> g_last_stream{nullptr};
std::atomic<bool> g_monitor_running{false};

namespace {

// Streams this tenant submitted to, with the context each belongs to. Append-only and lock-free
// to read: the launch path publishes an entry by bumping g_stream_count after filling it.
constexpr int kMaxStreams = 64;
struct TrackedStream {
  std::atomic<CUstream> stream{nullptr};
  std::atomic<CUcontext> ctx{nullptr};
};
TrackedStream g_streams[kMaxStreams];
std::atomic<int> g_stream_count{0};
std::mutex g_streams_mu;  // serialises appends only

uint64_t submissions(gpuos_control_block* cb) {
  return std::atomic_ref<uint64_t>(cb->launches).load(std::memory_order_seq_cst) +
         std::atomic_ref<uint64_t>(cb->graph_launches).load(std::memory_order_seq_cst);
}

void sleep_us(long us) {
  timespec t{us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&t, &t) != 0) {
  }
}

void futex_wake(uint32_t* word) { syscall(SYS_futex, word, FUTEX_WAKE, 1, nullptr, nullptr, 0); }

// Waits until every tracked stream has finished the work submitted to it so far. A stream whose
// context or handle is gone (destroyed, or the context faulted) has no more work: it is dropped.
// Returns false only while a tracked stream is under capture (its work cannot be fenced now).
bool wait_tracked_streams(const GpuosDriverTable& d, CUevent* events, CUcontext* event_ctx) {
  int n = g_stream_count.load(std::memory_order_acquire);
  bool recorded[kMaxStreams] = {};
  for (int i = 0; i < n; ++i) {
    CUstream s = g_streams[i].stream.load(std::memory_order_relaxed);
    CUcontext ctx = g_streams[i].ctx.load(std::memory_order_relaxed);
    if (ctx == nullptr) continue;
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    if (d.cuCtxSetCurrent(ctx) != CUDA_SUCCESS || d.cuStreamIsCapturing(s, &cap) != CUDA_SUCCESS) {
      g_streams[i].ctx.store(nullptr, std::memory_order_relaxed);
      continue;
    }
    if (cap != CU_STREAM_CAPTURE_STATUS_NONE) return false;
    if (event_ctx[i] != ctx) {
      if (events[i] != nullptr) d.cuEventDestroy_v2(events[i]);
      events[i] = nullptr;
      event_ctx[i] = nullptr;
      if (d.cuEventCreate(&events[i], CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        g_streams[i].ctx.store(nullptr, std::memory_order_relaxed);
        continue;
      }
      event_ctx[i] = ctx;
    }
    if (d.cuEventRecord(events[i], s) != CUDA_SUCCESS) {
      g_streams[i].ctx.store(nullptr, std::memory_order_relaxed);
      continue;
    }
    recorded[i] = true;
  }
  for (int i = 0; i < n; ++i) {
    if (recorded[i]) d.cuEventSynchronize(events[i]);  // an error means the work is gone too
  }
  return true;
}

// Follows one busy period to its end. While submissions keep coming the monitor only watches the
// counters (no driver calls: an event record on a stream the app is launching into contends with
// its launches inside the driver). Once they have been quiet for a short while it fences every
// tracked stream with an event and waits; if nothing new came meanwhile, the tenant is idle.
void follow_until_idle(const GpuosDriverTable& d, gpuos_control_block* cb, CUevent* events,
                       CUcontext* event_ctx) {
  std::atomic_ref<uint32_t> busy(cb->busy);
  uint64_t next_check = monotonic_ns() + 1000000000ull;
  for (;;) {
    if (monotonic_ns() >= next_check) {
      maintain_daemon_connection();
      if (g_control.load(std::memory_order_acquire) != cb) return;  // moved to a new daemon's block
      next_check = monotonic_ns() + 1000000000ull;
    }
    const uint32_t grace = grant_load(grants_of(cb)->idle_grace_us, std::memory_order_relaxed);
    // Work we cannot fence (per-thread default streams): idle is inferred from a quiet period long
    // enough to cover a typical kernel.
    const bool untracked = std::atomic_ref<uint32_t>(cb->untracked_work).load(std::memory_order_relaxed) != 0;
    const long quiet_us = untracked ? (grace > 2000 ? grace : 2000) : (grace > 50 ? grace : 50);
    uint64_t before = submissions(cb);
    sleep_us(quiet_us);
    if (submissions(cb) != before) continue;  // still launching
    if (g_active_captures.load(std::memory_order_relaxed) > 0 ||
        !wait_tracked_streams(d, events, event_ctx)) {
      continue;  // a capture is in progress: its streams cannot be fenced now
    }
    if (submissions(cb) != before) continue;
    busy.store(0, std::memory_order_seq_cst);
    if (submissions(cb) != before) {  // a launch slipped in between: stay busy
      uint32_t zero = 0;
      busy.compare_exchange_strong(zero, 1, std::memory_order_seq_cst);
      continue;
    }
    notify_activity(cb);
    return;
  }
}

void* monitor_main(void*) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  const GpuosDriverTable* d = real_driver();
  if (d == nullptr) return nullptr;
  // The monitor's event calls must neither be refused nor invalidate an app's stream capture in
  // global mode: relaxed capture mode exempts this thread.
  if (d->cuThreadExchangeStreamCaptureMode != nullptr) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    d->cuThreadExchangeStreamCaptureMode(&mode);
  }
  CUevent events[kMaxStreams] = {};
  CUcontext event_ctx[kMaxStreams] = {};
  for (;;) {
    // The block changes when the tenant re-registers with a restarted daemon.
    gpuos_control_block* cb = g_control.load(std::memory_order_acquire);
    if (std::atomic_ref<uint32_t>(cb->busy).load(std::memory_order_seq_cst) == 0) {
      futex_wait(&cb->busy, 0, 1000);
      maintain_daemon_connection();
      continue;
    }
    follow_until_idle(*d, cb, events, event_ctx);
  }
  return nullptr;
}

// Best-effort in-flight ring: completion events of the latest submissions, oldest first.
constexpr uint32_t kMaxInflight = 1024;
struct InflightRing {
  std::mutex mu;
  CUevent event[kMaxInflight] = {};
  CUcontext ctx[kMaxInflight] = {};
  uint32_t head = 0;   // oldest
  uint32_t count = 0;
};
InflightRing& ring() {
  static InflightRing* r = new InflightRing();  // never destroyed: used until process exit
  return *r;
}
thread_local bool t_ring_locked = false;

}  // namespace

void notify_activity(gpuos_control_block* cb) {
  int sock = daemon_socket();
  if (sock < 0) return;
  gpuos_msg_activity m{};
  init_header(&m.hdr, GPUOS_MSG_ACTIVITY, sizeof(m), 0);
  m.busy = std::atomic_ref<uint32_t>(cb->busy).load(std::memory_order_relaxed);
  m.waiting = std::atomic_ref<uint32_t>(cb->waiting).load(std::memory_order_relaxed);
  ssize_t ignored = send(sock, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL);
  (void)ignored;
}

void set_word_and_notify(gpuos_control_block* cb, uint32_t& word, uint32_t value) {
  std::atomic_ref<uint32_t> w(word);
  if (w.load(std::memory_order_relaxed) == value) return;
  if (w.exchange(value, std::memory_order_relaxed) != value) notify_activity(cb);
}

void become_busy(gpuos_control_block* cb) {
  if (!g_monitor_running.load(std::memory_order_relaxed)) return;  // nobody would ever clear it
  uint32_t zero = 0;
  if (!std::atomic_ref<uint32_t>(cb->busy).compare_exchange_strong(zero, 1, std::memory_order_seq_cst)) {
    return;  // another thread (or the monitor) got there first
  }
  std::atomic_ref<uint64_t>(cb->busy_transitions).fetch_add(1, std::memory_order_relaxed);
  futex_wake(&cb->busy);
  notify_activity(cb);
}

void track_stream(const GpuosDriverTable& d, gpuos_control_block* cb, CUstream stream, bool ptsz) {
  g_last_stream.store(stream, std::memory_order_relaxed);
  if (is_per_thread_default(stream, ptsz)) {
    std::atomic_ref<uint32_t>(cb->untracked_work).store(1, std::memory_order_relaxed);
    return;
  }
  int n = g_stream_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (g_streams[i].stream.load(std::memory_order_relaxed) == stream &&
        g_streams[i].ctx.load(std::memory_order_relaxed) != nullptr) {
      return;
    }
  }
  CUcontext ctx = nullptr;
  if (d.cuCtxGetCurrent == nullptr || d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) return;
  std::lock_guard<std::mutex> lock(g_streams_mu);
  n = g_stream_count.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {  // re-check under the lock; reuse a dropped slot of this stream
    if (g_streams[i].stream.load(std::memory_order_relaxed) == stream) {
      g_streams[i].ctx.store(ctx, std::memory_order_relaxed);
      return;
    }
  }
  if (n == kMaxStreams) {
    std::atomic_ref<uint32_t>(cb->untracked_work).store(1, std::memory_order_relaxed);
    return;
  }
  g_streams[n].stream.store(stream, std::memory_order_relaxed);
  g_streams[n].ctx.store(ctx, std::memory_order_relaxed);
  g_stream_count.store(n + 1, std::memory_order_release);
}

void start_activity_monitor(gpuos_control_block* cb) {
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  (void)cb;  // the monitor follows g_control, which may change on re-registration
  if (pthread_create(&t, &attr, &monitor_main, nullptr) == 0) {
    g_monitor_running.store(true, std::memory_order_release);
    pthread_setname_np(t, "gpuos-monitor");
  } else {
    log(LogLevel::kWarn, "cannot start the activity monitor; this tenant will look idle to gpuosd");
  }
  pthread_attr_destroy(&attr);
}

void inflight_before_submit(const GpuosDriverTable& d, gpuos_control_block* cb, uint32_t max) {
  if (max > kMaxInflight) max = kMaxInflight;
  InflightRing& r = ring();
  r.mu.lock();
  t_ring_locked = true;
  bool waited = false;
  while (r.count >= max) {
    // Oldest first: waiting for it retires it.
    CUevent ev = r.event[r.head];
    waited = true;
    d.cuEventSynchronize(ev);
    r.head = (r.head + 1) % kMaxInflight;
    --r.count;
  }
  if (waited) std::atomic_ref<uint64_t>(cb->inflight_waits).fetch_add(1, std::memory_order_relaxed);
  // The lock is held across the submission so the ring's order is the submission order; it is
  // released by inflight_after_submit (or inflight_abandon).
}

void inflight_after_submit(const GpuosDriverTable& d, CUstream stream, bool ptsz, bool submitted) {
  InflightRing& r = ring();
  if (!t_ring_locked) return;
  if (submitted) {
    CUcontext ctx = nullptr;
    d.cuCtxGetCurrent(&ctx);
    uint32_t slot = (r.head + r.count) % kMaxInflight;
    if (r.event[slot] != nullptr && r.ctx[slot] != ctx) {  // made in another context: remake
      d.cuEventDestroy_v2(r.event[slot]);
      r.event[slot] = nullptr;
    }
    if (r.event[slot] != nullptr ||
        d.cuEventCreate(&r.event[slot], CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
      r.ctx[slot] = ctx;
      auto record = ptsz && d.cuEventRecord_ptsz ? d.cuEventRecord_ptsz : d.cuEventRecord;
      if (record(r.event[slot], stream) == CUDA_SUCCESS) ++r.count;
    }
  }
  t_ring_locked = false;
  r.mu.unlock();
}

namespace {

// Re-registration. busy is seeded before the switch: the monitor thread follows the new block from
// then on, and a launch on it raises busy only on an idle-to-busy transition.
void seed_busy(gpuos_control_block* from, gpuos_control_block* to) {
  std::atomic_ref<uint32_t>(to->busy).store(std::atomic_ref<uint32_t>(from->busy).load());
}

void carry_activity(gpuos_control_block* from, gpuos_control_block* to) {
  carry_add(from->busy_transitions, to->busy_transitions);
  carry_add(from->inflight_waits, to->inflight_waits);
  std::atomic_ref<uint32_t>(to->untracked_work).store(std::atomic_ref<uint32_t>(from->untracked_work).load());
}

}  // namespace

constinit const CarryOver kActivityCarryOver{"activity", &seed_busy, &carry_activity};

}  // namespace gpuos::interpose
