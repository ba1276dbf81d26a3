// SPDX-License-Identifier: Apache-2.0
// Admission stage 4, limits (admission.h).
#include <algorithm>
#include <cstdio>

#include "common/log.h"
#include "daemon/core/admission.h"

namespace gpuos::daemon::admission {

Verdict limits(const Limits& l, const std::map<uint32_t, Tenant>& tenants, const Connection& conn, pid_t pid,
               const Claim* claim) {
  char why[GPUOS_TEXT_MAX];
  // One live registration per process: a process is one tenant (a second REGISTER from the same
  // pid, on another connection, would let it hold many slots and many gates).
  for (const auto& [id, o] : tenants) {
    if (l.one_tenant_per_pid && o.pid == pid && id != l.replaces) {
      std::snprintf(why, sizeof(why), "pid %d is already tenant %u", pid, id);
      log::warn("refused registration: %s", why);
      return Verdict::refuse(GPUOS_ERR_LIMIT, why);
    }
  }
  if (l.max_tenants_per_uid != 0 && !conn.peer.admin) {
    // A claim's tenants are counted by claim (containers' uids say nothing across pods).
    const auto of_uid = std::count_if(tenants.begin(), tenants.end(), [&](const auto& e) {
      if (e.first == l.replaces) return false;
      return claim != nullptr ? e.second.kube.claim_uid == claim->uid
                              : e.second.kube.claim_uid.empty() && e.second.uid == conn.peer.uid;
    });
    if (static_cast<uint32_t>(of_uid) >= l.max_tenants_per_uid) {
      std::snprintf(why, sizeof(why), "uid %u has %u live tenants (max_per_uid = %u)",
                    static_cast<unsigned>(conn.peer.uid), l.max_tenants_per_uid, l.max_tenants_per_uid);
      log::warn("refused registration of pid %d: %s", pid, why);
      return Verdict::refuse(GPUOS_ERR_LIMIT, why);
    }
  }
  if (tenants.size() - (l.replaces != 0 && tenants.count(l.replaces) != 0 ? 1 : 0) >= l.max_tenants) {
    std::snprintf(why, sizeof(why), "tenant table full (max_tenants = %u)", l.max_tenants);
    log::warn("refused registration of pid %d: %s", pid, why);
    return Verdict::refuse(GPUOS_ERR_LIMIT, why);
  }
  return {};
}

}  // namespace gpuos::daemon::admission
