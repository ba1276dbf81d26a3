// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/usage_verifier.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "common/clock.h"

namespace gpuos::daemon {

const char* finding_name(FindingKind k) {
  switch (k) {
    case FindingKind::kOverQuota: return "over_quota";
    case FindingKind::kLaunchedWhileGated: return "launched_while_gated";
    case FindingKind::kUnregistered: return "unregistered";
    case FindingKind::kOverPace: return "over_pace";
    case FindingKind::kUnderReported: return "under_reported";
  }
  return "unknown";
}

NvmlReader::NvmlReader(const GpuosNvmlTable& table, const std::vector<GpuInfo>& gpus) : t_(table) {
  const nvmlReturn_t r = t_.nvmlInit_v2 != nullptr ? t_.nvmlInit_v2() : NVML_ERROR_FUNCTION_NOT_FOUND;
  if (r != NVML_SUCCESS) {
    why_not_ = std::string("nvmlInit_v2: ") + nvml_return_name(r);
    return;
  }
  initialized_ = true;
  unsigned count = 0;
  if (t_.nvmlDeviceGetCount_v2 == nullptr || t_.nvmlDeviceGetHandleByIndex_v2 == nullptr ||
      t_.nvmlDeviceGetUUID == nullptr || t_.nvmlDeviceGetComputeRunningProcesses_v3 == nullptr ||
      t_.nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS) {
    why_not_ = "NVML lacks the process queries gpuos needs";
    return;
  }
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    char uuid[96] = {};
    if (t_.nvmlDeviceGetHandleByIndex_v2(i, &dev) != NVML_SUCCESS ||
        t_.nvmlDeviceGetUUID(dev, uuid, sizeof(uuid)) != NVML_SUCCESS) {
      continue;
    }
    for (const GpuInfo& g : gpus) {
      if (!g.uuid.empty() && g.uuid == uuid) devices_.emplace_back(g.index, dev);
    }
  }
  if (devices_.empty()) why_not_ = "no NVML device matches gpuosd's GPUs by UUID";
}

NvmlReader::~NvmlReader() {
  if (initialized_ && t_.nvmlShutdown != nullptr) t_.nvmlShutdown();
}

bool NvmlReader::free_bytes(uint32_t gpu, uint64_t* out) {
  if (t_.nvmlDeviceGetMemoryInfo == nullptr) return false;
  for (const auto& [index, dev] : devices_) {
    nvmlMemory_t m{};
    if (index != gpu) continue;
    if (t_.nvmlDeviceGetMemoryInfo(dev, &m) != NVML_SUCCESS || m.free > m.total) return false;
    *out = m.free;
    return true;
  }
  return false;
}

