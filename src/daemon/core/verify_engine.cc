// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/verify_engine.h"

#include <unistd.h>

#include <algorithm>

#include "common/log.h"

namespace gpuos::daemon {

VerifyEngine::VerifyEngine(VerifyOptions opts, const GpuMap& gpus, std::function<uint64_t(pid_t)> start_time,
                           uint64_t started_ns)
    : opts_(std::move(opts)), gpus_(gpus), start_time_(std::move(start_time)), started_ns_(started_ns) {}

void VerifyEngine::tick(std::map<uint32_t, Tenant>& tenants, uint64_t now, VerifyStats* stats) {
  if (!enabled() || now < next_at_ns_) return;
  View view;
  make_view(tenants, now, &view, stats);
  std::vector<RoundFigures> figures;
  const std::vector<Finding> findings = check(view, &figures);
  apply(tenants, view, findings, figures, stats);
  next_at_ns_ = now + opts_.interval_ns;
}

// Chargeback: this round's GPU time of each tenant, and each GPU's energy since the last round
// split by it (apportion_round). A counter that went back (driver reloaded) or was missing last
// round starts a new count: that round's energy is not counted.
void VerifyEngine::charge_round(std::map<uint32_t, Tenant>& tenants, const View& view) {
  const UsageSample& sample = view.sample;
  const std::vector<TenantGrant>& grants = view.grants;
  const uint64_t span_ns = view.span_ns;
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
    Tenant& t = tenants.at(grants[c.tenant].id);
    t.verify.gpu_time_ns += c.gpu_ns;
    t.verify.energy_mj += c.energy_mj;
    gpu_energy_[c.gpu].attributed_mj += c.energy_mj;
  }
}

uint64_t VerifyEngine::gpu_energy_mj(uint32_t index) const {
  auto it = gpu_energy_.find(index);
  return it != gpu_energy_.end() ? it->second.total_mj : 0;
}

uint64_t VerifyEngine::gpu_energy_attributed_mj(uint32_t index) const {
  auto it = gpu_energy_.find(index);
  return it != gpu_energy_.end() ? it->second.attributed_mj : 0;
}

