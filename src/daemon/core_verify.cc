// The core's side of the usage check (usage_verifier.h): every interval, NVML's view of the GPUs
// against what gpuosd granted. Findings are counted (metrics), logged once per kind and tenant,
// and acted on as the enforce policy says.
#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "daemon/core.h"

namespace gpuos::daemon {

// Chargeback: this round's GPU time of each tenant, and each GPU's energy since the last round
// split by it (apportion_round). A counter that went back (driver reloaded) or was missing last
// round starts a new count: that round's energy is not counted.
void Core::charge_round(const UsageSample& sample, const std::vector<TenantGrant>& grants, uint64_t span_ns) {
  std::map<uint32_t, uint64_t> delta;
  std::set<uint32_t> read;
  for (const GpuEnergy& e : sample.energy) {
    GpuEnergyCount& c = gpu_energy_[e.gpu];
    if (c.seen && e.mj >= c.last_mj && span_ns != 0) {
      delta[e.gpu] = e.mj - c.last_mj;
      c.total_mj += e.mj - c.last_mj;
    }
    c.seen = true;
    c.last_mj = e.mj;
    read.insert(e.gpu);
  }
  for (auto& [gpu, c] : gpu_energy_) {
    if (read.count(gpu) == 0) c.seen = false;
  }
  if (span_ns == 0) return;
  std::vector<pid_t> pids;
  pids.reserve(grants.size());
  for (const TenantGrant& g : grants) pids.push_back(g.pid);
  for (const Charge& c : apportion_round(sample, pids, span_ns, delta)) {
    Tenant& t = tenants_.at(grants[c.tenant].id);
    t.gpu_time_ns += c.gpu_ns;
    t.energy_mj += c.energy_mj;
    gpu_energy_[c.gpu].attributed_mj += c.energy_mj;
  }
}

uint64_t Core::gpu_energy_mj(uint32_t index) const {
  auto it = gpu_energy_.find(index);
  return it != gpu_energy_.end() ? it->second.total_mj : 0;
}

uint64_t Core::gpu_energy_attributed_mj(uint32_t index) const {
  auto it = gpu_energy_.find(index);
  return it != gpu_energy_.end() ? it->second.attributed_mj : 0;
}

void Core::verify_usage(uint64_t now) {
  const VerifyOptions& v = opts_.verify;
  const UsageSample sample = v.sample();
  ++stats_.usage_rounds;
  stats_.usage_check_ns += sample.cost_ns;
  // The round's span since the last (0: the first round).
  const uint64_t span = verified_at_ns_ != 0 && now > verified_at_ns_ ? now - verified_at_ns_ : 0;
  std::vector<TenantGrant> grants;
  std::set<pid_t> tenant_pids;
  for (auto& [id, t] : tenants_) {
    const uint64_t limit = t.granted.limit_bytes();
    // Gated the whole round: closed at the last round and now, and not moved in between (the grant
    // epoch bumps at every change). Launches submitted before it closed are bounded by max_inflight
    // and finish within milliseconds of a round of a second.
    const uint32_t epoch = load(t.grants->grant_epoch);
    const uint32_t word = load(t.grants->gate);
    const uint64_t closed = word == GPUOS_GATE_CLOSED ? ~0ull : word == GPUOS_GATE_PARTIAL ? t.gate.closed_gpus : 0;
    uint64_t gated = verified_at_ns_ != 0 && epoch == t.verify_grant_epoch ? closed & t.verify_gated_gpus : 0;
    // Only launches made while the gate was closed count: work it had in flight when the gate closed
    // runs on until that busy period ends (the interposer clears busy once its work finished), and
    // the round in which it ended still saw it run. Bounded by inflight_grace_ns (the word is the
    // tenant's).
    const bool inflight = t.verify_inflight_at_close && load(t.cb->busy) == 1 &&
                          load(t.cb->busy_transitions) == t.verify_close_transitions;
    if (inflight && t.verify_inflight_since_ns == 0) t.verify_inflight_since_ns = now;
    const bool excused_now = inflight && now - t.verify_inflight_since_ns < v.inflight_grace_ns;
    if (!inflight) t.verify_inflight_at_close = false;  // that busy period is over: no excuse again
    if (excused_now || t.verify_excused_last_round) gated = 0;
    t.verify_excused_last_round = excused_now;
    t.verify_gated_gpus = closed;
    t.verify_grant_epoch = epoch;
    // The window counts a round gated on a GPU only when the round before was too: no sample of it
    // reaches back to the launches it drained when its gate closed.
    const uint64_t settled = gated & t.verify_gated_last;
    t.verify_gated_last = gated;
    // Paced without a break since before the last round, two rounds in a row (as gated): its
    // granted share over this round, from gpuosd's own grants (publish_pacing).
    const bool paced_round = t.pace_since_ns != 0 && verified_at_ns_ != 0 && t.pace_since_ns <= verified_at_ns_;
    t.verify_paced_rounds = paced_round ? t.verify_paced_rounds + 1 : 0;
    t.pace_permille_ns += (now - std::min(now, t.pace_at_ns)) * t.granted.pacing.permille;
    t.pace_at_ns = now;
    const uint32_t share = span != 0 ? static_cast<uint32_t>(std::min<uint64_t>(t.pace_permille_ns / span, 1000)) : 0;
    t.pace_permille_ns = 0;
    const uint64_t paced_gpus =
        t.verify_paced_rounds >= 2 ? (t.granted.pacing.gpus != 0 ? t.granted.pacing.gpus : ~0ull) : 0;
    grants.push_back(TenantGrant{t.id, t.pid, limit, gated, settled, paced_gpus, share, &t.usage.window});
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
  charge_round(sample, grants, span);
  verified_at_ns_ = now;
  // A tenant that exited lately, or a tenant of the previous gpuosd that has yet to re-register,
  // is no process outside gpuos (each for a bounded time: then it is one).
  std::set<pid_t> ignored = v.ignored;
  std::erase_if(exited_at_ns_, [&](const auto& e) { return now - e.second >= v.exit_grace_ns; });
  for (const auto& [pid, at] : exited_at_ns_) ignored.insert(pid);
  if (now - started_ns_ >= v.rejoin_grace_ns) survivors_.clear();
  for (const auto& [pid, start] : survivors_) {
    if (start_time_of(pid) == start) ignored.insert(pid);
  }
  std::vector<RoundFigures> figures;
  const std::vector<Finding> findings = check_usage(sample, grants, v.check, ignored, &figures);
  for (std::size_t i = 0; i < grants.size() && i < figures.size(); ++i) {
    UsageWindow& w = tenants_.at(grants[i].id).usage.window;
    w.push_back(figures[i]);
    while (w.size() >= std::max<uint32_t>(v.check.window_rounds, 1)) w.pop_front();  // the earlier rounds
  }
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
    ++t.usage.violations;
    if (f.kind == FindingKind::kUnderReported) {
      // Reported, never enforced: the word decides no grant (the interposer's quota check keeps its
      // own count), and an honest tenant's driver-internal memory may grow past the margin.
      if ((t.usage.finding_kinds_logged & (1u << static_cast<unsigned>(f.kind))) == 0) {
        t.usage.finding_kinds_logged |= 1u << static_cast<unsigned>(f.kind);
        log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") holds %llu MiB on the GPUs but reports less than "
                  "%llu MiB of it (with its contexts): it rewrites its control block",
                  t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name,
                  static_cast<unsigned long long>(f.measured >> 20), static_cast<unsigned long long>(f.limit >> 20));
      }
      continue;
    }
    if (!found.insert(t.id).second) continue;  // rounds in a row count once per round
    ++t.usage.findings_in_a_row;
    const uint32_t kind_bit = 1u << static_cast<unsigned>(f.kind);
    if ((t.usage.finding_kinds_logged & kind_bit) == 0) {
      t.usage.finding_kinds_logged |= kind_bit;
      if (f.kind == FindingKind::kOverQuota) {
        log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") holds %llu MiB on the GPUs, over its %llu MiB "
                  "(quota, borrow and slack): it bypasses gpuos's accounting",
                  t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name,
                  static_cast<unsigned long long>(f.measured >> 20), static_cast<unsigned long long>(f.limit >> 20));
      } else if (f.kind == FindingKind::kOverPace) {
        log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") used %llu%% of the GPU on average over %u rounds "
                  "in which it was paced, above the %llu%% its pacing allows (share, a quarter and %u points): it "
                  "ignores its pacing",
                  t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name,
                  static_cast<unsigned long long>(f.measured), f.rounds, static_cast<unsigned long long>(f.limit),
                  v.check.pace_margin_percent);
      } else if (f.window) {
        log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") used %llu%% of GPU %u's SMs (and others') in "
                  "all in %u of its last %u rounds while its gate was closed: it bypasses the gate",
                  t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name,
                  static_cast<unsigned long long>(f.measured), f.gpu, f.rounds, v.check.window_rounds);
      } else {
        log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") used %llu%% of GPU %u's SMs while its gate was "
                  "closed: it bypasses the gate",
                  t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name,
                  static_cast<unsigned long long>(f.measured), f.gpu);
      }
    }
    const policies::EnforceAction a = policies::decide_enforcement(v.enforce, true, t.usage.findings_in_a_row);
    if (a == policies::EnforceAction::kReport || t.usage.enforced || v.enforcer == nullptr) continue;
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
    t.usage.enforced = done;
    if (done) ++stats_.enforcements;
    log::warn("usage check: tenant %u (pid %d, \"%s\") %s: %s", t.id, static_cast<int>(t.pid), t.name,
              done ? "enforced" : "not enforced", why.c_str());
  }
  for (auto& [id, t] : tenants_) {
    if (found.count(id) == 0) t.usage.findings_in_a_row = 0;
  }
  stats_.unregistered_processes = unregistered;
}

}  // namespace gpuos::daemon
