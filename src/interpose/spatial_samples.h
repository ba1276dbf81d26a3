// Right-sizing samples (spatial.h): one launch in about kSamplePeriod per thread and context is
// timed with two events on the stream it runs on; once the end event has completed (checked without
// blocking at a later launch of that thread) its duration goes to the control block's shape table
// (shape_table.h) at the SM count it ran on. After a change of size the next kBurstSamples launches
// are timed back to back.
#pragma once

#include "interpose/spatial.h"

namespace gpuos::interpose::spatial {

// The timing state of one thread in one context: its events, and the one timed launch that may be
// in flight.
struct SampleSlot {
  CUevent start = nullptr;
  CUevent end = nullptr;
  bool in_flight = false;
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
// while no earlier one is still running. Records the start event on `target` if so (then the
// launch's Placement carries s->end as timed_end). kernels: in the launch, or 0 for a graph's that
// are looked up when it is collected (outside the timing). Collects a finished earlier one first.
bool start_sample(const GpuosDriverTable& d, gpuos_control_block* cb, SampleSlot* s, CUstream target,
                  bool ptsz, const LaunchShape& shape, uint32_t sms, uint32_t kernels, CUgraphExec graph = nullptr);

// After a timed launch's call (p.timed_end set): records its end event where it ran, if submitted.
void end_sample(const GpuosDriverTable& d, const Placement& p, bool submitted);

}  // namespace gpuos::interpose::spatial
