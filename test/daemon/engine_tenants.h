// SPDX-License-Identifier: Apache-2.0
// Live tenants for an engine's unit test, without a Core: each with its two real blocks (memfds),
// unmapped and closed when the table goes.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>

#include "daemon/core/control_block.h"
#include "daemon/core/tenant.h"

namespace gpuos::daemon {

struct EngineTenants {
  std::map<uint32_t, Tenant> tenants;
  ~EngineTenants() {
    for (auto& [id, t] : tenants) destroy_tenant_blocks(t);
  }
  Tenant& add(uint32_t id, uint32_t tenant_class = GPUOS_CLASS_BEST_EFFORT, uint64_t quota = 0) {
    Tenant t;
    t.id = id;
    t.pid = static_cast<pid_t>(100000 + id);
    t.tenant_class = tenant_class;
    t.weight = 1;
    EXPECT_EQ(create_tenant_blocks(t, quota, GPUOS_GATE_OPEN, 1), 0);
    t.granted.tenant_class = tenant_class;
    t.granted.quota_bytes = quota;
    return tenants.emplace(id, t).first->second;
  }
};

}  // namespace gpuos::daemon
