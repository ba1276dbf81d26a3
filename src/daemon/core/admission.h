// SPDX-License-Identifier: Apache-2.0
// A REGISTER's way to a live tenant, in named stages (Core::on_register runs them in this order;
// the first refusal ends it and is the REGISTER_REPLY's status and text):
//   1. claim     (admission_claim.cc)    on a claim's socket, the claim's settings replace the asked
//   2. validate  (admission_validate.cc) the message alone: one tenant per connection, names, class, weight
//   3. identity  (admission_identity.cc) the pid is the peer's (3a, before the limits); the
//                                        tenant's id, kept across a reconnect or a gpuosd restart,
//                                        and its pod (3b, 3c, after them: a refused one takes no id)
//   4. limits    (admission_limits.cc)   one tenant per process, per uid (or claim), table size
//   5. admit     (admission_admit.cc)    the config's word (spatial domain, guaranteed for admins,
//                                        latency budget, quota cap), then the time gate's admit hook
//   6. grant     (admission_grant.cc)    the tenant's blocks made and the grant written into them
// Each stage is a function of what it is given; none keeps state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "daemon/core/claims.h"
#include "daemon/core/gate_engine.h"
#include "daemon/core/id_ledger.h"
#include "daemon/core/peer.h"
#include "daemon/core/slot_runner.h"
#include "daemon/core/tenant.h"
#include "gpuos/abi.h"
#include "slots/time_gate.h"

namespace gpuos::daemon::admission {

// A stage's answer: OK (go on), or the status and why of the refusal.
struct Verdict {
  gpuos_status status = GPUOS_OK;
  std::string why;
  bool refused() const { return status != GPUOS_OK; }
  static Verdict refuse(gpuos_status st, std::string why) { return Verdict{st, std::move(why)}; }
};

// 1. A claim's tenant gets the claim's settings (an admin's word), whatever it asked for; *claim is
// the claim (null: gpuosd's own socket). NOT_FOUND when the claim is no longer prepared.
Verdict claim(const ClaimStore& claims, const Connection& conn, gpuos_msg_register* m, const Claim** claim);

// 2. The message alone: a connection registers once; NUL-terminated names; a known class; weight 1..10000.
Verdict validate(const Connection& conn, const gpuos_msg_register& m);

// 3a. The pid is the peer's: a tenant in a container says its pid in its own pid namespace, which
// must be the peer's innermost pid (innermost: null = /proc); m->pid becomes the host's.
Verdict check_pid(const Connection& conn, const std::function<pid_t(pid_t)>& innermost, gpuos_msg_register* m);

// 3b. The tenant's id, and what it kept if it is the same process again. A process whose connection
// closed and that registers anew (its tenant `detached`, the same process: Core checks) gets its
// old tenant back (*back: its id, hold and usage record); after a gpuosd restart a tenant gets the
// id it had when the ledger says it was this very process's and this gpuosd never used it;
// otherwise the next free id, never one the ledger keeps for another.
struct Identity {
  const std::map<uint32_t, Tenant>& tenants;
  const Tenant* detached;  // this process's detached tenant (null: none)
  IdLedger& ids;
  const std::deque<gpuos_msg_tenant_info>& history;
  uint32_t next_id;
};
uint32_t choose_id(Identity in, const Connection& conn, const gpuos_msg_register& m, uint64_t start_time,
                   std::optional<Retained>* back);
// 3c. Who the tenant is: pid, uid, class asked, priority, weight, name, and its pod (the claim's, or
// the pod the kubelet's cgroup proves it in, pod_uid_of: null = /proc under `cgroups`).
void fill_identity(Tenant& t, const Connection& conn, const gpuos_msg_register& m, const Claim* claim,
                   const ClaimStore& claims, const std::function<std::string(pid_t)>& pod_uid_of,
                   const PodCgroups& cgroups);

// 4. The table's limits.
struct Limits {
  uint32_t max_tenants = 256;
  uint32_t max_tenants_per_uid = 0;  // non-admins' (a claim's tenants count per claim); 0 = no cap
  bool one_tenant_per_pid = true;
  uint32_t replaces = 0;  // the detached tenant this registration takes over (not counted; 0: none)
};
Verdict limits(const Limits& l, const std::map<uint32_t, Tenant>& tenants, const Connection& conn, pid_t pid,
               const Claim* claim);

// 5. The config's word, then the time gate's. On OK, *out is the admission to grant (class lowered
// only, quota and borrow capped) and t's class and latency budget are set; *lowered_why says why a
// tenant that asked for guaranteed got less ("" = not lowered, or lowered by the policy silently).
struct AdmitOptions {
  bool guaranteed_needs_admin = false;
  uint64_t mem_quota_cap_bytes = 0;
  uint32_t default_max_slowdown_permille = 0;
  // May this peer's tenant join spatial domain `domain`? "" = yes (CoreOptions::space_admit).
  std::function<std::string(const std::string& domain, const Peer& peer)> space_admit;
};
Verdict admit(const AdmitOptions& o, SlotRunner<slots::TimeGate>& time_gate, const GateEngine& gates,
              const Connection& conn, const Claim* claim, const gpuos_msg_register& m, Tenant& t,
              slots::Admission* out, std::string* lowered_why);

// 6. Makes t's blocks and writes its grant (quota, borrow, max_inflight, idle grace, sampling,
// spatial SM groups; gate `gate`, or closed when `held`). INTERNAL when the blocks cannot be made.
Verdict grant(Tenant& t, const slots::Admission& adm, uint32_t gate, bool held, uint32_t space_group_sms,
              uint64_t now_mono_ns);

}  // namespace gpuos::daemon::admission