void VerifyEngine::make_view(std::map<uint32_t, Tenant>& tenants, uint64_t now, View* out, VerifyStats* stats) {
  View& view = *out;
  view = View{};
  view.sample = opts_.sample();
  ++stats->usage_rounds;
  stats->usage_check_ns += view.sample.cost_ns;
  // The round's span since the last (0: the first round).
  const uint64_t span = last_at_ns_ != 0 && now > last_at_ns_ ? now - last_at_ns_ : 0;
  view.span_ns = span;
  for (auto& [id, t] : tenants) {
    const uint64_t limit = t.granted.limit_bytes();
    // Gated the whole round: closed at the last round and now, and not moved in between (the grant
    // epoch bumps at every change). Launches submitted before it closed are bounded by max_inflight
    // and finish within milliseconds of a round of a second.
    const uint32_t epoch = load(t.grants->grant_epoch);
    const uint32_t word = load(t.grants->gate);
    const uint64_t closed = word == GPUOS_GATE_CLOSED ? ~0ull : word == GPUOS_GATE_PARTIAL ? t.gate.closed_gpus : 0;
    uint64_t gated = last_at_ns_ != 0 && epoch == t.verify.grant_epoch ? closed & t.verify.gated_gpus : 0;
    // Only launches made while the gate was closed count: work it had in flight when the gate closed
    // runs on until that busy period ends (the interposer clears busy once its work finished), and
    // the round in which it ended still saw it run. Bounded by inflight_grace_ns (the word is the
    // tenant's).
    const bool inflight = t.verify.inflight_at_close && load(t.cb->busy) == 1 &&
                          load(t.cb->busy_transitions) == t.verify.close_transitions;
    if (inflight && t.verify.inflight_since_ns == 0) t.verify.inflight_since_ns = now;
    // Untracked work (its busy word cannot see it end): what it launched before the gate closed may
    // run until its last such launch is inflight_grace_ns old, not longer (issue #62 item 7). Its
    // count is the tenant's word, read only up to the close: launches counted at the closed gate
    // excuse nothing.
    if (t.verify.close_launch_ns == UINT64_MAX) t.verify.close_launch_ns = now;  // launched by now at the latest
    const bool launched_open = t.verify.untracked_at_close && t.verify.close_launch_ns != 0 &&
                               now - t.verify.close_launch_ns < opts_.inflight_grace_ns;
    const uint64_t launch_count = load(t.cb->launches) + load(t.cb->graph_launches);
    if (launch_count != t.verify.round_launches) {
      t.verify.round_launches = launch_count;
      t.verify.launch_seen_ns = now;
    }
    const bool excused_now =
        (inflight && now - t.verify.inflight_since_ns < opts_.inflight_grace_ns) || launched_open;
    if (!inflight) t.verify.inflight_at_close = false;  // that busy period is over: no excuse again
    if (!launched_open) t.verify.untracked_at_close = false;
    if (excused_now || t.verify.excused_last_round) gated = 0;
    t.verify.excused_last_round = excused_now;
    t.verify.gated_gpus = closed;
    t.verify.grant_epoch = epoch;
    // The window counts a round gated on a GPU only when the round before was too: no sample of it
    // reaches back to the launches it drained when its gate closed.
    const uint64_t settled = gated & t.verify.gated_last;
    t.verify.gated_last = gated;
    // Paced without a break since before the last round, two rounds in a row (as gated): its
    // granted share over this round, from gpuosd's own grants (publish_pacing).
    const bool paced_round = t.verify.pace_since_ns != 0 && last_at_ns_ != 0 && t.verify.pace_since_ns <= last_at_ns_;
    t.verify.paced_rounds = paced_round ? t.verify.paced_rounds + 1 : 0;
    t.verify.pace_permille_ns += (now - std::min(now, t.verify.pace_at_ns)) * t.granted.pacing.permille;
    t.verify.pace_at_ns = now;
    const uint32_t share = span != 0 ? static_cast<uint32_t>(std::min<uint64_t>(t.verify.pace_permille_ns / span, 1000)) : 0;
    t.verify.pace_permille_ns = 0;
    const uint64_t paced_gpus =
        t.verify.paced_rounds >= 2 ? (t.granted.pacing.gpus != 0 ? t.granted.pacing.gpus : ~0ull) : 0;
    view.grants.push_back(TenantGrant{t.id, t.pid, limit, gated, settled, paced_gpus, share, &t.verify.usage.window});
    // The times its gate was closed, for the duty check within rounds (closed_use): those that
    // reach into the window, each excused when work launched while open may still run then (the
    // busy period it had at the close, or its last launch before, under inflight_grace_ns old).
    {
      const uint64_t keep = std::max<uint64_t>(opts_.check.window_rounds, 1) * 2 * opts_.interval_ns;
      ClosedSpans& spans = t.verify.closed_spans;
      while (!spans.empty() && spans.front().to_ns != UINT64_MAX && now - std::min(now, spans.front().to_ns) > keep) {
        spans.pop_front();
      }
      TenantGrant& g = view.grants.back();
      g.closed.reserve(spans.size());
      for (ClosedSpan c : spans) {
        c.excused = c.excuse_from_ns != UINT64_MAX && c.from_ns - std::min(c.from_ns, c.excuse_from_ns) < opts_.inflight_grace_ns;
        g.closed.push_back(c);
      }
      g.round_from_ns = last_at_ns_;
      g.round_to_ns = now;
    }
    view.tenant_pids.insert(t.pid);
    t.verify.mem_bytes = measured_bytes(view.sample, t.pid);
    t.verify.gpus = 0;
    for (const ObservedProcess& p : view.sample.processes) {
      if (p.pid == t.pid && p.gpu < 64) t.verify.gpus |= uint64_t{1} << p.gpu;
    }
    // Its report against NVML (under_reported): the least NVML measured beyond it is its contexts'.
    // Learned only from rounds after one that had already seen it launch: a context reserves its
    // local memory at the first launch, without an allocation call (an honest tenant's grew from
    // about 30 to 520 MiB on an H100 when its first kernel started, and a minimum taken before
    // that flagged it). The count is the tenant's word: it only decides when the check starts.
    const uint64_t reported = gpus_.at_most_all(load(t.cb->mem_used_bytes));
    if (t.verify.mem_bytes != 0 && t.verify.launched) {
      const uint64_t gap = t.verify.mem_bytes > reported ? t.verify.mem_bytes - reported : 0;
      t.verify.context_bytes = std::min(t.verify.context_bytes, gap);
      view.grants.back().reported_bytes = reported;
      view.grants.back().context_bytes = t.verify.context_bytes;
    }
    t.verify.launched = t.verify.launched || load(t.cb->launches) != 0 || load(t.cb->graph_launches) != 0;
  }
  charge_round(tenants, view);
  last_at_ns_ = now;
  // A tenant that exited lately, or a tenant of the previous gpuosd that has yet to re-register,
  // is no process outside gpuos (each for a bounded time: then it is one).
  view.ignored = opts_.ignored;
  std::erase_if(exited_at_ns_, [&](const auto& e) { return now - e.second >= opts_.exit_grace_ns; });
  for (const auto& [pid, at] : exited_at_ns_) view.ignored.insert(pid);
  if (now - started_ns_ >= opts_.rejoin_grace_ns) survivors_.clear();
  for (const auto& [pid, start] : survivors_) {
    if (start_time_(pid) == start) view.ignored.insert(pid);
  }
}

