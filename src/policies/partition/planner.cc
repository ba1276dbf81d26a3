// SPDX-License-Identifier: Apache-2.0
#include "policies/partition/planner.h"

#include <algorithm>

namespace gpuos::policies::partition {
namespace {

bool on_gpu(const PlanTenant& t, uint32_t gpu) { return t.gpus == 0 || (gpu < 32 && (t.gpus >> gpu & 1u)); }

uint64_t range_mask(uint32_t first, uint32_t count) {
  uint64_t m = 0;
  for (uint32_t i = first; i < first + count && i < 64; ++i) m |= uint64_t{1} << i;
  return m;
}

// Groups kept for best-effort tenants (none without them; never all).
uint32_t reserve_groups(uint32_t groups, bool with_best_effort, const SpaceParams& params) {
  return with_best_effort ? std::clamp<uint32_t>(params.be_reserve_groups, 1, groups - 1) : 0;
}

// Plans one domain on one GPU of `groups` groups.
void plan_domain(uint32_t gpu, uint32_t groups, const std::vector<const PlanTenant*>& members,
                 const SpaceParams& params, std::map<uint32_t, SpaceMasks>* out) {
  if (members.size() <= 1 || groups < 2) return;  // alone (or nothing to split): unconfined
  std::vector<const PlanTenant*> guaranteed, best_effort;
  for (const PlanTenant* t : members) {
    (t->tenant_class == GPUOS_CLASS_GUARANTEED ? guaranteed : best_effort).push_back(t);
  }
  std::sort(guaranteed.begin(), guaranteed.end(), [](const PlanTenant* a, const PlanTenant* b) {
    return a->priority != b->priority ? a->priority > b->priority : a->id < b->id;
  });
  std::sort(best_effort.begin(), best_effort.end(), [](auto* a, auto* b) { return a->id < b->id; });

  const uint32_t for_guaranteed = groups - reserve_groups(groups, !best_effort.empty(), params);
  uint32_t asked = 0, unsized = 0;
  for (const PlanTenant* t : guaranteed) {
    if (t->want_sms == 0) {
      ++unsized;
    } else {
      asked += (t->want_sms + params.group_sms - 1) / params.group_sms;
    }
  }
  const uint32_t default_groups = space_default_groups(groups, asked, unsized, !best_effort.empty(), params);
  uint32_t next = 0;
  uint64_t lent = 0;
  uint64_t last_mask = 0;
  for (std::size_t i = 0; i < guaranteed.size(); ++i) {
    const PlanTenant* t = guaranteed[i];
    uint32_t want = t->want_sms ? (t->want_sms + params.group_sms - 1) / params.group_sms : default_groups;
    if (t->whole_gpu) {
      want = 1;  // it runs on every SM; one group keeps best-effort work off one part of the GPU
    } else if (t->want_sms == 0 && unsized > 0 && i + 1 == guaranteed.size()) {
      want = std::max<uint32_t>(want, for_guaranteed > next ? for_guaranteed - next : 0);  // the rest
    }
    const uint32_t avail = for_guaranteed > next ? for_guaranteed - next : 0;
    uint64_t mask = 0;
    if (avail == 0) {
      mask = last_mask;  // none left: share the previous guaranteed tenant's groups
    } else {
      const uint32_t n = std::min(want, avail);
      mask = range_mask(next, n);
      next += n;
    }
    if (mask == 0) mask = range_mask(0, 1);
    last_mask = mask;
    (*out)[t->id][gpu] = t->whole_gpu ? 0 : mask;
    if (!t->busy && t->idle_ns >= params.lend_after_ns) lent |= mask;
  }
  if (guaranteed.empty()) next = 0;
  // Best-effort: the groups no guaranteed tenant holds, by weight, plus everything lent.
  const uint32_t be_first = next, be_groups = groups - next;
  if (best_effort.empty()) return;
  // Only a borrower whose kernels end soon gives lent groups back in bounded time.
  const auto lent_to = [&](const PlanTenant* t) {
    return t->kernel_ns != 0 && t->kernel_ns <= params.lend_max_kernel_ns ? lent : uint64_t{0};
  };
  if (be_groups < best_effort.size()) {
    for (const PlanTenant* t : best_effort) {
      const uint64_t shared = range_mask(be_first, be_groups) | lent_to(t);
      (*out)[t->id][gpu] = shared ? shared : range_mask(groups - 1, 1);
    }
    return;
  }
  uint64_t total_weight = 0;
  for (const PlanTenant* t : best_effort) total_weight += std::max<uint32_t>(t->weight, 1);
  uint32_t pos = be_first, given = 0;
  uint64_t weight_so_far = 0;
  for (std::size_t i = 0; i < best_effort.size(); ++i) {
    weight_so_far += std::max<uint32_t>(best_effort[i]->weight, 1);
    // Cumulative rounding keeps the total exact; every tenant keeps at least one group.
    uint32_t upto = static_cast<uint32_t>(be_groups * weight_so_far / total_weight);
    const uint32_t left_tenants = static_cast<uint32_t>(best_effort.size() - i - 1);
    upto = std::clamp<uint32_t>(upto, given + 1, be_groups - left_tenants);
    (*out)[best_effort[i]->id][gpu] = range_mask(pos, upto - given) | lent_to(best_effort[i]);
    pos += upto - given;
    given = upto;
  }
}

}  // namespace

uint32_t space_default_groups(uint32_t groups, uint32_t asked, uint32_t unsized, bool with_best_effort,
                              const SpaceParams& params) {
  if (groups < 2) return 1;
  const uint32_t for_guaranteed = groups - reserve_groups(groups, with_best_effort, params);
  const uint32_t left = for_guaranteed > asked ? for_guaranteed - asked : 0;
  return std::max<uint32_t>(1, left / std::max<uint32_t>(unsized, 1));
}

uint64_t space_next_lend_ns(const std::vector<PlanTenant>& tenants, const SpaceParams& params) {
  uint64_t next = 0;
  for (const PlanTenant& t : tenants) {
    if (t.domain.empty() || t.tenant_class != GPUOS_CLASS_GUARANTEED || t.busy) continue;
    if (t.idle_ns >= params.lend_after_ns) continue;  // lent already
    const uint64_t left = params.lend_after_ns - t.idle_ns;
    if (next == 0 || left < next) next = left;
  }
  return next;
}

std::map<uint32_t, SpaceMasks> plan_space(const std::vector<SpaceGpu>& gpus,
                                          const std::vector<PlanTenant>& tenants, const SpaceParams& params) {
  std::map<uint32_t, SpaceMasks> out;
  for (const PlanTenant& t : tenants) out[t.id].fill(0);
  if (params.group_sms == 0) return out;
  for (const SpaceGpu& g : gpus) {
    if (g.index >= GPUOS_MAX_DEVICES) continue;
    std::map<std::string, std::vector<const PlanTenant*>> domains;
    for (const PlanTenant& t : tenants) {
      if (!t.domain.empty() && on_gpu(t, g.index)) domains[t.domain].push_back(&t);
    }
    for (const auto& [name, members] : domains) {
      plan_domain(g.index, space_groups(g, params.group_sms), members, params, &out);
    }
  }
  return out;
}

}  // namespace gpuos::policies::partition
