// SPDX-License-Identifier: Apache-2.0
// The partition policy's planner: which SMs each tenant of a spatial domain may use, per GPU. A pure
// function of the tenants' classes, requests and busy words; the core applies its answer (control
// block space_mask) and the interposer places every launch on a green context of exactly those SMs.
//
// A GPU's SMs are split into groups of group_sms (8 on Hopper), as the driver's
// cuDevSmResourceSplitByCount makes them (the last group taking the remainder); a partition is a
// set of groups, a bit mask (bit i = group i).
// Rules, per GPU and per domain (tenants of different domains never share in space: they are
// time-shared by the scheduling policy, as separate MPS servers or contexts):
//  - Alone on the GPU (the only tenant of its domain there): unconfined (mask 0, no placement).
//  - Guaranteed tenants, by priority (then id), get their own groups from group 0 upward: as many
//    as they asked for (space_sms, rounded up to whole groups), by default all but
//    be_reserve_groups when best-effort tenants share the GPU, split evenly among the guaranteed
//    tenants that asked for no size. At least be_reserve_groups stay for the best-effort tenants;
//    guaranteed tenants that find no group left share the groups of the last one served.
//  - A guaranteed tenant planned `whole_gpu` (a latency budget, with the partition policy's
//    budget_whole_gpu) holds one group, which best-effort tenants stay off, but runs unconfined
//    (mask 0): on every SM, the best-effort tenants' included. Its budget then pays for no
//    partition, only for what the best-effort tenants beside it take: they are planned on every
//    other group, and the budget policy sizes how many of them they use (Pacing::groups).
//  - A guaranteed tenant keeps its groups while idle (its next kernel starts there at once, before
//    gpuosd hears of it); once it has been idle for lend_after_ns they are lent to the best-effort
//    tenants, which lose them as soon as it is busy again (at their next kernel boundary). Not
//    lending in short gaps keeps a serving tenant's next burst off the borrowers' kernels.
//    Groups are lent only to a best-effort tenant whose kernels are known to end within
//    lend_max_kernel_ns (its longest measured kernel, kernel_ns), so taking them back is bounded
//    by that: a kernel already running on a lent SM finishes there before the owner's can start.
//  - Best-effort tenants split the groups no guaranteed tenant holds, by weight (at least one group
//    each while there are enough; with more tenants than groups they all share all of them), plus
//    every lent group (shared by all of them).
// A tenant is on a GPU when it holds memory or has launched there, or when it has done neither
// anywhere yet.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpuos/abi.h"
#include "slots/space.h"

namespace gpuos::policies::partition {

using slots::SpaceGpu;
using slots::SpaceMasks;
using slots::space_groups;
using slots::space_mask_sms;

struct PlanTenant {
  uint32_t id = 0;
  std::string domain;  // "" = not in a spatial domain (never confined)
  uint32_t tenant_class = GPUOS_CLASS_BEST_EFFORT;
  int32_t priority = 0;
  uint32_t weight = 100;
  uint32_t want_sms = 0;  // guaranteed: SMs asked for (0 = default)
  bool whole_gpu = false; // guaranteed: holds its groups, but runs on the whole GPU (mask 0)
  bool busy = false;
  uint64_t idle_ns = 0;   // not busy: for how long (0 while busy)
  uint32_t gpus = 0;      // bit g: holds memory or launched on GPU g (0: neither yet: on every GPU)
  uint64_t kernel_ns = 0; // best-effort: its longest kernel as measured (0 = not measured yet)
};

struct SpaceParams {
  uint32_t group_sms = 8;
  uint32_t be_reserve_groups = 2;  // groups kept for best-effort tenants when there are any
  uint64_t lend_after_ns = 20'000'000;  // an idle guaranteed tenant's groups are lent after this ...
  uint64_t lend_max_kernel_ns = 10'000'000;  // ... to best-effort tenants whose kernels end within this
};

// When plan_space should run again for lending to start: the earliest time an idle guaranteed
// tenant of a shared domain crosses lend_after_ns (relative to now, ns); 0 = no such moment.
uint64_t space_next_lend_ns(const std::vector<PlanTenant>& tenants, const SpaceParams& params);

// Groups a guaranteed tenant that asked for no size gets by default on a GPU of `groups` groups:
// an even share, among the `unsized` such tenants, of what the `asked` groups of the others and
// (with best-effort tenants there) be_reserve_groups leave; at least 1. The right-sizer's ceiling.
uint32_t space_default_groups(uint32_t groups, uint32_t asked, uint32_t unsized, bool with_best_effort,
                              const SpaceParams& params);

// Masks per tenant id, for every tenant of `tenants` (all zero for those not in a domain).
std::map<uint32_t, SpaceMasks> plan_space(const std::vector<SpaceGpu>& gpus,
                                          const std::vector<PlanTenant>& tenants, const SpaceParams& params);

}  // namespace gpuos::policies::partition