std::vector<Finding> VerifyEngine::check(const View& view, std::vector<RoundFigures>* figures) const {
  return check_usage(view.sample, view.grants, opts_.check, view.ignored, figures);
}

void VerifyEngine::apply(std::map<uint32_t, Tenant>& tenants, const View& view, const std::vector<Finding>& findings,
                         const std::vector<RoundFigures>& figures, VerifyStats* stats) {
  const std::vector<TenantGrant>& grants = view.grants;
  for (std::size_t i = 0; i < grants.size() && i < figures.size(); ++i) {
    UsageWindow& w = tenants.at(grants[i].id).verify.usage.window;
    w.push_back(figures[i]);
    while (w.size() >= std::max<uint32_t>(opts_.check.window_rounds, 1)) w.pop_front();  // the earlier rounds
  }
  std::set<uint32_t> found;
  std::set<pid_t> outside;  // processes on the GPUs that are no tenant, this round
  uint64_t unregistered = 0;
  for (const Finding& f : findings) {
    ++stats->violations;
    if (f.tenant_id == 0) {
      ++unregistered;
      ++stats->unregistered_findings;
      outside.insert(f.pid);
      if (unregistered_logged_.insert(f.pid).second) {
        log::warn("usage check: pid %d uses GPU %u (%llu MiB) without being a gpuos tenant (it bypasses gpuos)",
                  static_cast<int>(f.pid), f.gpu, static_cast<unsigned long long>(f.measured >> 20));
      }
      continue;
    }
    auto it = tenants.find(f.tenant_id);
    if (it == tenants.end()) continue;
    Tenant& t = it->second;
    ++t.verify.usage.violations;
    if (f.kind == FindingKind::kUnderReported) {
      // Reported, never enforced: the word decides no grant (the interposer's quota check keeps its
      // own count), and an honest tenant's driver-internal memory may grow past the margin.
      if ((t.verify.usage.finding_kinds_logged & (1u << static_cast<unsigned>(f.kind))) == 0) {
        t.verify.usage.finding_kinds_logged |= 1u << static_cast<unsigned>(f.kind);
        log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") holds %llu MiB on the GPUs but reports less than "
                  "%llu MiB of it (with its contexts): it rewrites its control block",
                  t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name,
                  static_cast<unsigned long long>(f.measured >> 20), static_cast<unsigned long long>(f.limit >> 20));
      }
      continue;
    }
    if (!found.insert(t.id).second) continue;  // rounds in a row count once per round
    ++t.verify.usage.findings_in_a_row;
    const uint32_t kind_bit = 1u << static_cast<unsigned>(f.kind);
    if ((t.verify.usage.finding_kinds_logged & kind_bit) == 0) {
      t.verify.usage.finding_kinds_logged |= kind_bit;
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
                  opts_.check.pace_margin_percent);
      } else if (f.duty) {
        log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") used GPU %u's SMs (and others') %llu%% of the "
                  "%llu ms its gate was closed in its last %u rounds (%u of them with use): it bypasses the gate",
                  t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name, f.gpu,
                  static_cast<unsigned long long>(f.measured), static_cast<unsigned long long>(f.closed_ms),
                  opts_.check.window_rounds, f.rounds);
      } else if (f.window) {
        log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") used %llu%% of GPU %u's SMs (and others') in "
                  "all in %u of its last %u rounds while its gate was closed: it bypasses the gate",
                  t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name,
                  static_cast<unsigned long long>(f.measured), f.gpu, f.rounds, opts_.check.window_rounds);
      } else {
        log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") used %llu%% of GPU %u's SMs while its gate was "
                  "closed: it bypasses the gate",
                  t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name,
                  static_cast<unsigned long long>(f.measured), f.gpu);
      }
    }
    const EnforceAction a = decide_enforcement(opts_.enforce, t.verify.usage.findings_in_a_row);
    if (a == EnforceAction::kReport || t.verify.usage.enforced || opts_.enforcer == nullptr) continue;
    std::set<pid_t> others = view.tenant_pids;
    others.erase(t.pid);
    enforce_on_tenant(t, a, others, stats);
  }
  for (auto& [id, t] : tenants) {
    if (found.count(id) == 0) t.verify.usage.findings_in_a_row = 0;
  }
  stats->unregistered_processes = unregistered;
  // A process on a governed GPU that is no tenant meets the enforcement as a tenant would, after
  // grace_rounds rounds in a row (issue #62): under freeze or kill, running outside gpuos is no way
  // around it. The same process (start time) only; a pid reused starts over.
  std::erase_if(unregistered_, [&](const auto& e) { return outside.count(e.first) == 0; });
  for (pid_t pid : outside) {
    const uint64_t start = start_time_(pid);
    Unregistered& u = unregistered_[pid];
    if (u.start != start) u = Unregistered{start, 0, false};
    ++u.rounds;
    const EnforceAction a = decide_enforcement(opts_.enforce, u.rounds);
    if (a == EnforceAction::kReport || u.enforced || opts_.enforcer == nullptr || start == 0) continue;
    // (Its uid: a freeze stops only a cgroup of its own user's processes.)
    const long uid = a == EnforceAction::kFreeze ? process_uid(pid) : 0;
    std::string why = "the process is gone";
    const bool done = uid >= 0 && enforce(pid, static_cast<uid_t>(uid), start, a, view.tenant_pids, &why);
    u.enforced = done;
    if (done) ++stats->enforcements;
    log::warn("usage check: pid %d (no gpuos tenant) %s: %s", static_cast<int>(pid), done ? "enforced" : "not enforced",
              why.c_str());
  }
}

