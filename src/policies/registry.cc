#include "policies/registry.h"

#include "policies/priority/priority.h"

namespace gpuos::policies {

std::unique_ptr<daemon::Policy> make_policy(std::string_view name, const SchedulerConfig& cfg) {
  if (name == "open") return daemon::make_open_policy();
  if (name == "priority") {
    return std::make_unique<PriorityPolicy>(
        PriorityParams{cfg.be_max_inflight, cfg.idle_grace_us, cfg.be_slice_ms, cfg.signal_grace_ms});
  }
  return nullptr;
}

}  // namespace gpuos::policies
