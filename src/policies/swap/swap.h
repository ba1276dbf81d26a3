// The `swap` memory policy (memory oversubscription by swapping to host): planner.h's rules.
#pragma once

#include "policies/registry.h"
#include "policies/swap/planner.h"

namespace gpuos::policies {

class SwapPolicy final : public slots::MemoryPolicy {
 public:
  const char* name() const override { return "swap"; }
  slots::MemoryActions decide(const slots::MemoryView& view) override {
    return {swap::plan_swaps(view.tenants, view.params, view.now_ns)};
  }
};

extern const PolicyEntry kSwapPolicy;

}  // namespace gpuos::policies
