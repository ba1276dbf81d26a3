// SPDX-License-Identifier: Apache-2.0
// The budget's first stage: the budgeted tenants' timings into their meters (stages.h).
#include <algorithm>

#include "common/log.h"
#include "policies/budget/stages.h"
#include "policies/budget_split.h"

namespace gpuos::policies::budget {

Scene::Scene(const slots::GateView& v, const BudgetParams& p) : view(v), params(p), now(v.now_ns) {
  for (const slots::GateTenant& t : view.tenants) {
    if (budgeted(t) && !t.space_domain.empty()) budget_domains.insert(t.space_domain);
  }
}

bool Scene::paced(const slots::GateTenant& t) const {
  return t.tenant_class != GPUOS_CLASS_GUARANTEED &&
         (t.space_domain.empty() || budget_domains.count(t.space_domain) != 0);
}

bool Scene::pausing(const slots::GateTenant& t, const BudgetState& st) const {
  if (active(t) || t.space_domain.empty() || t.space_confined) return false;
  auto it = st.tenants.find(t.id);
  return it != st.tenants.end() && it->second.idle.holding(now, params.idle_hold_ns);
}

void keep_be_launches(const Scene& s, BudgetState* st) {
  if (!s.params.cap_long_best_effort) return;
  for (const slots::GateTenant& v : s.view.tenants) {
    if (!s.paced(v) || v.timed.empty()) continue;
    std::deque<uint64_t>& kept = st->be_launch_ns[v.id];
    for (const slots::TimedLaunch& l : v.timed) kept.push_back(l.ns);
    while (kept.size() > kLongLaunchKeep) kept.pop_front();
  }
}

// Under MPS a closed gate stops a tenant's launches, not the kernels it queued before, so solo
// also needs the BE work drained. A BE tenant's busy word is for all of its GPUs: one that also
// works elsewhere may be busy there, so for it the settle time alone counts.
bool solo_now(const Scene& s, const slots::GateTenant& t, const TenantBudget& b) {
  bool any_be = false, be_drained = true;
  for (const slots::GateTenant& v : s.view.tenants) {
    if (!s.beside(v, t)) continue;
    any_be = true;
    const bool only_on_its_gpus = (gpus_or_all(v.gpus) & ~gpus_or_all(t.gpus)) == 0;
    be_drained = be_drained && !(v.busy && only_on_its_gpus);
  }
  return !any_be || (b.be_quiet_since_ns != 0 && s.now >= b.be_quiet_since_ns + s.params.settle_ns && be_drained);
}

void observe_timings(const Scene& s, BudgetState* st) {
  for (const slots::GateTenant& t : s.view.tenants) {
    if (!budgeted(t)) continue;
    TenantBudget& b = st->tenants.try_emplace(t.id, TenantBudget{SlowdownMeter(s.params.meter)}).first->second;
    const bool solo = solo_now(s, t, b);
    for (const slots::TimedLaunch& l : t.timed) b.meter.add(l.key, l.ns, solo, s.now);
    note_kernels(s.params, t, b, solo);
    if (b.lending) b.lent += t.timed.size();  // timed while the last decision lent beside it
    if (b.idle.was_active && !active(t)) ++b.pauses;
    b.idle.observe(active(t), s.now);
  }
}

void note_kernels(const BudgetParams& p, const slots::GateTenant& t, TenantBudget& b, bool solo) {
  // Its words are its own (and only ever its own budget's): a count that went back starts again,
  // and a step no real tenant takes between two decisions counts for nothing.
  constexpr uint64_t kMaxKernelsStep = uint64_t{1} << 32, kMaxNsStep = uint64_t{1} << 42;
  const uint64_t kernels = t.timed_kernels - b.seen_kernels, ns = t.timed_ns - b.seen_kernel_ns;
  if (solo && b.seen_solo && t.timed_kernels >= b.seen_kernels && t.timed_ns >= b.seen_kernel_ns &&
      kernels < kMaxKernelsStep && ns < kMaxNsStep) {
    b.solo_kernels += kernels;
    b.solo_kernel_ns += ns;
  }
  b.seen_kernels = t.timed_kernels;
  b.seen_kernel_ns = t.timed_ns;
  b.seen_solo = solo;
  if (!b.mps_warned && !t.space_domain.empty() && b.solo_kernels >= kMpsCostMinKernels && meter_limit(p, t, b) <= 1.0) {
    b.mps_warned = true;
    log::warn("budget: tenant %u (%s): its kernels take %.2f us on average alone, and MPS adds about %.2f us to each: "
              "%.1f%% of its time, which with its partition takes its whole budget of %.2fx; nothing is lent beside it. "
              "Time-shared (outside domain \"%s\") the whole budget would be the meter's",
              t.id, t.name.c_str(), b.solo_kernel_ns / 1e3 / static_cast<double>(b.solo_kernels), kMpsKernelCostNs / 1e3,
              mps_cost(p, b) * 100, t.max_slowdown_permille / 1000.0, t.space_domain.c_str());
  }
}

}  // namespace gpuos::policies::budget
