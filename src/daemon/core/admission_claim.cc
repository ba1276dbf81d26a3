// SPDX-License-Identifier: Apache-2.0
// Admission stage 1, claim (admission.h).
#include <cstring>

#include "common/ipc.h"
#include "daemon/core/admission.h"

namespace gpuos::daemon::admission {

Verdict claim(const ClaimStore& claims, const Connection& conn, gpuos_msg_register* m, const Claim** out) {
  *out = nullptr;
  if (conn.claim_uid.empty()) return {};
  const Claim* c = claims.find(conn.claim_uid);
  if (c == nullptr) return Verdict::refuse(GPUOS_ERR_NOT_FOUND, "this claim is no longer prepared");
  m->tenant_class = c->tenant_class;
  m->priority = c->priority;
  m->weight = c->weight;
  m->requested_mem_bytes = c->mem_bytes;
  m->requested_borrow_bytes = c->borrow_bytes;
  m->max_slowdown_permille = c->max_slowdown_permille;
  m->space_sms = c->space_sms;
  std::memset(m->space_domain, 0, sizeof(m->space_domain));
  copy_name(m->space_domain, sizeof(m->space_domain), c->space_domain.c_str());
  *out = c;
  return {};
}

}  // namespace gpuos::daemon::admission
