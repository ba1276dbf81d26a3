// SPDX-License-Identifier: Apache-2.0
// The budget's second stage: each budgeted tenant's share (stages.h, controller.h).
#include <algorithm>

#include "common/log.h"
#include "policies/budget/stages.h"

namespace gpuos::policies::budget {

double judged_growth(const BudgetParams& p, const TenantBudget& b, uint64_t now) {
  if (!p.steer_load_growth) return 1.0;
  double growth = 0;
  switch (p.growth_by) {
    case BudgetParams::Growth::kMean: growth = b.meter.load_growth(now, p.meter.window_ns); break;
    case BudgetParams::Growth::kMedian: growth = b.meter.tail_growth(0.5, now, p.meter.window_ns, Launches::kSteps); break;
    case BudgetParams::Growth::kStepMean: growth = b.meter.step_mean_growth(now, p.meter.window_ns); break;
  }
  return std::clamp(growth, 1.0, kMaxLoadGrowth);
}

// Judged by intervals (meter_interval_ms), it reacts to an interval that ended over the budget,
// once per interval: a TPOT budget is over only when an interval's mean is, and 20 ms of a 100 ms
// interval is one prefill or one best-effort kernel's end (the whole-GPU budgets at 30% load sat
// at 2-3 of 14 groups with a third of their budget unused, bench/results/2026-12-06-wgi-method-h100-0.3).
bool reading_to_judge(const BudgetParams& p, TenantBudget* b, uint64_t now, double* reading, std::size_t* launches) {
  *launches = 0;
  if (p.meter.interval_ns != 0) {
    uint64_t end = b->meter.interval_end(now);
    if (end <= b->interval_judged_ns) return false;  // judged already
    b->interval_judged_ns = end;
    // One that began before the last cut was timed (partly) at the share before it.
    if (end - p.meter.interval_ns < b->last_react_ns) return false;
    *reading = b->meter.last_interval(0.9, now, &end, launches);
    return true;
  }
  if (now < b->last_react_ns + p.react_ns) return false;
  *reading = b->meter.slowdown(0.9, now, p.react_ns, launches);
  return true;
}

void cut_share(const BudgetParams& p, TenantBudget* b, uint32_t planned, uint64_t now) {
  b->moves.note(b->share);
  b->share = whole_groups(b->share * p.controller.decrease, planned);
  if (b->share < p.controller.increase / 4) b->share = 0;
  ++b->moves.cuts;
  b->moves.note(b->share);
  b->lent = 0;
  b->last_react_ns = now;
  b->moved_ns = now;
}

void react_to_readings(const Scene& s, BudgetState* st) {
  for (const slots::GateTenant& t : s.view.tenants) {
    auto it = st->tenants.find(t.id);
    if (it == st->tenants.end() || !budgeted(t) || it->second.share == 0) continue;
    TenantBudget& b = it->second;
    double reading = 0;
    std::size_t n = 0;
    if (!reading_to_judge(s.params, &b, s.now, &reading, &n)) continue;
    const double limit = meter_limit(s.params, t, b);
    if (reading * judged_growth(s.params, b, s.now) > limit && n >= kReactMinLaunches) {
      cut_share(s.params, &b, be_groups_beside(t, s.view), s.now);
      if (reading <= limit) ++b.moves.cuts_by_growth;
    }
  }
}

Measure control_measure(const Scene& s, const slots::GateTenant& t, const TenantBudget& b, uint32_t planned) {
  const BudgetParams& p = s.params;
  const uint64_t now = s.now;
  Measure m;
  const uint64_t span = b.last_control_ns != 0 && now > b.last_control_ns ? now - b.last_control_ns : p.control_ns;
  const double g = judged_growth(p, b, now);
  // Judged by intervals, over the budget is the reaction's to judge (a whole interval's mean); the
  // period's launches would be parts of two.
  if (p.meter.interval_ns == 0) m.recent_p90 = b.meter.slowdown(0.9, now, span, &m.recent) * g;
  // In SM groups a move is judged on what was timed since the last one, and the next group waits
  // for a whole window of it.
  const uint64_t since_move = now - std::min(now, b.moved_ns);
  const uint64_t judged_span = planned != 0 ? std::min(since_move, p.meter.window_ns) : p.meter.window_ns;
  m.window_p99 = g * b.meter.slowdown(0.99, now, judged_span, &m.window);
  // Judged by intervals, its admissions are judged apart as well: an interval's mean is mostly
  // steps, while a best-effort kernel on its SM groups slows a prefill most, and TTFT from
  // admission waits for the whole prefill (at 50% load the steps held B = 1.5 at 1.34x TPOT while
  // TTFT from admission read 1.51x, bench/results/2026-12-06-wgi100r-h100-0.5).
  if (p.meter.interval_ns != 0) {
    std::size_t admissions = 0;
    const double p99 = b.meter.slowdown(0.99, now, judged_span, &admissions, Launches::kAdmissions);
    if (admissions >= p.controller.min_samples) m.window_p99 = std::max(m.window_p99, p99);
  }
  m.lent = b.lent;
  return m;
}

ControllerParams controller_for(const Scene& s, const slots::GateTenant& t, double limit) {
  ControllerParams cp = s.params.controller;
  if (t.space_domain.empty()) cp.max_share = std::min(cp.max_share, time_share_cap(limit));
  return cp;
}

double largest_share(const Scene& s, const slots::GateTenant& t, double limit) {
  const ControllerParams cp = controller_for(s, t, limit);
  const uint32_t planned = be_groups_beside(t, s.view);
  return planned != 0 ? group_share_cap(cp, planned) : cp.max_share;
}

namespace {

// Tenant t's share for the next control period.
double next_share_of(const Scene& s, const slots::GateTenant& t, const TenantBudget& b) {
  if (!b.meter.has_solo()) return 0;
  const double budget = meter_limit(s.params, t, b);
  if (budget <= 1.0) return 0;
  const uint32_t planned = be_groups_beside(t, s.view);
  const Measure m = control_measure(s, t, b, planned);
  const ControllerParams cp = controller_for(s, t, budget);
  if (planned == 0) return next_share(cp, b.share, budget, m);
  const bool settled = s.now - std::min(s.now, b.moved_ns) >= s.params.meter.window_ns;
  return next_group_share(cp, b.share, budget, m, planned, settled);
}

}  // namespace

void control_shares(const Scene& s, BudgetState* st) {
  for (const slots::GateTenant& t : s.view.tenants) {
    auto it = st->tenants.find(t.id);
    if (it == st->tenants.end() || !budgeted(t)) continue;
    TenantBudget& b = it->second;
    const double before = b.share;
    b.share = next_share_of(s, t, b);
    if (b.meter.has_solo()) {
      if (b.share != before) {
        b.lent = 0;
        b.moved_ns = s.now;
        ++(b.share > before ? b.moves.ups : b.moves.downs);
      }
      b.moves.note(b.share);
      if (b.share < before * 0.75) {
        log::debug("budget: tenant %u over its target: best-effort share %.3f -> %.3f", t.id, before, b.share);
      }
    }
    b.last_control_ns = s.now;
  }
  st->next_control_ns = s.now + s.params.control_ns;
}

}  // namespace gpuos::policies::budget
