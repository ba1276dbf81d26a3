// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/enforce.h"

namespace gpuos::daemon {

bool parse_enforce_mode(std::string_view text, EnforceMode* out) {
  if (text == "report") *out = EnforceMode::kReport;
  else if (text == "freeze") *out = EnforceMode::kFreeze;
  else if (text == "kill") *out = EnforceMode::kKill;
  else return false;
  return true;
}

EnforceAction decide_enforcement(const EnforceParams& p, uint32_t rounds_in_a_row) {
  // One round can be a measurement's edge (memory freed between two queries, a kernel that was on
  // the GPU when the gate closed): act only on a finding that persists.
  if (p.mode == EnforceMode::kReport || rounds_in_a_row < p.grace_rounds) return EnforceAction::kReport;
  return p.mode == EnforceMode::kFreeze ? EnforceAction::kFreeze : EnforceAction::kKill;
}

}  // namespace gpuos::daemon
