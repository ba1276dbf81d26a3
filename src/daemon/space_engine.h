// The space slot's mechanism: the SpaceView of the live tenants (their domains, GPUs and latency
// samples, read from their control blocks) and the SM masks the slot grants, written back by each
// tenant's device ordinals.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "daemon/gpus.h"
#include "daemon/tenant.h"
#include "slots/space.h"

namespace gpuos::daemon {

class SpaceEngine {
 public:
  SpaceEngine(const GpuMap& gpus, const std::vector<GpuInfo>& info, uint32_t group_sms);
  // False when no live tenant is in a domain (nothing to plan).
  bool make_view(const std::map<uint32_t, Tenant>& tenants, slots::Event e, uint32_t tenant_id, uint64_t now,
                 slots::SpaceView* out) const;
  // Whether the actions keep the slot's contract: grants only for tenants of a domain, once each,
  // masks within each GPU's groups. False with the first breach in *why.
  bool check(const slots::SpaceView& view, const slots::SpaceActions& actions, std::string* why) const;
  // Writes every spatial tenant's masks (those not granted: unconfined), bumps space_epoch where
  // they changed, and marks the tenant planned with its device map as it stands.
  void apply(std::map<uint32_t, Tenant>& tenants, const slots::SpaceActions& actions) const;
  // Trims a spatial tenant's planned masks to at most `cap` groups each (0 = as planned: the time
  // gate's Pacing::groups) and writes them if that changed them.
  void apply_group_cap(Tenant& t, uint32_t cap) const;
  // Unconfines every spatial tenant (no slot answer to apply).
  void clear(std::map<uint32_t, Tenant>& tenants) const { apply(tenants, {}); }
  uint32_t group_sms() const { return group_sms_; }
  // SMs of `mask` on GPU `index`.
  uint32_t mask_sms(uint64_t mask, uint32_t index) const;

 private:
  void write_masks(Tenant& t, const slots::SpaceMasks& per_gpu) const;
  void write_capped(Tenant& t) const;  // t.space.planned trimmed by t.space.group_cap
  const GpuMap& gpus_;
  std::vector<slots::SpaceGpu> space_gpus_;
  uint32_t group_sms_;
};

}  // namespace gpuos::daemon
