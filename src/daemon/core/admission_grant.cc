// SPDX-License-Identifier: Apache-2.0
// Admission stage 6, grant (admission.h).
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "daemon/core/admission.h"
#include "daemon/core/control_block.h"

namespace gpuos::daemon::admission {

Verdict grant(Tenant& t, const slots::Admission& adm, uint32_t gate, bool held, uint32_t space_group_sms,
              uint64_t now_mono_ns) {
  if (int r = create_tenant_blocks(t, adm.mem_quota_bytes, held ? GPUOS_GATE_CLOSED : gate, now_mono_ns); r < 0) {
    char why[GPUOS_TEXT_MAX];
    std::snprintf(why, sizeof(why), "cannot create the tenant's shared blocks: %s%s", std::strerror(-r),
                  r == -EINVAL ? " (sealing them needs Linux 5.1 or later)" : "");
    log::error("registration of pid %d: %s", t.pid, why);
    return Verdict::refuse(GPUOS_ERR_INTERNAL, why);
  }
  const uint32_t budget = t.tenant_class == GPUOS_CLASS_GUARANTEED ? t.granted.max_slowdown_permille : 0;
  t.granted = Granted{t.tenant_class, adm.mem_quota_bytes, adm.mem_borrow_bytes, adm.max_inflight, adm.idle_grace_us,
                      adm.sample_period, budget, {}};
  std::atomic_ref<uint32_t>(t.grants->sample_period).store(adm.sample_period, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(t.grants->max_inflight).store(adm.max_inflight, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(t.grants->idle_grace_us).store(adm.idle_grace_us, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(t.grants->mem_borrow_bytes).store(adm.mem_borrow_bytes, std::memory_order_relaxed);
  if (t.in_domain()) {
    std::atomic_ref<uint32_t>(t.grants->space_group_sms).store(space_group_sms, std::memory_order_relaxed);
    std::atomic_ref<uint32_t>(t.grants->space_enabled).store(1, std::memory_order_release);
  }
  t.gate.policy_gate = gate;
  t.gate.pinned = held;
  t.busy.obs_ns = now_mono_ns;
  t.swap.resident_since_ns = now_mono_ns;
  return {};
}

}  // namespace gpuos::daemon::admission
