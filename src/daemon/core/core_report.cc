// SPDX-License-Identifier: Apache-2.0
// What the core reports: LIST's tenant and GPU records, and the counters of the metrics endpoint
// (busy time integrated from the tenants' busy words).
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "common/ipc.h"
#include "daemon/core/core.h"
#include "daemon/core/tenant_info.h"

namespace gpuos::daemon {
Outcome Core::on_list(Connection& conn, const gpuos_msg_list& m) {
  if ((m.flags & ~(GPUOS_LIST_INCLUDE_EXITED | GPUOS_LIST_WITH_GPUS)) != 0) {
    char why[GPUOS_TEXT_MAX];
    std::snprintf(why, sizeof(why), "unknown LIST flags 0x%x", m.flags);
    return refuse(m.hdr.seq, GPUOS_ERR_BAD_MESSAGE, why);
  }
  Outcome o;
  const uint32_t seq = m.hdr.seq;
  // A user sees their own tenants and what those hold, an admin everything (peer.h: sees_tenant);
  // the metrics endpoint stays complete for its scraper.
  auto visible = [&](uid_t uid) { return sees_tenant(conn.peer, uid); };
  for (const GpuInfo& g : opts_.gpus) {
    gpuos_msg_gpu_info gi{};
    init_header(&gi.hdr, GPUOS_MSG_GPU_INFO, sizeof(gi), seq);
    gi.index = g.index;
    gi.sm_count = g.sm_count;
    gi.total_mem_bytes = g.total_mem_bytes;
    uint64_t used = 0;
    if (g.index < GPUOS_MAX_DEVICES) {
      for (const auto& [id, t] : tenants_) {
        if (visible(t.uid)) used += gpu_map_.used_on(t, g.index);
      }
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
      if (!visible(i.uid)) continue;
      i.hdr.seq = seq;
      o.replies.push_back(encode(i));
      ++count;
    }
  }
  const uint64_t now = now_mono_ns();
  for (auto& [id, t] : tenants_) {
    observe_busy(t, now);  // the gate wait in progress up to now
    if (!visible(t.uid)) continue;
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
  gpu_busy_.observe(tenants_, now);
  o.replies.push_back(make_reply(GPUOS_MSG_LIST_END, seq, GPUOS_OK, count, "end"));
  return o;
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
  gpu_busy_.observe(tenants_, now_mono_ns);
  return out;
}

uint64_t Core::gpu_used_bytes(uint32_t index) const {
  uint64_t used = 0;
  if (index >= GPUOS_MAX_DEVICES) return 0;
  for (const auto& [id, t] : tenants_) used += gpu_map_.used_on(t, index);
  return used;
}

}  // namespace gpuos::daemon
