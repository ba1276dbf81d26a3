// SPDX-License-Identifier: Apache-2.0
#include "policies/partition/partition.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/log.h"

namespace gpuos::policies {

using partition::PlanTenant;
using partition::SizerDecision;
using partition::SizerState;
using partition::SpaceParams;
using slots::LatencyPoint;
using slots::ShapeSamples;
using slots::SpaceGpu;

namespace {

// The GPU of index `home` in the view (null: none).
const SpaceGpu* gpu_of(const slots::SpaceView& view, uint32_t home) {
  const SpaceGpu* gpu = nullptr;
  for (const SpaceGpu& g : view.gpus) {
    if (g.index == home) gpu = &g;
  }
  return gpu;
}

// The partition sizes the GPU gives: the SMs of groups 0..g-1, g = 1 .. groups.
std::vector<uint32_t> partition_sizes(const SpaceGpu& gpu, uint32_t groups, uint32_t group_sms) {
  std::vector<uint32_t> sizes;
  for (uint32_t g = 1; g <= groups; ++g) {
    sizes.push_back(slots::space_mask_sms(g >= 64 ? ~0ull : (1ull << g) - 1, gpu, group_sms));
  }
  return sizes;
}

}  // namespace

PartitionPolicy::DomainShare PartitionPolicy::domain_share(const slots::SpaceTenant& t, const slots::SpaceView& view,
                                                           const SpaceParams& p) const {
  DomainShare ds;
  const uint32_t group_sms = std::max<uint32_t>(p.group_sms, 1);
  for (const slots::SpaceTenant& o : view.tenants) {
    if (o.id == t.id || o.domain != t.domain || o.home_gpu != t.home_gpu) continue;
    if (o.tenant_class != GPUOS_CLASS_GUARANTEED) {
      ds.shared = true;
    } else if (whole_gpu(o)) {
      ds.asked_groups += 1;  // it holds one group (planner.h)
    } else if (o.asked_sms != 0) {
      ds.asked_groups += (o.asked_sms + group_sms - 1) / group_sms;
    } else {
      ++ds.unsized;
    }
  }
  return ds;
}

uint32_t PartitionPolicy::right_size(const slots::SpaceTenant& t, const slots::SpaceView& view, const SpaceParams& p,
                                     TenantState& st) {
  partition::SizerParams sp = params_.sizer;
  // A latency budget sets the slack: its partition's part of what it allows over running alone
  // (budget_split.h).
  if (t.max_slowdown_permille > 1000) sp.slack = budget_slack(t.max_slowdown_permille);
  if (sp.slack <= 0 || t.tenant_class != GPUOS_CLASS_GUARANTEED || t.domain.empty()) return 0;
  // Sized only while it shares its GPU, in its domain, with best-effort tenants: the SMs it does
  // not need go to them. Its ceiling is the partition the planner gives it unsized: an even share,
  // among the guaranteed tenants there that asked for no size, of the groups the others did not
  // ask for (`gpuos run --sms`). Each guaranteed tenant is sized within its own share, so one
  // tenant's moves never change another's ceiling.
  const DomainShare ds = domain_share(t, view, p);
  const SpaceGpu* gpu = gpu_of(view, t.home_gpu);
  if (!ds.shared || gpu == nullptr) {
    reset_sizing(st);
    return 0;
  }
  const uint32_t groups = slots::space_groups(*gpu, p.group_sms);
  if (groups < 2) return 0;
  const uint32_t share = partition::space_default_groups(groups, ds.asked_groups, ds.unsized, true, p);
  const std::vector<uint32_t> sizes = partition_sizes(*gpu, groups, p.group_sms);
  const uint32_t ceiling = sizes[std::min(share, groups) - 1];
  if (st.default_sms != 0 && st.default_sms != ceiling) {
    // Its share changed (a guaranteed tenant came or went): everything it measured was judged
    // against the old ceiling; start again from the new one.
    log::info("tenant %u (%s): its default partition is now %u SMs (was %u): right-sizing starts again", t.id,
              t.name.c_str(), ceiling, st.default_sms);
    reset_sizing(st);
  }
  // Not read (the tenant was writing them): what it had, or the ceiling (never "unsized", which
  // the planner would read as the rest of the guaranteed groups).
  if (!t.samples_read) return st.sized_sms != 0 ? st.sized_sms : ceiling;
  const SizerDecision d = partition::right_size(t.shapes, sizes, ceiling, sp, &st.sizer, view.now_ns);
  warn_if_partition_costs_slack(t, ceiling, *gpu, sp, st);
  if (st.sized_sms == 0) log::info("tenant %u (%s): right-sizing from its %u-SM default partition", t.id, t.name.c_str(), ceiling);
  const uint32_t before = st.sized_sms != 0 ? st.sized_sms : ceiling;
  trace_sizer(t, view.now_ns, d, before, ceiling, st);
  log_sizer_decision(t, d, before, ceiling, st);
  st.sized_sms = d.sms;
  st.default_sms = ceiling;
  if (d.sms != before) st.sized_latency = 0;  // a new size: nothing measured there yet
  if (d.measured > 0 && d.sms == before) st.sized_latency = d.measured;
  return d.sms;
}

void PartitionPolicy::warn_if_partition_costs_slack(const slots::SpaceTenant& t, uint32_t ceiling, const SpaceGpu& gpu,
                                                    const partition::SizerParams& sp, TenantState& st) {
  if (st.cost_warned) return;
  const double cost = partition::partition_cost(t.shapes, ceiling, gpu.sm_count, sp.min_samples);
  if (cost <= 1.0 + sp.slack) return;
  st.cost_warned = true;
  log::warn("tenant %u (%s): its kernels run %.2fx as long on its %u-SM default partition as on the whole GPU "
            "(%u SMs): spatial sharing cannot keep it within %.0f%% of running alone; for that, run it outside "
            "domain \"%s\" (time-shared: best-effort tenants then wait for its idle time)",
            t.id, t.name.c_str(), cost, ceiling, gpu.sm_count, sp.slack * 100, t.domain.c_str());
}

void PartitionPolicy::trace_sizer(const slots::SpaceTenant& t, uint64_t now_ns, const SizerDecision& d, uint32_t before,
                                  uint32_t ceiling, TenantState& st) {
  // The debug trace, each time the decision or the measured figure (to 1%) changes: the sizer is
  // asked at every sample report.
  char traced[64];
  std::snprintf(traced, sizeof(traced), "%u %s %.2f", d.sms, d.why, d.measured);
  if (d.measured <= 0 || !log::enabled(log::Level::kDebug) || st.sizer_traced == traced) return;
  st.sizer_traced = traced;
  std::string points;
  for (const ShapeSamples& s : t.shapes) {
    for (const LatencyPoint& pt : s.points) {
      points += " " + std::to_string(s.key % 10000) + "@" + std::to_string(pt.sms) + ":" + std::to_string(pt.count) +
                "x" + std::to_string(static_cast<uint64_t>(pt.mean_ns / 1000)) + "us";
    }
  }
  log::debug("tenant %u (%s): sizer at %u SMs, t=%.3f s: %s, measured %.3f of %.0f us at %u SMs; table%s", t.id,
             t.name.c_str(), before, now_ns / 1e9, d.why, d.measured, d.ref_ns / 1000, ceiling, points.c_str());
}

void PartitionPolicy::log_sizer_decision(const slots::SpaceTenant& t, const SizerDecision& d, uint32_t before,
                                         uint32_t ceiling, TenantState& st) {
  if (d.sms != before) {
    char hold[64] = "";
    if (d.hold_ns != 0) std::snprintf(hold, sizeof(hold), "; not below %u SMs for %.0f s", d.sms, d.hold_ns / 1e9);
    log::info("tenant %u (%s): right-sized %u -> %u SMs of %u (%s; latency %.3f of its %u-SM figure%s)", t.id,
              t.name.c_str(), before, d.sms, ceiling, d.why, d.predicted, ceiling, hold);
  }
  if (std::strcmp(d.why, "confirm") == 0) {
    log::info("tenant %u (%s): %u SMs read %.3f of its %u-SM figure, a little over the slack: judged again on new "
              "samples before moving up", t.id, t.name.c_str(), d.sms, d.measured, ceiling);
  }
  if (d.grid_blocks != 0 && st.grid_logged_sms != d.sms) {
    st.grid_logged_sms = d.sms;
    log::info("tenant %u (%s): right-sizing holds %u SMs: a main kernel of %u blocks runs one per SM there and "
              "would put two on some SMs below (set [policy.partition] right_size_below_grid to go on)",
              t.id, t.name.c_str(), d.sms, d.grid_blocks);
  }
}

void PartitionPolicy::reset_sizing(TenantState& st) {
  st.sizer = SizerState{};
  st.sized_sms = 0;
  st.default_sms = 0;
  st.sized_latency = 0;
}

bool PartitionPolicy::whole_gpu(const slots::SpaceTenant& t) const {
  return params_.budget_whole_gpu && t.max_slowdown_permille > 1000 && t.tenant_class == GPUOS_CLASS_GUARANTEED &&
         !t.domain.empty() && t.asked_sms == 0;
}

void PartitionPolicy::warn_if_mps_costs_slack(const slots::SpaceTenant& t, TenantState& st) {
  if (st.mps_warned || t.tenant_class != GPUOS_CLASS_GUARANTEED || t.domain.empty()) return;
  if (t.samples < kMpsCostMinSamples) return;
  const double cost = measured_mps_cost(t.timed_kernels, t.timed_ns, params_.mps_kernel_cost_ns);
  double slack = params_.sizer.slack > 0 ? params_.sizer.slack : partition::SizerParams{}.slack;
  if (t.max_slowdown_permille > 1000) slack = t.max_slowdown_permille / 1000.0 - 1.0;  // its whole budget
  if (cost <= slack) return;
  st.mps_warned = true;
  log::warn("tenant %u (%s): its kernels take %.1f us on average, and an MPS client's kernel about %.2f us more: "
            "%.0f%% of its GPU time, more than its %.0f%% slack; spatial sharing cannot keep it within its slack of "
            "running alone. For that, run it outside domain \"%s\" (time-shared)",
            t.id, t.name.c_str(), t.timed_ns / 1e3 / static_cast<double>(t.timed_kernels),
            params_.mps_kernel_cost_ns / 1e3, cost * 100, slack * 100, t.domain.c_str());
}

slots::SpaceActions PartitionPolicy::decide(const slots::SpaceView& view) {
  const uint64_t now = view.now_ns;
  SpaceParams p = params_.space;
  p.group_sms = view.group_sms;
  std::vector<PlanTenant> in;
  bool sizing = false;  // a tenant is being right-sized: look at its samples again soon
  for (const slots::SpaceTenant& v : view.tenants) {
    TenantState& st = tenants_[v.id];
    PlanTenant s;
    s.id = v.id;
    s.domain = v.domain;
    s.tenant_class = v.tenant_class;
    s.priority = v.priority;
    s.weight = v.weight;
    s.whole_gpu = whole_gpu(v);
    if (s.whole_gpu) {
      reset_sizing(st);  // on every SM: nothing to size
    } else {
      s.want_sms = v.asked_sms != 0 ? v.asked_sms : right_size(v, view, p, st);
    }
    warn_if_mps_costs_slack(v, st);
    sizing = sizing || st.sized_sms != 0;
    s.busy = v.busy;
    if (s.busy) {
      st.idle_since_ns = 0;
    } else {
      if (st.idle_since_ns == 0) st.idle_since_ns = now;
      s.idle_ns = now - st.idle_since_ns;
    }
    s.gpus = v.gpus;
    if (s.tenant_class == GPUOS_CLASS_BEST_EFFORT && !s.domain.empty()) {
      // How long taking lent groups back from it could take (the planner lends only below a bound).
      if (v.samples_read) st.longest_kernel_ns = partition::longest_kernel_ns(v.shapes);
      s.kernel_ns = st.longest_kernel_ns;
    }
    in.push_back(std::move(s));
  }
  const std::map<uint32_t, slots::SpaceMasks> plan = partition::plan_space(view.gpus, in, p);
  slots::SpaceActions out;
  if (const uint64_t wait = partition::space_next_lend_ns(in, p); wait != 0) out.next_ns = now + wait;
  constexpr uint64_t kSizingPeriodNs = 100'000'000;  // a busy tenant sends no ACTIVITY: poll its samples
  if (sizing && (out.next_ns == 0 || out.next_ns > now + kSizingPeriodNs)) out.next_ns = now + kSizingPeriodNs;
  for (const slots::SpaceTenant& v : view.tenants) {
    if (v.domain.empty()) continue;
    slots::SpaceGrant g;
    g.id = v.id;
    if (auto it = plan.find(v.id); it != plan.end()) g.masks = it->second;
    const TenantState& st = tenants_[v.id];
    if (st.sized_sms != 0 && v.asked_sms == 0) {
      g.sized_sms = st.sized_sms;
      g.default_sms = st.default_sms;
      g.sized_latency = st.sized_latency;
    }
    out.grants.push_back(g);
  }
  return out;
}

bool parse_partition_params(const ConfigSection& sec, PartitionParams* out, std::string* error) {
  uint32_t lend_after_ms = 20, lend_max_kernel_ms = 10, reserve = 2, slack_pct = 4;
  uint32_t mps_cost = kMpsKernelCostNs;
  bool below_grid = false, whole_gpu = PartitionParams{}.budget_whole_gpu;
  if (!sec.get_uint("lend_after_ms", 0, 3600000, &lend_after_ms, error) ||
      !sec.get_uint("lend_max_kernel_ms", 1, 3600000, &lend_max_kernel_ms, error) ||
      !sec.get_uint("be_reserve_groups", 1, 63, &reserve, error) ||
      !sec.get_uint("right_size_slack_pct", 0, 50, &slack_pct, error) ||
      !sec.get_bool("right_size_below_grid", &below_grid, error) ||
      !sec.get_uint("mps_kernel_cost_ns", 0, 1000000, &mps_cost, error) ||
      !sec.get_bool("budget_whole_gpu", &whole_gpu, error) || !sec.all_read(error)) {
    return false;
  }
  PartitionParams p;
  p.space.be_reserve_groups = reserve;
  p.space.lend_after_ns = uint64_t{lend_after_ms} * 1'000'000;
  p.space.lend_max_kernel_ns = uint64_t{lend_max_kernel_ms} * 1'000'000;
  p.sizer.slack = slack_pct / 100.0;
  p.sizer.below_grid = below_grid;
  p.mps_kernel_cost_ns = mps_cost;
  p.budget_whole_gpu = whole_gpu;
  *out = p;
  return true;
}

namespace {
std::unique_ptr<slots::SpacePolicy> make_partition(const PolicyContext& ctx, std::string* error) {
  PartitionParams p;
  if (!parse_partition_params(ctx.section, &p, error)) return nullptr;
  return std::make_unique<PartitionPolicy>(p);
}

// What parse_partition_params reads, in its order.
constexpr KeyDoc kPartitionKeys[] = {
    {"lend_after_ms", "An idle guaranteed tenant's SM groups go to best-effort ones after this long (0..3600000 ms)"},
    {"lend_max_kernel_ms", "... only to those whose kernels end within this (1..3600000 ms)"},
    {"be_reserve_groups", "SM groups (8 SMs each) a guaranteed tenant leaves to best-effort tenants (1..63)"},
    {"right_size_slack_pct", "Right-sizing: fewest SMs within this % of the default partition's latency (0 = off)"},
    {"right_size_below_grid", "Right-sizing may go below a one-block-per-SM kernel's grid (its fit cannot see it)"},
    {"mps_kernel_cost_ns", "What MPS adds to each kernel; warns of tenants it costs more than the slack (0 = off)"},
    {"budget_whole_gpu", "A guaranteed tenant with --max-slowdown and no --sms runs on every SM, unconfined"},
};

std::string partition_settings(const ConfigSection& section) {
  PartitionParams p;
  std::string unused;
  parse_partition_params(section, &p, &unused);
  return "lend_after_ms = " + std::to_string(p.space.lend_after_ns / 1'000'000) +
         "\nlend_max_kernel_ms = " + std::to_string(p.space.lend_max_kernel_ns / 1'000'000) +
         "\nbe_reserve_groups = " + std::to_string(p.space.be_reserve_groups) +
         "\nright_size_slack_pct = " + std::to_string(static_cast<int>(std::lround(p.sizer.slack * 100))) +
         "\nright_size_below_grid = " + (p.sizer.below_grid ? "true" : "false") +
         "\nmps_kernel_cost_ns = " + std::to_string(p.mps_kernel_cost_ns) +
         "\nbudget_whole_gpu = " + (p.budget_whole_gpu ? "true" : "false") + "\n";
}
}  // namespace

const PolicyEntry kPartitionPolicy{"partition", SlotKind::kSpace,
                                   "SM partitions per spatial domain, lending of idle groups, right-sizing", nullptr,
                                   &make_partition, nullptr, &partition_settings, kPartitionKeys};

}  // namespace gpuos::policies
