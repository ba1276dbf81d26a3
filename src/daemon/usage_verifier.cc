#include "daemon/usage_verifier.h"

#include <time.h>

#include <algorithm>
#include <fstream>
#include <map>

namespace gpuos::daemon {

namespace {

uint64_t mono_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

}  // namespace

const char* finding_name(FindingKind k) {
  switch (k) {
    case FindingKind::kOverQuota: return "over_quota";
    case FindingKind::kLaunchedWhileGated: return "launched_while_gated";
    case FindingKind::kUnregistered: return "unregistered";
  }
  return "unknown";
}

NvmlReader::NvmlReader(const GpuosNvmlTable& table, const std::vector<GpuInfo>& gpus) : t_(table) {
  if (t_.nvmlInit_v2 == nullptr || t_.nvmlInit_v2() != NVML_SUCCESS) {
    why_not_ = "nvmlInit_v2 failed";
    return;
  }
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

UsageSample NvmlReader::read() {
  UsageSample s;
  const uint64_t t0 = mono_ns();
  s.ok = true;
  unsigned long long newest = last_seen_us_;
  std::vector<nvmlProcessInfo_t> infos(64);
  std::vector<nvmlProcessUtilizationSample_t> util(64);
  for (const auto& [gpu, dev] : devices_) {
    std::map<pid_t, ObservedProcess> seen;
    // Ordinary and MPS clients: the array grows until it holds every process (the count says how
    // many there are when it was too small).
    for (auto query : {t_.nvmlDeviceGetComputeRunningProcesses_v3, t_.nvmlDeviceGetMPSComputeRunningProcesses_v3}) {
      if (query == nullptr) continue;
      nvmlReturn_t r;
      unsigned n;
      for (int attempt = 0; attempt < 4; ++attempt) {
        n = static_cast<unsigned>(infos.size());
        r = query(dev, &n, infos.data());
        if (r != NVML_ERROR_INSUFFICIENT_SIZE) break;
        infos.resize(std::max<std::size_t>(n + 16, infos.size() * 2));
      }
      if (r != NVML_SUCCESS) {
        s.ok = false;
        continue;
      }
      for (unsigned i = 0; i < n && i < infos.size(); ++i) {
        ObservedProcess& p = seen[static_cast<pid_t>(infos[i].pid)];
        p.pid = static_cast<pid_t>(infos[i].pid);
        p.gpu = gpu;
        if (infos[i].usedGpuMemory != GPUOS_NVML_VALUE_NOT_AVAILABLE) {
          p.mem_known = true;
          p.mem_bytes = std::max<uint64_t>(p.mem_bytes, infos[i].usedGpuMemory);
        }
      }
    }
    if (t_.nvmlDeviceGetProcessUtilization != nullptr) {
      unsigned n = static_cast<unsigned>(util.size());
      nvmlReturn_t r = t_.nvmlDeviceGetProcessUtilization(dev, util.data(), &n, last_seen_us_);
      if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
        util.resize(n + 16);
        n = static_cast<unsigned>(util.size());
        r = t_.nvmlDeviceGetProcessUtilization(dev, util.data(), &n, last_seen_us_);
      }
      if (r == NVML_SUCCESS) {
        for (unsigned i = 0; i < n && i < util.size(); ++i) {
          ObservedProcess& p = seen[static_cast<pid_t>(util[i].pid)];
          p.pid = static_cast<pid_t>(util[i].pid);
          p.gpu = gpu;
          p.sm_util = std::max<int32_t>(p.sm_util, static_cast<int32_t>(std::min(util[i].smUtil, 100u)));
          newest = std::max(newest, util[i].timeStamp);
        }
      }  // NOT_FOUND: no sample since the last round (nothing ran)
    }
    for (auto& [pid, p] : seen) s.processes.push_back(p);
  }
  last_seen_us_ = newest;
  s.cost_ns = mono_ns() - t0;
  return s;
}

bool is_mps_server(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string comm;
  return std::getline(in, comm) && comm == "nvidia-cuda-mps-server";
}

uint64_t measured_bytes(const UsageSample& sample, pid_t pid) {
  uint64_t sum = 0;
  for (const ObservedProcess& p : sample.processes) {
    if (p.pid == pid && p.mem_known) sum += p.mem_bytes;
  }
  return sum;
}

std::vector<Finding> check_usage(const UsageSample& sample, const std::vector<TenantGrant>& tenants,
                                 const CheckParams& p, const std::set<pid_t>& ignored) {
  std::vector<Finding> out;
  std::map<pid_t, const TenantGrant*> by_pid;
  for (const TenantGrant& t : tenants) by_pid[t.pid] = &t;
  for (const TenantGrant& t : tenants) {
    const uint64_t bytes = measured_bytes(sample, t.pid);
    if (t.limit_bytes != 0 && bytes > t.limit_bytes && bytes - t.limit_bytes > p.memory_slack_bytes) {
      out.push_back(Finding{FindingKind::kOverQuota, t.pid, t.id, 0, bytes, t.limit_bytes + p.memory_slack_bytes});
    }
  }
  std::set<pid_t> unregistered_reported;
  for (const ObservedProcess& o : sample.processes) {
    auto it = by_pid.find(o.pid);
    if (it == by_pid.end()) {
      if (ignored.count(o.pid) != 0 || !unregistered_reported.insert(o.pid).second) continue;
      if ((o.mem_known && o.mem_bytes > 0) || o.sm_util > 0 || !o.mem_known) {
        out.push_back(Finding{FindingKind::kUnregistered, o.pid, 0, o.gpu, measured_bytes(sample, o.pid), 0});
      }
      continue;
    }
    const TenantGrant& t = *it->second;
    if (t.gated_all_round && o.sm_util > static_cast<int32_t>(p.gated_sm_util_percent)) {
      out.push_back(Finding{FindingKind::kLaunchedWhileGated, o.pid, t.id, o.gpu, static_cast<uint64_t>(o.sm_util),
                            p.gated_sm_util_percent});
    }
  }
  return out;
}

}  // namespace gpuos::daemon