UsageSample NvmlReader::read() {
  UsageSample s;
  const uint64_t t0 = monotonic_ns();
  s.ok = true;
  unsigned long long newest = last_seen_us_;
  // NVML's timestamps are CLOCK_REALTIME microseconds; gpuosd's gates are CLOCK_MONOTONIC ns.
  const uint64_t real_now = clock_ns(CLOCK_REALTIME), mono_now = monotonic_ns();
  const uint64_t real_ahead = real_now > mono_now ? real_now - mono_now : 0;
  // Times one call into NVML for the per-call figures.
  auto timed = [&s](const char* name, uint32_t gpu, auto&& call) {
    const uint64_t c0 = monotonic_ns();
    const nvmlReturn_t r = call();
    s.calls.push_back(NvmlCall{name, gpu, r, monotonic_ns() - c0});
    return r;
  };
  for (const auto& device : devices_) {
    const uint32_t gpu = device.first;
    const nvmlDevice_t dev = device.second;  // named, not bound: lambdas below capture it
    std::map<pid_t, ObservedProcess> seen;
    // Ordinary and MPS clients: the array grows until it holds every process (the count says how
    // many there are when it was too small).
    const std::pair<const char*, decltype(t_.nvmlDeviceGetComputeRunningProcesses_v3)> queries[] = {
        {"nvmlDeviceGetComputeRunningProcesses_v3", t_.nvmlDeviceGetComputeRunningProcesses_v3},
        {"nvmlDeviceGetMPSComputeRunningProcesses_v3", t_.nvmlDeviceGetMPSComputeRunningProcesses_v3}};
    for (const auto& entry : queries) {
      const char* name = entry.first;
      const auto query = entry.second;
      if (query == nullptr) continue;
      nvmlReturn_t r = NVML_SUCCESS;
      unsigned n = 0;
      for (int attempt = 0; attempt < 4; ++attempt) {
        n = static_cast<unsigned>(infos_.size());
        r = timed(name, gpu, [&] { return query(dev, &n, infos_.data()); });
        if (r != NVML_ERROR_INSUFFICIENT_SIZE) break;
        infos_.resize(std::max<std::size_t>(n + 16, infos_.size() * 2));
      }
      // No MPS on this GPU or driver: nothing to list, not a failure.
      if (r == NVML_ERROR_NOT_SUPPORTED && query == t_.nvmlDeviceGetMPSComputeRunningProcesses_v3) continue;
      if (r != NVML_SUCCESS) {
        s.ok = false;
        continue;
      }
      for (unsigned i = 0; i < n && i < infos_.size(); ++i) {
        ObservedProcess& p = seen[static_cast<pid_t>(infos_[i].pid)];
        p.pid = static_cast<pid_t>(infos_[i].pid);
        p.gpu = gpu;
        p.listed = true;
        if (infos_[i].usedGpuMemory != GPUOS_NVML_VALUE_NOT_AVAILABLE) {
          p.mem_known = true;
          p.mem_bytes = std::max<uint64_t>(p.mem_bytes, infos_[i].usedGpuMemory);
        }
      }
    }
    if (t_.nvmlDeviceGetProcessUtilization != nullptr) {
      nvmlReturn_t r = NVML_SUCCESS;
      unsigned n = 0;
      for (int attempt = 0; attempt < 4; ++attempt) {
        n = static_cast<unsigned>(util_.size());
        r = timed("nvmlDeviceGetProcessUtilization", gpu,
                  [&] { return t_.nvmlDeviceGetProcessUtilization(dev, util_.data(), &n, last_seen_us_); });
        if (r != NVML_ERROR_INSUFFICIENT_SIZE) break;
        util_.resize(std::max<std::size_t>(n + 16, util_.size() * 2));
      }
      if (r == NVML_SUCCESS) {
        std::map<pid_t, std::pair<uint64_t, uint32_t>> sums;  // pid -> SM percents summed, samples
        for (unsigned i = 0; i < n && i < util_.size(); ++i) {
          ObservedProcess& p = seen[static_cast<pid_t>(util_[i].pid)];
          p.pid = static_cast<pid_t>(util_[i].pid);
          p.gpu = gpu;
          const uint32_t pct = std::min(util_[i].smUtil, 100u);
          p.sm_util = std::max<int32_t>(p.sm_util, static_cast<int32_t>(pct));
          auto& [sum, count] = sums[p.pid];
          sum += pct;
          ++count;
          const uint64_t at = static_cast<uint64_t>(util_[i].timeStamp) * 1000;
          if (at > real_ahead) p.points.push_back(SmPoint{at - real_ahead, pct});
          newest = std::max(newest, util_[i].timeStamp);
        }
        for (const auto& [pid, sc] : sums) seen[pid].sm_util_mean = static_cast<int32_t>(sc.first / sc.second);
        // The GPU's sampling period: the least gap between two samples of one process so far.
        for (auto& [pid, p] : seen) {
          std::sort(p.points.begin(), p.points.end(), [](const SmPoint& a, const SmPoint& b) { return a.at_ns < b.at_ns; });
          for (std::size_t i = 1; i < p.points.size(); ++i) {
            const uint64_t gap = p.points[i].at_ns - p.points[i - 1].at_ns;
            if (gap == 0) continue;
            uint64_t& least = period_ns_[gpu];
            least = least == 0 ? gap : std::min(least, gap);
          }
        }
      }  // NOT_FOUND: no sample since the last round (nothing ran); others: no figure this round
    }
    for (auto& [pid, p] : seen) {
      auto period = period_ns_.find(gpu);
      p.period_ns = period != period_ns_.end() ? period->second : 0;
      p.mps_server = p.listed && is_mps_server(pid);
      s.processes.push_back(p);
    }
    // Chargeback: the GPU's energy counter. Missing (old NVML, pre-Volta GPU) or failing: no energy
    // for this GPU, the sample stays ok (the usage check does not need it).
    if (t_.nvmlDeviceGetTotalEnergyConsumption != nullptr) {
      unsigned long long mj = 0;
      const nvmlReturn_t r = timed("nvmlDeviceGetTotalEnergyConsumption", gpu,
                                   [&] { return t_.nvmlDeviceGetTotalEnergyConsumption(dev, &mj); });
      if (r == NVML_SUCCESS) s.energy.push_back(GpuEnergy{gpu, mj});
    }
  }
  last_seen_us_ = newest;
  s.cost_ns = monotonic_ns() - t0;
  return s;
}

