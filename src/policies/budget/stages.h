// SPDX-License-Identifier: Apache-2.0
// The budget policy's decision (BudgetPolicy::decide), as stages run in this order, each a function
// of the view, the settings and the policy's state that it reads or moves, with no hidden inputs:
//   observe  (stage_observe.cc)  the budgeted tenants' timings into their meters, solo or not;
//   control  (stage_control.cc)  each budgeted tenant's share: cut at once when an interval read
//                                over its budget, else moved once per control period;
//   lend     (stage_lend.cc)     probes, and whether each budgeted tenant lends now (phase holds);
//   pace     (stage_pace.cc)     the gates (priority's rules) and the pacing of best-effort tenants;
//   report   (stage_report.cc)   what was measured, and when to look again.
// Mechanism stays in the slots (the gate, pacing words); these stages are the policy, and each can
// be asked alone by a test.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "policies/budget/budget.h"
#include "policies/gpu_groups.h"
#include "policies/long_launch_hold.h"

namespace gpuos::policies::budget {

// A guaranteed tenant that declared a budget.
inline bool budgeted(const slots::GateTenant& t) {
  return t.tenant_class == GPUOS_CLASS_GUARANTEED && t.max_slowdown_permille != 0;
}
inline bool active(const slots::GateTenant& t) { return t.busy || (t.waiting && !t.pinned); }
// Two tenants work on a GPU in common (one whose GPUs are not known yet: on every GPU).
inline bool share_gpu(const slots::GateTenant& a, const slots::GateTenant& b) {
  return (gpus_or_all(a.gpus) & gpus_or_all(b.gpus)) != 0;
}
// Sharing in time, a budgeted tenant has the GPU 1 - share of the time at best: a share beyond
// 1 - 1/limit cannot keep it within its budget, whatever its timings say. Beside it in space (the
// best-effort tenants of its domain, on SMs of their own) no time slice is taken from it, and only
// its meter bounds the share.
inline double time_share_cap(double limit) { return 1.0 - 1.0 / limit; }

// What every stage of one decision reads: the view, the time, the settings, and which tenants a
// budget paces.
struct Scene {
  Scene(const slots::GateView& v, const BudgetParams& p);
  const slots::GateView& view;
  const BudgetParams& params;
  uint64_t now;
  std::set<std::string> budget_domains;  // the spatial domains with a budgeted tenant

