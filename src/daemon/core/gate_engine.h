// SPDX-License-Identifier: Apache-2.0
// The time gate's mechanism: the GateView of the live tenants (their classes, busy words, GPUs and
// the launches they timed) and carrying out the slot's answer: each tenant's gate (whole, or closed
// on some GPUs only: mapped to its device ordinals) and its pacing, written into its grant block;
// the budget reports kept for LIST. An admin's pin and the memory slot's hold outrank the answer
// (GateState::effective).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/core/gpus.h"
#include "daemon/core/space_engine.h"
#include "daemon/core/tenant.h"
#include "slots/time_gate.h"

namespace gpuos::daemon {

class GateEngine {
 public:
  using Policy = slots::TimeGate;
  using View = slots::GateView;
  using Actions = slots::GateActions;

  // space: the group cap of a spatial tenant's SM masks follows its pacing (Pacing::groups).
  GateEngine(const GpuMap& gpus, std::size_t gpu_count, const SpaceEngine& space);
  // One tenant as the time gate sees it (admission asks with it before the tenant is live).
  slots::GateTenant tenant_view(const Tenant& t) const;
  // Every live tenant, with the launches each timed since the last view (read from its timing
  // ring, checked). Always true: the time gate is asked at every event.
  bool make_view(std::map<uint32_t, Tenant>& tenants, slots::Event e, uint32_t tenant_id, uint64_t now,
                 View* out) const;
  // Whether the actions keep the slot's contract: gates and budget reports only for tenants in the
  // view, gate values OPEN or CLOSED, pacing within 1000 per mille and 64 groups, and no pacing of
  // a guaranteed tenant. False with the first breach in *why.
  bool check(const View& view, const Actions& actions, std::string* why) const;
  // Writes each answered tenant's pacing and gate (unless an admin pinned it), maps every partial
  // gate to the tenant's device map as it stands now, keeps the budget reports and the next tick.
  void apply(std::map<uint32_t, Tenant>& tenants, const View& view, const Actions& actions, uint64_t now);
  // A failed time gate's admission settings go with it: max_inflight 0, every gate not pinned or
  // held opened, no tick asked for.
  void reset(std::map<uint32_t, Tenant>& tenants, uint64_t now);
  // When the time gate wants to decide again (absolute CLOCK_MONOTONIC ns; 0: at the next event).
  uint64_t next_ns() const { return next_ns_; }

 private:
  std::vector<slots::TimedLaunch> read_timed_launches(Tenant& t) const;
  // Writes a time gate's pacing of t into its grant block (and wakes its paced launches).
  void publish_pacing(Tenant& t, slots::Pacing pacing, uint64_t now) const;
  // The grant block's pace_devices for pacing on gpuosd's GPUs `gpus`: the tenant's ordinals of
  // them; 0 (every device) for all GPUs or while its devices are not known.
  uint32_t pace_ordinals(const Tenant& t, uint64_t gpus) const;
  // GateState::closed_ordinals from closed_gpus and the tenant's device map.
  void map_closed_gpus(Tenant& t) const;
  const GpuMap& gpus_;
  std::size_t gpu_count_;
  const SpaceEngine& space_;
  uint64_t next_ns_ = 0;
};

}  // namespace gpuos::daemon
