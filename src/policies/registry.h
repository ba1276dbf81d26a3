// The scheduling policies gpuosd can run, by name (gpuos::kSchedulerPolicies lists the names).
#pragma once

#include <memory>
#include <string_view>

#include "daemon/config.h"
#include "daemon/policy.h"

namespace gpuos::policies {

// A new policy of that name configured from cfg; null for an unknown name.
std::unique_ptr<daemon::Policy> make_policy(std::string_view name, const SchedulerConfig& cfg);

}  // namespace gpuos::policies
