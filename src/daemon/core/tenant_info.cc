// SPDX-License-Identifier: Apache-2.0
// What gpuosd reports of a tenant (LIST, the metrics endpoint), and its busy time.
#include "daemon/core/tenant_info.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/ipc.h"
#include "gpuos/kv.h"

namespace gpuos::daemon {

gpuos_msg_tenant_info tenant_info(const Tenant& t, uint32_t state, uint64_t exited_ms, const GpuMap& gpus,
                                  const SwapEngine& swap, const SpaceEngine& space) {
  gpuos_msg_tenant_info i{};
  init_header(&i.hdr, GPUOS_MSG_TENANT_INFO, sizeof(i), 0);
  const gpuos_control_block& cb = *t.cb;
  i.tenant_id = t.id;
  i.pid = t.pid;
  i.uid = t.uid;
  i.tenant_class = t.tenant_class;
  i.state = state;
  i.priority = t.priority;
  i.weight = t.weight;
  copy_name(i.name, sizeof(i.name), t.name);
  copy_name(i.pod_namespace, sizeof(i.pod_namespace), t.kube.pod_namespace.c_str());
  copy_name(i.pod_name, sizeof(i.pod_name), t.kube.pod_name.c_str());
  copy_name(i.pod_uid, sizeof(i.pod_uid), t.kube.pod_uid.c_str());
  copy_name(i.claim_uid, sizeof(i.claim_uid), t.kube.claim_uid.c_str());
  i.launches = load(cb.launches);
  i.graph_launches = load(cb.graph_launches);
  i.captured_launches = load(cb.captured_launches);
  i.gate_waits = load(cb.gate_waits);
  i.gate_wait_ns = load(cb.gate_wait_ns);
  i.mem_used_bytes = gpus.at_most_all(load(cb.mem_used_bytes));  // tenant-written: bounded
  i.mem_peak_bytes = gpus.at_most_all(load(cb.mem_peak_bytes));
  i.mem_quota_bytes = t.granted.quota_bytes;  // what gpuosd granted, whatever the word says
  i.alloc_calls = load(cb.alloc_calls);
  i.alloc_failures = load(cb.alloc_failures);
  i.registered_unix_ms = t.registered_unix_ms;
  i.exited_unix_ms = exited_ms;
  i.swappable = load(cb.swappable);
  i.swap_state = load(cb.swap_state);
  i.swapped_bytes = load(cb.swapped_bytes);
  i.swap_outs = load(cb.swap_outs);
  i.swap_ins = load(cb.swap_ins);
  i.swap_out_bytes = load(cb.swap_out_bytes);
  i.swap_in_bytes = load(cb.swap_in_bytes);
  i.swap_out_ns = load(cb.swap_out_ns);
  i.swap_in_ns = load(cb.swap_in_ns);
  i.max_swap_in_ns = load(cb.max_swap_in_ns);
  i.mem_waits = load(cb.mem_waits);
  i.mem_wait_ns = load(cb.mem_wait_ns);
  i.mem_borrow_bytes = t.granted.borrow_bytes;
  i.mem_imported_bytes = load(cb.mem_imported_bytes);
  i.verified_mem_bytes = t.verify.mem_bytes;
  i.violations = t.verify.usage.violations;
  i.gpu_time_ns = t.verify.gpu_time_ns;
  i.energy_mj = t.verify.energy_mj;
  i.max_slowdown_permille = t.granted.max_slowdown_permille;
  i.slowdown_permille = t.budget.slowdown_permille;
  i.be_share_permille = t.budget.be_share_permille;
  i.slowdown_step_permille = t.budget.step_permille;
  i.slowdown_admission_permille = t.budget.admission_permille;
  i.mps_cost_permille = t.budget.mps_cost_permille;
  i.budget_limit = t.budget.limit;
  i.detached = state != GPUOS_TENANT_EXITED && t.detached ? 1 : 0;
  i.long_launches = load(cb.long_launches);
  if (state != GPUOS_TENANT_EXITED) {
    // Sized in SM groups (beside a guaranteed tenant on the whole GPU): its share is the part of
    // its planned groups it may use, times its time share on them.
    uint32_t planned = 0;
    for (const uint64_t mask : t.space.planned) planned = std::max<uint32_t>(planned, std::popcount(mask));
    const slots::Pacing& p = t.granted.pacing;
    i.pace_permille = p.groups != 0 && planned != 0 ? std::min(p.groups, planned) * p.permille / planned : p.permille;
    i.pace_max_kernel_us = p.max_kernel_us;
  }
  i.kv_resident_bytes = swap.kv_bytes(t);
  i.kv_reserved_bytes = load(cb.kv_reserved_bytes);
  i.kv_queue_depth = load(cb.kv_queue_depth);
  // The tenant's words, shown as it wrote them once they are consistent (they decide nothing).
  const uint32_t capacity = load(cb.engine_slots_capacity), active = load(cb.engine_slots_active);
  if (capacity != 0 && capacity <= GPUOS_KV_MAX_SLOTS && active <= capacity) {
    i.engine_slots_active = active;
    i.engine_slots_capacity = capacity;
  }
  i.kv_target_bytes = t.kv.target_on ? t.kv.target_bytes : UINT64_MAX;
  if (state != GPUOS_TENANT_EXITED) {  // who holds the gate closed, so ps can tell a hold from gating
    i.gate_by = (t.gate.pinned ? GPUOS_GATE_BY_ADMIN : 0u) |
                (t.gate.policy_gate == GPUOS_GATE_CLOSED || t.gate.closed_ordinals == GateState::kAllOrdinals
                     ? GPUOS_GATE_BY_POLICY
                     : 0u) |
                (t.gate.held ? GPUOS_GATE_BY_MEMORY : 0u);
    if (t.gate.word() == GPUOS_GATE_PARTIAL) {
      i.gate_by |= static_cast<uint32_t>(t.gate.closed_gpus & 0xffff) << GPUOS_GATE_BY_POLICY_ON_GPUS_SHIFT;
    }
  }
  if (state != GPUOS_TENANT_EXITED && t.busy.waiting_since_ns != 0 && t.busy.obs_ns > t.busy.waiting_since_ns) {
    i.gate_waiting_ms = static_cast<uint32_t>(std::min<uint64_t>((t.busy.obs_ns - t.busy.waiting_since_ns) / 1000000, UINT32_MAX));
  }
  copy_name(i.space_domain, sizeof(i.space_domain), t.space.domain);
  const uint32_t home = gpus.home(t);
  const int home_ordinal = gpus.ordinal_of(t, home);
  i.space_mask = home_ordinal >= 0 ? t.space.masks[home_ordinal] : 0;
  i.space_sms = space.mask_sms(i.space_mask, home);
  i.space_active = load(cb.space_active);
  i.space_launches = load(cb.space_launches);
  i.space_switches = load(cb.space_switches);
  i.space_failures = load(cb.space_failures);
  if (const uint64_t kernels = load(cb.space_timed_kernels); kernels != 0) {
    i.space_kernel_ns = static_cast<uint32_t>(std::min<uint64_t>(load(cb.space_timed_ns) / kernels, UINT32_MAX));
  }
  if (t.space.sized_sms != 0 && t.space.asked_sms == 0) {
    i.space_default_sms = t.space.default_sms;
    i.space_sized_permille = static_cast<uint32_t>(std::lround(std::clamp(t.space.sized_latency, 0.0, 1e6) * 1000));
  }
  return i;
}

void observe_busy(Tenant& t, uint64_t now) {
  if (t.cb == nullptr) return;
  BusyState& b = t.busy;
  if (now > b.obs_ns && b.busy) b.busy_ns += now - b.obs_ns;
  if (now >= b.obs_ns) b.obs_ns = now;
  b.busy = load(t.cb->busy) != 0;
  // A wait counts only at a gate gpuosd holds closed and from when gpuosd saw it: the tenant's word
  // (untrusted) can neither lengthen a wait nor claim one at an open gate.
  if (load(t.cb->waiting) == 0 || t.gate.word() == GPUOS_GATE_OPEN) {
    b.waiting_since_ns = 0;
  } else if (b.waiting_since_ns == 0) {
    b.waiting_since_ns = std::max<uint64_t>(b.obs_ns, 1);
  }
}

GpuBusyClock::GpuBusyClock(const GpuMap& map, std::size_t gpu_count)
    : map_(map), gpus_(std::max<std::size_t>(1, std::min<std::size_t>(gpu_count, GPUOS_MAX_DEVICES))) {}

void GpuBusyClock::observe(const std::map<uint32_t, Tenant>& tenants, uint64_t now) {
    for (std::size_t g = 0; g < gpus_.size(); ++g) {
    Gpu& b = gpus_[g];
    if (now > b.obs_ns && b.busy) b.busy_ns += now - b.obs_ns;
    if (now >= b.obs_ns) b.obs_ns = now;
    b.busy = false;
    for (const auto& [id, t] : tenants) {
      if (!t.busy.busy) continue;
      bool holds_any = false;
      for (int d = 0; d < GPUOS_MAX_DEVICES && !holds_any; ++d) holds_any = load(t.cb->mem_used_per_device[d]) != 0;
      if (holds_any ? map_.used_on(t, static_cast<uint32_t>(g)) != 0 : g == 0) {
        b.busy = true;
        break;
      }
    }
  }
}

uint64_t GpuBusyClock::busy_ns(uint32_t index) const { return index < gpus_.size() ? gpus_[index].busy_ns : 0; }

}  // namespace gpuos::daemon
