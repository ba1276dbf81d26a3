// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/gate_engine.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <set>

#include "daemon/core/control_block.h"
#include "gpuos/kv.h"

namespace gpuos::daemon {

GateEngine::GateEngine(const GpuMap& gpus, std::size_t gpu_count, const SpaceEngine& space)
    : gpus_(gpus), gpu_count_(gpu_count), space_(space) {}

slots::GateTenant GateEngine::tenant_view(const Tenant& t) const {
  slots::GateTenant v;
  v.id = t.id;
  v.pid = t.pid;
  v.uid = t.uid;
  v.owner = t.owner();
  v.name = t.name;
  v.space_domain = t.space.domain;
  for (const uint64_t mask : t.space.planned) {
    v.space_confined = v.space_confined || mask != 0;
    v.space_groups = std::max<uint32_t>(v.space_groups, static_cast<uint32_t>(std::popcount(mask)));
  }
  v.tenant_class = t.tenant_class;
  v.priority = t.priority;
  v.weight = t.weight;
  v.requested_mem_bytes = t.requested_mem_bytes;
  if (t.cb != nullptr) {  // (none yet at admission)
    v.busy = load(t.cb->busy) != 0;
    v.waiting = load(t.cb->waiting) != 0;
    v.signalled = load(t.cb->signalled) != 0;
    v.admitting = load(t.cb->engine_phase) == GPUOS_KV_PHASE_ADMISSION;
    v.long_launch = v.busy && load(t.cb->launch_phase) == GPUOS_LAUNCH_PHASE_LONG;
    v.timed_kernels = load(t.cb->space_timed_kernels);
    v.timed_ns = load(t.cb->space_timed_ns);
  }
  v.gate = t.gate.effective();  // what gpuosd set (the word is put back if the tenant changed it)
  v.closed_gpus = v.gate == GPUOS_GATE_OPEN ? t.gate.closed_gpus : 0;
  v.pinned = t.gate.pinned;
  v.max_slowdown_permille = t.granted.max_slowdown_permille;
  v.gpus = t.verify.gpus;
  if (t.cb != nullptr) {
    for (uint32_t g = 0; g < gpu_count_ && g < 64; ++g) {
      if (gpus_.used_on(t, g) != 0) v.gpus |= uint64_t{1} << g;
    }
  }
  return v;
}

std::vector<slots::TimedLaunch> GateEngine::read_timed_launches(Tenant& t) const {
  std::vector<slots::TimedLaunch> out;
  if (t.cb == nullptr || t.granted.sample_period == 0) return out;
  const uint64_t head = std::atomic_ref<uint64_t>(t.cb->timing_head).load(std::memory_order_acquire);
  uint64_t from = t.budget.timing_read;
  if (head < from) from = head;  // the tenant moved its head back: nothing to read
  if (head - from > GPUOS_TIMING_RING) from = head - GPUOS_TIMING_RING;  // lapped: the newest ring's worth
  out.reserve(head - from);
  constexpr uint64_t kMaxNs = 60'000'000'000ull;
  for (uint64_t i = from; i < head; ++i) {
    const gpuos_timed_launch& e = t.cb->timing_ring[i % GPUOS_TIMING_RING];
    slots::TimedLaunch l{load(e.key), load(e.ns)};
    if (l.key != 0 && l.ns != 0 && l.ns <= kMaxNs) out.push_back(l);
  }
  t.budget.timing_read = head;
  return out;
}

uint32_t GateEngine::pace_ordinals(const Tenant& t, uint64_t gpus) const {
  const uint32_t devices = std::min<uint32_t>(load(t.cb->device_count), GPUOS_MAX_DEVICES);
  if (gpus == 0 || devices == 0) return 0;  // every GPU, or its devices not published yet: everywhere
  return gpus_.ordinals_of(t, gpus);  // (none of them visible to it: 0, paced everywhere)
}

void GateEngine::publish_pacing(Tenant& t, slots::Pacing p, uint64_t now) const {
  if (p.permille == 0) p = {};
  // Its device map may come (or change) after the pacing was decided: mapped again each time.
  const uint32_t ordinals = pace_ordinals(t, p.gpus);
  if (t.granted.pacing == p && t.granted.pace_ordinals == ordinals) return;
  // The usage check holds what it used against the share granted over time (verify_engine.cc).
  t.verify.note_pacing(t.granted.pacing, p, now);
  std::atomic_ref<uint32_t>(t.grants->pace_devices).store(ordinals, std::memory_order_relaxed);
  t.granted.pace_ordinals = ordinals;
  std::atomic_ref<uint32_t>(t.grants->pace_max_kernel_us).store(p.max_kernel_us, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(t.grants->pace_burst_us).store(p.burst_us, std::memory_order_relaxed);
  if (t.granted.pacing.permille != p.permille) {
    std::atomic_ref<uint32_t>(t.grants->pace_permille).store(p.permille, std::memory_order_release);
    futex_wake_all(&t.grants->pace_permille);  // a paced launch waits on it
  }
  t.granted.pacing = p;
}

void GateEngine::map_closed_gpus(Tenant& t) const {
  const uint32_t devices = std::min<uint32_t>(load(t.cb->device_count), GPUOS_MAX_DEVICES);
  uint32_t ordinals = gpus_.ordinals_of(t, t.gate.closed_gpus);
  // Devices not published yet (no ordinal to hold), or every one of them: the whole gate.
  const uint32_t all = devices >= 32 ? ~0u : (1u << devices) - 1;
  if (t.gate.closed_gpus != 0 && (devices == 0 || (ordinals & all) == all)) ordinals = GateState::kAllOrdinals;
  t.gate.closed_ordinals = ordinals;
}

bool GateEngine::make_view(std::map<uint32_t, Tenant>& tenants, slots::Event e, uint32_t tenant_id, uint64_t now,
                           View* out) const {
  View& view = *out;
  view = View{};
  view.now_ns = now;
  view.event = e;
  view.tenant_id = tenant_id;
  view.tenants.reserve(tenants.size());
  for (auto& [id, t] : tenants) {
    view.tenants.push_back(tenant_view(t));
    view.tenants.back().timed = read_timed_launches(t);
  }
  return true;
}

bool GateEngine::check(const View& view, const Actions& acts, std::string* why) const {
  std::map<uint32_t, uint32_t> class_of;  // the live tenants (the view's)
  for (const slots::GateTenant& t : view.tenants) class_of[t.id] = t.tenant_class;
  for (const slots::GateAction& g : acts.gates) {
    if (class_of.count(g.id) == 0) {
      *why = "a gate for tenant " + std::to_string(g.id) + ", which is not live";
      return false;
    }
    if (g.gate != GPUOS_GATE_OPEN && g.gate != GPUOS_GATE_CLOSED) {
      *why = "gate value " + std::to_string(g.gate) + " for tenant " + std::to_string(g.id);
      return false;
    }
    if (g.pacing.permille > 1000) {
      *why = "pace " + std::to_string(g.pacing.permille) + " per mille for tenant " + std::to_string(g.id);
      return false;
    }
    if (g.pacing.groups > 64) {
      *why = "pacing to " + std::to_string(g.pacing.groups) + " SM groups for tenant " + std::to_string(g.id);
      return false;
    }
    if (g.pacing.permille != 0 && class_of.at(g.id) == GPUOS_CLASS_GUARANTEED) {
      *why = "pacing of guaranteed tenant " + std::to_string(g.id);
      return false;
    }
  }
  for (const slots::BudgetReport& b : acts.budgets) {
    if (class_of.count(b.id) == 0) {
      *why = "a budget report of tenant " + std::to_string(b.id) + ", which is not live";
      return false;
    }
  }
  return true;
}

void GateEngine::apply(std::map<uint32_t, Tenant>& tenants, const View&, const Actions& a, uint64_t now) {
  for (const slots::GateAction& g : a.gates) {
    Tenant& t = tenants.at(g.id);
    publish_pacing(t, g.gate == GPUOS_GATE_OPEN ? g.pacing : slots::Pacing{}, now);
    space_.apply_group_cap(t, t.granted.pacing.groups);
    if (t.gate.pinned) continue;  // an admin's pin outranks the policy
    t.gate.policy_gate = g.gate;
    t.gate.closed_gpus = g.gate == GPUOS_GATE_OPEN ? g.closed_gpus : 0;
    map_closed_gpus(t);
    publish_gate(t, now);  // a held gate stays closed until the memory slot releases it
  }
  // A partial gate follows the tenant's device map, which it may publish (or change) after the
  // gate was decided.
  for (auto& [id, t] : tenants) {
    if (t.gate.closed_gpus == 0) continue;
    const uint32_t before = t.gate.closed_ordinals;
    map_closed_gpus(t);
    if (t.gate.closed_ordinals != before) publish_gate(t, now);
  }
  for (const slots::BudgetReport& b : a.budgets) {
    Tenant& t = tenants.at(b.id);
    t.budget.slowdown_permille = b.slowdown_permille;
    t.budget.be_share_permille = b.be_share_permille;
    t.budget.step_permille = b.step_permille;
    t.budget.admission_permille = b.admission_permille;
    t.budget.mps_cost_permille = b.mps_cost_permille;
    t.budget.limit = b.limit;
  }
  next_ns_ = a.next_tick_ns;
}

void GateEngine::reset(std::map<uint32_t, Tenant>& tenants, uint64_t now) {
  for (auto& [id, t] : tenants) {
    t.granted.max_inflight = 0;
    std::atomic_ref<uint32_t>(t.grants->max_inflight).store(0, std::memory_order_relaxed);
    t.gate.policy_gate = GPUOS_GATE_OPEN;
    t.gate.closed_gpus = 0;
    t.gate.closed_ordinals = 0;
    publish_gate(t, now);
  }
  next_ns_ = 0;
}

}  // namespace gpuos::daemon
