// SPDX-License-Identifier: Apache-2.0
#include "policies/swap/planner.h"

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

}  // namespace

std::vector<SwapAction> plan_swaps(const std::vector<SwapTenant>& tenants, const SwapParams& p, uint64_t now,
                                   const KvSettings& kv) {
  std::vector<SwapAction> out;
  for (const SwapTenant& t : tenants) {
    if (t.command_pending) return out;
  }
  // Signalled tenants are served first, then guaranteed ones, then by id (registration order).
  std::vector<const SwapTenant*> order;
  for (const SwapTenant& t : tenants) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const SwapTenant* a, const SwapTenant* b) {
    return std::make_pair(!a->signalled, !a->guaranteed) < std::make_pair(!b->signalled, !b->guaranteed);
  });

  auto capacity = [&](uint32_t dev) { return dev < p.capacity.size() ? p.capacity[dev] : 0; };
  auto free_on = [&](uint32_t dev) {
    uint64_t resident = 0;
    for (const SwapTenant& t : tenants) resident += t.device == dev ? t.resident_bytes : 0;
    return capacity(dev) > resident ? capacity(dev) - resident : 0;
  };

  // 1. Allocations waiting for room.
  for (const SwapTenant* r : order) {
    if (!r->wants_room) continue;
    const uint64_t free_now = free_on(r->device);
    if (r->room_made) {
      out.push_back({SwapAction::Kind::kAnswerRetry, r->id});
      continue;
    }
    // The driver said "full", whatever the estimate says: free what it still wants on top of what
    // the estimate shows (all of it when the estimate is wrong).
    const uint64_t target = std::max(r->wanted_bytes, r->quota_left_bytes);
    const uint64_t have = free_now < target ? free_now : 0;
    const uint64_t need = target - have + p.margin_bytes;
    // KV targets on its GPU that are not met: past the deadline, the rest is swapped out; before
    // it, the requester waits (the pages are on their way back).
    bool kv_pending = false;
    for (const SwapTenant& t : tenants) {
      if (t.id == r->id || t.device != r->device || !kv_above_target(t)) continue;
      if (t.kv_target_overdue && could_reclaim(t, *r, now)) {
        const uint64_t rest = t.kv_bytes - t.kv_target_bytes + p.margin_bytes;
        out.push_back({SwapAction::Kind::kSwapOut, t.id, amount(t, rest)});
        return out;
      }
      kv_pending = kv_pending || (!t.kv_target_overdue && t.resident);
    }
    if (kv_pending) return out;
    // KV donors shrink before anyone is swapped (one past its deadline is not asked again).
    std::vector<SwapTenant> kv_donors;
    for (const SwapTenant& t : tenants) {
      if (!t.kv_target_overdue) kv_donors.push_back(t);
    }
    const std::vector<kv::KvTarget> shrink = kv::plan_kv_shrink(kv_donors, *r, need, kv.rule);
    if (!shrink.empty()) {
      for (const kv::KvTarget& s : shrink) {
        out.push_back({SwapAction::Kind::kSetKvTarget, s.tenant_id, s.target_bytes, kv.deadline_ms});
      }
      return out;
    }
    if (const SwapTenant* v = pick_victim(tenants, *r, p, now)) {
      out.push_back({SwapAction::Kind::kSwapOut, v->id, amount(*v, need)});
      return out;
    }
    // No victim now. Refused only if it could never fit: memory that cannot move (other tenants'
    // unswappable bytes) leaves too little. Otherwise it waits: a guaranteed tenant may exit or
    // free, a peer's quantum ends.
    uint64_t fixed = 0;
    for (const SwapTenant& t : tenants) {
      if (t.id != r->id && t.device == r->device) fixed += t.resident_bytes - std::min(t.resident_bytes, t.movable_bytes);
    }
    if (r->resident_bytes + fixed > capacity(r->device)) {  // (its resident bytes include the
                                                          // allocation waiting: reserved first)
      out.push_back({SwapAction::Kind::kAnswerRefused, r->id});
    }
  }

  // 2. Swapped-out tenants that want to run: signalled, then guaranteed first, then the one out
  // longest.
  std::stable_sort(order.begin(), order.end(), [](const SwapTenant* a, const SwapTenant* b) {
    return std::make_tuple(!a->signalled, !a->guaranteed, a->out_since_ns) <
           std::make_tuple(!b->signalled, !b->guaranteed, b->out_since_ns);
  });
  for (const SwapTenant* w : order) {
    if (!w->swapped_out || !w->waiting) continue;
    const uint64_t free_now = free_on(w->device);
    if (!w->swap_in_failed && w->swapped_bytes <= free_now) {
      out.push_back({SwapAction::Kind::kSwapIn, w->id});
      return out;
    }
    if (const SwapTenant* v = pick_victim(tenants, *w, p, now)) {
      const uint64_t short_by = w->swapped_bytes > free_now ? w->swapped_bytes - free_now : 0;
      out.push_back({SwapAction::Kind::kSwapOut, v->id, amount(*v, short_by + p.margin_bytes)});
      return out;
    }
  }

  // 3. KV targets that held long enough rise again (or are lifted) on GPUs where nothing wants
  // memory; the free memory is shared among the targets raised together.
  auto wants_memory_on = [&](uint32_t dev) {
    return std::any_of(tenants.begin(), tenants.end(), [&](const SwapTenant& t) {
      return t.device == dev && (t.wants_room || (t.swapped_out && t.waiting));
    });
  };
  auto may_rise = [&](const SwapTenant& t) {
    return t.kv_target_on && now >= t.kv_target_since_ns && now - t.kv_target_since_ns >= p.kv_hold_ns;
  };
  for (const SwapTenant& t : tenants) {
    if (!may_rise(t) || wants_memory_on(t.device)) continue;
    const uint64_t free_now = free_on(t.device);
    const uint64_t spare = free_now > p.margin_bytes ? free_now - p.margin_bytes : 0;
    const auto rising = std::count_if(tenants.begin(), tenants.end(),
                                      [&](const SwapTenant& o) { return o.device == t.device && may_rise(o); });
    if (auto a = raised_kv_target(t, spare / static_cast<uint64_t>(rising), p.margin_bytes, kv.deadline_ms)) {
      out.push_back(*a);
    }
  }
  return out;
}

}  // namespace gpuos::policies::swap
