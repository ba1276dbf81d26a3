// SPDX-License-Identifier: Apache-2.0
// `gpuos top`: a live terminal view of GPUs and tenants, refreshed in place.
//
// Every --interval seconds it takes a LIST snapshot from gpuosd and draws one frame: a header, a
// line per GPU, and a row per live tenant with rates computed from the previous snapshot (launches/s,
// graph launches/s, and GATE-WAIT% = gate wait time / wall time between the snapshots, summed over
// the tenant's threads, so it can exceed 100 with several waiting threads).
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

// One frame as lines (no escape sequences), for tests and --once. prev may be null (no rates yet);
// dt_s is the time between the snapshots. width/height clip the frame (0 = unlimited).
std::vector<std::string> render_top(const client::Listing* prev, const client::Listing& cur, double dt_s,
                                    const std::string& socket, double interval, std::size_t width,
                                    std::size_t height);

}  // namespace gpuos::cli
