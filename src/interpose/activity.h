// SPDX-License-Identifier: Apache-2.0
// Knowing, exactly and cheaply, whether this tenant has GPU work in flight — the input every
// time-sharing policy needs — and bounding how much unfinished work a best-effort tenant may have,
// so that a closed gate drains fast.
//
// busy: the launch path raises the control block's `busy` word on the first submission after an
// idle period (one seq_cst load per launch otherwise). A monitor thread, started at registration,
// watches the submission counters; once they have been quiet for idle_grace_us it records an event
// on every stream the tenant submitted to and waits for them; if they completed and nothing new
// came meanwhile, it clears `busy`. Both transitions send
// an ACTIVITY message so gpuosd's policy reacts at once. Work on a per-thread default stream cannot
// be observed from the monitor thread; for it, idle is inferred from the absence of submissions
// (untracked_work = 1).
//
// in-flight bound: with max_inflight > 0 (set by gpuosd for best-effort tenants) every submission
// records an event on its own stream, and a submission that would exceed the bound first waits for
// the oldest one.
#pragma once

#include <atomic>

#include "interpose/runtime.h"

namespace gpuos::interpose {

// The stream the latest submission went to: lets the launch path skip stream bookkeeping when the
// tenant keeps using the same stream (the common case).
extern std::atomic<CUstream> g_last_stream;
// True once the monitor thread runs (registered with a daemon).
extern std::atomic<bool> g_monitor_running;

// Starts the monitor thread for a registered tenant. Called once, under the init lock, after
// g_control points at the tenant's block.
void start_activity_monitor(gpuos_control_block* cb);

// Slow paths of note_submission.
void track_stream(const GpuosDriverTable& d, gpuos_control_block* cb, CUstream stream, bool ptsz);
void become_busy(gpuos_control_block* cb);

// Sends an ACTIVITY message to gpuosd without ever blocking (a full socket just drops it: the
// control block stays authoritative and the daemon re-reads it on its ticks).
void notify_activity(gpuos_control_block* cb);

// Sets a control-block word gpuosd acts on (an engine's phase, a learned one) and wakes gpuosd when
// its value changed; reads only, with no write to the block's line, when it did not.
void set_word_and_notify(gpuos_control_block* cb, uint32_t& word, uint32_t value);

// In-flight bound (best-effort tenants): before a submission, wait until fewer than max launches
// are unfinished; after it (submitted or not: this also releases the ring), record the submission's
// completion event on `stream`. Always called as a pair on one thread.
void inflight_before_submit(const GpuosDriverTable& d, gpuos_control_block* cb, uint32_t max);
void inflight_after_submit(const GpuosDriverTable& d, CUstream stream, bool ptsz, bool submitted);

inline bool is_per_thread_default(CUstream stream, bool ptsz) {
  return stream == CU_STREAM_PER_THREAD || (ptsz && stream == nullptr);
}

// Called by the launch path after every successful submission (not for captured launches).
inline void note_submission(const GpuosDriverTable& d, gpuos_control_block* cb, CUstream stream,
                            bool ptsz) {
  if (__builtin_expect(stream != g_last_stream.load(std::memory_order_relaxed), 0)) {
    track_stream(d, cb, stream, ptsz);
  }
  // Pairs with the monitor's store of busy=0 followed by its re-read of the submission counters:
  // either the monitor sees this submission, or this load sees busy == 0 and raises it again.
  if (__builtin_expect(std::atomic_ref<uint32_t>(cb->busy).load(std::memory_order_seq_cst) == 0, 0)) {
    become_busy(cb);
  }
}

}  // namespace gpuos::interpose
