// Admission stage 2, validate (admission.h).
#include <string>

#include "common/ipc.h"
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
  if (m.tenant_class != GPUOS_CLASS_GUARANTEED && m.tenant_class != GPUOS_CLASS_BEST_EFFORT) {
    return Verdict::refuse(GPUOS_ERR_BAD_MESSAGE, "unknown tenant class " + std::to_string(m.tenant_class));
  }
  if (m.weight < 1 || m.weight > 10000) {
    return Verdict::refuse(GPUOS_ERR_BAD_MESSAGE, "weight " + std::to_string(m.weight) + " out of range 1..10000");
  }
  return {};
}

}  // namespace gpuos::daemon::admission
