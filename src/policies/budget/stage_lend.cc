// SPDX-License-Identifier: Apache-2.0
// The budget's third stage: probes, and whether each budgeted tenant lends now (stages.h).
#include <algorithm>

#include "common/budget_limits.h"
#include "common/log.h"
#include "policies/budget/stages.h"

namespace gpuos::policies::budget {
namespace {

// One line per probe period: what budgeted tenant `id`'s budget did since the last one, and what
// held it unspent (kept for gpuosd's report; t: the tenant in the view, if it is there).
void log_probe_line(const Scene& s, const slots::GateTenant* t, uint32_t id, TenantBudget& b) {
  const BudgetParams& p = s.params;
  const uint64_t now = s.now;
  std::size_t n = 0, admissions = 0;
  if (b.phase_held_since_ns != 0) {  // a hold under way counts up to this line
    b.moves.phase_held_ns += now - b.phase_held_since_ns;
    b.phase_held_since_ns = now;
  }
  const double p99 = b.meter.window_p99(now, &n);
  const double admissions_p99 = b.meter.slowdown(0.99, now, p.meter.window_ns, &admissions, Launches::kAdmissions);
  const ShareMoves& m = b.moves;
  const double sizes = b.meter.tail_growth(0.99, now, p.meter.window_ns, Launches::kAdmissions);
  std::size_t steps = 0, solo_steps = 0;  // what the load growth compares
  b.meter.growth_counts(now, p.meter.window_ns, &steps, &solo_steps);
  if (t != nullptr && budgeted(*t)) b.limit = budget_limit(s, *t, b, m, n != 0 ? p99 : 0.0, p.probe_every_ns);
  log::info("budget: tenant %u slowdown p99 %.3f over %zu launches, admissions p99 %.3f over %zu (sizes p99 "
            "x%.3f), load growth %.3f (time-weighted median x%.3f, step-sized mean x%.3f; steps %zu, alone %zu; %llu cuts "
            "by it), "
            "best-effort share %.3f (%.3f-%.3f since the last line: %llu cuts over the budget, %llu steps down, "
            "%llu up; %llu decisions held for a phase, %.0f ms), %llu pauses; budget held by %s; probing %.0f ms",
            id, p99, n, admissions_p99, admissions, sizes, b.meter.load_growth(now, p.meter.window_ns),
            b.meter.tail_growth(0.5, now, p.meter.window_ns, Launches::kSteps), b.meter.step_mean_growth(now, p.meter.window_ns),
            steps, solo_steps,
            static_cast<unsigned long long>(b.moves.cuts_by_growth), b.share,
            m.seen ? m.low : b.share, m.seen ? m.high : b.share, static_cast<unsigned long long>(m.cuts),
            static_cast<unsigned long long>(m.downs), static_cast<unsigned long long>(m.ups),
            static_cast<unsigned long long>(m.phase_held), m.phase_held_ns / 1e6,
            static_cast<unsigned long long>(b.pauses - b.pauses_logged), budget_limit_name(b.limit), p.probe_ns / 1e6);
  b.pauses_logged = b.pauses;
  b.moves = ShareMoves{};
}

// How long each budgeted tenant's hold for a phase lasted, for the log line.
void note_phase_holds(const std::set<uint32_t>& held, uint64_t now, BudgetState* st) {
  for (auto& [id, b] : st->tenants) {
    if (held.count(id) != 0) {
      if (b.phase_held_since_ns == 0) b.phase_held_since_ns = now;
    } else if (b.phase_held_since_ns != 0) {
      b.moves.phase_held_ns += now - b.phase_held_since_ns;
      b.phase_held_since_ns = 0;
    }
  }
}

}  // namespace

void start_probe_if_due(const Scene& s, BudgetState* st) {
  if (s.now < st->next_probe_ns || std::none_of(s.view.tenants.begin(), s.view.tenants.end(), [](const slots::GateTenant& t) {
        return budgeted(t) && active(t);
      })) {
    return;
  }
  st->probe_end_ns = s.now + s.params.probe_ns;
  st->next_probe_ns = s.now + s.params.probe_every_ns;
  for (auto& [id, b] : st->tenants) {
    const auto t = std::find_if(s.view.tenants.begin(), s.view.tenants.end(),
                                [id = id](const slots::GateTenant& v) { return v.id == id; });
    log_probe_line(s, t != s.view.tenants.end() ? &*t : nullptr, id, b);
  }
}

// A budgeted tenant lends its GPUs while no probe runs, it has a share, and no active guaranteed
// tenant without a budget works on one of them (that one gates BE there anyway).
Lending decide_lending(const Scene& s, BudgetState* st) {
  const bool probing = s.now < st->probe_end_ns;
  Lending lends;
  std::set<uint32_t> phase_held;  // those that lend nothing for a phase
  for (const slots::GateTenant& t : s.view.tenants) {
    if (!budgeted(t) || !(active(t) || s.pausing(t, *st))) continue;
    const bool strict_beside = std::any_of(s.view.tenants.begin(), s.view.tenants.end(), [&](const slots::GateTenant& g) {
      return g.tenant_class == GPUOS_CLASS_GUARANTEED && !budgeted(g) && active(g) && share_gpu(g, t);
    });
    auto it = st->tenants.find(t.id);
    // While its engine admits requests, or it runs a launch its timings mark long (a prefill with no
    // engine hint), it lends nothing (phase awareness): a prefill's slowdown reaches its TTFT whole,
    // amplified by the queue for batch slots; its steps lend again. Always: without the hold a server
    // on the whole GPU at 30% load read 1.59x TPOT p99 of B = 1.5, and aimed lower it lent 0.19 where
    // the hold lent 0.32 (bench/results/2026-12-06-method-trials-h100-0.3, -nohold85-h100-0.3).
    const bool phase = t.admitting || t.long_launch;
    lends[t.id] = !probing && !strict_beside && !phase && it != st->tenants.end() && it->second.share > 0;
    if (phase && it != st->tenants.end()) {
      ++it->second.moves.phase_held;
      phase_held.insert(t.id);
    }
  }
  note_phase_holds(phase_held, s.now, st);
  for (auto& [id, b] : st->tenants) b.lending = lends_now(lends, id);
  return lends;
}

}  // namespace gpuos::policies::budget
