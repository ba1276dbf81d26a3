// SPDX-License-Identifier: Apache-2.0
#include "policies/swap/planner.h"
#include "policies/swap/stages.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <tuple>

namespace gpuos::policies::swap {

namespace {

// Could `v` ever make room for `for_whom` (ignoring the quantum and the pool)?
bool could_displace(const SwapTenant& v, const SwapTenant& for_whom) {
  if (v.id == for_whom.id || !v.swappable || v.command_pending || v.movable_bytes == 0) return false;
  if (v.device != for_whom.device) return false;
  if (!v.resident && !v.swapped_out) return false;
  return !(v.guaranteed && !for_whom.guaranteed);
}

const SwapTenant* pick_victim(const std::vector<SwapTenant>& tenants, const SwapTenant& for_whom,
                              const SwapParams& p, uint64_t now) {
  const SwapTenant* best = nullptr;
  auto rank = [](const SwapTenant& t) {
    return std::make_tuple(t.borrowed_bytes == 0, t.busy || t.waiting, t.guaranteed, t.resident_since_ns, t.id);
  };
  for (const SwapTenant& v : tenants) {
    if (!could_displace(v, for_whom)) continue;
    if (now < v.no_victim_until_ns) continue;
    // It has a signal to act on, which it can only while it runs: moving it out again would
    // leave it (and the tenant it made way for) taking turns without either ever acting.
    if (v.signalled) continue;
    const bool peer = v.guaranteed == for_whom.guaranteed;
    if (peer && v.borrowed_bytes == 0 && !for_whom.signalled && now < v.resident_since_ns + p.quantum_ns) continue;
    if (v.pool_largest_free == 0) continue;
    if (best == nullptr || rank(v) < rank(*best)) best = &v;
  }
  return best;
}

uint64_t amount(const SwapTenant& v, uint64_t want) {
  return std::min({want, v.movable_bytes, v.pool_largest_free});
}

// Its KV pools hold more than the target gpuosd set them.
bool kv_above_target(const SwapTenant& t) { return t.kv_target_on && t.kv_bytes > t.kv_target_bytes; }

// Could `d`, past its KV deadline, have the rest swapped out for `for_whom` now? As a victim, but
// its quantum does not hold: it was given a deadline instead.
bool could_reclaim(const SwapTenant& d, const SwapTenant& for_whom, uint64_t now) {
  return could_displace(d, for_whom) && now >= d.no_victim_until_ns && d.pool_largest_free > 0;
}

// What a tenant's KV target may rise to when nothing on its GPU wants memory: its pools plus
// `share` of the free memory, as kSetKvTarget, or kLiftKvTarget when that would not limit it;
// nothing when it would rise by less than a margin (no churn).
std::optional<SwapAction> raised_kv_target(const SwapTenant& t, uint64_t share, uint64_t margin, uint32_t deadline_ms) {
  const uint64_t raised = t.kv_bytes + share;
  if (raised < t.kv_target_bytes || raised - t.kv_target_bytes < margin) return std::nullopt;
  const bool has_quota = t.guaranteed_bytes > 0 || t.quota_left_bytes > 0;
  const bool unlimited = has_quota ? share >= t.quota_left_bytes : share >= t.kv_bytes;
  if (unlimited) return SwapAction{SwapAction::Kind::kLiftKvTarget, t.id};
  return SwapAction{SwapAction::Kind::kSetKvTarget, t.id, raised, deadline_ms};
}

// Pointers to the tenants in a stable order by key(tenant).
template <class Key>
std::vector<const SwapTenant*> ordered_by(const std::vector<SwapTenant>& tenants, Key key) {
  std::vector<const SwapTenant*> order;
  for (const SwapTenant& t : tenants) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [&](const SwapTenant* a, const SwapTenant* b) { return key(*a) < key(*b); });
  return order;
}

// KV targets on r's GPU that are not met: past the deadline, the rest is swapped out; before it,
// the requester waits (the pages are on their way back). True when it planned the swap or waits.
bool reclaim_or_wait_for_kv(const SwapTenant& r, const std::vector<SwapTenant>& tenants, const SwapParams& p,
                            uint64_t now, std::vector<SwapAction>* out) {
  bool kv_pending = false;
  for (const SwapTenant& t : tenants) {
    if (t.id == r.id || t.device != r.device || !kv_above_target(t)) continue;
    if (t.kv_target_overdue && could_reclaim(t, r, now)) {
      const uint64_t rest = t.kv_bytes - t.kv_target_bytes + p.margin_bytes;
      out->push_back({SwapAction::Kind::kSwapOut, t.id, amount(t, rest)});
      return true;
    }
    kv_pending = kv_pending || (!t.kv_target_overdue && t.resident);
  }
  return kv_pending;
}

// KV donors shrink before anyone is swapped (one past its deadline is not asked again): `need`
// spread over them by the rule. True when one can give.
bool shrink_kv_donors(const SwapTenant& r, const std::vector<SwapTenant>& tenants, uint64_t need, const KvSettings& kv,
                      std::vector<SwapAction>* out) {
  std::vector<SwapTenant> kv_donors;
  for (const SwapTenant& t : tenants) {
    if (!t.kv_target_overdue) kv_donors.push_back(t);
  }
  const std::vector<kv::KvTarget> shrink = kv::plan_kv_shrink(kv_donors, r, need, kv.rule);
  for (const kv::KvTarget& s : shrink) {
    out->push_back({SwapAction::Kind::kSetKvTarget, s.tenant_id, s.target_bytes, kv.deadline_ms});
  }
  return !shrink.empty();
}

// Something on GPU `dev` wants memory: a request for room, or a swapped-out tenant waiting to run.
bool wants_memory_on(const std::vector<SwapTenant>& tenants, uint32_t dev) {
  return std::any_of(tenants.begin(), tenants.end(), [&](const SwapTenant& t) {
    return t.device == dev && (t.wants_room || (t.swapped_out && t.waiting));
  });
}

}  // namespace

