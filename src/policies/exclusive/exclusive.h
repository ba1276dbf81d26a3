// SPDX-License-Identifier: Apache-2.0
// The `exclusive` time gate, the example policy of docs/ARCHITECTURE.md ("How to add a policy"):
// one tenant at a time has the GPU, in turn. The holder keeps it while it is active (busy or
// waiting at its gate); when others are active too, it passes on after max_hold_ms, to the next
// active tenant in id order. With nobody active every gate is open, so whoever launches first is
// not held back (two that start at once run together until the next decision). Classes, priorities
// and weights are ignored: it suits a GPU lent to jobs that should never interleave kernels.
//
// Several GPUs: one turn per group of GPUs that active tenants connect (two that share a GPU,
// directly or through others, take turns; a tenant whose GPUs are not known yet is on all of
// them). A tenant is held while a holder of another tenant works on one of its GPUs.
//
//   [policy.exclusive]
//   max_hold_ms = 100   # 1..60000
#pragma once

#include <cstdint>
#include <vector>

#include "policies/registry.h"
#include "slots/time_gate.h"

namespace gpuos::policies {

class ExclusivePolicy final : public slots::TimeGate {
 public:
  explicit ExclusivePolicy(uint64_t max_hold_ns) : max_hold_ns_(max_hold_ns) {}
  const char* name() const override { return "exclusive"; }
  void on_exit(uint32_t tenant_id) override;
  slots::GateActions decide(const slots::GateView& view) override;
  // The holder of the first turn (0 = nobody active); for one group of GPUs.
  uint32_t holder() const { return turns_.empty() ? 0 : turns_.front().holder; }

 private:
  // The turn of one group of GPUs.
  struct Turn {
    uint64_t gpus = 0;          // the group's GPUs (all bits: every GPU)
    uint32_t holder = 0;        // the tenant that has them
    uint32_t last_holder = 0;   // the turn passes on from here
    uint64_t hold_until_ns = 0;
  };
  uint64_t max_hold_ns_;
  std::vector<Turn> turns_;     // one per group with an active tenant
  uint32_t last_holder_ = 0;    // of a group that went idle: where its next turn starts
};

extern const PolicyEntry kExclusivePolicy;

}  // namespace gpuos::policies
