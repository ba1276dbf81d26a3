// SPDX-License-Identifier: Apache-2.0
// The space slot's mechanism: the SpaceView of the live tenants (their domains, GPUs and latency
// samples, read from their control blocks) and the SM masks the slot grants, written back by each
// tenant's device ordinals.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "daemon/core/gpus.h"
#include "daemon/core/tenant.h"
#include "slots/space.h"

namespace gpuos::daemon {

class SpaceEngine {
 public:
  using Policy = slots::SpacePolicy;
  using View = slots::SpaceView;
  using Actions = slots::SpaceActions;

  SpaceEngine(const GpuMap& gpus, const std::vector<GpuInfo>& info, uint32_t group_sms);
  // False when no live tenant is in a domain (nothing to plan; no look asked for).
  bool make_view(const std::map<uint32_t, Tenant>& tenants, slots::Event e, uint32_t tenant_id, uint64_t now,
                 slots::SpaceView* out);
  // Whether the actions keep the slot's contract: grants only for tenants of a domain, once each,
  // masks within each GPU's groups. False with the first breach in *why.
  bool check(const slots::SpaceView& view, const slots::SpaceActions& actions, std::string* why) const;
  // Writes every spatial tenant's masks (those not granted: unconfined), bumps space_epoch where
  // they changed, and marks the tenant planned with its device map as it stands; keeps when the
  // slot wants to look again (next_ns).
  void apply(std::map<uint32_t, Tenant>& tenants, const slots::SpaceView& view, const slots::SpaceActions& actions,
             uint64_t now);
  // Trims a spatial tenant's planned masks to at most `cap` groups each (0 = as planned: the time
  // gate's Pacing::groups) and writes them if that changed them.
  void apply_group_cap(Tenant& t, uint32_t cap) const;
  // When the space slot wants to look again (absolute CLOCK_MONOTONIC ns; 0: at the next event).
  uint64_t next_ns() const { return next_ns_; }
  // A failed space policy's next look goes with it.
  void reset() { next_ns_ = 0; }
  uint32_t group_sms() const { return group_sms_; }
  // SMs of `mask` on GPU `index`.
  uint32_t mask_sms(uint64_t mask, uint32_t index) const;

 private:
  void write_masks(Tenant& t, const slots::SpaceMasks& per_gpu) const;
  void write_capped(Tenant& t) const;  // t.space.planned trimmed by t.space.group_cap
  const GpuMap& gpus_;
  std::vector<slots::SpaceGpu> space_gpus_;
  uint32_t group_sms_;
  uint64_t next_ns_ = 0;
};

}  // namespace gpuos::daemon
