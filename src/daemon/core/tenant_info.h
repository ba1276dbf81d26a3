// SPDX-License-Identifier: Apache-2.0
// What gpuosd reports of a tenant (LIST's record, the metrics endpoint's), and busy time: each
// tenant's and each GPU's, integrated piecewise-constant between observations of the busy words.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "daemon/core/gpus.h"
#include "daemon/core/space_engine.h"
#include "daemon/core/swap_engine.h"
#include "daemon/core/tenant.h"
#include "gpuos/abi.h"

namespace gpuos::daemon {

// A tenant's LIST record in state `state` (RUNNING, GATED or EXITED; exited_ms: when it exited):
// its counters, bounded where the tenant writes them, and what gpuosd granted it.
gpuos_msg_tenant_info tenant_info(const Tenant& t, uint32_t state, uint64_t exited_ms, const GpuMap& gpus,
                                  const SwapEngine& swap, const SpaceEngine& space);

// Integrates t's busy time up to now from its busy word, and dates a gate wait in progress
// (BusyState::waiting_since_ns).
void observe_busy(Tenant& t, uint64_t now);

// Time each GPU had work of at least one live tenant in flight (a tenant belongs to the GPUs it
// holds memory on; one that holds none counts for GPU 0), from the tenants' last observed busy words.
class GpuBusyClock {
 public:
  GpuBusyClock(const GpuMap& map, std::size_t gpu_count);
  // Integrates up to now and takes the new state from the live tenants (after observe_busy of each).
  void observe(const std::map<uint32_t, Tenant>& tenants, uint64_t now);
  uint64_t busy_ns(uint32_t index) const;

 private:
  struct Gpu {
    bool busy = false;
    uint64_t obs_ns = 0;
    uint64_t busy_ns = 0;
  };
  const GpuMap& map_;
  std::vector<Gpu> gpus_;  // one per GPU (at least one)
};

}  // namespace gpuos::daemon
