// SPDX-License-Identifier: Apache-2.0
// The `partition` space policy: SM partitions for the tenants of each spatial domain (planner.h),
// lending of idle guaranteed tenants' groups, and right-sizing of guaranteed tenants that asked
// for no size (sizer.h). Its per-tenant state is the sizer's (what it measured and chose).
//
//   [policy.partition]  (or [spatial], their place before the policy slots)
//   lend_after_ms, lend_max_kernel_ms, be_reserve_groups, right_size_slack_pct,
//   right_size_below_grid, mps_kernel_cost_ns, budget_whole_gpu: see common/config.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "policies/budget_split.h"
#include "policies/partition/planner.h"
#include "policies/partition/sizer.h"
#include "policies/registry.h"
#include "slots/space.h"

namespace gpuos::policies {

struct PartitionParams {
  partition::SpaceParams space;  // group_sms comes from each view
  partition::SizerParams sizer;  // slack <= 0: no right-sizing
  // What MPS adds to each kernel of a spatial tenant (budget_split.h): a guaranteed one whose mean
  // kernel is so short that MPS's cost (measured_mps_cost) exceeds the sizer's slack is warned about
  // once (0: never).
  uint64_t mps_kernel_cost_ns = kMpsKernelCostNs;
  // A guaranteed tenant with a latency budget and no --sms runs on the whole GPU (planner.h
  // whole_gpu) instead of a right-sized partition: best-effort tenants stay on the reserve groups,
  // and the budget paces them. Off: it is partitioned and right-sized like any guaranteed tenant.
  // On by default: beside training at 30% load on an H100, by #40's method, it lent 0.324 of the
  // trainer's speed within B = 1.5 where MPS's best setting lent 0.304, and a right-sized partition
  // 0.045 in #40's first runs (bench/results/2026-12-06-method-trials-h100-0.3).
  bool budget_whole_gpu = true;
};

bool parse_partition_params(const ConfigSection& section, PartitionParams* out, std::string* error);

class PartitionPolicy final : public slots::SpacePolicy {
 public:
  explicit PartitionPolicy(PartitionParams params) : params_(std::move(params)) {}
  const char* name() const override { return "partition"; }
  void on_exit(uint32_t tenant_id) override { tenants_.erase(tenant_id); }
  slots::SpaceActions decide(const slots::SpaceView& view) override;
  const PartitionParams& params() const { return params_; }

 private:
  struct TenantState {
    uint64_t idle_since_ns = 0;            // when it was first seen idle; 0 while active
    partition::SizerState sizer;           // right-sizing (guaranteed, no size asked for)
    uint32_t sized_sms = 0;                // what the sizer chose last (0 = not sized)
    uint32_t default_sms = 0;              // the sizer's ceiling: the default partition
    double sized_latency = 0;              // measured at the current size / at the ceiling (0 = none yet)
    uint64_t longest_kernel_ns = 0;        // best-effort: its longest kernel as last read (0 = none)
    bool cost_warned = false;              // said once that its partition costs it its slack
    bool mps_warned = false;               // said once that MPS costs it its slack
    std::string sizer_traced;              // the sizer's last decision in the debug log
    uint32_t grid_logged_sms = 0;          // the size at which "stops at the grid" was logged
  };
  // The SMs a guaranteed spatial tenant should get, from its latency samples (0 = no opinion).
  uint32_t right_size(const slots::SpaceTenant& t, const slots::SpaceView& view, const partition::SpaceParams& p,
                      TenantState& st);
  // The other tenants of t's domain on its GPU: whether a best-effort one shares it, and what the
  // guaranteed ones take (the groups asked for, the count that asked for none, t included).
  struct DomainShare {
    bool shared = false;
    uint32_t unsized = 1;
    uint32_t asked_groups = 0;
  };
  DomainShare domain_share(const slots::SpaceTenant& t, const slots::SpaceView& view,
                           const partition::SpaceParams& p) const;
  // Said once: its kernels run longer on its default partition than its slack allows against the
  // whole GPU.
  static void warn_if_partition_costs_slack(const slots::SpaceTenant& t, uint32_t ceiling, const slots::SpaceGpu& gpu,
                                            const partition::SizerParams& sp, TenantState& st);
  // The sizer's decisions, in the debug log and (moves, confirmations, the grid) in the info log.
  static void trace_sizer(const slots::SpaceTenant& t, uint64_t now_ns, const partition::SizerDecision& d,
                          uint32_t before, uint32_t ceiling, TenantState& st);
  static void log_sizer_decision(const slots::SpaceTenant& t, const partition::SizerDecision& d, uint32_t before,
                                 uint32_t ceiling, TenantState& st);
  void warn_if_mps_costs_slack(const slots::SpaceTenant& t, TenantState& st);
  static void reset_sizing(TenantState& st);
  // Planned whole_gpu: a budgeted guaranteed tenant of a domain that asked for no size.
  bool whole_gpu(const slots::SpaceTenant& t) const;
  static constexpr uint64_t kMpsCostMinSamples = 64;

  PartitionParams params_;
  std::map<uint32_t, TenantState> tenants_;
};

extern const PolicyEntry kPartitionPolicy;

}  // namespace gpuos::policies
