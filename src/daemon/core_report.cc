// What the core reports: LIST's tenant and GPU records, and the counters of the metrics endpoint
// (busy time integrated from the tenants' busy words).
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "common/ipc.h"
#include "daemon/core.h"

namespace gpuos::daemon {
gpuos_msg_tenant_info Core::snapshot(const Tenant& t, uint32_t state, uint64_t exited_ms) const {
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
  i.mem_used_bytes = gpu_map_.at_most_all(load(cb.mem_used_bytes));  // tenant-written: bounded
  i.mem_peak_bytes = gpu_map_.at_most_all(load(cb.mem_peak_bytes));
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
  if (state != GPUOS_TENANT_EXITED) {
    // Sized in SM groups (beside a guaranteed tenant on the whole GPU): its share is the part of
    // its planned groups it may use, times its time share on them.
    uint32_t planned = 0;
    for (const uint64_t mask : t.space.planned) planned = std::max<uint32_t>(planned, std::popcount(mask));
    const slots::Pacing& p = t.granted.pacing;
    i.pace_permille = p.groups != 0 && planned != 0 ? std::min(p.groups, planned) * p.permille / planned : p.permille;
    i.pace_max_kernel_us = p.max_kernel_us;
  }
  i.kv_resident_bytes = swap_engine_.kv_bytes(t);
  i.kv_reserved_bytes = load(cb.kv_reserved_bytes);
  i.kv_queue_depth = load(cb.kv_queue_depth);
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
  const uint32_t home = gpu_map_.home(t);
  const int home_ordinal = gpu_map_.ordinal_of(t, home);
  i.space_mask = home_ordinal >= 0 ? t.space.masks[home_ordinal] : 0;
  i.space_sms = space_engine_.mask_sms(i.space_mask, home);
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

Outcome Core::on_list(Connection& conn, const gpuos_msg_list& m) {
  if ((m.flags & ~(GPUOS_LIST_INCLUDE_EXITED | GPUOS_LIST_WITH_GPUS)) != 0) {
    char why[GPUOS_TEXT_MAX];
    std::snprintf(why, sizeof(why), "unknown LIST flags 0x%x", m.flags);
    return refuse(m.hdr.seq, GPUOS_ERR_BAD_MESSAGE, why);
  }
  Outcome o;
  const uint32_t seq = m.hdr.seq;
  for (const GpuInfo& g : opts_.gpus) {
    gpuos_msg_gpu_info gi{};
    init_header(&gi.hdr, GPUOS_MSG_GPU_INFO, sizeof(gi), seq);
    gi.index = g.index;
    gi.sm_count = g.sm_count;
    gi.total_mem_bytes = g.total_mem_bytes;
    uint64_t used = 0;
    if (g.index < GPUOS_MAX_DEVICES) {
      for (const auto& [id, t] : tenants_) used += gpu_map_.used_on(t, g.index);
    }
    gi.used_mem_bytes = used;
    copy_name(gi.name, sizeof(gi.name), g.name.c_str());
    // gpuos_msg_gpu_info::uuid (40 bytes) cannot hold "GPU-" + 36 + NUL: it carries the bare 36-char
    // UUID and clients print the "GPU-" prefix.
    const char* uuid = g.uuid.c_str();
    if (g.uuid.rfind("GPU-", 0) == 0) uuid += 4;
    copy_name(gi.uuid, sizeof(gi.uuid), uuid);
    o.replies.push_back(encode(gi));
  }
  uint32_t count = 0;
  if (m.flags & GPUOS_LIST_INCLUDE_EXITED) {
    for (gpuos_msg_tenant_info i : history_) {
      i.hdr.seq = seq;
      o.replies.push_back(encode(i));
      ++count;
    }
  }
  const uint64_t now = now_mono_ns();
  for (auto& [id, t] : tenants_) {
    observe_busy(t, now);  // the gate wait in progress up to now
    // The gate gpuosd set, not the word the tenant may have rewritten.
    gpuos_msg_tenant_info i =
        snapshot(t, t.gate.word() == GPUOS_GATE_CLOSED ? GPUOS_TENANT_GATED : GPUOS_TENANT_RUNNING, 0);
    i.hdr.seq = seq;
    o.replies.push_back(encode(i));
    ++count;
    if ((m.flags & GPUOS_LIST_WITH_GPUS) == 0) continue;
    for (const GpuInfo& g : opts_.gpus) {
      if (g.index >= GPUOS_MAX_DEVICES) continue;
      const uint64_t used = gpu_map_.used_on(t, g.index);
      if (used == 0 && (g.index >= 64 || (t.verify.gpus >> g.index & 1u) == 0)) continue;
      gpuos_msg_tenant_gpu tg{};
      init_header(&tg.hdr, GPUOS_MSG_TENANT_GPU, sizeof(tg), seq);
      tg.tenant_id = t.id;
      tg.gpu = g.index;
      tg.mem_used_bytes = used;
      const uint32_t word = t.gate.word();
      tg.gated = word == GPUOS_GATE_CLOSED || (word == GPUOS_GATE_PARTIAL && (t.gate.closed_gpus >> g.index & 1u) != 0);
      o.replies.push_back(encode(tg));
    }
  }
  observe_gpus(now);
  o.replies.push_back(make_reply(GPUOS_MSG_LIST_END, seq, GPUOS_OK, count, "end"));
  return o;
}

void Core::observe_busy(Tenant& t, uint64_t now) {
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

std::vector<TenantStat> Core::tenant_stats(uint64_t now_mono_ns) {
  std::vector<TenantStat> out;
  out.reserve(tenants_.size());
  for (auto& [id, t] : tenants_) {
    observe_busy(t, now_mono_ns);
    TenantStat st;
    st.info = snapshot(t, t.gate.word() == GPUOS_GATE_CLOSED ? GPUOS_TENANT_GATED : GPUOS_TENANT_RUNNING, 0);
    st.violations = t.verify.usage.violations;
    st.verified_mem_bytes = t.verify.mem_bytes;
    st.busy = t.busy.busy;
    st.waiting = load(t.cb->waiting) != 0;
    st.busy_ns = t.busy.busy_ns;
    for (int i = 0; i < GPUOS_GATE_WAIT_BUCKETS; ++i) st.gate_wait_hist[i] = load(t.cb->gate_wait_hist[i]);
    for (uint32_t g = 0; g < GPUOS_MAX_DEVICES; ++g) st.mem_used_per_device[g] = gpu_map_.used_on(t, g);
    out.push_back(st);
  }
  observe_gpus(now_mono_ns);
  return out;
}

void Core::observe_gpus(uint64_t now) {
  if (gpu_busy_.empty()) gpu_busy_.resize(std::max<std::size_t>(1, std::min<std::size_t>(opts_.gpus.size(), GPUOS_MAX_DEVICES)));
  for (std::size_t g = 0; g < gpu_busy_.size(); ++g) {
    GpuBusy& b = gpu_busy_[g];
    if (now > b.obs_ns && b.busy) b.busy_ns += now - b.obs_ns;
    if (now >= b.obs_ns) b.obs_ns = now;
    b.busy = false;
    for (const auto& [id, t] : tenants_) {
      if (!t.busy.busy) continue;
      bool holds_any = false;
      for (int d = 0; d < GPUOS_MAX_DEVICES && !holds_any; ++d) holds_any = load(t.cb->mem_used_per_device[d]) != 0;
      if (holds_any ? gpu_map_.used_on(t, static_cast<uint32_t>(g)) != 0 : g == 0) {
        b.busy = true;
        break;
      }
    }
  }
}

uint64_t Core::gpu_busy_ns(uint32_t index) const {
  return index < gpu_busy_.size() ? gpu_busy_[index].busy_ns : 0;
}

uint64_t Core::gpu_used_bytes(uint32_t index) const {
  uint64_t used = 0;
  if (index >= GPUOS_MAX_DEVICES) return 0;
  for (const auto& [id, t] : tenants_) used += gpu_map_.used_on(t, index);
  return used;
}

}  // namespace gpuos::daemon