uint64_t capacity_of(const SwapParams& p, uint32_t dev) { return dev < p.capacity.size() ? p.capacity[dev] : 0; }

uint64_t free_on(const std::vector<SwapTenant>& tenants, const SwapParams& p, uint32_t dev) {
  uint64_t resident = 0;
  for (const SwapTenant& t : tenants) resident += t.device == dev ? t.resident_bytes : 0;
  return capacity_of(p, dev) > resident ? capacity_of(p, dev) - resident : 0;
}

uint64_t room_needed(const SwapTenant& r, uint64_t free_now, uint64_t margin) {
  const uint64_t target = std::max(r.wanted_bytes, r.quota_left_bytes);
  const uint64_t have = free_now < target ? free_now : 0;
  return target - have + margin;
}

bool never_fits(const std::vector<SwapTenant>& tenants, const SwapTenant& r, const SwapParams& p) {
  uint64_t fixed = 0;
  for (const SwapTenant& t : tenants) {
    if (t.id != r.id && t.device == r.device) fixed += t.resident_bytes - std::min(t.resident_bytes, t.movable_bytes);
  }
  return r.resident_bytes + fixed > capacity_of(p, r.device);
}

bool make_room_for(const SwapTenant& r, const std::vector<SwapTenant>& tenants, const SwapParams& p, uint64_t now,
                   const KvSettings& kv, std::vector<SwapAction>* out) {
  if (r.room_made) {
    out->push_back({SwapAction::Kind::kAnswerRetry, r.id});
    return false;
  }
  const uint64_t need = room_needed(r, free_on(tenants, p, r.device), p.margin_bytes);
  if (reclaim_or_wait_for_kv(r, tenants, p, now, out)) return true;
  if (shrink_kv_donors(r, tenants, need, kv, out)) return true;
  if (const SwapTenant* v = pick_victim(tenants, r, p, now)) {
    out->push_back({SwapAction::Kind::kSwapOut, v->id, amount(*v, need)});
    return true;
  }
  // No victim now. Refused only if it could never fit; otherwise it waits: a guaranteed tenant may
  // exit or free, a peer's quantum ends.
  if (never_fits(tenants, r, p)) out->push_back({SwapAction::Kind::kAnswerRefused, r.id});
  return false;
}

bool make_room(const std::vector<SwapTenant>& tenants, const SwapParams& p, uint64_t now, const KvSettings& kv,
               std::vector<SwapAction>* out) {
  const auto order = ordered_by(tenants, [](const SwapTenant& t) { return std::make_pair(!t.signalled, !t.guaranteed); });
  for (const SwapTenant* r : order) {
    if (r->wants_room && make_room_for(*r, tenants, p, now, kv, out)) return true;
  }
  return false;
}

bool bring_back(const std::vector<SwapTenant>& tenants, const SwapParams& p, uint64_t now,
                std::vector<SwapAction>* out) {
  const auto order = ordered_by(
      tenants, [](const SwapTenant& t) { return std::make_tuple(!t.signalled, !t.guaranteed, t.out_since_ns); });
  for (const SwapTenant* w : order) {
    if (!w->swapped_out || !w->waiting) continue;
    const uint64_t free_now = free_on(tenants, p, w->device);
    if (!w->swap_in_failed && w->swapped_bytes <= free_now) {
      out->push_back({SwapAction::Kind::kSwapIn, w->id});
      return true;
    }
    if (const SwapTenant* v = pick_victim(tenants, *w, p, now)) {
      const uint64_t short_by = w->swapped_bytes > free_now ? w->swapped_bytes - free_now : 0;
      out->push_back({SwapAction::Kind::kSwapOut, v->id, amount(*v, short_by + p.margin_bytes)});
      return true;
    }
  }
  return false;
}

bool may_rise(const SwapTenant& t, const SwapParams& p, uint64_t now) {
  return t.kv_target_on && now >= t.kv_target_since_ns && now - t.kv_target_since_ns >= p.kv_hold_ns;
}

void raise_kv_targets(const std::vector<SwapTenant>& tenants, const SwapParams& p, uint64_t now, const KvSettings& kv,
                      std::vector<SwapAction>* out) {
  for (const SwapTenant& t : tenants) {
    if (!may_rise(t, p, now) || wants_memory_on(tenants, t.device)) continue;
    const uint64_t free_now = free_on(tenants, p, t.device);
    const uint64_t spare = free_now > p.margin_bytes ? free_now - p.margin_bytes : 0;
    const auto rising = std::count_if(tenants.begin(), tenants.end(),
                                      [&](const SwapTenant& o) { return o.device == t.device && may_rise(o, p, now); });
    if (auto a = raised_kv_target(t, spare / static_cast<uint64_t>(rising), p.margin_bytes, kv.deadline_ms)) {
      out->push_back(*a);
    }
  }
}

std::vector<SwapAction> plan_swaps(const std::vector<SwapTenant>& tenants, const SwapParams& p, uint64_t now,
                                   const KvSettings& kv) {
  std::vector<SwapAction> out;
  // One swap at a time: nothing new while a command is pending.
  if (std::any_of(tenants.begin(), tenants.end(), [](const SwapTenant& t) { return t.command_pending; })) return out;
  if (make_room(tenants, p, now, kv, &out)) return out;
  if (bring_back(tenants, p, now, &out)) return out;
  raise_kv_targets(tenants, p, now, kv, &out);
  return out;
}

}  // namespace gpuos::policies::swap
