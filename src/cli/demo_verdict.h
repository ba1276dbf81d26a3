// SPDX-License-Identifier: Apache-2.0
// `gpuos demo`'s verdict: what its numbers say, in one line. A pure function, so that its
// thresholds are tested apart from any machine's timings: the verdict may call hp "as fast as
// alone" only within kAloneRatio of its latency alone, at the median and at p99.
#pragma once

#include <cstdio>
#include <string>

namespace gpuos::cli {

// hp shared within this factor of hp alone (p50 and p99) is "as fast as alone".
inline constexpr double kAloneRatio = 1.1;

struct DemoNumbers {
  std::string sharing;      // "space" (a spatial domain: SM partitions under MPS) or "time" (the gate)
  std::string policy;       // gpuosd's scheduling policy
  double p50_ratio = 0;     // hp shared / hp alone
  double p99_ratio = 0;
  double alone_p50_us = 0, shared_p50_us = 0, alone_p99_us = 0, shared_p99_us = 0;
  double be_rate = 0;       // be's kernels/s beside hp
  double be_vs_alone = 0;   // ... over be's rate alone (0: not measured)
  double hp_idle_share = 0; // the GPU time hp alone leaves idle (0: not measured)
};

inline std::string demo_verdict(const DemoNumbers& n) {
  if (n.p50_ratio <= 0 || n.p99_ratio <= 0) return "no verdict: a run failed (see below)";
  const bool median_kept = n.p50_ratio <= kAloneRatio, tail_kept = n.p99_ratio <= kAloneRatio;
  const char* how = n.sharing == "space"
                        ? "hp on SM groups of its own, be on the rest (one MPS domain)"
                        : "be's launches gated while hp works (time sharing)";
  const char* meaning =
      median_kept && tail_kept ? "gpuos kept hp within 10% of its latency alone, median and tail"
      : n.policy == "open"     ? "policy open gates nothing; the default, priority, holds be back while hp works"
      : median_kept            ? "gpuos kept hp's median within 10% of alone, not its tail: be's kernels already running "
                                 "when hp's came hold the GPU until they end (no preemption)"
                               : "gpuos did not keep hp's median near its latency alone here, more than 10% "
                                 "slower (is the machine busy with other work?)";
  char be[160] = "";
  if (n.be_vs_alone > 0 && n.hp_idle_share > 0) {
    std::snprintf(be, sizeof be, "; be ran at %.0f%% of its speed alone (hp alone leaves %.0f%% of the GPU's time idle)",
                  n.be_vs_alone * 100, n.hp_idle_share * 100);
  } else if (n.be_vs_alone > 0) {
    std::snprintf(be, sizeof be, "; be ran at %.0f%% of its speed alone", n.be_vs_alone * 100);
  }
  char line[900];
  std::snprintf(line, sizeof line,
                "beside be (%.1f kernels/s) hp's latency was %.2fx its latency alone at the median (%.1f vs %.1f us) "
                "and %.2fx at p99 (%.1f vs %.1f us), with %s: %s%s",
                n.be_rate, n.p50_ratio, n.shared_p50_us, n.alone_p50_us, n.p99_ratio, n.shared_p99_us, n.alone_p99_us,
                how, meaning, be);
  return line;
}

}  // namespace gpuos::cli