bool VerifyEngine::enforce(pid_t pid, uid_t uid, unsigned long long start, EnforceAction a,
                           const std::set<pid_t>& others, std::string* why) {
  if (opts_.enforcer == nullptr || a == EnforceAction::kReport) return false;
  // Not freezable without stopping others: kill, when the admin allowed that as well, is not
  // assumed; the finding stays reported.
  if (a == EnforceAction::kFreeze) return opts_.enforcer->freeze(pid, uid, start, others, why);
  return opts_.enforcer->kill(pid, start, why);
}

void VerifyEngine::escaped(Tenant& t, const char* held_by, const std::set<pid_t>& others, VerifyStats* stats) {
  ++stats->escapes;
  ++stats->violations;
  ++t.verify.usage.violations;
  log::warn("usage check: tenant %u (pid %d uid %u, \"%s\") escaped: it closed its connection to gpuosd while %s, "
            "and runs on; it stays this tenant, held",
            t.id, static_cast<int>(t.pid), static_cast<unsigned>(t.uid), t.name, held_by);
  const EnforceAction a = decide_enforcement(opts_.enforce, std::max<uint32_t>(opts_.enforce.grace_rounds, 1));
  if (a == EnforceAction::kReport || t.verify.usage.enforced || opts_.enforcer == nullptr) return;
  enforce_on_tenant(t, a, others, stats);
}

void VerifyEngine::enforce_on_tenant(Tenant& t, EnforceAction a, const std::set<pid_t>& others, VerifyStats* stats) {
  std::string why;
  const bool done = enforce(t.pid, t.uid, start_time_(t.pid), a, others, &why);
  t.verify.usage.enforced = done;
  if (done) ++stats->enforcements;
  log::warn("usage check: tenant %u (pid %d, \"%s\") %s: %s", t.id, static_cast<int>(t.pid), t.name,
            done ? "enforced" : "not enforced", why.c_str());
}

void note_closed_span(VerifyState* v, uint64_t closed_gpus, bool closing, uint64_t now) {
  ClosedSpans& spans = v->closed_spans;
  const bool open_span = !spans.empty() && spans.back().to_ns == UINT64_MAX;
  if (open_span && spans.back().gpus == closed_gpus) return;
  uint64_t excuse_from = open_span ? spans.back().excuse_from_ns : UINT64_MAX;
  if (open_span) spans.back().to_ns = std::max(now, spans.back().from_ns);
  if (closing) {
    // Work launched while open may run on: from the busy period's first close (busy word), or
    // from its last launch before this close (untracked work; UINT64_MAX: since the last round).
    excuse_from = UINT64_MAX;
    if (v->inflight_at_close) {
      if (v->busy_period_since_ns == 0 || v->busy_period_transitions != v->close_transitions) {
        v->busy_period_transitions = v->close_transitions;
        v->busy_period_since_ns = now;
      }
      excuse_from = v->busy_period_since_ns;
    }
    if (v->untracked_at_close && v->close_launch_ns != 0) {
      const uint64_t last = v->close_launch_ns == UINT64_MAX ? now : v->close_launch_ns;
      excuse_from = excuse_from == UINT64_MAX ? last : std::max(excuse_from, last);
    }
  }
  if (closed_gpus != 0) spans.push_back(ClosedSpan{now, UINT64_MAX, closed_gpus, excuse_from, false});
  while (spans.size() > kClosedSpans) spans.pop_front();
}

}  // namespace gpuos::daemon
