// SPDX-License-Identifier: Apache-2.0
#include "interpose/spatial_samples.h"

#include <time.h>

#include <climits>
#include <mutex>
#include <utility>

#include "common/clock.h"
#include "gpuos/kv.h"
#include "interpose/blocks.h"
#include "interpose/launch_durations.h"
#include "interpose/shape_table.h"
#include "interpose/spatial_graphs.h"
#include "interpose/spatial_registry.h"

namespace gpuos::interpose {
namespace spatial {
namespace {

thread_local SampleSlot* t_timing = nullptr;  // start_sample -> end_sample of one launch


// Adds one timed launch to the control block's shape table (shape_table.h); one writer at a time
// in the process.
void record_sample(gpuos_control_block* cb, uint64_t key, uint32_t blocks, uint32_t sms, uint64_t ns, bool paced) {
  // Only the timings say whether it was an admission: a shape's size and expected duration are the
  // same in either phase (shape_key), and the learned phases look its duration up by its shape.
  const uint64_t shape = key & ~GPUOS_TIMING_KEY_ADMISSION;
  std::lock_guard<std::mutex> lock(registry().sample_mu);
  shape_table_add(cb, shape, blocks, sms, ns);
  timing_ring_add(cb, key, ns);
  note_launch_duration(shape, ns, paced);
}

// Collects this thread's timed launch in slot s once it has finished (never waits).
void collect_sample(const GpuosDriverTable& d, gpuos_control_block* cb, SampleSlot* s) {
  if (!s->in_flight || d.cuEventQuery == nullptr) return;
  const CUresult q = d.cuEventQuery(s->end);
  if (q == CUDA_ERROR_NOT_READY) return;
  s->in_flight = false;
  s->prev_ok = false;
  float ms = 0;
  if (q != CUDA_SUCCESS || d.cuEventElapsedTime_v2 == nullptr ||
      d.cuEventElapsedTime_v2(&ms, s->chained ? s->prev_end : s->start, s->end) != CUDA_SUCCESS || ms < 0) {
    return;
  }
  const uint64_t ns = static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
  record_sample(cb, s->key, s->blocks, s->sms, ns, s->paced);
  // Its end is where the next step may be timed from.
  if (s->prev_end != nullptr) {
    std::swap(s->end, s->prev_end);
    s->prev_ok = true;
    s->prev_ns = ns;
  }
  uint32_t kernels = s->kernels;
  if (kernels == 0 && s->graph != nullptr) kernels = kernels_of(s->graph);
  if (kernels != 0) {
    add(cb->space_timed_kernels, kernels);
    add(cb->space_timed_ns, ns);
  }
}

}  // namespace

void make_sample_events(const GpuosDriverTable& d, SampleSlot* s) {
  if (d.cuEventCreate(&s->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
      d.cuEventCreate(&s->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    s->start = s->end = nullptr;
  } else if (d.cuEventCreate(&s->prev_end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    s->prev_end = nullptr;  // steps are then timed from their own start
  }
}

bool start_sample(const GpuosDriverTable& d, gpuos_control_block* cb, SampleSlot* s, CUstream target,
                  bool ptsz, const LaunchShape& shape, uint32_t sms, uint32_t kernels, CUgraphExec graph) {
  collect_sample(d, cb, s);
  if (sms != s->last_sms) {
    // A new size: gpuosd's sizer waits for samples here, and the tenant may be too slow here, so
    // time every launch (one in flight at a time) until kBurstSamples have been taken.
    s->last_sms = sms;
    s->burst_left = kBurstSamples;
  }
  // A latency budget (sample_period > 0) times a graph launch whenever none of the thread's is in
  // flight: a replay is long against two event records, and one decode step is one graph.
  const uint32_t period = grant_load(grants_of(cb)->sample_period, std::memory_order_relaxed);
  const bool every_graph = period != 0 && kernels == 0;
  if (s->burst_left == 0 && !every_graph) {
    if (--s->countdown != 0) return false;
    s->countdown = next_sample_gap(period != 0 ? period : kSamplePeriod);
  }
  if (s->in_flight || s->start == nullptr || sms == 0) return false;
  if (s->burst_left > 0) --s->burst_left;
  const uint64_t now = every_graph ? monotonic_ns() : 0;
  s->chained = every_graph && s->prev_ok && s->stream == target &&
               now - s->submit_ns <= kChainFactor * s->prev_ns + kChainSlackNs;
  auto record = ptsz && d.cuEventRecord_ptsz ? d.cuEventRecord_ptsz : d.cuEventRecord;
  if (!s->chained && record(s->start, target) != CUDA_SUCCESS) return false;
  s->stream = target;
  s->submit_ns = now;
  if (std::atomic_ref<uint32_t>(cb->space_sample_period).load(std::memory_order_relaxed) != kSamplePeriod) {
    std::atomic_ref<uint32_t>(cb->space_sample_period).store(kSamplePeriod, std::memory_order_relaxed);
  }
  s->key = s->chained ? shape_key(shape) ^ kChainedKey : shape_key(shape);
  // Made while the engine said it admits requests, or a launch its own timings mark long (a
  // prefill, with no engine hint; launch_phase is set before the launch is placed): the budget
  // measures those apart (shape_key leaves the top bit for this).
  if (std::atomic_ref<uint32_t>(cb->engine_phase).load(std::memory_order_relaxed) == GPUOS_KV_PHASE_ADMISSION ||
      std::atomic_ref<uint32_t>(cb->launch_phase).load(std::memory_order_relaxed) == GPUOS_LAUNCH_PHASE_LONG) {
    s->key |= GPUOS_TIMING_KEY_ADMISSION;
  }
  s->paced = grant_load(grants_of(cb)->pace_permille, std::memory_order_relaxed) != 0;
  const uint64_t blocks = uint64_t{shape.grid[0]} * shape.grid[1] * shape.grid[2];
  s->blocks = blocks > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(blocks);
  s->sms = sms;
  s->kernels = kernels;
  s->graph = kernels == 0 ? graph : nullptr;
  t_timing = s;
  return true;
}

void end_sample(const GpuosDriverTable& d, const Placement& p, bool submitted) {
  SampleSlot* s = t_timing;
  t_timing = nullptr;
  // The end event goes on the stream the launch went to (the app's own, _ptsz-aware, when it was
  // not placed); a launch that failed leaves no sample.
  auto record = p.back == nullptr && p.ptsz && d.cuEventRecord_ptsz ? d.cuEventRecord_ptsz : d.cuEventRecord;
  if (s != nullptr && submitted && record(p.timed_end, p.target) == CUDA_SUCCESS) s->in_flight = true;
}

}  // namespace spatial

uint64_t shape_key(const LaunchShape& s) {
  uint64_t h = reinterpret_cast<uintptr_t>(s.fn) * 0x9E3779B97F4A7C15ull;
  for (unsigned v : {s.grid[0], s.grid[1], s.grid[2], s.block[0], s.block[1], s.block[2]}) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  }
  // The top bit is left for GPUOS_TIMING_KEY_ADMISSION (set on timed launches only), so that every
  // use of a shape's key (its pacing durations, its timings) agrees whatever the phase.
  h &= ~GPUOS_TIMING_KEY_ADMISSION;
  return h != 0 ? h : 1;  // 0 marks an unused slot
}

unsigned next_sample_gap(unsigned period) {
  // xorshift64*, one state per thread (seeded from its address and the clock): no lock, no libc
  // state shared with the app.
  thread_local uint64_t state = 0;
  if (state == 0) {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    state = (reinterpret_cast<uintptr_t>(&state) ^ (static_cast<uint64_t>(ts.tv_nsec) << 20) ^
             static_cast<uint64_t>(ts.tv_sec)) | 1;
  }
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  const uint64_t r = (state * 0x2545F4914F6CDD1Dull) >> 32;
  if (period <= 1) return 1;
  return 1 + static_cast<unsigned>(r % (2 * period - 1));
}

}  // namespace gpuos::interpose
