// SPDX-License-Identifier: Apache-2.0
// The built-in policies (slots/builtin.h) as entries of the policy list, so that a config can
// choose them by name: "open", "unconfined", "resident".
#pragma once

#include "policies/registry.h"

namespace gpuos::policies {

extern const PolicyEntry kOpenPolicy;
extern const PolicyEntry kUnconfinedPolicy;
extern const PolicyEntry kResidentPolicy;

}  // namespace gpuos::policies
