// SPDX-License-Identifier: Apache-2.0
// Admission stage 3, identity (admission.h): the pid, the tenant's id and its pod.
#include <algorithm>
#include <cstdio>

#include "common/ipc.h"
#include "common/log.h"
#include "daemon/core/admission.h"

namespace gpuos::daemon::admission {

Verdict check_pid(const Connection& conn, const std::function<pid_t(pid_t)>& innermost, gpuos_msg_register* m) {
  // A tenant in a container knows its pid in its own pid namespace, gpuosd the host's: the REGISTER
  // pid is checked against the peer's innermost pid, and gpuosd keeps the host's.
  if (m->pid == conn.peer.pid) return {};
  const pid_t inner = innermost ? innermost(conn.peer.pid) : innermost_pid(conn.peer.pid);
  if (inner != m->pid || inner == 0) {
    char why[GPUOS_TEXT_MAX];
    std::snprintf(why, sizeof(why), "pid %d does not match the socket peer (pid %d)", m->pid,
                  static_cast<int>(conn.peer.pid));
    log::warn("refused registration: %s", why);
    return Verdict::refuse(GPUOS_ERR_PERMISSION, why);
  }
  m->pid = conn.peer.pid;
  return {};
}

uint32_t choose_id(Identity in, const Connection& conn, const gpuos_msg_register& m, uint64_t start_time,
                   std::optional<Retained>* back) {
  uint32_t id = in.next_id;
  // The same process again (its connection closed, it registers anew): its old tenant back, with
  // its id, its hold (the ledger) and the usage check's strikes, whatever it asks for.
  if (const Tenant* d = in.detached; d != nullptr && d->pid == m.pid && d->start_time != 0 &&
                                     d->start_time == start_time && d->uid == conn.peer.uid) {
    *back = Retained{d->start_time, d->uid, d->id, d->gate.pinned, d->verify.usage};
    return d->id;
  }
  // Re-registration after a daemon restart: keep the id the tenant had if this daemon never used
  // it (not live, not in the history), so ps, metrics and admins keep seeing the same tenant; and
  // only if the ledger says it was this very process's (another user cannot take it). New tenants
  // skip the ids the ledger keeps (below), so such an id was never given to anyone else here.
  if (const uint32_t prev = m.previous_tenant_id; !*back && prev != 0 && in.tenants.count(prev) == 0 &&
      in.ids.owned_by(prev, conn.peer.uid, m.pid) &&
      std::none_of(in.history.begin(), in.history.end(),
                   [&](const gpuos_msg_tenant_info& h) { return h.tenant_id == prev; }) &&
      prev < 0x80000000u) {  // (bounded: a lying tenant cannot wrap the ids)
    id = prev;
  }
  // Never two live tenants with one id, and not the id of a survivor of the previous daemon that has
  // yet to re-register (the ledger keeps it, and its hold, for that process).
  while (in.tenants.count(id) != 0 || id == 0 || in.ids.kept_for_another(id, conn.peer.uid, m.pid)) ++id;
  return id;
}

void fill_identity(Tenant& t, const Connection& conn, const gpuos_msg_register& m, const Claim* claim,
                   const ClaimStore& claims, const std::function<std::string(pid_t)>& pod_uid_of,
                   const PodCgroups& cgroups) {
  t.pid = m.pid;
  t.uid = conn.peer.uid;
  t.tenant_class = m.tenant_class;
  t.priority = m.priority;
  t.weight = m.weight;
  t.requested_mem_bytes = m.requested_mem_bytes;
  copy_name(t.name, sizeof(t.name), m.name);
  if (claim != nullptr) {
    t.kube.claim_uid = claim->uid;
    t.kube.pod_namespace = claim->claim_namespace;
    t.kube.pod_name = claim->pod_name;
    t.kube.pod_uid = claim->pod_uid;
    return;
  }
  // A process in a pod that came by gpuosd's own socket: the kubelet's cgroup it is in proves the
  // pod. A pod named elsewhere (a user's own cgroup) labels nothing.
  if (pod_uid_of) {
    t.kube.pod_uid = pod_uid_of(m.pid);
  } else {
    PodOfProcess pod = pod_of_process(m.pid, "/proc", cgroups);
    if (!pod.refusal.empty()) {
      log::warn("pid %d (uid %u) is given no pod: %s", static_cast<int>(m.pid), static_cast<unsigned>(t.uid),
                pod.refusal.c_str());
    }
    t.kube.pod_uid = std::move(pod.uid);
  }
  for (const auto& [uid, c] : claims.all()) {
    if (!t.kube.pod_uid.empty() && c.pod_uid == t.kube.pod_uid) {
      t.kube.pod_namespace = c.claim_namespace;
      t.kube.pod_name = c.pod_name;
    }
  }
}

}  // namespace gpuos::daemon::admission
