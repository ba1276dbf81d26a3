// SPDX-License-Identifier: Apache-2.0
// `gpuos top`: a live terminal view of GPUs and tenants, refreshed in place, within 100 columns.
//
// Every --interval seconds it takes a LIST snapshot from gpuosd and draws one frame: a header, a
// line per GPU, and a row per live tenant: its GPU use (GPU%: the GPU time the usage check measures
// through NVML, per wall time over the last kGpuWindowS seconds of snapshots, so that its rounds of
// [verify] interval_ms do not make it jump; "-" where NVML does not measure it), its memory (MEM,
// as the tenant reports it), launches/s, WAIT% (gate wait time per wall time between the snapshots,
// summed over the tenant's threads, so it can exceed 100 with several waiting threads), its SM
// partition and its latency budget. `gpuos ps` shows the rest (peak memory, graph launches, ...).
//
// On a terminal it uses the alternate screen, hides the cursor and reads keys without echo; `q` (or
// Ctrl-C, SIGTERM, SIGHUP) quits and restores the terminal. -n N (as procps top) prints N frames as
// plain text, each with rates over one interval (the first snapshot only primes them), and exits;
// --once is -n 1.
#pragma once

#include <string>
#include <vector>

#include "client/client.h"

namespace gpuos::cli {

struct TopOptions {
  double interval = 1.0;  // seconds between frames (0.1..3600)
  bool once = false;      // = iterations 1
  unsigned iterations = 0;  // -n: frames to print (plain text, each with rates), then exit; 0 = until quit
  std::string socket;     // resolved control socket
};
int top_command(const TopOptions& o);

inline constexpr std::size_t kTopWidth = 100;  // every line fits in this many columns
inline constexpr double kGpuWindowS = 5.0;     // GPU% spans at least this much of the past

// What a frame's rates come from: the snapshot before (launches/s, WAIT%; null: none yet) and the
// one GPU% starts from (the newest at least kGpuWindowS old, else the oldest kept; null: none).
struct TopRates {
  const client::Listing* prev = nullptr;
  double dt_s = 0;  // prev .. the current snapshot
  const client::Listing* gpu_base = nullptr;
  double gpu_dt_s = 0;  // gpu_base .. the current snapshot
};

// One frame as lines (no escape sequences), for tests and --once. Each fits in kTopWidth columns
// (a tenant's long budget text is the exception: it is last); width/height clip the frame further
// (0 = unlimited).
std::vector<std::string> render_top(const TopRates& rates, const client::Listing& cur, const std::string& socket,
                                    double interval, std::size_t width, std::size_t height);

}  // namespace gpuos::cli
