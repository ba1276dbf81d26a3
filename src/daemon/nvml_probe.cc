// SPDX-License-Identifier: Apache-2.0
// gpuos-nvml-probe: what gpuosd's usage check (usage_verifier.h) sees through NVML, without
// gpuosd. Samples every NVML GPU with the verifier's NvmlReader and prints one JSON object: per
// GPU the processes, their memory and SM use, and what each NVML call cost. With --watch PID it
// samples until that process is listed, holds --min-bytes (0: listed is enough; MPS clients' bytes
// may be unknown) and ran kernels (or --timeout-ms), and
// says how old the process was when each was first seen: the check's reaction time, apart from
// gpuosd's interval. gpu/verify_nvml.sh runs it on the H200.
//
//   gpuos-nvml-probe [--library PATH] [--rounds N] [--interval-ms MS]
//                    [--watch PID [--min-bytes BYTES] [--timeout-ms MS]]
// Exit: 0 done (and the watched process fully seen), 1 watched process not seen in time,
// 2 NVML unavailable or bad arguments.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "daemon/core/id_ledger.h"
#include "daemon/core/usage_verifier.h"
#include "gpuos/nvml_api.h"

namespace {

using gpuos::clock_ns;
using gpuos::daemon::GpuInfo;
using gpuos::daemon::NvmlReader;
using gpuos::daemon::UsageSample;

// How long pid has existed (ms; -1 when it is gone): /proc start time is in clock ticks since boot.
double age_ms(pid_t pid) {
  const uint64_t start = gpuos::daemon::process_start_time(pid);
  if (start == 0) return -1;
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  return static_cast<double>(clock_ns(CLOCK_BOOTTIME)) / 1e6 - static_cast<double>(start) * 1000.0 / hz;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o + "\"";
}

struct Stat {
  std::vector<double> us;
  std::string json() {
    std::sort(us.begin(), us.end());
    char b[160];
    std::snprintf(b, sizeof b, "{\"n\": %zu, \"min\": %.1f, \"median\": %.1f, \"max\": %.1f}", us.size(),
                  us.empty() ? 0.0 : us.front(), us.empty() ? 0.0 : us[us.size() / 2], us.empty() ? 0.0 : us.back());
    return b;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const char* library = nullptr;
  long rounds = 1, interval_ms = 100, timeout_ms = 20000;
  pid_t watch = 0;
  unsigned long long min_bytes = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (v == nullptr) {
      std::fprintf(stderr, "gpuos-nvml-probe: %s needs a value\n", a.c_str());
      return 2;
    }
    ++i;
    // A value that is no whole number is a usage error, not 0.
    auto number = [&](long long lo, long long hi) {
      char* end = nullptr;
      errno = 0;
      const long long x = std::strtoll(v, &end, 10);
      if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
        std::fprintf(stderr, "gpuos-nvml-probe: %s %s: want a whole number %lld..%lld\n", a.c_str(), v, lo, hi);
        std::exit(2);
      }
      return x;
    };
    if (a == "--library") library = v;
    else if (a == "--rounds") rounds = static_cast<long>(number(1, 1000000));
    else if (a == "--interval-ms") interval_ms = static_cast<long>(number(1, 3600000));
    else if (a == "--timeout-ms") timeout_ms = static_cast<long>(number(0, 86400000));
    else if (a == "--watch") watch = static_cast<pid_t>(number(1, INT32_MAX));
    else if (a == "--min-bytes") min_bytes = static_cast<unsigned long long>(number(0, INT64_MAX));
    else {
      std::fprintf(stderr, "gpuos-nvml-probe: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  GpuosNvmlTable t{};
  char err[512] = "";
  const uint64_t load0 = clock_ns(CLOCK_MONOTONIC);
  if (!gpuos::load_nvml(&t, library, err, sizeof err)) {
    std::printf("{\"error\": %s}\n", json_str(err).c_str());
    return 2;
  }
  const double load_us = static_cast<double>(clock_ns(CLOCK_MONOTONIC) - load0) / 1e3;
  // The GPUs as NVML numbers them (gpuosd matches its own by UUID; here NVML's are gpuosd's).
  const uint64_t init0 = clock_ns(CLOCK_MONOTONIC);
  const nvmlReturn_t init = t.nvmlInit_v2();
  const double init_us = static_cast<double>(clock_ns(CLOCK_MONOTONIC) - init0) / 1e3;
  std::vector<GpuInfo> gpus;
  unsigned count = 0;
  if (init == NVML_SUCCESS && t.nvmlDeviceGetCount_v2 != nullptr && t.nvmlDeviceGetCount_v2(&count) == NVML_SUCCESS) {
    for (unsigned i = 0; i < count; ++i) {
      nvmlDevice_t d = nullptr;
      char uuid[96] = "";
      if (t.nvmlDeviceGetHandleByIndex_v2(i, &d) == NVML_SUCCESS && t.nvmlDeviceGetUUID(d, uuid, sizeof uuid) == NVML_SUCCESS) {
        GpuInfo g;
        g.index = i;
        g.uuid = uuid;
        gpus.push_back(g);
      }
    }
  }
  char driver[96] = "";
  if (t.nvmlSystemGetDriverVersion != nullptr) t.nvmlSystemGetDriverVersion(driver, sizeof driver);
  NvmlReader reader(t, gpus);
  if (init == NVML_SUCCESS) t.nvmlShutdown();  // the reader holds its own nvmlInit_v2
  if (!reader.available()) {
    std::printf("{\"error\": %s, \"driver\": %s}\n", json_str(reader.why_not()).c_str(), json_str(driver).c_str());
    return 2;
  }
  // Sample until the rounds are done and, with --watch, the process was fully seen (or timed out).
  std::map<std::string, Stat> per_call;
  Stat per_round;
  UsageSample last;
  double first_listed = -1, first_bytes = -1, first_active = -1;
  uint64_t max_bytes = 0;
  int32_t max_sm = -1;
  std::map<pid_t, std::pair<int32_t, long>> util_by_pid;  // highest SM %, rounds with a sample
  const double watch_age0 = watch != 0 ? age_ms(watch) : -1;
  const uint64_t t0 = clock_ns(CLOCK_MONOTONIC);
  long done = 0;
  for (;; ++done) {
    last = reader.read();
    const double age = watch != 0 ? age_ms(watch) : -1;
    per_round.us.push_back(static_cast<double>(last.cost_ns) / 1e3);
    for (const auto& c : last.calls) per_call[c.name].us.push_back(static_cast<double>(c.ns) / 1e3);
    uint64_t bytes = 0;
    for (const auto& p : last.processes) {
      if (p.sm_util >= 0) {
        auto& [top, n] = util_by_pid[p.pid];
        top = n == 0 ? p.sm_util : std::max(top, p.sm_util);
        ++n;
      }
    }
    for (const auto& p : last.processes) {
      if (p.pid != watch || watch == 0) continue;
      if (p.listed && first_listed < 0) first_listed = age;
      if (p.mem_known) bytes += p.mem_bytes;
      if (p.sm_util > 0 && first_active < 0) first_active = age;
      max_sm = std::max(max_sm, p.sm_util);
    }
    max_bytes = std::max(max_bytes, bytes);
    if (watch != 0 && first_listed >= 0 && bytes >= min_bytes && first_bytes < 0) first_bytes = age;
    const bool seen = watch == 0 || (first_listed >= 0 && first_bytes >= 0 && first_active >= 0);
    const bool timed_out = static_cast<long>((clock_ns(CLOCK_MONOTONIC) - t0) / 1000000) >= timeout_ms;
    if ((done + 1 >= rounds && seen) || (watch != 0 && (timed_out || age < 0))) break;
    usleep(static_cast<useconds_t>(interval_ms) * 1000);
  }
  std::string o = "{\"driver\": " + json_str(driver) + ", \"load_us\": " + std::to_string(load_us) +
                  ", \"init_us\": " + std::to_string(init_us) + ", \"rounds\": " + std::to_string(done + 1) +
                  ", \"interval_ms\": " + std::to_string(interval_ms) + ", \"ok\": " + (last.ok ? "true" : "false");
  o += ", \"gpus\": [";
  for (std::size_t g = 0; g < gpus.size(); ++g) {
    o += std::string(g ? ", " : "") + "{\"index\": " + std::to_string(gpus[g].index) + ", \"uuid\": " +
         json_str(gpus[g].uuid) + ", \"processes\": [";
    bool first = true;
    for (const auto& p : last.processes) {
      if (p.gpu != gpus[g].index) continue;
      o += std::string(first ? "" : ", ") + "{\"pid\": " + std::to_string(p.pid) +
           ", \"listed\": " + (p.listed ? "true" : "false") +
           ", \"mem_bytes\": " + (p.mem_known ? std::to_string(p.mem_bytes) : "null") +
           ", \"sm_util\": " + (p.sm_util >= 0 ? std::to_string(p.sm_util) : "null") +
           ", \"mps_server\": " + (p.mps_server ? "true" : "false") + "}";
      first = false;
    }
    o += "]}";
  }
  o += "], \"last_round\": {\"cost_us\": " + std::to_string(static_cast<double>(last.cost_ns) / 1e3) + ", \"calls\": [";
  for (std::size_t i = 0; i < last.calls.size(); ++i) {
    const auto& c = last.calls[i];
    o += std::string(i ? ", " : "") + "{\"name\": " + json_str(c.name) + ", \"gpu\": " + std::to_string(c.gpu) +
         ", \"result\": " + json_str(gpuos::nvml_return_name(c.result)) + ", \"us\": " +
         std::to_string(static_cast<double>(c.ns) / 1e3) + "}";
  }
  o += "]}, \"round_us\": " + per_round.json() + ", \"call_us\": {";
  bool first = true;
  for (auto& [name, st] : per_call) {
    o += std::string(first ? "" : ", ") + json_str(name) + ": " + st.json();
    first = false;
  }
  o += "}, \"sm_util_by_pid\": {";  // over all rounds: the highest share and how many rounds had a sample
  first = true;
  for (const auto& [pid, u] : util_by_pid) {
    o += std::string(first ? "" : ", ") + "\"" + std::to_string(pid) + "\": {\"max\": " + std::to_string(u.first) +
         ", \"rounds\": " + std::to_string(u.second) + "}";
    first = false;
  }
  o += "}";
  if (watch != 0) {
    auto num = [](double v) { return v < 0 ? std::string("null") : std::to_string(v); };
    o += ", \"watch\": {\"pid\": " + std::to_string(watch) + ", \"min_bytes\": " + std::to_string(min_bytes) +
         ", \"age_ms_at_first_round\": " + num(watch_age0) + ", \"first_listed_ms\": " + num(first_listed) +
         ", \"first_bytes_ms\": " + num(first_bytes) + ", \"first_active_ms\": " + num(first_active) +
         ", \"max_bytes\": " + std::to_string(max_bytes) + ", \"max_sm_util\": " +
         (max_sm >= 0 ? std::to_string(max_sm) : "null") + "}";
  }
  o += "}\n";
  std::fputs(o.c_str(), stdout);
  return watch == 0 || (first_listed >= 0 && first_bytes >= 0 && first_active >= 0) ? 0 : 1;
}
