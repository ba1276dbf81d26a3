#include "policies/swap/planner.h"

#include <algorithm>
#include <iterator>
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

}  // namespace

std::vector<SwapAction> plan_swaps(const std::vector<SwapTenant>& tenants, const SwapParams& p, uint64_t now) {
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
    if (const SwapTenant* v = pick_victim(tenants, *r, p, now)) {
      // The driver said "full", whatever the estimate says: free what it still wants on top of
      // what the estimate shows (all of it when the estimate is wrong).
      const uint64_t target = std::max(r->wanted_bytes, r->quota_left_bytes);
      const uint64_t have = free_now < target ? free_now : 0;
      out.push_back({SwapAction::Kind::kSwapOut, v->id, amount(*v, target - have + p.margin_bytes)});
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
  return out;
}

}  // namespace gpuos::policies::swap
