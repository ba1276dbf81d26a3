// SPDX-License-Identifier: Apache-2.0
#include "policies/kv/shrink_rules.h"

#include <algorithm>
#include <tuple>

namespace gpuos::policies::kv {

const char* kv_rule_name(KvRule rule) {
  switch (rule) {
    case KvRule::kFair: return "fair";
    case KvRule::kPriority: return "priority";
    case KvRule::kQueue: return "queue";
  }
  return "?";
}

std::optional<KvRule> parse_kv_rule(std::string_view name) {
  for (KvRule r : {KvRule::kFair, KvRule::kPriority, KvRule::kQueue}) {
    if (name == kv_rule_name(r)) return r;
  }
  return std::nullopt;
}

uint64_t kv_givable_bytes(const SwapTenant& t) {
  if (t.guaranteed_bytes == 0) return t.kv_bytes;
  if (t.resident_bytes <= t.guaranteed_bytes) return 0;
  return std::min(t.kv_bytes, t.resident_bytes - t.guaranteed_bytes);
}

bool kv_can_give(const SwapTenant& d, const SwapTenant& for_whom) {
  if (d.id == for_whom.id || d.device != for_whom.device || d.command_pending || !d.resident) return false;
  if (d.guaranteed && !for_whom.guaranteed) return false;
  return kv_givable_bytes(d) > 0;
}

namespace {

struct Donor {
  const SwapTenant* t;
  uint64_t givable;
  uint64_t floor() const { return t->kv_bytes - givable; }  // the lowest its target may go
};

// Each donor in `order` gives what it can until `need` is met.
std::vector<KvTarget> take_in_order(const std::vector<Donor>& order, uint64_t need) {
  std::vector<KvTarget> out;
  for (const Donor& d : order) {
    if (need == 0) break;
    const uint64_t give = std::min(d.givable, need);
    out.push_back({d.t->id, d.t->kv_bytes - give});
    need -= give;
  }
  return out;
}

// Max-min: the pools above a level L come down to it (or to their floor), with L the highest level
// at which they give `need` together. Donors are sorted by kv_bytes, largest first.
std::vector<KvTarget> water_fill(const std::vector<Donor>& donors, uint64_t need) {
  auto taken = [&](uint64_t level) {
    uint64_t sum = 0;
    for (const Donor& d : donors) {
      if (d.t->kv_bytes > level) sum += d.t->kv_bytes - std::max(level, d.floor());
    }
    return sum;
  };
  // taken() falls as the level rises: taken(0) is everything the donors can give, taken(largest
  // pool) is 0. Find the highest level that still gives `need` (0 when even everything is short).
  uint64_t lo = 0, hi = donors.front().t->kv_bytes;
  if (taken(lo) > need) {
    while (hi - lo > 1) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (taken(mid) >= need) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
  }
  // At level lo the donors give up to one byte each too much (per donor at the level, fewer than
  // there are): those keep one byte more, so together they give exactly `need`.
  uint64_t excess = taken(lo) > need ? taken(lo) - need : 0;
  std::vector<KvTarget> out;
  for (const Donor& d : donors) {
    if (d.t->kv_bytes <= lo) continue;
    uint64_t target = std::max(lo, d.floor());
    if (excess > 0 && d.floor() <= lo) {
      ++target;
      --excess;
    }
    if (target < d.t->kv_bytes) out.push_back({d.t->id, target});
  }
  return out;
}

}  // namespace

std::vector<KvTarget> plan_kv_shrink(const std::vector<SwapTenant>& tenants, const SwapTenant& for_whom,
                                     uint64_t need_bytes, KvRule rule) {
  std::vector<Donor> donors;
  for (const SwapTenant& t : tenants) {
    if (kv_can_give(t, for_whom)) donors.push_back({&t, kv_givable_bytes(t)});
  }
  if (donors.empty() || need_bytes == 0) return {};
  auto larger_pool = [](const Donor& a, const Donor& b) {
    return std::make_pair(b.t->kv_bytes, a.t->id) < std::make_pair(a.t->kv_bytes, b.t->id);
  };
  switch (rule) {
    case KvRule::kFair:
      std::sort(donors.begin(), donors.end(), larger_pool);
      return water_fill(donors, need_bytes);
    case KvRule::kPriority:
      std::sort(donors.begin(), donors.end(), [&](const Donor& a, const Donor& b) {
        if (a.t->guaranteed != b.t->guaranteed) return !a.t->guaranteed;  // best-effort first
        if (a.t->priority != b.t->priority) return a.t->priority < b.t->priority;
        return larger_pool(a, b);
      });
      return take_in_order(donors, need_bytes);
    case KvRule::kQueue:
      // Waiting requests per byte of pool, lowest first (compared as cross products: exact, and a
      // u32 depth times a u64 size fits 128 bits): where pages cost the fewest queued requests.
      std::sort(donors.begin(), donors.end(), [&](const Donor& a, const Donor& b) {
        const unsigned __int128 ra = static_cast<unsigned __int128>(a.t->kv_queue_depth) * b.t->kv_bytes;
        const unsigned __int128 rb = static_cast<unsigned __int128>(b.t->kv_queue_depth) * a.t->kv_bytes;
        if (ra != rb) return ra < rb;
        return larger_pool(a, b);
      });
      return take_in_order(donors, need_bytes);
  }
  return {};
}

}  // namespace gpuos::policies::kv