  // A best-effort tenant a budget paces: one time-shared, or one in the spatial domain of a
  // budgeted tenant (it runs beside that tenant on SMs of its own, and still takes from its memory
  // system).
  bool paced(const slots::GateTenant& t) const;
  // A BE tenant beside budgeted tenant b: paced, on one of b's GPUs.
  bool beside(const slots::GateTenant& v, const slots::GateTenant& b) const { return paced(v) && share_gpu(v, b); }
  // A budgeted tenant on the whole GPU of a domain pauses between its steps (a server: 0.1 ms
  // between two). Its best-effort neighbours keep the groups it lends them until the pause outlasts
  // idle_hold_ns: with all their groups for the pause, the kernels they queue then run across the
  // SMs of its next step (at 30% load on an H100 a trainer's partition changed 70 times a second
  // that way, bench/results/2026-12-06-method-h100-0.3).
  bool pausing(const slots::GateTenant& t, const BudgetState& st) const;
};

// MPS's cost to budgeted tenant b (BudgetParams::mps_cost_fixed, else measured), and the slowdown
// its meter may allow it: its whole budget time-shared; in a spatial domain what its partition and
// MPS leave of it (budget_split.h).
double mps_cost(const BudgetParams& p, const TenantBudget& b);
double meter_limit(const BudgetParams& p, const slots::GateTenant& t, const TenantBudget& b);
// The longest best-effort launch (us) that budgeted tenant t, sharing in time, lets run beside it
// (0 = no bound): the smaller of pace_max_kernel_us and long_kernel_fraction's.
uint32_t max_kernel_us(const BudgetParams& p, const slots::GateTenant& t, const TenantBudget& b);
// The SM groups planned for the best-effort tenants of budgeted tenant t's domain while t runs on
// the whole GPU (the most any of them has; 0: t shares in time or on a partition of its own).
uint32_t be_groups_beside(const slots::GateTenant& t, const slots::GateView& view);

// --- observe (stage_observe.cc)
// cap_long_best_effort: each paced best-effort tenant's last timed launches.
void keep_be_launches(const Scene& s, BudgetState* st);
// Whether budgeted tenant t's launches timed now ran solo: no BE tenant beside it, or every gate
// of one closed for the settle time with no such BE work left in flight.
bool solo_now(const Scene& s, const slots::GateTenant& t, const TenantBudget& b);
// Every budgeted tenant's timings into its meter (its TenantBudget made at its first sight).
void observe_timings(const Scene& s, BudgetState* st);
// Adds what t's kernels were timed at since the last decision to b's solo kernels, when both
// decisions saw it solo; warns once when MPS alone takes its whole budget.
void note_kernels(const BudgetParams& p, const slots::GateTenant& t, TenantBudget& b, bool solo);

// --- control (stage_control.cc)
// What the controller multiplies the meter's slowdown by: the tenant's load growth with
// steer_load_growth (clamped to [1, kMaxLoadGrowth]), else 1.
double judged_growth(const BudgetParams& p, const TenantBudget& b, uint64_t now);
// The reading the reactive back-off judges now (the last interval's p90 mean, or the last react
// span's p90), with *launches its count; nothing when it is not yet time to judge (the interval
// was judged, began before the last cut, or the react span has not passed). Marks it judged.
bool reading_to_judge(const BudgetParams& p, TenantBudget* b, uint64_t now, double* reading, std::size_t* launches);
// Halves b's share at once (whole groups of `planned`), and counts the cut.
void cut_share(const BudgetParams& p, TenantBudget* b, uint32_t planned, uint64_t now);
// The reactive back-off of every budgeted tenant with a share.
void react_to_readings(const Scene& s, BudgetState* st);
// What the control period judges of tenant t: the meter's readings, times its growth.
Measure control_measure(const Scene& s, const slots::GateTenant& t, const TenantBudget& b, uint32_t planned);
// The controller's settings for budgeted tenant t at meter limit `limit`: sharing in time, its
// share is capped at time_share_cap(limit) too.
ControllerParams controller_for(const Scene& s, const slots::GateTenant& t, double limit);
// The largest share the controller grants t: on SM groups (beside t on the whole GPU)
// group_share_cap, else controller_for's max_share.
double largest_share(const Scene& s, const slots::GateTenant& t, double limit);
// Once per control period: each budgeted tenant's next share (controller.h).
void control_shares(const Scene& s, BudgetState* st);

// --- lend (stage_lend.cc)
// Starts a probe when one is due and a budgeted tenant is active, and logs what each budget did
// since the last one.
void start_probe_if_due(const Scene& s, BudgetState* st);
// Active (or pausing) budgeted tenants: whether each lends its GPUs now.
using Lending = std::map<uint32_t, bool>;
Lending decide_lending(const Scene& s, BudgetState* st);
inline bool lends_now(const Lending& lends, uint32_t id) {
  auto it = lends.find(id);
  return it != lends.end() && it->second;
}

// --- pace (stage_pace.cc)
// The pacing of BE tenant v: the smallest share (and burst) of the budgeted tenants on its GPUs.
// *beside: one is active there; *lent false when one of them lends nothing now (a probe, no share).
slots::Pacing pacing_of(const Scene& s, BudgetState* st, const slots::GateTenant& v, bool* beside, bool* lent);
// Priority's gates, as if the budgeted tenants that lend were idle, with the pacing of the BE
// tenants beside them; *priority_tick: when priority's rules want to look again. Sets st->share.
slots::GateActions gate_tenants(const Scene& s, const Lending& lends, BudgetState* st, uint64_t* priority_tick);
// A time-shared BE tenant left unpaced because the guaranteed tenants on its GPUs went idle stays
// paced at the full share for idle_hold_ns, its long launches waiting.
void hold_long_launches(const Scene& s, BudgetState* st, slots::GateActions* out);

// --- report (stage_report.cc)
// A budget counts as spent when its meter's p99 used at least this fraction of the excess over 1
// the meter may use (issue #56: a budget left mostly unspent lends less than it could).
inline constexpr double kSpentFraction = 0.7;
// What held budgeted tenant t's budget unspent over the period whose moves are m, its meter's p99
// then `held` (0 = not measured), or that it was spent (GPUOS_BUDGET_LIMIT_*): the first that
// holds of no solo times, spent, no best-effort tenant beside it, MPS's cost, the largest share,
// cuts by load growth, cuts over the budget, phase holds over kPhaseHeldFraction of the period,
// else the controller's own steps.
uint32_t budget_limit(const Scene& s, const slots::GateTenant& t, const TenantBudget& b, const ShareMoves& m,
                      double held, uint64_t period_ns);
inline constexpr double kPhaseHeldFraction = 0.3;
// Whether BE work may run beside each budgeted tenant now (its timings are not solo then).
void note_be_quiet(const Scene& s, const slots::GateActions& out, BudgetState* st);
// Each budgeted tenant's slowdown and share, for gpuosd's report.
void report_budgets(const Scene& s, const BudgetState& st, slots::GateActions* out);
// When to decide again: the soonest of priority's tick, the control period, probes, settle and
// idle holds.
uint64_t next_tick(const Scene& s, const BudgetState& st, uint64_t priority_tick, bool lending_seen);

}  // namespace gpuos::policies::budget
