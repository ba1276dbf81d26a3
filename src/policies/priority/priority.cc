// SPDX-License-Identifier: Apache-2.0
#include "policies/priority/priority.h"

#include <algorithm>
#include <climits>

#include "common/log.h"
#include "policies/gpu_groups.h"
#include "policies/long_launch_hold.h"
#include "policies/priority/stages.h"
#include "slots/slot.h"

namespace gpuos::policies {
namespace {

bool is_guaranteed(const PriorityTenant& t) { return t.tenant_class == GPUOS_CLASS_GUARANTEED; }

// Wants the GPU: submitted work not finished, or a thread waiting at the gate (unless an admin pinned
// the gate closed: then only its draining work counts).
bool active(const PriorityTenant& t) { return t.busy || (t.waiting && !t.pinned); }

// Tenants of one spatial domain share the GPU in space, not in time: they never gate each other.
bool shares_in_space(const PriorityTenant& a, const PriorityTenant& b) {
  return !a.domain.empty() && a.domain == b.domain;
}

}  // namespace

uint64_t be_slice_ns(const PriorityParams& p, uint32_t weight) {
  uint64_t ns = static_cast<uint64_t>(p.be_slice_ms) * 1000000ull * weight / 100u;
  return std::max<uint64_t>(ns, 1000000ull);
}

namespace {

uint64_t gpus_of(const PriorityTenant& t) { return gpus_or_all(t.gpus); }

// One group's rotation, one decision: g_active says whether a guaranteed tenant on one of its GPUs
// is active. Returns the slice's end while it rotates (0: no timer).
uint64_t rotate(BeRotation* st, const std::vector<const PriorityTenant*>& runnable, bool g_active,
                const PriorityParams& params, std::map<uint32_t, uint64_t>* granted_ns, uint64_t now) {
  auto is_runnable = [&](uint32_t id) {
    return std::any_of(runnable.begin(), runnable.end(), [id](auto* t) { return t->id == id; });
  };
  auto end_slice = [&] {
    if (st->owner == 0) return;
    if (!st->paused && now > st->slice_start_ns) (*granted_ns)[st->owner] += now - st->slice_start_ns;
    st->last_owner = st->owner;
    st->owner = 0;
    st->paused = false;
  };
  const bool was_rotating = st->owner != 0;
  if (g_active) {
    // Every BE of the group yields; a running slice is paused with what is left of it.
    if (st->owner != 0 && !st->paused) {
      if (now > st->slice_start_ns) (*granted_ns)[st->owner] += now - st->slice_start_ns;
      st->paused_remaining_ns = st->slice_end_ns > now ? st->slice_end_ns - now : 0;
      st->paused = true;
    }
    return 0;
  }
  if (st->paused) {  // the guaranteed tenants went idle: resume the interrupted slice if it still matters
    st->paused = false;
    if (runnable.size() >= 2 && is_runnable(st->owner) && st->paused_remaining_ns > 0) {
      st->slice_start_ns = now;
      st->slice_end_ns = now + st->paused_remaining_ns;
    } else {
      st->last_owner = st->owner;  // its time was counted when it was paused
      st->owner = 0;
    }
  }
  if (runnable.size() <= 1) {
    end_slice();
    return 0;
  }
  if (st->owner != 0 && (!is_runnable(st->owner) || now >= st->slice_end_ns)) end_slice();
  if (st->owner == 0) {
    // Round-robin order: the first runnable id after the previous owner, wrapping.
    std::vector<const PriorityTenant*> order;
    for (auto* t : runnable) {
      if (t->id > st->last_owner) order.push_back(t);
    }
    for (auto* t : runnable) {
      if (t->id <= st->last_owner) order.push_back(t);
    }
    const PriorityTenant* pick = order.front();
    if (!was_rotating) {  // starting: keep a BE that is on the GPU right now, if any
      for (auto* t : order) {
        if (t->busy && !t->waiting) {
          pick = t;
          break;
        }
      }
    }
    st->owner = pick->id;
    st->slice_start_ns = now;
    st->slice_end_ns = now + be_slice_ns(params, pick->weight);
  }
  return st->slice_end_ns;
}

}  // namespace

const BeRotation* PriorityState::rotation_of(uint32_t id) const {
  for (const auto& [mask, r] : rotations) {
    if (std::find(r.members.begin(), r.members.end(), id) != r.members.end()) return &r;
  }
  return nullptr;
}

bool PriorityState::rotating() const {
  return std::any_of(rotations.begin(), rotations.end(), [](const auto& e) { return e.second.owner != 0; });
}

uint32_t PriorityState::owner() const {
  for (const auto& [mask, r] : rotations) {
    if (r.owner != 0) return r.owner;
  }
  return 0;
}

namespace priority {
namespace {

bool is_live(const std::vector<PriorityTenant>& tenants, uint32_t id) {
  return std::any_of(tenants.begin(), tenants.end(), [id](const PriorityTenant& t) { return t.id == id; });
}

// The sooner of two times, 0 meaning none.
uint64_t sooner(uint64_t a, uint64_t b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); }

// The GPUs of t's on which a guaranteed tenant (above `floor`) that does not share them in space
// with t is active. A tenant whose GPUs are not known yet is on all of them.
uint64_t guaranteed_gpus_of(const PriorityTenant& t, const std::vector<PriorityTenant>& tenants, int32_t floor) {
  uint64_t on = 0;
  for (const PriorityTenant& g : tenants) {
    if (is_guaranteed(g) && active(g) && g.priority > floor && &g != &t && !shares_in_space(g, t)) on |= gpus_of(g);
  }
  return on & gpus_of(t);
}

}  // namespace

GuaranteedActive active_guaranteed(const std::vector<PriorityTenant>& tenants) {
  GuaranteedActive g;
  for (const PriorityTenant& t : tenants) {
    if (is_guaranteed(t) && active(t)) {
      g.any = true;
      g.top = std::max(g.top, t.priority);
    }
  }
  return g;
}

std::vector<const PriorityTenant*> runnable_best_effort(const std::vector<PriorityTenant>& tenants) {
  std::vector<const PriorityTenant*> runnable;
  for (const PriorityTenant& t : tenants) {
    if (!is_guaranteed(t) && t.domain.empty() && !t.pinned && (t.busy || t.waiting)) runnable.push_back(&t);
  }
  std::sort(runnable.begin(), runnable.end(), [](auto* a, auto* b) { return a->id < b->id; });
  return runnable;
}

uint64_t rotate_groups(const std::vector<PriorityTenant>& tenants, const std::vector<const PriorityTenant*>& runnable,
                       const PriorityParams& params, PriorityState* st, uint64_t now) {
  uint64_t next_tick = 0;
  std::map<uint64_t, BeRotation> rotations;
  for (const auto& group : gpu_groups(runnable)) {
    const uint64_t mask = group.first;  // (not a structured binding: clang 14 cannot capture those)
    const std::vector<const PriorityTenant*>& members = group.second;
    // A group keeps its rotation while its GPUs stay the same (a new group starts afresh).
    auto old = st->rotations.find(mask);
    BeRotation r = old != st->rotations.end() ? old->second : BeRotation{};
    if (old != st->rotations.end()) st->rotations.erase(old);
    const bool g_here = std::any_of(tenants.begin(), tenants.end(), [&](const PriorityTenant& g) {
      return is_guaranteed(g) && active(g) && (gpus_of(g) & mask) != 0;
    });
    next_tick = sooner(next_tick, rotate(&r, members, g_here, params, &st->granted_ns, now));
    r.members.clear();
    for (auto* t : members) r.members.push_back(t->id);
    rotations[mask] = r;
  }
  for (auto& [mask, r] : st->rotations) {  // groups gone (their BE idle, or regrouped): slices end
    if (r.owner != 0 && !r.paused && now > r.slice_start_ns) st->granted_ns[r.owner] += now - r.slice_start_ns;
  }
  st->rotations = std::move(rotations);
  return next_tick;
}

uint64_t reprieve_cooldown_ns(const PriorityParams& params) {
  const uint64_t grace_ns = static_cast<uint64_t>(params.signal_grace_ms) * 1000000ull;
  return std::max<uint64_t>(10'000'000'000ull, 20 * grace_ns);
}

std::string reprieve_owner(const PriorityTenant& t) {
  return t.owner.empty() ? "tenant " + std::to_string(t.id) : t.owner;
}

uint64_t update_reprieves(const std::vector<PriorityTenant>& tenants, const PriorityParams& params, PriorityState* st,
                          uint64_t now) {
  // Signalled BE: a reprieve from the gate. The next decision after it ends closes the gate again.
  // At most one per owner per cooldown (reprieve_cooldown_ns): ten processes of one user taking
  // turns would otherwise keep a best-effort gate open beside a guaranteed tenant end to end.
  const uint64_t grace_ns = static_cast<uint64_t>(params.signal_grace_ms) * 1000000ull;
  const uint64_t cooldown_ns = reprieve_cooldown_ns(params);
  for (const PriorityTenant& t : tenants) {
    if (is_guaranteed(t) || t.pinned || !t.signalled || !t.waiting || params.signal_grace_ms == 0 ||
        st->reprieve_until_ns.count(t.id) != 0) {
      continue;
    }
    const std::string owner = reprieve_owner(t);
    auto last = st->reprieve_granted_ns.find(owner);
    if (last == st->reprieve_granted_ns.end() || now >= last->second + cooldown_ns) {
      st->reprieve_granted_ns[owner] = now;
      st->reprieve_until_ns[t.id] = now + grace_ns;
    } else if (now < last->second + grace_ns) {
      st->reprieve_until_ns[t.id] = last->second + grace_ns;  // joins its owner's reprieve
    }
  }
  // Kept for the cooldown, live or not: a tenant that reconnects is the same owner's, and with it
  // comes the reprieve it already had.
  std::erase_if(st->reprieve_granted_ns, [&](const auto& e) { return now >= e.second + cooldown_ns; });
  uint64_t next_tick = 0;
  for (auto it = st->reprieve_until_ns.begin(); it != st->reprieve_until_ns.end();) {
    if (!is_live(tenants, it->first) || now >= it->second) {
      it = st->reprieve_until_ns.erase(it);
      continue;
    }
    next_tick = sooner(next_tick, it->second);
    ++it;
  }
  return next_tick;
}

uint64_t closed_gpus(const PriorityTenant& t, const std::vector<PriorityTenant>& tenants, const GuaranteedActive& g,
                     const std::map<uint64_t, BeRotation>& rotations) {
  // Closed where a guaranteed tenant it would slow works; all of its GPUs (or unknown ones) close
  // the whole gate, some of them only those.
  if (is_guaranteed(t)) return g.any && t.priority < g.top ? guaranteed_gpus_of(t, tenants, t.priority) : 0;
  if (!t.domain.empty()) return g.any ? guaranteed_gpus_of(t, tenants, INT32_MIN) : 0;
  // A slice running on one of its GPUs that is not its own (an idle BE too: it would take the GPU
  // from the owner as soon as it launched) closes it on all of them.
  const bool other_slice = std::any_of(rotations.begin(), rotations.end(), [&](const auto& e) {
    const BeRotation& r = e.second;
    return r.owner != 0 && !r.paused && r.owner != t.id && (e.first & gpus_of(t)) != 0;
  });
  return other_slice ? gpus_of(t) : guaranteed_gpus_of(t, tenants, INT32_MIN);
}

GateDecision gate_of(const PriorityTenant& t, uint64_t closed) {
  GateDecision g{t.id, GPUOS_GATE_OPEN, 0, {}};
  if (closed != 0 && (t.gpus == 0 || closed == t.gpus)) {
    g.gate = GPUOS_GATE_CLOSED;
  } else {
    g.closed_gpus = closed;
  }
  return g;
}

void forget_gone(const std::vector<PriorityTenant>& tenants, PriorityState* st) {
  for (auto it = st->granted_ns.begin(); it != st->granted_ns.end();) {
    it = is_live(tenants, it->first) ? std::next(it) : st->granted_ns.erase(it);
  }
}

}  // namespace priority

PriorityDecision decide_priority(const std::vector<PriorityTenant>& tenants, const PriorityParams& params,
                                 PriorityState* st, uint64_t now) {
  using namespace priority;
  const GuaranteedActive g = active_guaranteed(tenants);
  PriorityDecision d;
  d.next_tick_ns = rotate_groups(tenants, runnable_best_effort(tenants), params, st, now);
  st->guaranteed_active = g.any;
  d.next_tick_ns = sooner(d.next_tick_ns, update_reprieves(tenants, params, st, now));
  d.gates.reserve(tenants.size());
  for (const PriorityTenant& t : tenants) {
    const bool reprieved = st->reprieve_until_ns.count(t.id) != 0;
    d.gates.push_back(gate_of(t, reprieved ? 0 : closed_gpus(t, tenants, g, st->rotations)));
  }
  forget_gone(tenants, st);
  return d;
}

void PriorityPolicy::admit(const slots::GateTenant& t, slots::Admission* a) {
  a->idle_grace_us = params_.idle_grace_us;
  if (t.tenant_class == GPUOS_CLASS_BEST_EFFORT) {
    a->max_inflight = params_.be_max_inflight;
    if (params_.be_max_kernel_us != 0) a->sample_period = kLongLaunchSamplePeriod;
    // Closed from the start while a guaranteed tenant is active or the BE slices rotate (the
    // decision at its admission looks again with fresh words before the tenant gets its fd).
    if (state_.guaranteed_active || state_.rotating()) a->initial_gate = GPUOS_GATE_CLOSED;
  } else {
    a->max_inflight = 0;
  }
}

slots::GateActions PriorityPolicy::decide(const slots::GateView& view) {
  std::vector<PriorityTenant> in;
  in.reserve(view.tenants.size());
  for (const slots::GateTenant& v : view.tenants) {
    in.push_back(PriorityTenant{v.id, v.tenant_class, v.priority, v.weight, v.busy, v.waiting, v.pinned, v.space_domain,
                                v.signalled, v.gpus, v.owner});
  }
  std::map<uint64_t, uint32_t> old_owners;
  for (const auto& [mask, r] : state_.rotations) old_owners[mask] = r.owner;
  const uint64_t now = view.now_ns;
  const char* why = slots::event_name(view.event);
  PriorityDecision d = decide_priority(in, params_, &state_, now);
  hold_long_launches(view, &d);
  for (const auto& [mask, r] : state_.rotations) {
    auto old = old_owners.find(mask);
    if (r.owner != 0 && (old == old_owners.end() || old->second != r.owner)) {
      log::debug("priority (%s): best-effort slice (GPUs %#llx) to tenant %u until +%.1f ms", why,
                 static_cast<unsigned long long>(mask), r.owner, static_cast<double>(r.slice_end_ns - now) / 1e6);
    }
  }
  slots::GateActions out;
  out.next_tick_ns = d.next_tick_ns;
  for (std::size_t i = 0; i < d.gates.size(); ++i) {
    const slots::Pacing pacing = d.gates[i].gate == GPUOS_GATE_OPEN ? d.gates[i].pacing : slots::Pacing{};
    auto published = pacing_.find(d.gates[i].id);
    const bool paced_anew = (published == pacing_.end() ? slots::Pacing{} : published->second) != pacing;
    if ((d.gates[i].gate == view.tenants[i].gate && d.gates[i].closed_gpus == view.tenants[i].closed_gpus &&
         !paced_anew) ||
        in[i].pinned) {
      continue;
    }
    out.gates.push_back(d.gates[i]);
    if (pacing == slots::Pacing{}) {
      pacing_.erase(d.gates[i].id);  // only paced tenants are kept: the map stays as small as the hold
    } else {
      pacing_[d.gates[i].id] = pacing;
    }
    const char* reason = "";
    if (d.gates[i].gate == GPUOS_GATE_OPEN && state_.reprieve_until_ns.count(d.gates[i].id) != 0) {
      log::info("priority: tenant %u was woken by a signal at its closed gate: open for %u ms so it can act on it",
                d.gates[i].id, params_.signal_grace_ms);
    }
    if (d.gates[i].gate == GPUOS_GATE_CLOSED) {
      reason = is_guaranteed(in[i]) ? "a higher-priority guaranteed tenant is busy"
               : state_.guaranteed_active ? "a guaranteed tenant is busy"
                                          : "another best-effort tenant holds the slice";
    }
    if (d.gates[i].closed_gpus != 0) {
      log::debug("priority (%s): tenant %u gate closed on GPUs %#llx only: a guaranteed tenant is busy there", why,
                 d.gates[i].id, static_cast<unsigned long long>(d.gates[i].closed_gpus));
      continue;
    }
    log::debug("priority (%s): tenant %u gate %s%s%s", why, d.gates[i].id,
               d.gates[i].gate == GPUOS_GATE_OPEN ? "open" : "closed", *reason ? ": " : "", reason);
  }
  return out;
}

void PriorityPolicy::hold_long_launches(const slots::GateView& view, PriorityDecision* d) {
  if (params_.be_max_kernel_us == 0) return;
  const uint64_t now = view.now_ns, hold_ns = uint64_t{params_.be_idle_hold_ms} * 1'000'000;
  std::vector<LongLaunchHolder> holding;
  for (const slots::GateTenant& g : view.tenants) {
    if (g.tenant_class != GPUOS_CLASS_GUARANTEED) continue;
    IdleClock& idle = guaranteed_idle_[g.id];
    idle.observe(g.busy || (g.waiting && !g.pinned), now);
    if (!idle.holding(now, hold_ns)) continue;
    holding.push_back(LongLaunchHolder{&g, params_.be_max_kernel_us});
    d->next_tick_ns = d->next_tick_ns == 0 ? idle.hold_end(hold_ns) : std::min(d->next_tick_ns, idle.hold_end(hold_ns));
  }
  if (holding.empty()) return;
  for (std::size_t i = 0; i < d->gates.size(); ++i) {
    const slots::GateTenant& v = view.tenants[i];
    if (v.tenant_class == GPUOS_CLASS_GUARANTEED || d->gates[i].gate != GPUOS_GATE_OPEN) continue;
    const slots::Pacing held = long_launch_hold(v, holding);
    if (held.permille != 0) d->gates[i].pacing = held;
  }
}

bool read_priority_keys(const ConfigSection& sec, PriorityParams* p, std::string* error) {
  return sec.get_uint("be_max_inflight", 0, 1024, &p->be_max_inflight, error) &&
         sec.get_uint("idle_grace_us", 0, 1000000, &p->idle_grace_us, error) &&
         sec.get_uint("be_slice_ms", 1, 10000, &p->be_slice_ms, error) &&
         sec.get_uint("signal_grace_ms", 0, 60000, &p->signal_grace_ms, error);
}

bool parse_priority_params(const ConfigSection& sec, PriorityParams* out, std::string* error) {
  PriorityParams p;
  if (!read_priority_keys(sec, &p, error) || !sec.get_uint("be_max_kernel_us", 0, 10000000, &p.be_max_kernel_us, error) ||
      !sec.get_uint("be_idle_hold_ms", 0, 10000, &p.be_idle_hold_ms, error) || !sec.all_read(error)) {
    return false;
  }
  *out = p;
  return true;
}

std::string format_priority_params(const PriorityParams& p) {
  return "be_max_inflight = " + std::to_string(p.be_max_inflight) + "\nidle_grace_us = " +
         std::to_string(p.idle_grace_us) + "\nbe_slice_ms = " + std::to_string(p.be_slice_ms) +
         "\nsignal_grace_ms = " + std::to_string(p.signal_grace_ms) + "\n";
}

namespace {
std::unique_ptr<slots::TimeGate> make_priority(const PolicyContext& ctx, std::string* error) {
  PriorityParams p;
  if (!parse_priority_params(ctx.section, &p, error)) return nullptr;
  return std::make_unique<PriorityPolicy>(p);
}


// What parse_priority_params reads, in priority_settings' order.
constexpr KeyDoc kPriorityOwnKeys[] = {
    {"be_max_kernel_us", "A best-effort launch expected to run longer (us) waits until guaranteed ones idle; 0 = off"},
    {"be_idle_hold_ms", "... until they have been idle this long (0..10000 ms)"},
};
constexpr auto kPriorityKeys = join_key_docs(kPriorityCommonKeys, kPriorityOwnKeys);

std::string priority_settings(const ConfigSection& section) {
  PriorityParams p;
  std::string unused;
  parse_priority_params(section, &p, &unused);
  return format_priority_params(p) + "be_max_kernel_us = " + std::to_string(p.be_max_kernel_us) +
         "\nbe_idle_hold_ms = " + std::to_string(p.be_idle_hold_ms) + "\n";
}
}  // namespace

const PolicyEntry kPriorityPolicy{"priority", SlotKind::kTimeGate,
                                  "guaranteed tenants run as if alone; best-effort ones share the rest by weight",
                                  &make_priority, nullptr, nullptr, &priority_settings, kPriorityKeys};

}  // namespace gpuos::policies
