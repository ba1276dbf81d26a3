// The core's side of the usage check (usage_verifier.h): every interval, NVML's view of the GPUs
// against what gpuosd granted. Findings are counted (metrics), logged once per kind and tenant,
// and acted on as the enforce policy says.
#include <unistd.h>

#include "common/log.h"
#include "daemon/core.h"

namespace gpuos::daemon {

void Core::verify_usage(uint64_t now) {
  const VerifyOptions& v = opts_.verify;
  const UsageSample sample = v.sample();
  ++stats_.usage_rounds;
  stats_.usage_check_ns += sample.cost_ns;
  std::vector<TenantGrant> grants;
  std::set<pid_t> tenant_pids;
  for (auto& [id, t] : tenants_) {
    const uint64_t q = t.granted.quota_bytes;
    const uint64_t limit = q == 0 ? 0 : (t.granted.borrow_bytes > UINT64_MAX - q ? UINT64_MAX : q + t.granted.borrow_bytes);
    // Gated the whole round: closed at the last round and now, and not moved in between (the grant
    // epoch bumps at every change). Launches submitted before it closed are bounded by max_inflight
    // and finish within milliseconds of a round of a second.
    const uint32_t epoch = load(t.grants->grant_epoch);
    const uint32_t word = load(t.grants->gate);
    const uint64_t closed = word == GPUOS_GATE_CLOSED ? ~0ull : word == GPUOS_GATE_PARTIAL ? t.gate.closed_gpus : 0;
    const uint64_t gated = verified_at_ns_ != 0 && epoch == t.verify_grant_epoch ? closed & t.verify_gated_gpus : 0;
    t.verify_gated_gpus = closed;
    t.verify_grant_epoch = epoch;
    grants.push_back(TenantGrant{t.id, t.pid, limit, gated});
    tenant_pids.insert(t.pid);
    t.verified_mem_bytes = measured_bytes(sample, t.pid);
    t.verified_gpus = 0;
    for (const ObservedProcess& p : sample.processes) {
      if (p.pid == t.pid && p.gpu < 64) t.verified_gpus |= uint64_t{1} << p.gpu;
    }
    // Its report against NVML (under_reported): the least NVML measured beyond it is its contexts'.
    const uint64_t reported = gpu_map_.at_most_all(load(t.cb->mem_used_bytes));
    if (t.verified_mem_bytes != 0) {
      const uint64_t gap = t.verified_mem_bytes > reported ? t.verified_mem_bytes - reported : 0;
      t.verify_context_bytes = std::min(t.verify_context_bytes, gap);
      grants.back().reported_bytes = reported;
      grants.back().context_bytes = t.verify_context_bytes;
    }
  }
  verified_at_ns_ = now;
  const std::vector<Finding> findings = check_usage(sample, grants, v.check, v.ignored);
  std::set<uint32_t> found;
  uint64_t unregistered = 0;
  for (const Finding& f : findings) {
    ++stats_.violations;
    if (f.tenant_id == 0) {
      ++unregistered;
      ++stats_.unregistered_findings;
      if (unregistered_logged_.insert(f.pid).second) {
        log::warn("usage check: pid %d uses GPU %u (%llu MiB) without being a gpuos tenant (it bypasses gpuos)",
                  static_cast<int>(f.pid), f.gpu, static_cast<unsigned long long>(f.measured >> 20));
      }
      continue;
    }
    auto it = tenants_.find(f.tenant_id);
    if (it == tenants_.end()) continue;
    Tenant& t = it->second;
    ++t.violations;
    if (f.kind == FindingKind::kUnderReported) {
      // Reported, never enforced: the word decides no grant (the interposer's quota check keeps its
      // own count), and an honest tenant's driver-internal memory may grow past the margin.
      if ((t.finding_kinds_logged & (1u << static_cast<unsigned>(f.kind))) == 0) {
        t.finding_kinds_logged |= 1u << static_cast<unsigned>(f.kind);
        log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") holds %llu MiB on the GPUs but reports less than "
                  "%llu MiB of it (with its contexts): it rewrites its control block",
                  t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name,
                  static_cast<unsigned long long>(f.measured >> 20), static_cast<unsigned long long>(f.limit >> 20));
      }
      continue;
    }
    if (!found.insert(t.id).second) continue;  // rounds in a row count once per round
    ++t.findings_in_a_row;
    const uint32_t kind_bit = 1u << static_cast<unsigned>(f.kind);
    if ((t.finding_kinds_logged & kind_bit) == 0) {
      t.finding_kinds_logged |= kind_bit;
      if (f.kind == FindingKind::kOverQuota) {
        log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") holds %llu MiB on the GPUs, over its %llu MiB "
                  "(quota, borrow and slack): it bypasses gpuos's accounting",
                  t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name,
                  static_cast<unsigned long long>(f.measured >> 20), static_cast<unsigned long long>(f.limit >> 20));
      } else {
        log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") used %llu%% of GPU %u's SMs while its gate was "
                  "closed: it bypasses the gate",
                  t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name,
                  static_cast<unsigned long long>(f.measured), f.gpu);
      }
    }
    const policies::EnforceAction a = policies::decide_enforcement(v.enforce, true, t.findings_in_a_row);
    if (a == policies::EnforceAction::kReport || t.enforced || v.enforcer == nullptr) continue;
    const unsigned long long start = opts_.pid_start_time ? opts_.pid_start_time(t.pid) : process_start_time(t.pid);
    std::string why;
    bool done = false;
    if (a == policies::EnforceAction::kFreeze) {
      std::set<pid_t> others = tenant_pids;
      others.erase(t.pid);
      done = v.enforcer->freeze(t.pid, t.uid, start, others, &why);
      // Not freezable without stopping others: kill, when the admin allowed that as well, is not
      // assumed; the finding stays reported.
    } else {
      done = v.enforcer->kill(t.pid, start, &why);
    }
    t.enforced = done;
    if (done) ++stats_.enforcements;
    log::warn("usage check: tenant %u (pid %d, \"%s\") %s: %s", t.id, static_cast<int>(t.pid), t.name,
              done ? "enforced" : "not enforced", why.c_str());
  }
  for (auto& [id, t] : tenants_) {
    if (found.count(id) == 0) t.findings_in_a_row = 0;
  }
  stats_.unregistered_processes = unregistered;
}

}  // namespace gpuos::daemon
