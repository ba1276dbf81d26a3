#include "daemon/policy.h"

namespace gpuos::daemon {
namespace {

class OpenPolicy final : public Policy {
 public:
  const char* name() const override { return "open"; }
};

}  // namespace

std::unique_ptr<Policy> make_open_policy() { return std::make_unique<OpenPolicy>(); }

}  // namespace gpuos::daemon
