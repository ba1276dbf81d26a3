// SPDX-License-Identifier: Apache-2.0
// Admission stage 2, validate (admission.h).
#include <string>

#include "common/ipc.h"
#include "common/tenant_numbers.h"
#include "daemon/core/admission.h"

namespace gpuos::daemon::admission {

Verdict validate(const Connection& conn, const gpuos_msg_register& m) {
  if (conn.tenant_id != 0) {
    return Verdict::refuse(GPUOS_ERR_BAD_MESSAGE, "this connection already registered a tenant");
  }
  if (!has_nul(m.name, sizeof(m.name))) return Verdict::refuse(GPUOS_ERR_BAD_MESSAGE, "name is not NUL-terminated");
  if (!has_nul(m.space_domain, sizeof(m.space_domain))) {
    return Verdict::refuse(GPUOS_ERR_BAD_MESSAGE, "space_domain is not NUL-terminated");
  }
  // The class and each number in its range (tenant_numbers.h: the same check as the CLI's and the
  // claims'): the tenant's own word, bounded.
  char why[GPUOS_TEXT_MAX];
  if (!check_tenant_numbers(numbers_of(m), why, sizeof(why))) return Verdict::refuse(GPUOS_ERR_BAD_MESSAGE, why);
  return {};
}

}  // namespace gpuos::daemon::admission
