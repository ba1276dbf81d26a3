// SPDX-License-Identifier: Apache-2.0
// Spatial placement of a tenant's launches (spatial sharing, gpuos run --space): gpuosd gives each
// tenant of a spatial domain a set of SM groups per device (control block space_mask); every kernel
// or graph launch then runs on a stream of a green context that holds exactly those SMs.
//
// The application's own streams are left alone. A placed launch goes to a partition stream that
// belongs to (application stream, mask) and is joined to the application stream in both
// directions with events:
//     record A on app stream; partition stream waits for A; launch on partition stream;
//     record B on partition stream; app stream waits for B.
// So the launch starts after everything issued before it on the app stream and everything issued
// after it there (copies, events, synchronisation, the next launch, the legacy stream's implicit
// barriers) starts after it ends: stream order is kept exactly and nothing else needs to know.
// The forward join is skipped when the process issued no stream work at all since the previous
// launch on the same partition stream (stream_work.h): the app stream then ends with that launch's
// join back, which the partition stream is already ordered after: kernels queued back to back
// then follow each other on the partition stream directly, and a launch costs two driver calls
// fewer. (On the H200 this made no measurable difference to the synthetic HP's kernel times:
// bench/results/2026-12-03-spatial-joins.)
// A new mask takes effect at the next launch (a kernel boundary): kernels already running finish
// where they started, later ones go to the new partition, still in stream order.
//
// Only launches in a device's primary context are placed (green contexts share the primary
// context's memory, not that of contexts the application created itself); captured launches are
// never placed (they are recorded into a graph; the graph's launch is placed as one unit). A launch
// that cannot be placed runs unconfined on its own stream and counts in space_failures.
//
// Right-sizing samples: one launch in kSamplePeriod (per thread and context) is timed with two
// events on the stream it runs on; when the end event has completed (checked without blocking at a
// later launch of that thread) its duration goes to the control block's table of launch shapes at
// the SM count it ran on, which gpuosd fits (daemon/space_sizer.h). One sample is in flight per
// thread at a time; the table is a Space-Saving summary of the most frequent shapes. After a change
// of size the next kBurstSamples launches are timed back to back, so the sizer can judge the new
// size (and undo a size too small) within a few kernels.
//
// A change of size needs the new partition's green context (~1.7 ms to create) and stream. When a
// tenant first runs on a partition, a short-lived helper thread makes the partitions one group
// larger and smaller (common/sm_split.h: neighbour_partitions), their streams and the variants of
// the graphs already placed, so that the sizer's next step does not stall the launch that meets it.
#pragma once

#include <atomic>
#include <mutex>

#include "gpuos/abi.h"
#include "gpuos/driver_api.h"

namespace gpuos::interpose {

// What identifies a launch's shape for right-sizing: the kernel and its grid, or the graph.
struct LaunchShape {
  const void* fn = nullptr;  // CUfunction, or the CUgraphExec of a graph launch
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
};

// The key of a shape in the control block's tables (never 0).
uint64_t shape_key(const LaunchShape& s);

// A launch redirected to a partition stream: what finish_placement needs to join it back.
struct Placement {
  CUstream target = nullptr;  // the stream to launch on (the app's own when not placed)
  CUstream origin = nullptr;  // the app's stream
  CUevent back = nullptr;     // recorded on target after the launch; null when not placed
  CUevent timed_end = nullptr;  // this launch is timed: record this on target after it
  bool ptsz = false;
  CUgraphExec graph = nullptr;  // a graph launch: the variant to launch instead (null: the app's)
  // Placed: the partition stream's note of the stream work count its last launch left, and the
  // count this launch leaves (finish_placement stores it once the launch is joined back).
  std::atomic<uint64_t>* last_work = nullptr;
  uint64_t work = 0;
  // The tenant's first launch on this device: gpuosd should plan again (space_devices changed,
  // and a busy tenant sends no other message).
  bool first_on_device = false;
};

// Chooses where a launch on `stream` goes (ptsz: it came through a _ptsz entry point) and whether
// it is timed for right-sizing (one in every sample period, a start event recorded on the target).
// Call only when cb->space_enabled is set. Never fails: on any error the launch stays on `stream`.
// A graph launch (`graph` non-null) is placed differently: a graph's kernel nodes run in the
// context they were made in, whatever stream it is launched on (measured on the H200: a captured
// graph replayed on a green-context stream is not confined, nor is one captured on such a stream).
// Only a kernel node that names its kernel by CUkernel with a context (func null) runs in that
// context. So the graph is launched as a variant: a copy of the graph it was instantiated from
// (kept by note_graph_instantiated) whose kernel nodes name the partition's green context,
// instantiated once per partition, on the app's own stream (no joins needed).
Placement place_launch(const GpuosDriverTable& d, gpuos_control_block* cb, CUstream stream, bool ptsz,
                       const LaunchShape& shape, CUgraphExec graph = nullptr);

// Graph bookkeeping for placement (spatial tenants only): an instantiated graph is copied (the app
// may edit or destroy its graph afterwards); an executable graph the app changes in place loses its
// variants (cuGraphExecUpdate takes the new graph as its copy; other in-place edits leave it
// unplaceable: it then runs unconfined, counted in space_failures); a destroyed one drops them.
void note_graph_instantiated(const GpuosDriverTable& d, CUgraphExec exec, CUgraph graph, unsigned long long flags);
void note_graph_updated(const GpuosDriverTable& d, CUgraphExec exec, CUgraph graph);  // graph null: edited
void note_graph_destroyed(const GpuosDriverTable& d, CUgraphExec exec);

// Waits (200 ms at most, then goes on) until gpuosd has planned the tenant's SMs with the device map
// it published (device_count devices): planned at registration, the masks took ordinal = GPU
// index, and under CUDA_VISIBLE_DEVICES its first kernels would otherwise run on another GPU's plan.
// Call once, after publishing the map and waking gpuosd, only when cb->space_enabled is set.
void await_space_plan(gpuos_control_block* cb, uint32_t device_count);

// After the launch call: makes the app stream wait for the placed launch (if it was submitted)
// and ends its timing.
void finish_placement(const GpuosDriverTable& d, const Placement& p, bool submitted);

// For tests: the lock of the process-wide tables (partitions, streams, graphs and variants).
std::mutex& TEST_registry_mutex();

// Launches per timed launch (one sample in this many per thread and context, on average: the gap
// to the next is drawn uniformly from 1 .. 2 * kSamplePeriod - 1, see next_sample_gap).
inline constexpr unsigned kSamplePeriod = 8;

// The launches until the next timed one after one was timed. At random: a fixed period aliases
// with an app's periodic launch sequence (any sequence of an even number of launches against 8),
// timing only some of its kernels forever; on the e2e probe (a 2 ms kernel and a 9 us one in
// turn) it timed only the short one, and the sizer, seeing only that, sized for it alone.
// period: the mean gap (kSamplePeriod, or the grant block's sample_period for a latency budget).
unsigned next_sample_gap(unsigned period = kSamplePeriod);
// After a change of size, this many launches are timed back to back (as fast as one in flight
// allows): the sizer then decides within a few kernels, not a few sample periods.
inline constexpr unsigned kBurstSamples = 12;

}  // namespace gpuos::interpose
