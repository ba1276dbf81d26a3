// SPDX-License-Identifier: Apache-2.0
// Admission stage 5, admit (admission.h): the config's word, then the time gate's.
#include <algorithm>
#include <cstdio>

#include "common/ipc.h"
#include "common/log.h"
#include "daemon/core/admission.h"

namespace gpuos::daemon::admission {

Verdict admit(const AdmitOptions& o, SlotRunner<slots::TimeGate>& time_gate, const GateEngine& gates,
              const Connection& conn, const Claim* claim, const gpuos_msg_register& m, Tenant& t,
              slots::Admission* out, std::string* lowered_why) {
  if (m.space_domain[0] != '\0') {
    // Spatial sharing is only among tenants of one trust domain (MPS gives no fault isolation):
    // the config says who may join. A tenant that may not is admitted, time-shared.
    // (A claim's domain was an admin's choice: only whether the domain exists is asked.)
    Peer asker = conn.peer;
    if (claim != nullptr) asker.admin = true;
    std::string no = o.space_admit ? o.space_admit(m.space_domain, asker)
                                   : std::string("no spatial domains are configured");
    if (no.empty()) {
      copy_name(t.space.domain, sizeof(t.space.domain), m.space_domain);
      t.space.asked_sms = m.space_sms;
    } else {
      log::warn("pid %d (%s) asked for spatial domain \"%s\": %s; admitted time-shared", m.pid, t.name,
                m.space_domain, no.c_str());
    }
  }

  // Why a tenant that asked for guaranteed got less: the REGISTER reply's text tells the tenant, which
  // tells its user (its class alone would not say why).
  lowered_why->clear();
  if (m.tenant_class == GPUOS_CLASS_GUARANTEED && o.guaranteed_needs_admin && !conn.peer.admin && claim == nullptr) {
    // A tenant never raises its own class: guaranteed is granted to admins only.
    log::warn("pid %d (%s, uid %u) asked for guaranteed; admitted as best-effort (not an admin)", m.pid,
              t.name, static_cast<unsigned>(conn.peer.uid));
    t.tenant_class = GPUOS_CLASS_BEST_EFFORT;
    *lowered_why = "guaranteed is for admins and uid " + std::to_string(conn.peer.uid) +
                   " is not one, see [tenants] guaranteed";
  }
  // A latency budget is what a guaranteed tenant may lose to best-effort tenants (its range was
  // checked at validate; a best-effort tenant has none: it is not guaranteed anything).
  slots::Admission prefilled;
  prefilled.granted_class = t.tenant_class;
  prefilled.mem_quota_bytes = m.requested_mem_bytes;
  prefilled.mem_borrow_bytes = m.requested_borrow_bytes;
  const uint64_t cap = o.mem_quota_cap_bytes;
  // A tenant never grants itself more memory than the config allows: for a non-admin, quota and
  // borrowable bytes together stay within the cap.
  auto apply_cap = [&](slots::Admission& a) {
    if (cap == 0 || conn.peer.admin || claim != nullptr) return;  // (a claim was checked against it)
    if (a.mem_quota_bytes == 0 || a.mem_quota_bytes > cap) a.mem_quota_bytes = cap;
    a.mem_borrow_bytes = std::min(a.mem_borrow_bytes, cap - a.mem_quota_bytes);
  };
  apply_cap(prefilled);
  if (t.tenant_class == GPUOS_CLASS_GUARANTEED) {  // (admit sees it; dropped at the grant if the class is lowered)
    t.granted.max_slowdown_permille =
        m.max_slowdown_permille != 0 ? m.max_slowdown_permille : o.default_max_slowdown_permille;
  }
  slots::Admission& adm = *out;
  adm = prefilled;
  if (!time_gate.run("admit", [&](slots::TimeGate& p) { p.admit(gates.tenant_view(t), &adm); })) adm = prefilled;
  if (adm.status != GPUOS_OK) {
    char why[GPUOS_TEXT_MAX];
    std::snprintf(why, sizeof(why), "refused by policy %s: %s", time_gate.policy().name(), adm.reason.c_str());
    log::info("registration of pid %d (%s): %s", m.pid, t.name, why);
    return Verdict::refuse(adm.status, why);
  }
  // Lower only: GUARANTEED(1) is above BEST_EFFORT(2).
  if (adm.granted_class == GPUOS_CLASS_GUARANTEED || adm.granted_class == GPUOS_CLASS_BEST_EFFORT) {
    if (!(t.tenant_class == GPUOS_CLASS_BEST_EFFORT && adm.granted_class == GPUOS_CLASS_GUARANTEED)) {
      if (t.tenant_class != adm.granted_class) {
        *lowered_why = std::string("so admitted by the time policy ") + time_gate.policy().name();
      }
      t.tenant_class = adm.granted_class;
    }
  }
  apply_cap(adm);
  if (adm.mem_quota_bytes == 0) adm.mem_borrow_bytes = 0;  // borrowing is on top of a quota
  if (adm.mem_borrow_bytes > UINT64_MAX - adm.mem_quota_bytes) adm.mem_borrow_bytes = UINT64_MAX - adm.mem_quota_bytes;
  return {};
}

}  // namespace gpuos::daemon::admission
