// SPDX-License-Identifier: Apache-2.0
// What the machine itself was doing while `gpuos demo` measured: the CPU time other processes took
// on the CPUs the demo may run on (from /proc/stat, less the demo's own processes) and steal, so the demo's verdict can say the
// machine was too busy to tell from measurements instead of guessing. On the simulated device a
// kernel is a sleep of the driver double's worker thread, so a busy CPU delays its wake-ups: the
// double's timings are exactly as good as the machine's scheduling. Parsers are pure (tested in
// test/cli/demo_verdict_test.cc); the readers take /proc as it is now.
#pragma once

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace gpuos::cli {

// CPU time from /proc/stat, in clock ticks, summed over a set of CPUs.
struct CpuTicks {
  uint64_t busy = 0;   // user + nice + system + irq + softirq (guest time is inside user)
  uint64_t idle = 0;   // idle + iowait
  uint64_t steal = 0;  // taken by the hypervisor for other guests
  bool ok = false;
};

// Parses /proc/stat ("cpu  user nice system idle iowait irq softirq steal ..." for all CPUs, then a
// "cpuN ..." line each): the CPUs in `cpus`, or all of them (the "cpu" line) when it is empty.
// Only the CPUs the demo may run on matter: busy loops pinned to others do not slow it.
inline CpuTicks parse_proc_stat(const std::string& text, const std::vector<int>& cpus = {}) {
  CpuTicks t;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string label;
    if (!(in >> label) || label.rfind("cpu", 0) != 0) continue;
    if (cpus.empty() ? label != "cpu" : label == "cpu") continue;
    if (!cpus.empty()) {
      char* end = nullptr;
      const long n = std::strtol(label.c_str() + 3, &end, 10);
      if (end == label.c_str() + 3 || *end != '\0' || std::find(cpus.begin(), cpus.end(), n) == cpus.end()) continue;
    }
    uint64_t v[8] = {};
    int n = 0;
    while (n < 8 && in >> v[n]) ++n;
    if (n < 4) return CpuTicks{};  // user nice system idle at least (older kernels have fewer)
    t.busy += v[0] + v[1] + v[2] + v[5] + v[6];
    t.idle += v[3] + v[4];
    t.steal += v[7];
    t.ok = true;
  }
  return t;
}

// CPU ticks of a process from /proc/PID/stat: utime + stime + cutime + cstime (its own and its
// reaped children's, e.g. gpuosd's probes of the MPS control daemon). The command name may hold
// spaces and parentheses, so fields are counted after the last ')'. -1 when it does not parse.
inline long long parse_pid_stat_ticks(const std::string& text) {
  const auto close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream in(text.substr(close + 1));
  std::string f;
  long long sum = 0;
  // After the name: state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
  // utime(14) stime cutime cstime(17).
  for (int field = 3; field <= 17; ++field) {
    if (!(in >> f)) return -1;
    if (field >= 14) {
      char* end = nullptr;
      const long long x = std::strtoll(f.c_str(), &end, 10);
      if (end == f.c_str() || *end != '\0') return -1;
      sum += x;
    }
  }
  return sum;
}

// The 1-minute load average from /proc/loadavg's text; -1 when it does not parse.
inline double parse_loadavg(const std::string& text) {
  double one = -1;
  return std::sscanf(text.c_str(), "%lf", &one) == 1 ? one : -1;
}

// What other processes took of the machine over an interval: CPUs kept busy on average (busy ticks
// less the demo's own, plus steal), never below 0.
inline double other_cpus(const CpuTicks& before, const CpuTicks& after, double own_ticks, double ticks_per_s,
                         double wall_s) {
  if (!before.ok || !after.ok || wall_s <= 0 || ticks_per_s <= 0) return -1;
  const double busy = static_cast<double>(after.busy - before.busy) - own_ticks;
  const double steal = static_cast<double>(after.steal - before.steal);
  const double cpus = (std::max(busy, 0.0) + steal) / ticks_per_s / wall_s;
  return cpus > 0 ? cpus : 0;
}

// ---- readers of the live machine ----
inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
inline CpuTicks read_cpu_ticks(const std::vector<int>& cpus) { return parse_proc_stat(read_text("/proc/stat"), cpus); }
// The CPUs this process may run on (its affinity: taskset, a cpuset); empty if unknown.
inline std::vector<int> affinity_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}
inline double read_loadavg() { return parse_loadavg(read_text("/proc/loadavg")); }
inline long long read_pid_ticks(pid_t pid) {
  return parse_pid_stat_ticks(read_text("/proc/" + std::to_string(pid) + "/stat"));
}
// This process's CPU time and that of every child it has reaped (with theirs), in clock ticks.
inline double own_and_reaped_ticks(double ticks_per_s) {
  auto ticks = [&](int who) {
    rusage ru{};
    getrusage(who, &ru);
    const double s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                     static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    return s * ticks_per_s;
  };
  return ticks(RUSAGE_SELF) + ticks(RUSAGE_CHILDREN);
}

}  // namespace gpuos::cli
