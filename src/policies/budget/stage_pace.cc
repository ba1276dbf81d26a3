// SPDX-License-Identifier: Apache-2.0
// The budget's fourth stage: the gates, and the pacing of best-effort tenants (stages.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/log.h"
#include "policies/budget/stages.h"

namespace gpuos::policies::budget {
namespace {

// cap_long_best_effort: whether BE tenant v's launches run longer than budgeted tenant b may be
// held (its typical launch over limit - 1).
bool runs_long(const BudgetParams& p, const BudgetState& st, const slots::GateTenant& v, const TenantBudget& b,
               double limit) {
  if (!p.cap_long_best_effort || limit <= 1.0 || !b.meter.has_solo()) return false;
  auto it = st.be_launch_ns.find(v.id);
  if (it == st.be_launch_ns.end() || it->second.size() < kLongLaunchKeep / 4) return false;
  const double bound_ns = b.meter.typical_solo_ns() / (limit - 1.0);
  return static_cast<double>(time_weighted_median({it->second.begin(), it->second.end()})) > bound_ns;
}

// Logs when whether BE tenant v is capped (cap_long_best_effort) changed.
void note_capped(BudgetState* st, const slots::GateTenant& v, bool capped) {
  bool& was = st->be_capped[v.id];
  if (capped == was) return;
  log::info("budget: best-effort tenant %u (%s) %s", v.id, v.name.c_str(),
            capped ? "runs launches longer than a budget beside it may be held: at most 1 - 1/limit of its SM groups"
                   : "no longer runs long launches: its SM groups as the budget's share");
  was = capped;
}

}  // namespace

slots::Pacing pacing_of(const Scene& s, BudgetState* st, const slots::GateTenant& v, bool* beside, bool* lent) {
  const BudgetParams& p = s.params;
  double share = 1.0, burst_ns = 1e12;
  bool capped = false;
  uint32_t max_kernel = p.pace_max_kernel_us;
  bool beside_whole_gpu = true;  // in the domain of each of them, each on every SM (unconfined)
  uint64_t gpus = 0;             // the GPUs it shares with them
  bool every_gpu = false;        // ... or all of its GPUs (not known yet)
  *beside = false;
  *lent = true;
  for (const slots::GateTenant& t : s.view.tenants) {
    if (!budgeted(t) || !share_gpu(t, v)) continue;
    const bool in_space = !v.space_domain.empty() && t.space_domain == v.space_domain;
    if (!active(t) && !(in_space && s.pausing(t, *st))) continue;
    *beside = true;
    beside_whole_gpu = beside_whole_gpu && in_space && !t.space_confined;
    every_gpu = every_gpu || t.gpus == 0 || v.gpus == 0;
    gpus |= t.gpus & v.gpus;
    auto it = st->tenants.find(t.id);
    if (it == st->tenants.end() || !it->second.lending) {
      *lent = false;
      continue;
    }
    const TenantBudget& b = it->second;
    const double limit = meter_limit(p, t, b);
    share = std::min(share, in_space ? b.share : std::min(b.share, time_share_cap(limit)));
    if (in_space && !t.space_confined && v.space_groups != 0 && runs_long(p, *st, v, b, limit)) {
      const double groups = std::max(1.0, std::floor(v.space_groups * time_share_cap(limit) + 1e-9));
      share = std::min(share, groups / v.space_groups);
      capped = true;
    }
    if (!in_space) max_kernel = smaller_bound(max_kernel, max_kernel_us(p, t, b));
    burst_ns = std::min(burst_ns, p.burst_fraction * (limit - 1.0) * b.meter.typical_solo_ns());
  }
  slots::Pacing pacing;
  if (!*beside || !*lent) return pacing;
  pacing.permille = std::clamp<uint32_t>(static_cast<uint32_t>(std::lround(share * 1000)), 1, 1000);
  pacing.max_kernel_us = max_kernel;
  pacing.burst_us = static_cast<uint32_t>(std::clamp(burst_ns / 1000.0, 0.0, 1e6));
  // Beside guaranteed tenants on the whole GPU, the share buys SM groups of its partition first,
  // and time on one group only below that.
  if (beside_whole_gpu && v.space_groups != 0) {
    const GroupSplit split = groups_for_share(share, v.space_groups);
    pacing.groups = split.groups;
    pacing.permille = split.permille;
  }
  // On GPUs where no budget works it runs as it likes (pacing is per GPU; the process's one share
  // is the smallest of the budgets it shares a GPU with).
  pacing.gpus = every_gpu ? 0 : gpus;
  if (p.cap_long_best_effort) note_capped(st, v, capped);
  return pacing;
}

slots::GateActions gate_tenants(const Scene& s, const Lending& lends, BudgetState* st, uint64_t* priority_tick) {
  // Priority's rules, as if the budgeted tenants that lend were idle.
  std::vector<PriorityTenant> in;
  in.reserve(s.view.tenants.size());
  for (const slots::GateTenant& v : s.view.tenants) {
    const bool hide = budgeted(v) && lends_now(lends, v.id);
    in.push_back(PriorityTenant{v.id, v.tenant_class, v.priority, v.weight, v.busy && !hide, v.waiting && !hide, v.pinned,
                                v.space_domain, v.signalled, v.gpus, v.owner});
  }
  const PriorityDecision d = decide_priority(in, s.params.priority, &st->priority, s.now);
  *priority_tick = d.next_tick_ns;
  // Gates, and the pacing of the BE tenants that run beside a budgeted tenant.
  slots::GateActions out;
  double granted = 0;
  for (std::size_t i = 0; i < d.gates.size(); ++i) {
    const slots::GateTenant& v = s.view.tenants[i];
    slots::GateAction a = d.gates[i];
    if (s.paced(v)) {
      bool beside = false, lent = false;
      const slots::Pacing pacing = pacing_of(s, st, v, &beside, &lent);
      // Priority never gates a domain's best-effort tenant for its guaranteed ones: a budget does,
      // while it lends nothing (a probe, or no share yet) and a budgeted tenant is active.
      if (!v.space_domain.empty() && beside && !lent) a.gate = GPUOS_GATE_CLOSED;
      if (a.gate == GPUOS_GATE_CLOSED) a.closed_gpus = 0;
      if (a.gate == GPUOS_GATE_OPEN) {
        a.pacing = pacing;
        const double share = pacing.groups != 0 && v.space_groups != 0
                                 ? pacing.groups * (pacing.permille / 1000.0) / v.space_groups
                                 : pacing.permille / 1000.0;
        granted = std::max(granted, share);
      }
    }
    out.gates.push_back(a);
  }
  st->share = granted;
  return out;
}

// ... up to a budgeted tenant's bound, or pace_max_kernel_us beside one without a budget (not
// counted as lent).
void hold_long_launches(const Scene& s, BudgetState* st, slots::GateActions* out) {
  const BudgetParams& p = s.params;
  std::vector<LongLaunchHolder> holding;
  for (const slots::GateTenant& t : s.view.tenants) {
    if (t.tenant_class != GPUOS_CLASS_GUARANTEED) continue;
    auto it = st->tenants.find(t.id);
    if (it != st->tenants.end() && budgeted(t)) {
      if (it->second.idle.holding(s.now, p.idle_hold_ns)) holding.push_back({&t, max_kernel_us(p, t, it->second)});
    } else if (p.pace_max_kernel_us != 0) {
      IdleClock& idle = st->strict_idle[t.id];
      idle.observe(active(t), s.now);
      if (idle.holding(s.now, p.idle_hold_ns)) holding.push_back({&t, p.pace_max_kernel_us});
    }
  }
  for (std::size_t i = 0; i < out->gates.size() && !holding.empty(); ++i) {
    slots::GateAction& a = out->gates[i];
    const slots::GateTenant& v = s.view.tenants[i];
    if (a.gate == GPUOS_GATE_OPEN && a.pacing.permille == 0 && v.tenant_class != GPUOS_CLASS_GUARANTEED) {
      a.pacing = long_launch_hold(v, holding);
    }
  }
}

}  // namespace gpuos::policies::budget
