// SPDX-License-Identifier: Apache-2.0
// `gpuos demo`'s verdict: what its numbers say, in one line. A pure function, so that its
// thresholds are tested apart from any machine's timings: the verdict may call hp "as fast as
// alone" only within kAloneRatio of its latency alone, at the median and at p99. It names the
// mechanism that shared the GPU and the machine's load as measured during the run; a miss on a
// machine measured busy or noisy is "cannot tell", never blamed on other work by guessing.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>

namespace gpuos::cli {

// hp shared within this factor of hp alone (p50 and p99) is "as fast as alone".
inline constexpr double kAloneRatio = 1.1;
// Other processes keeping at least this share of the machine's CPUs busy while hp ran make the
// machine too busy to judge a 10% difference (on the simulated device a kernel is a sleep of the
// double's worker thread, and a busy CPU delays its wake-up).
inline constexpr double kBusyCpuShare = 0.25;

struct DemoNumbers {
  std::string sharing;      // "space" (a spatial domain: SM partitions) or "time" (the gate)
  std::string policy;       // gpuosd's scheduling policy
  bool simulated = false;   // the driver double, not a GPU
  unsigned hp_sms = 0, device_sms = 0;  // space: hp's partition and the device's SMs (0: unknown)
  double p50_ratio = 0;     // hp shared / hp alone
  double p99_ratio = 0;
  double alone_p50_us = 0, shared_p50_us = 0, alone_p99_us = 0, shared_p99_us = 0;
  double be_rate = 0;       // be's kernels/s beside hp
  double be_vs_alone = 0;   // ... over be's rate alone (0: not measured)
  double hp_idle_share = 0; // the GPU time hp alone leaves idle (0: not measured)
  // The machine, measured during the run (cli/machine_load.h); negative: not measured.
  double cpus = 0;          // CPUs the demo may run on (its affinity)
  double other_cpus = -1;   // CPUs other processes kept busy (steal included), the most of any hp phase
  double loadavg = -1;      // 1-minute load average at the end
  // hp alone measured a second time, after the shared phase, over the first: the machine's own
  // noise on the very measurement judged (0: not measured).
  double again_p50_ratio = 0, again_p99_ratio = 0;
};

// How far apart two measurements of the same thing are, as a factor >= 1 (0: not measured).
inline double spread(double ratio) { return ratio > 0 ? std::max(ratio, 1 / ratio) : 0; }

// The mechanism that shared the GPU, in words.
inline std::string demo_mechanism(const DemoNumbers& n) {
  if (n.sharing != "space") return "time sharing (be's launches gated while hp works)";
  std::string s = "SM partitions in one spatial domain (hp on ";
  if (n.hp_sms > 0 && n.device_sms > n.hp_sms) {
    s += std::to_string(n.hp_sms) + " SMs of its own, be on the other " + std::to_string(n.device_sms - n.hp_sms);
  } else {
    s += "SM groups of its own, be on the rest";
  }
  s += n.simulated ? "; the simulated device runs kernels of disjoint partitions side by side, as MPS does on a GPU)"
                   : "; MPS)";
  return s;
}

// The machine as measured, in words, with the bounds within which it can tell a 10% difference;
// "" when nothing was measured.
inline std::string demo_machine(const DemoNumbers& n) {
  std::string s;
  char b[240];
  auto add = [&](const char* text) { s += (s.empty() ? "" : ", ") + std::string(text); };
  if (n.other_cpus >= 0 && n.cpus > 0) {
    std::snprintf(b, sizeof b, "other processes kept %.2f of the demo's %.0f CPUs busy while hp ran (below %.2f lets it tell)",
                  n.other_cpus, n.cpus, kBusyCpuShare * n.cpus);
    add(b);
  }
  if (n.loadavg >= 0) {
    std::snprintf(b, sizeof b, "load average %.2f", n.loadavg);
    add(b);
  }
  if (n.again_p50_ratio > 0 && n.again_p99_ratio > 0) {
    std::snprintf(b, sizeof b, "hp alone measured twice came out %.2fx apart at the median and %.2fx at p99 "
                  "(within %.2fx lets it tell)", spread(n.again_p50_ratio), spread(n.again_p99_ratio), kAloneRatio);
    add(b);
  }
  return s;
}

// Whether the machine, as measured, was too busy or too noisy to judge a 10% difference.
inline bool demo_machine_busy(const DemoNumbers& n) {
  return n.other_cpus >= 0 && n.cpus > 0 && n.other_cpus >= kBusyCpuShare * n.cpus;
}
inline bool demo_machine_noisy(const DemoNumbers& n) {
  return spread(n.again_p50_ratio) > kAloneRatio || spread(n.again_p99_ratio) > kAloneRatio;
}

inline std::string demo_verdict(const DemoNumbers& n) {
  if (n.p50_ratio <= 0 || n.p99_ratio <= 0) return "no verdict: a run failed (see below)";
  const bool median_kept = n.p50_ratio <= kAloneRatio, tail_kept = n.p99_ratio <= kAloneRatio;
  const bool busy = demo_machine_busy(n), noisy = demo_machine_noisy(n);
  std::string meaning;
  if (median_kept && tail_kept) {
    meaning = "gpuos kept hp within 10% of its latency alone, median and tail";
    // Held on a machine this busy or noisy, a 10% difference could also have hidden in the noise.
    if (busy || noisy) {
      meaning += std::string(", on a machine measured too ") +
                 (busy && noisy ? "busy and too noisy" : busy ? "busy" : "noisy") + " to show a 10% difference for sure";
    }
  } else if (n.policy == "open") {
    meaning = "policy open gates nothing; the default, priority, holds be back while hp works";
  } else if (busy || noisy) {
    meaning = std::string("cannot tell on this machine now: it was too ") +
              (busy && noisy ? "busy and too noisy" : busy ? "busy" : "noisy") +
              " to judge a 10% difference (run it again on an idle machine)";
  } else if (median_kept) {
    meaning = n.sharing == "space"
                  ? "gpuos kept hp's median within 10% of alone, not its tail, on a machine measured quiet"
                  : "gpuos kept hp's median within 10% of alone, not its tail: be's kernels already running when "
                    "hp's came hold the GPU until they end (no preemption)";
  } else {
    meaning = "gpuos did not keep hp near its latency alone, more than 10% slower at the median, on a machine "
              "measured quiet";
  }
  char be[160] = "";
  if (n.be_vs_alone > 0 && n.hp_idle_share > 0) {
    std::snprintf(be, sizeof be, "; be ran at %.0f%% of its speed alone (hp alone leaves %.0f%% of the GPU's time idle)",
                  n.be_vs_alone * 100, n.hp_idle_share * 100);
  } else if (n.be_vs_alone > 0) {
    std::snprintf(be, sizeof be, "; be ran at %.0f%% of its speed alone", n.be_vs_alone * 100);
  }
  const std::string machine = demo_machine(n);
  char line[600];
  std::snprintf(line, sizeof line,
                "beside be (%.1f kernels/s) hp's latency was %.2fx its latency alone at the median (%.1f vs %.1f us) "
                "and %.2fx at p99 (%.1f vs %.1f us), with ",
                n.be_rate, n.p50_ratio, n.shared_p50_us, n.alone_p50_us, n.p99_ratio, n.shared_p99_us, n.alone_p99_us);
  return line + demo_mechanism(n) + ": " + meaning + be + (machine.empty() ? "" : "; machine: " + machine);
}

}  // namespace gpuos::cli