bool is_mps_server(pid_t pid, const std::string& proc_root, uid_t trusted_uid) {
  const std::string exe = proc_root + "/" + std::to_string(pid) + "/exe";
  char path[4096];
  const ssize_t n = readlink(exe.c_str(), path, sizeof(path) - 1);
  if (n <= 0) return false;
  path[n] = '\0';
  const char* slash = std::strrchr(path, '/');
  if (std::strcmp(slash != nullptr ? slash + 1 : path, "nvidia-cuda-mps-server") != 0) return false;
  struct stat st {};
  return stat(exe.c_str(), &st) == 0 && st.st_uid == trusted_uid && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

uint64_t measured_bytes(const UsageSample& sample, pid_t pid) {
  uint64_t sum = 0;
  for (const ObservedProcess& p : sample.processes) {
    if (p.pid == pid && p.mem_known) sum += p.mem_bytes;
  }
  return sum;
}

uint64_t round_gpu_ns(const ObservedProcess& o, uint64_t span_ns) {
  if (o.sm_util_mean <= 0) return 0;
  const uint64_t pct = std::min<uint64_t>(static_cast<uint64_t>(o.sm_util_mean), 100);
  return static_cast<uint64_t>(static_cast<unsigned __int128>(span_ns) * pct / 100);
}

std::vector<Charge> apportion_round(const UsageSample& sample, const std::vector<pid_t>& tenant_pids,
                                    uint64_t span_ns, const std::map<uint32_t, uint64_t>& energy_delta_mj) {
  std::vector<Charge> out;
  std::map<uint32_t, uint64_t> all_ns;  // GPU -> GPU time of every process on it (tenants or not)
  for (const ObservedProcess& o : sample.processes) all_ns[o.gpu] += round_gpu_ns(o, span_ns);
  std::map<pid_t, std::size_t> index;
  for (std::size_t i = 0; i < tenant_pids.size(); ++i) index.emplace(tenant_pids[i], i);
  for (const ObservedProcess& o : sample.processes) {
    auto it = index.find(o.pid);
    const uint64_t ns = round_gpu_ns(o, span_ns);
    if (it == index.end() || ns == 0) continue;
    Charge c{it->second, o.gpu, ns, 0};
    auto e = energy_delta_mj.find(o.gpu);
    const uint64_t total = all_ns[o.gpu];
    if (e != energy_delta_mj.end() && total != 0) {
      c.energy_mj = static_cast<uint64_t>(static_cast<unsigned __int128>(e->second) * ns / total);
    }
    out.push_back(c);
  }
  return out;
}

ClosedUse closed_use(const std::vector<SmPoint>& points, uint64_t period_ns, uint32_t gpu,
                     const std::vector<ClosedSpan>& spans, uint64_t from_ns, uint64_t to_ns) {
  ClosedUse u;
  if (gpu >= 64 || from_ns == 0 || to_ns <= from_ns) return u;
  // The sampling period: the least gap between two of its samples (never shorter than NVML's).
  std::vector<uint64_t> at;
  at.reserve(points.size());
  for (const SmPoint& p : points) at.push_back(p.at_ns);
  std::sort(at.begin(), at.end());
  uint64_t period = period_ns != 0 ? std::min(period_ns, kSamplePeriodUnknownNs) : kSamplePeriodUnknownNs;
  for (std::size_t i = 1; i < at.size(); ++i) {
    if (at[i] > at[i - 1]) period = std::min(period, at[i] - at[i - 1]);
  }
  auto sat_add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
  for (const ClosedSpan& c : spans) {
    if ((c.gpus >> gpu & 1u) == 0 || c.excused) continue;
    // A sample ending at t counts when [t - period - edge, t + edge] lies within the span.
    const uint64_t lo = sat_add(sat_add(c.from_ns, period), kSampleEdgeNs);
    const uint64_t hi = c.to_ns == UINT64_MAX ? UINT64_MAX : c.to_ns > kSampleEdgeNs ? c.to_ns - kSampleEdgeNs : 0;
    if (hi <= lo) continue;
    // The closed time: this round's part of it. The samples: those read this round (each once).
    const uint64_t rlo = std::max(lo, from_ns), rhi = std::min(hi, to_ns);
    if (rhi > rlo) u.closed_ns += rhi - rlo;
    for (const SmPoint& p : points) {
      if (p.at_ns >= lo && p.at_ns <= hi) u.used_ns += period / 100 * std::min(p.sm, 100u);
    }
  }
  return u;
}

bool closed_duty_bypass(uint64_t closed_ns, uint64_t used_ns, uint32_t* duty_percent) {
  if (closed_ns == 0) return false;
  const uint64_t duty = static_cast<uint64_t>(static_cast<unsigned __int128>(used_ns) * 100 / closed_ns);
  if (duty_percent != nullptr) *duty_percent = static_cast<uint32_t>(std::min<uint64_t>(duty, UINT32_MAX));
  return closed_ns >= kClosedDutyMinNs && static_cast<unsigned __int128>(used_ns) * 100 >=
                                              static_cast<unsigned __int128>(closed_ns) * kClosedDutyPercent;
}

uint32_t pace_bound_percent(uint32_t permille, const CheckParams& p) {
  return (permille * 5 + 20) / 40 + p.pace_margin_percent;  // share * 1.25 in percent, rounded, + margin
}

uint64_t report_margin(uint64_t limit_bytes) {
  constexpr uint64_t kMargin = 64ull << 20;
  constexpr uint64_t kNoQuotaMargin = 256ull << 20;
  return limit_bytes != 0 ? std::min(kMargin, limit_bytes / 4) : kNoQuotaMargin;
}

std::vector<Finding> check_usage(const UsageSample& sample, const std::vector<TenantGrant>& tenants,
                                 const CheckParams& p, const std::set<pid_t>& ignored,
                                 std::vector<RoundFigures>* figures) {
  std::vector<Finding> out;
  std::map<pid_t, const TenantGrant*> by_pid;
  for (const TenantGrant& t : tenants) by_pid[t.pid] = &t;
  for (const TenantGrant& t : tenants) {
    const uint64_t bytes = measured_bytes(sample, t.pid);
    if (t.limit_bytes != 0 && bytes > t.limit_bytes && bytes - t.limit_bytes > p.memory_slack_bytes) {
      out.push_back(Finding{FindingKind::kOverQuota, t.pid, t.id, 0, bytes, t.limit_bytes + p.memory_slack_bytes});
    }
    if (t.context_bytes != UINT64_MAX) {
      auto sat_add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
      const uint64_t fair = sat_add(sat_add(t.reported_bytes, t.context_bytes), report_margin(t.limit_bytes));
      if (bytes > fair) out.push_back(Finding{FindingKind::kUnderReported, t.pid, t.id, 0, bytes, fair});
    }
  }
  std::set<pid_t> unregistered_reported;
  std::set<uint32_t> gated_found;  // tenants found gated by this round alone
  for (const ObservedProcess& o : sample.processes) {
    auto it = by_pid.find(o.pid);
    if (it == by_pid.end()) {
      // Memory, activity, or a context NVML cannot size (MPS clients, no permission). A process
      // only in utilization samples at 0% is no evidence (it may have just exited). One finding per pid.
      const bool uses = (o.mem_known && o.mem_bytes > 0) || o.sm_util > 0 || (o.listed && !o.mem_known);
      if (!uses || o.mps_server || ignored.count(o.pid) != 0 || !unregistered_reported.insert(o.pid).second) continue;
      out.push_back(Finding{FindingKind::kUnregistered, o.pid, 0, o.gpu, measured_bytes(sample, o.pid), 0});
      continue;
    }
    const TenantGrant& t = *it->second;
    if (o.gpu < 64 && (t.gated_all_round >> o.gpu & 1u) != 0 && o.sm_util > static_cast<int32_t>(p.gated_sm_util_percent)) {
      out.push_back(Finding{FindingKind::kLaunchedWhileGated, o.pid, t.id, o.gpu, static_cast<uint64_t>(o.sm_util),
                            p.gated_sm_util_percent});
      gated_found.insert(t.id);
    }
  }
  // The window: this round's figures of each tenant, added to its earlier rounds'.
  if (figures != nullptr) figures->clear();
  const std::size_t earlier = p.window_rounds > 0 ? p.window_rounds - 1 : 0;
  for (const TenantGrant& t : tenants) {
    RoundFigures now;
    uint32_t gated_gpu = 0, paced_gpu = 0, closed_gpu = 0;
    bool gated_seen = false;
    for (const ObservedProcess& o : sample.processes) {
      if (o.pid != t.pid || o.gpu >= 64) continue;
      const ClosedUse cu = closed_use(o.points, o.period_ns, o.gpu, t.closed, t.round_from_ns, t.round_to_ns);
      now.closed_ns += cu.closed_ns;
      if (cu.used_ns != 0 && now.closed_used_ns == 0) closed_gpu = o.gpu;
      now.closed_used_ns += cu.used_ns;
      if ((t.gated_settled >> o.gpu & 1u) != 0 && o.sm_util > 0) {
        now.gated_sm += static_cast<uint32_t>(o.sm_util);
        if (!gated_seen) gated_gpu = o.gpu;
        gated_seen = true;
      }
      if ((t.paced_gpus >> o.gpu & 1u) != 0 && o.sm_util_mean >= 0) {
        if (!now.paced) paced_gpu = o.gpu;
        now.paced = true;
        now.paced_sm += static_cast<uint32_t>(o.sm_util_mean);
      }
    }
    now.pace_permille = now.paced ? t.pace_permille : 0;
    if (figures != nullptr) figures->push_back(now);
    // The window's earlier rounds (the newest `earlier` of them) and this one.
    uint64_t gated_sum = now.gated_sm, used = now.paced_sm, bound = 0;
    uint64_t closed_sum = now.closed_ns, closed_used = now.closed_used_ns;
    uint32_t gated_rounds = now.gated_sm > 0 ? 1 : 0, paced_rounds = now.paced ? 1 : 0;
    uint32_t closed_rounds = now.closed_used_ns > 0 ? 1 : 0;
    if (now.paced) bound += pace_bound_percent(now.pace_permille, p);
    if (t.window != nullptr) {
      const std::size_t n = std::min(t.window->size(), earlier);
      for (auto r = t.window->end() - static_cast<std::ptrdiff_t>(n); r != t.window->end(); ++r) {
        gated_sum += r->gated_sm;
        gated_rounds += r->gated_sm > 0 ? 1 : 0;
        closed_sum += r->closed_ns;
        closed_used += r->closed_used_ns;
        closed_rounds += r->closed_used_ns > 0 ? 1 : 0;
        if (!r->paced) continue;
        ++paced_rounds;
        used += r->paced_sm;
        bound += pace_bound_percent(r->pace_permille, p);
      }
    }
    if (now.gated_sm > 0 && gated_found.count(t.id) == 0 && gated_sum > p.gated_window_percent) {
      out.push_back(Finding{FindingKind::kLaunchedWhileGated, t.pid, t.id, gated_gpu, gated_sum, p.gated_window_percent,
                            true, gated_rounds});
      gated_found.insert(t.id);
    }
    // Its duty while closed, whatever the gate's pattern (closed_use): found in a round that added
    // to it, unless found gated already.
    uint32_t duty = 0;
    if (now.closed_used_ns > 0 && gated_found.count(t.id) == 0 && closed_duty_bypass(closed_sum, closed_used, &duty)) {
      out.push_back(Finding{FindingKind::kLaunchedWhileGated, t.pid, t.id, closed_gpu, duty, kClosedDutyPercent, true,
                            closed_rounds, true, closed_sum / 1'000'000});
    }
    if (now.paced && now.paced_sm > pace_bound_percent(now.pace_permille, p) && paced_rounds >= p.pace_min_rounds &&
        used > bound) {
      out.push_back(Finding{FindingKind::kOverPace, t.pid, t.id, paced_gpu, used / paced_rounds, bound / paced_rounds, true,
                            paced_rounds});
    }
  }
  return out;
}

}  // namespace gpuos::daemon
