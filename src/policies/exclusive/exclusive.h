// The `exclusive` time gate, the example policy of docs/ARCHITECTURE.md ("How to add a policy"):
// one tenant at a time has the GPU, in turn. The holder keeps it while it is active (busy or
// waiting at its gate); when others are active too, it passes on after max_hold_ms, to the next
// active tenant in id order. With nobody active every gate is open, so whoever launches first is
// not held back (two that start at once run together until the next decision). Classes, priorities
// and weights are ignored: it suits a GPU lent to jobs that should never interleave kernels.
//
//   [policy.exclusive]
//   max_hold_ms = 100   # 1..60000
#pragma once

#include <cstdint>

#include "policies/registry.h"
#include "slots/time_gate.h"

namespace gpuos::policies {

class ExclusivePolicy final : public slots::TimeGate {
 public:
  explicit ExclusivePolicy(uint64_t max_hold_ns) : max_hold_ns_(max_hold_ns) {}
  const char* name() const override { return "exclusive"; }
  void on_exit(uint32_t tenant_id) override;
  slots::GateActions decide(const slots::GateView& view) override;
  uint32_t holder() const { return holder_; }

 private:
  uint64_t max_hold_ns_;
  uint32_t holder_ = 0;       // the tenant that has the GPU; 0 = nobody active
  uint32_t last_holder_ = 0;  // the turn passes on from here
  uint64_t hold_until_ns_ = 0;
};

extern const PolicyEntry kExclusivePolicy;

}  // namespace gpuos::policies
