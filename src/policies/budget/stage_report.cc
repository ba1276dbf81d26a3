// SPDX-License-Identifier: Apache-2.0
// The budget's last stage: what was measured, and when to look again (stages.h).
#include <algorithm>
#include <cmath>

#include "policies/budget/stages.h"

namespace gpuos::policies::budget {

void note_be_quiet(const Scene& s, const slots::GateActions& out, BudgetState* st) {
  for (const slots::GateTenant& t : s.view.tenants) {
    auto it = st->tenants.find(t.id);
    if (it == st->tenants.end() || !budgeted(t)) continue;
    bool be_open = false;
    for (std::size_t i = 0; i < out.gates.size(); ++i) {
      const slots::GateAction& a = out.gates[i];
      const uint64_t open_gpus = gpus_or_all(s.view.tenants[i].gpus) & ~a.closed_gpus;
      be_open = be_open || (s.beside(s.view.tenants[i], t) && a.gate == GPUOS_GATE_OPEN &&
                            (open_gpus & gpus_or_all(t.gpus)) != 0);
    }
    uint64_t& quiet = it->second.be_quiet_since_ns;
    if (be_open) {
      quiet = 0;
    } else if (quiet == 0) {
      quiet = s.now;
    }
  }
}

uint32_t budget_limit(const Scene& s, const slots::GateTenant& t, const TenantBudget& b, const ShareMoves& m,
                      double held, uint64_t period_ns) {
  if (!b.meter.has_solo()) return GPUOS_BUDGET_LIMIT_NO_SOLO;
  const double budget = t.max_slowdown_permille / 1000.0;
  const double limit = meter_limit(s.params, t, b);
  if (held > 1.0 && held - 1.0 >= kSpentFraction * (limit - 1.0)) return GPUOS_BUDGET_LIMIT_SPENT;
  const bool be_beside = std::any_of(s.view.tenants.begin(), s.view.tenants.end(), [&](const slots::GateTenant& v) {
    return s.beside(v, t) && active(v);
  });
  if (!be_beside) return GPUOS_BUDGET_LIMIT_NO_BE;
  if (limit - 1.0 < (1.0 - kSpentFraction) * (budget - 1.0)) return GPUOS_BUDGET_LIMIT_MPS;
  const double high = m.seen ? m.high : b.share;
  if (high >= largest_share(s, t, limit) - 1e-9 && m.cuts == 0) return GPUOS_BUDGET_LIMIT_SHARE_CAP;
  if (m.cuts_by_growth > 0 && 2 * m.cuts_by_growth >= m.cuts) return GPUOS_BUDGET_LIMIT_GROWTH;
  if (m.cuts > 0) return GPUOS_BUDGET_LIMIT_OVER;
  if (period_ns != 0 && m.phase_held_ns >= kPhaseHeldFraction * static_cast<double>(period_ns)) {
    return GPUOS_BUDGET_LIMIT_PHASES;
  }
  return GPUOS_BUDGET_LIMIT_CONTROL;
}

void report_budgets(const Scene& s, const BudgetState& st, slots::GateActions* out) {
  for (const slots::GateTenant& t : s.view.tenants) {
    auto it = st.tenants.find(t.id);
    if (it == st.tenants.end() || !budgeted(t)) continue;
    const TenantBudget& b = it->second;
    auto permille = [&](Launches which) {
      const double p99 = b.meter.slowdown(0.99, s.now, s.params.meter.window_ns, nullptr, which);
      return static_cast<uint32_t>(std::lround(std::min(p99, 1e6) * 1000));
    };
    const uint32_t lent = b.lending ? std::clamp<uint32_t>(static_cast<uint32_t>(std::lround(b.share * 1000)), 1, 1000) : 0;
    slots::BudgetReport r{t.id, permille(Launches::kAll), lent};
    // Its steps and its admissions apart, once an admission was marked (else all are steps).
    r.admission_permille = permille(Launches::kAdmissions);
    if (r.admission_permille != 0) r.step_permille = permille(Launches::kSteps);
    if (!t.space_domain.empty()) {
      r.mps_cost_permille = static_cast<uint32_t>(std::lround(std::clamp(mps_cost(s.params, b), 0.0, 1.0) * 1000));
    }
    r.limit = b.limit;
    out->budgets.push_back(r);
  }
}

uint64_t next_tick(const Scene& s, const BudgetState& st, uint64_t priority_tick, bool lending_seen) {
  const uint64_t now = s.now;
  uint64_t next = priority_tick;
  auto sooner = [&](uint64_t t) {
    if (t > now && (next == 0 || t < next)) next = t;
  };
  const bool any_budgeted = std::any_of(s.view.tenants.begin(), s.view.tenants.end(), [&](const slots::GateTenant& t) {
    return budgeted(t) && st.tenants.count(t.id) != 0;
  });
  if (any_budgeted) sooner(st.next_control_ns);
  if (now < st.probe_end_ns) sooner(st.probe_end_ns);
  if (lending_seen) sooner(st.next_probe_ns);
  for (const auto& [id, b] : st.tenants) {
    if (b.be_quiet_since_ns != 0) sooner(b.be_quiet_since_ns + s.params.settle_ns);
    if (b.idle.idle_since_ns != 0) sooner(b.idle.hold_end(s.params.idle_hold_ns));
  }
  for (const auto& [id, idle] : st.strict_idle) {
    if (idle.idle_since_ns != 0) sooner(idle.hold_end(s.params.idle_hold_ns));
  }
  return next;
}

}  // namespace gpuos::policies::budget
