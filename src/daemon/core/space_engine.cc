// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/space_engine.h"

#include <set>

#include "common/log.h"
#include "daemon/core/control_block.h"

namespace gpuos::daemon {

SpaceEngine::SpaceEngine(const GpuMap& gpus, const std::vector<GpuInfo>& info, uint32_t group_sms)
    : gpus_(gpus), group_sms_(group_sms) {
  for (const GpuInfo& g : info) space_gpus_.push_back(slots::SpaceGpu{g.index, g.sm_count, g.sm_groups});
}

uint32_t SpaceEngine::mask_sms(uint64_t mask, uint32_t index) const {
  for (const slots::SpaceGpu& g : space_gpus_) {
    if (g.index == index) return slots::space_mask_sms(mask, g, group_sms_);
  }
  return 0;
}

bool SpaceEngine::make_view(const std::map<uint32_t, Tenant>& tenants, slots::Event e, uint32_t tenant_id,
                            uint64_t now, slots::SpaceView* out) {
  next_ns_ = 0;
  bool any = false;
  for (const auto& [id, t] : tenants) any = any || t.in_domain();
  if (!any) return false;
  slots::SpaceView& v = *out;
  v = slots::SpaceView{};
  v.now_ns = now;
  v.event = e;
  v.tenant_id = tenant_id;
  v.group_sms = group_sms_;
  v.gpus = space_gpus_;
  for (const auto& [id, t] : tenants) {
    slots::SpaceTenant s;
    s.id = t.id;
    s.name = t.name;
    s.domain = t.space.domain;
    s.tenant_class = t.tenant_class;
    s.priority = t.priority;
    s.weight = t.weight;
    s.asked_sms = t.space.asked_sms;
    s.max_slowdown_permille = t.granted.max_slowdown_permille;
    s.busy = load(t.cb->busy) != 0 || load(t.cb->waiting) != 0;
    for (uint32_t g = 0; g < GPUOS_MAX_DEVICES && g < 32; ++g) {
      if (gpus_.used_on(t, g) != 0 || gpus_.launched_on(t, g)) s.gpus |= 1u << g;
    }
    s.home_gpu = gpus_.home(t);
    if (t.in_domain()) {
      s.samples_read = read_shape_samples(*t.cb, &s.shapes);
      s.samples = load(t.cb->space_samples);
      s.timed_kernels = load(t.cb->space_timed_kernels);
      s.timed_ns = load(t.cb->space_timed_ns);
    }
    v.tenants.push_back(std::move(s));
  }
  return true;
}

bool SpaceEngine::check(const slots::SpaceView& view, const slots::SpaceActions& actions, std::string* why) const {
  std::set<uint32_t> seen;
  for (const slots::SpaceGrant& g : actions.grants) {
    const slots::SpaceTenant* t = nullptr;
    for (const slots::SpaceTenant& v : view.tenants) {
      if (v.id == g.id) t = &v;
    }
    if (t == nullptr || t->domain.empty()) {
      *why = "a partition for tenant " + std::to_string(g.id) + ", which is not a live tenant of a spatial domain";
      return false;
    }
    if (!seen.insert(g.id).second) {
      *why = "two partitions for tenant " + std::to_string(g.id);
      return false;
    }
    for (uint32_t i = 0; i < GPUOS_MAX_DEVICES; ++i) {
      if (g.masks[i] == 0) continue;
      const slots::SpaceGpu* gpu = nullptr;
      for (const slots::SpaceGpu& s : space_gpus_) {
        if (s.index == i) gpu = &s;
      }
      const uint32_t groups = gpu != nullptr ? slots::space_groups(*gpu, group_sms_) : 0;
      if (groups == 0 || (groups < 64 && (g.masks[i] >> groups) != 0)) {
        *why = "tenant " + std::to_string(g.id) + "'s mask on GPU " + std::to_string(i) + " names groups it does not have";
        return false;
      }
    }
  }
  return true;
}

void SpaceEngine::apply(std::map<uint32_t, Tenant>& tenants, const slots::SpaceView&, const slots::SpaceActions& actions,
                        uint64_t) {
  next_ns_ = actions.next_ns;
  for (auto& [id, t] : tenants) {
    if (!t.in_domain()) continue;
    const slots::SpaceGrant* grant = nullptr;
    for (const slots::SpaceGrant& g : actions.grants) {
      if (g.id == id) grant = &g;
    }
    write_masks(t, grant != nullptr ? grant->masks : slots::SpaceMasks{});
    t.space.sized_sms = grant != nullptr ? grant->sized_sms : 0;
    t.space.default_sms = grant != nullptr ? grant->default_sms : 0;
    t.space.sized_latency = grant != nullptr ? grant->sized_latency : 0;
    // Planned with its device map as it stands (the view refreshed it): the tenant may wait for
    // this at start (await_space_plan). Stored after its masks.
    std::atomic_ref<uint32_t>(t.grants->space_planned_devices).store(t.devices.mapped_device_count,
                                                                 std::memory_order_release);
  }
}

void SpaceEngine::write_masks(Tenant& t, const slots::SpaceMasks& per_gpu) const {
  // The plan is per GPU; the grant block per the tenant's device ordinals.
  for (uint32_t o = 0; o < GPUOS_MAX_DEVICES; ++o) t.space.planned[o] = 0;
  for (uint32_t g = 0; g < GPUOS_MAX_DEVICES; ++g) {
    if (const int o = gpus_.ordinal_of(t, g); o >= 0) t.space.planned[o] = per_gpu[g];
  }
  write_capped(t);
}

void SpaceEngine::apply_group_cap(Tenant& t, uint32_t cap) const {
  if (t.space.group_cap == cap) return;
  t.space.group_cap = cap;
  if (t.in_domain()) write_capped(t);
}

void SpaceEngine::write_capped(Tenant& t) const {
  bool changed = false;
  for (uint32_t o = 0; o < GPUOS_MAX_DEVICES; ++o) {
    const uint64_t mask = slots::space_keep_highest(t.space.planned[o], t.space.group_cap);
    t.space.masks[o] = mask;
    std::atomic_ref<uint64_t> word(t.grants->space_mask[o]);
    if (word.load(std::memory_order_relaxed) == mask) continue;
    word.store(mask, std::memory_order_release);
    changed = true;
    log::debug("tenant %u: SM groups on its device %u now 0x%llx", t.id, o, static_cast<unsigned long long>(mask));
  }
  if (changed) std::atomic_ref<uint32_t>(t.grants->space_epoch).fetch_add(1, std::memory_order_release);
}

}  // namespace gpuos::daemon
