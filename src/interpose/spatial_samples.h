// SPDX-License-Identifier: Apache-2.0
// Right-sizing samples (spatial.h): one launch in about kSamplePeriod per thread and context is
// timed with two events on the stream it runs on; once the end event has completed (checked without
// blocking at a later launch of that thread) its duration goes to the control block's shape table
// (shape_table.h) at the SM count it ran on. After a change of size the next kBurstSamples launches
// are timed back to back.
#pragma once

#include "interpose/spatial.h"

namespace gpuos::interpose::spatial {

inline constexpr uint64_t kChainedKey = 0x5bd1e9955bd1e995ull;
inline constexpr uint64_t kChainFactor = 3;
inline constexpr uint64_t kChainSlackNs = 1'000'000;

// The timing state of one thread in one context: its events, and the one timed launch that may be
// in flight.
struct SampleSlot {
  CUevent start = nullptr;
  CUevent end = nullptr;
  CUevent prev_end = nullptr;  // the end of the last launch collected (a latency budget's steps)
  bool in_flight = false;
  // A latency budget's graph launches are timed as steps (see start_sample): from the end of the
  // thread's previous timed launch on the same stream, when that was launched just before.
  bool chained = false;
  bool prev_ok = false;        // prev_end holds a completed launch's end
  CUstream stream = nullptr;   // of the launch in flight, then of prev_end
  uint64_t submit_ns = 0;      // when the launch in flight was submitted, then that of prev_end's
  uint64_t prev_ns = 0;        // how long prev_end's launch took
  uint64_t key = 0;
  uint32_t blocks = 0;  // blocks in its grid (0: a graph)
  uint32_t sms = 0;
  bool paced = false;    // pacing (pacing.h) was on when it was launched
  uint32_t kernels = 0;  // kernels in the timed launch (a graph's kernel nodes); 0 = not known
  CUgraphExec graph = nullptr;  // ... then, the graph whose nodes to count once it is done
  unsigned countdown = kSamplePeriod;
  uint32_t last_sms = 0;      // SM count of the last launch that could be timed
  unsigned burst_left = 0;    // after a change of size: launches timed back to back (see start_sample)
};

// Creates the slot's two events in the current context (left null if that fails: nothing is timed).
void make_sample_events(const GpuosDriverTable& d, SampleSlot* s);

// Whether this launch is timed: one in kSamplePeriod of the thread's launches in this context,
// while no earlier one is still running. With a latency budget (grant sample_period > 0) every
// graph launch is, and as a step: when the thread's previous timed launch went to the same stream
// just before (within kChainFactor of its own duration, plus kChainSlackNs), from that launch's end
// rather than from its own start event, so that the time it waited for the GPU to switch back from
// another tenant's context counts (a start event waits for that switch too). Steps have their own
// shape keys (kChainedKey), the host's time between them being part of what they measure. Records the start event on `target` if so (then the
// launch's Placement carries s->end as timed_end). kernels: in the launch, or 0 for a graph's that
// are looked up when it is collected (outside the timing). Collects a finished earlier one first.
bool start_sample(const GpuosDriverTable& d, gpuos_control_block* cb, SampleSlot* s, CUstream target,
                  bool ptsz, const LaunchShape& shape, uint32_t sms, uint32_t kernels, CUgraphExec graph = nullptr);

// After a timed launch's call (p.timed_end set): records its end event where it ran, if submitted.
void end_sample(const GpuosDriverTable& d, const Placement& p, bool submitted);

}  // namespace gpuos::interpose::spatial
