// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/swap_engine.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <thread>

#include "common/log.h"
#include "daemon/core/control_block.h"

namespace gpuos::daemon {

using slots::SwapAction;

namespace {
// A queue this long already says "starved": more only lets a tenant outbid others by writing.
constexpr uint32_t kMaxKvQueueDepth = 1u << 20;
constexpr uint32_t kDefaultKvDeadlineMs = 1000;
// Past its deadline, a pool still giving memory back (seen smaller within the last
// kKvProgressNs) is not overdue yet, up to kKvGraceFactor times its deadline: it is doing as
// asked, only slower than the deadline assumed (unmapping tens of GiB), and swapping out what it is
// about to free would move it twice. One that stops giving back, or takes longer, is overdue.
constexpr uint64_t kKvProgressNs = 300'000'000;
constexpr uint64_t kKvGraceFactor = 4;
}  // namespace

SwapEngine::SwapEngine(const GpuMap& gpus, const std::vector<GpuInfo>& info, SwapOptions opts)
    : gpus_(gpus), opts_(opts) {
  for (const GpuInfo& g : info) {
    capacity_.push_back(g.total_mem_bytes > opts_.headroom_bytes ? g.total_mem_bytes - opts_.headroom_bytes : 0);
  }
}

SwapEngine::~SwapEngine() {
  for (auto& [id, pool] : pools_) close(pool.fd);
}

uint64_t SwapEngine::pool_bytes_for(const Tenant& t) const {
  // A tenant never has more on its GPUs than its quota and borrow (the interposer refuses beyond
  // them): a pool larger than that, with room for a slice's 2 MiB alignment per swap-out, would be
  // host memory it pins for nothing. Without a quota: the configured size.
  constexpr uint64_t kSlack = 64ull << 20;
  const uint64_t limit = t.granted.limit_bytes();
  if (limit == 0) return opts_.pool_bytes;
  const uint64_t cap = limit > UINT64_MAX - kSlack ? UINT64_MAX : limit + kSlack;
  return std::min<uint64_t>(opts_.pool_bytes, (cap + (2ull << 20) - 1) & ~((2ull << 20) - 1));
}

gpuos_status SwapEngine::pool_for(const Tenant& t, int* fd_out, uint64_t* bytes) {
  if (!enabled()) return GPUOS_ERR_REFUSED;  // swapping is off: the tenant's memory stays resident
  // A pool is host memory (it is filled at once): only for a tenant that made its memory movable
  // (gpuos run --swap sets the word before it asks).
  if (load(t.cb->swappable) == 0) return GPUOS_ERR_REFUSED;
  // The tenant's own pool: whoever maps a pool can read and write every slice in it, and a uid says
  // nothing about who is who across containers (root in every pod), so no pool is shared.
  Pool& pool = pools_[t.id];
  if (pool.fd < 0) {
    const uint64_t size = pool_bytes_for(t);
    int fd = memfd_create("gpuos-swap-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    // Sparse until used; sealed so that the tenant cannot shrink it under gpuosd (SIGBUS).
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      log::error("cannot create a %llu-byte swap pool: %s", static_cast<unsigned long long>(size),
                 std::strerror(errno));
      if (fd >= 0) close(fd);
      pools_.erase(t.id);
      return GPUOS_ERR_INTERNAL;
    }
    pool.fd = fd;
    pool.space = std::make_unique<SwapSpace>(size);
    // Allocate the pool's pages now, off the event loop: the tenant that pins the pool would
    // otherwise fault them in (zero-filled) one by one, several times slower.
    if (int fd2 = opts_.prefault ? dup(fd) : -1; fd2 >= 0) {
      const off_t len = static_cast<off_t>(size);
      std::thread([fd2, len] {
        if (fallocate(fd2, 0, 0, len) != 0) log::warn("swap pool: fallocate: %s", std::strerror(errno));
        close(fd2);
      }).detach();
    }
    log::info("swap pool of %llu MiB created for tenant %u (uid %u)", static_cast<unsigned long long>(size >> 20),
              t.id, static_cast<unsigned>(t.uid));
  }
  *fd_out = pool.fd;
  *bytes = pool.space->size();
  return GPUOS_OK;
}

void SwapEngine::send_command(Tenant& t, uint32_t cmd) {
  std::atomic_ref<uint32_t>(t.grants->swap_command).store(cmd, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(t.grants->swap_command_seq).fetch_add(1, std::memory_order_release);
  futex_wake_all(&t.grants->swap_command_seq);
  t.swap.cmd = cmd;
}

void SwapEngine::set_kv_target(Tenant& t, bool on, uint64_t bytes, uint32_t deadline_ms, uint64_t now) {
  KvState& s = t.kv;
  s.target_on = on;
  s.target_bytes = on ? bytes : 0;
  s.target_since_ns = now;
  s.deadline_ms = deadline_ms;
  std::atomic_ref<uint64_t>(t.grants->kv_target_bytes).store(s.target_bytes, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(t.grants->kv_deadline_ms).store(deadline_ms, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(t.grants->kv_target_on).store(on ? 1 : 0, std::memory_order_release);
  std::atomic_ref<uint32_t>(t.grants->kv_target_seq).fetch_add(1, std::memory_order_release);
  futex_wake_all(&t.grants->kv_target_seq);
  if (on) {
    log::info("tenant %u: its KV pools (%llu MiB) are to hold at most %llu MiB within %u ms", t.id,
              static_cast<unsigned long long>(kv_bytes(t) >> 20), static_cast<unsigned long long>(bytes >> 20),
              deadline_ms);
  } else {
    log::info("tenant %u: the target of its KV pools is lifted", t.id);
  }
}

uint64_t SwapEngine::kv_bytes(const Tenant& t) const {
  // Tenant-written: never more than the memory it holds (so a forged value cannot make it look
  // like a donor of memory it does not have).
  return std::min(load(t.cb->kv_resident_bytes), gpus_.at_most_all(load(t.cb->mem_used_bytes)));
}

void SwapEngine::note_kv_release(std::map<uint32_t, Tenant>& tenants, uint64_t now) {
  // Room counts once a pool gave back all it was asked for (or freed memory unasked): an engine
  // that unmaps chunk by chunk would otherwise wake the waiting tenant for each one, and its
  // allocation gives up after 16 rounds.
  bool released = false;
  for (auto& [id, t] : tenants) {
    const uint64_t now_bytes = kv_bytes(t);
    const bool asked_for_more = t.kv.target_on && now_bytes > t.kv.target_bytes;
    if (now_bytes < t.kv.seen_bytes) {
      t.kv.released_ns = now;
      if (!asked_for_more) released = true;
    }
    t.kv.seen_bytes = now_bytes;
  }
  if (!released) return;
  for (auto& [id, t] : tenants) {
    if (load(t.cb->mem_request_seq) != t.swap.room_answered_seq) t.swap.room_made = true;
  }
}

void SwapEngine::answer_room(Tenant& t, uint32_t answer, uint64_t now) {
  const uint32_t seq = load(t.cb->mem_request_seq);
  std::atomic_ref<uint32_t>(t.grants->mem_answer).store(answer, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(t.grants->mem_answer_seq).store(seq, std::memory_order_release);
  futex_wake_all(&t.grants->mem_answer_seq);
  t.swap.room_answered_seq = seq;
  t.swap.room_made = false;
  t.swap.room_answered_ns = now;
  if (answer == GPUOS_MEM_RETRY) {
    // Room made for it: counted against its grant until its report grows (its next allocation's
    // reservation; a forger that only asks again never grows it).
    const uint64_t used = gpus_.at_most_all(load(t.cb->mem_used_bytes));
    const uint64_t wanted = gpus_.at_most_all(load(t.cb->mem_wanted_bytes));
    if (used > t.swap.room_retried_used) t.swap.room_retried_bytes = 0;
    t.swap.room_retried_bytes = std::min(t.swap.room_retried_bytes + wanted, gpus_.at_most_all(UINT64_MAX));
    t.swap.room_retried_used = used;
  }
  // Room made: its memory is on the GPU from now, and its quantum against its peers starts now
  // (counted from registration, a tenant that waited a quantum for room would be displaced again
  // as soon as it got it, the two taking turns at every swap).
  if (answer == GPUOS_MEM_RETRY) t.swap.resident_since_ns = now;
}

void SwapEngine::free_slices(Tenant& t) {
  auto p = pools_.find(t.id);
  for (uint64_t off : t.swap.slices) {
    if (p != pools_.end() && p->second.space) p->second.space->free(off);
  }
  t.swap.slices.clear();
}

void SwapEngine::refuse_all(std::map<uint32_t, Tenant>& tenants) {
  for (auto& [id, t] : tenants) {
    if (load(t.cb->mem_request_seq) != t.swap.room_answered_seq) answer_room(t, GPUOS_MEM_REFUSED, 0);
  }
}

void SwapEngine::refuse_beyond_grant(std::map<uint32_t, Tenant>& tenants, uint64_t now) {
  auto mib = [](uint64_t b) { return static_cast<unsigned long long>(b >> 20); };
  for (auto& [id, t] : tenants) {
    if (load(t.cb->mem_request_seq) == t.swap.room_answered_seq) continue;
    if (now < t.swap.room_answered_ns + kMinRoomIntervalNs) continue;  // waits; make_view hides it
    // Tenant-written, bounded by the node's memory. The waiting allocation's bytes are in
    // mem_used_bytes already (reserved before the driver was asked), not in what NVML measured.
    const uint64_t wanted = gpus_.at_most_all(load(t.cb->mem_wanted_bytes));
    const uint64_t used = gpus_.at_most_all(load(t.cb->mem_used_bytes));
    if (wanted == 0 || used < wanted) {
      log::warn("tenant %u asked for room for %llu MiB reporting %llu MiB held: refused (no allocation of its waits)",
                t.id, mib(wanted), mib(used));
      answer_room(t, GPUOS_MEM_REFUSED, now);
      continue;
    }
    if (const uint64_t limit = t.granted.limit_bytes(); limit != 0) {
      const uint64_t held = std::max(used, t.verify.mem_bytes + wanted);
      const uint64_t made = used > t.swap.room_retried_used ? 0 : t.swap.room_retried_bytes;
      if (held > limit || made > limit - held) {
        log::warn("tenant %u asked for room for %llu MiB holding %llu MiB (and %llu MiB of room made for it) of a "
                  "%llu MiB grant: refused (beyond its grant)",
                  t.id, mib(wanted), mib(held), mib(made), mib(limit));
        answer_room(t, GPUOS_MEM_REFUSED, now);
        continue;
      }
    }
    // Backed by a failure? The allocation's GPU (the tenant's ordinal, mapped by its device map).
    int gpu = static_cast<int>(gpus_.home(t));
    if (const int32_t wd = load(t.cb->mem_wanted_device); wd >= 0 && wd < GPUOS_MAX_DEVICES) {
      if (const int g = gpus_.gpu_of(t, wd); g >= 0) gpu = g;
    }
    const GpuInfo* info = gpus_.find(static_cast<uint32_t>(gpu));
    if (info == nullptr || info->total_mem_bytes == 0) continue;
    const uint64_t spare = info->total_mem_bytes / 16;
    // The driver's own count, read now: an allocation that fits it did not fail for lack of room
    // (issue #62: a report claiming the GPU full, and 900 MiB asked for, swapped out a 600 MiB
    // tenant of root's with the GPU nearly empty).
    if (uint64_t free = 0; opts_.gpu_free && opts_.gpu_free(static_cast<uint32_t>(gpu), &free)) {
      if (wanted <= free && free - wanted >= spare) {
        log::info("tenant %u asked for room for %llu MiB on GPU %d, which has %llu MiB free as its driver counts it: "
                  "retry (no allocation of that size failed for lack of room; nobody is displaced)",
                  t.id, mib(wanted), gpu, mib(free));
        answer_room(t, GPUOS_MEM_RETRY, now);
      }
      continue;  // a failure gpuosd saw: the policy's to answer
    }
    // gpuosd cannot read the GPU's free memory: only a recorded need backs a request, its grant
    // (above). A tenant with none could make the GPU look full by its words alone.
    if (t.granted.limit_bytes() == 0) {
      log::warn("tenant %u asked for room for %llu MiB without a quota, and gpuosd cannot read GPU %d's free memory "
                "(NVML): refused (nothing backs it)",
                t.id, mib(wanted), gpu);
      answer_room(t, GPUOS_MEM_REFUSED, now);
      continue;
    }
    // By gpuosd's numbers (each tenant's memory on the GPU: the larger of its report and, for a
    // tenant on that GPU alone, NVML's measure; and the waiting allocation, which is in no
    // per-device word until it succeeds), the allocation fits: no failure for lack of room.
    uint64_t known = std::min(wanted, info->total_mem_bytes);
    for (const auto& [oid, o] : tenants) {
      uint64_t on = gpus_.used_on(o, static_cast<uint32_t>(gpu));
      if (o.verify.gpus == uint64_t{1} << gpu) on = std::max(on, std::min(o.verify.mem_bytes, info->total_mem_bytes));
      known += on;
    }
    if (known + spare <= info->total_mem_bytes) {
      log::info("tenant %u asked for room for %llu MiB on GPU %d, which has %llu MiB free by gpuosd's count: "
                "retry (nobody is displaced)",
                t.id, mib(wanted), gpu, mib(info->total_mem_bytes - known));
      answer_room(t, GPUOS_MEM_RETRY, now);
    }
  }
}

void SwapEngine::tenant_gone(Tenant& gone, std::map<uint32_t, Tenant>& tenants) {
  free_slices(gone);
  // Its pool goes with it (its host memory is the node's; nothing in it is anybody else's).
  if (auto p = pools_.find(gone.id); p != pools_.end()) {
    close(p->second.fd);
    pools_.erase(p);
    log::info("swap pool of tenant %u freed (it exited)", gone.id);
  }
  for (auto& [oid, o] : tenants) {
    if (load(o.cb->mem_request_seq) != o.swap.room_answered_seq) o.swap.room_made = true;  // its memory is free now
  }
}

void SwapEngine::note_done(std::map<uint32_t, Tenant>& tenants, uint64_t now) {
  for (auto& [id, t] : tenants) {
    SwapState& s = t.swap;
    if (s.cmd == GPUOS_SWAP_NONE && t.gate.held && load(t.cb->swap_state) == GPUOS_SWAP_RESIDENT &&
        load(t.cb->swapped_bytes) == 0) {
      // It brought its memory back itself: gpuosd had stopped renewing its lease (a stall longer
      // than GPUOS_GATE_LEASE_NS) and it went on, as it may. Nothing of it is out any more.
      log::info("tenant %u swapped itself back in while gpuosd was not looking; its gate is released", t.id);
      free_slices(t);
      s.resident_since_ns = now;
      t.gate.held = false;
      publish_gate(t, now);
      continue;
    }
    if (s.cmd == GPUOS_SWAP_NONE || load(t.cb->swap_done_seq) != load(t.grants->swap_command_seq)) continue;
    const uint32_t state = load(t.cb->swap_state);
    if (s.cmd == GPUOS_SWAP_OUT) {
      const uint64_t swapped = load(t.cb->swapped_bytes);
      const uint64_t moved = swapped > s.swapped_before_cmd ? swapped - s.swapped_before_cmd : 0;
      auto p = pools_.find(t.id);
      if (!s.slices.empty() && p != pools_.end() && p->second.space) p->second.space->shrink(s.slices.back(), moved);
      if (moved == 0 && !s.slices.empty()) s.slices.pop_back();
      if (state == GPUOS_SWAP_SWAPPED_OUT && moved > 0) {
        if (s.swapped_before_cmd == 0) s.out_since_ns = now;
        log::info("tenant %u swapped out %llu MiB (%llu MiB out in all)", t.id,
                  static_cast<unsigned long long>(moved >> 20), static_cast<unsigned long long>(swapped >> 20));
        for (auto& [oid, o] : tenants) {
          o.swap.swap_in_failed = false;
          if (load(o.cb->mem_request_seq) != o.swap.room_answered_seq) o.swap.room_made = true;
        }
      } else {
        log::warn("tenant %u did not swap out (state %u); leaving it alone for 10 s", t.id, state);
        s.no_victim_until_ns = now + 10'000'000'000ull;
        if (state == GPUOS_SWAP_RESIDENT) {
          t.gate.held = false;
          publish_gate(t, now);
        }
      }
    } else if (s.cmd == GPUOS_SWAP_IN) {
      if (state == GPUOS_SWAP_RESIDENT) {
        log::info("tenant %u swapped in (longest swap-in %.1f ms)", t.id,
                  static_cast<double>(load(t.cb->max_swap_in_ns)) / 1e6);
        free_slices(t);
        s.resident_since_ns = now;
        // Back for a signal: its wait ends (and the word clears) as its gate opens, before the
        // program got to act on it. It keeps its memory for a quantum, borrower or not, so that it
        // can (a borrower is otherwise the first victim at once).
        if (load(t.cb->signalled) != 0) s.no_victim_until_ns = std::max(s.no_victim_until_ns, now + opts_.quantum_ns);
        t.gate.held = false;
        publish_gate(t, now);
      } else {
        // No room after all (an estimate was off, or an exited tenant's memory is still being
        // torn down): a victim goes first, or, with none, the same swap-in again a little later.
        s.swap_in_failed = true;
        s.swap_in_retry_ns = now + 500'000'000ull;
      }
    }
    s.cmd = GPUOS_SWAP_NONE;
  }
}

bool SwapEngine::make_view(std::map<uint32_t, Tenant>& tenants, slots::Event e, uint32_t tenant_id, uint64_t now,
                           slots::MemoryView* out) {
  if (!enabled()) {
    refuse_all(tenants);
    return false;
  }
  note_done(tenants, now);
  note_kv_release(tenants, now);
  refuse_beyond_grant(tenants, now);
  *out = build_view(tenants, e, tenant_id, now);
  return true;
}

slots::MemoryView SwapEngine::build_view(std::map<uint32_t, Tenant>& tenants, slots::Event e, uint32_t tenant_id,
                                         uint64_t now) const {
  slots::MemoryView view;
  view.now_ns = now;
  view.event = e;
  view.tenant_id = tenant_id;
  view.params.capacity = capacity_;
  view.params.quantum_ns = opts_.quantum_ns;
  view.params.margin_bytes = opts_.headroom_bytes;
  for (auto& [id, t] : tenants) {
    const gpuos_control_block& cb = *t.cb;
    slots::SwapTenant s;
    s.id = t.id;
    // Its GPU: where most of its memory is; for a request for room, the waiting allocation's.
    s.device = gpus_.home(t);
    s.guaranteed = t.tenant_class == GPUOS_CLASS_GUARANTEED;
    s.swappable = load(cb.swappable) != 0;
    const uint32_t state = load(cb.swap_state);
    s.command_pending = t.swap.cmd != GPUOS_SWAP_NONE;
    s.resident = state == GPUOS_SWAP_RESIDENT && !s.command_pending;
    s.swapped_out = state == GPUOS_SWAP_SWAPPED_OUT && !s.command_pending;
    s.waiting = load(cb.waiting) != 0;
    s.signalled = load(cb.signalled) != 0;
    s.busy = load(cb.busy) != 0;
    // (A request within kMinRoomIntervalNs of its last answer waits: refuse_beyond_grant.)
    s.wants_room = load(cb.mem_request_seq) != t.swap.room_answered_seq &&
                   now >= t.swap.room_answered_ns + kMinRoomIntervalNs;
    if (const int32_t wd = load(cb.mem_wanted_device); s.wants_room && wd >= 0 && wd < GPUOS_MAX_DEVICES) {
      if (const int g = gpus_.gpu_of(t, wd); g >= 0) s.device = static_cast<uint32_t>(g);
    }
    s.wanted_bytes = gpus_.at_most_all(load(cb.mem_wanted_bytes));
    const uint64_t quota = t.granted.quota_bytes;  // gpuosd's, not the word the tenant can write
    s.room_made = t.swap.room_made;
    s.swap_in_failed = t.swap.swap_in_failed && now < t.swap.swap_in_retry_ns;
    // Tenant-written: bounded by the node's memory, so that a forged value cannot look like more
    // than a GPU can hold.
    const uint64_t swapped = gpus_.at_most_all(load(cb.swapped_bytes));
    const uint64_t movable = gpus_.at_most_all(load(cb.swappable_bytes));
    const uint64_t used = gpus_.at_most_all(load(cb.mem_used_bytes));
    s.movable_bytes = movable > swapped ? movable - swapped : 0;
    s.swapped_bytes = swapped;
    s.resident_bytes = used > swapped ? used - swapped : 0;
    const uint64_t borrow = t.granted.borrow_bytes;
    s.quota_left_bytes = quota > used ? quota - used : 0;
    s.borrowed_bytes = quota != 0 && borrow != 0 && used > quota ? used - quota : 0;
    s.resident_since_ns = t.swap.resident_since_ns;
    s.out_since_ns = t.swap.out_since_ns;
    s.no_victim_until_ns = t.swap.no_victim_until_ns;
    auto p = pools_.find(t.id);
    s.pool_largest_free = p != pools_.end() && p->second.space ? p->second.space->largest_free() : 0;
    s.priority = t.priority;
    s.guaranteed_bytes = quota;
    s.kv_bytes = std::min(kv_bytes(t), s.resident_bytes);
    s.kv_queue_depth = std::min<uint32_t>(load(cb.kv_queue_depth), kMaxKvQueueDepth);
    s.kv_target_on = t.kv.target_on;
    s.kv_target_bytes = t.kv.target_bytes;
    s.kv_target_since_ns = t.kv.target_since_ns;
    const uint64_t deadline_ns = uint64_t{t.kv.deadline_ms} * 1'000'000ull;
    const bool giving_back = t.kv.released_ns > t.kv.target_since_ns &&
                             now < t.kv.released_ns + kKvProgressNs &&
                             now < t.kv.target_since_ns + kKvGraceFactor * deadline_ns;
    s.kv_target_overdue = t.kv.target_on && s.kv_bytes > t.kv.target_bytes &&
                          now >= t.kv.target_since_ns + deadline_ns && !giving_back;
    view.tenants.push_back(s);
  }
  return view;
}

bool SwapEngine::check(const slots::MemoryView& view, const slots::MemoryActions& actions, std::string* why) const {
  std::set<uint32_t> commanded, answered;
  for (const SwapAction& a : actions.actions) {
    const slots::SwapTenant* t = nullptr;
    for (const slots::SwapTenant& v : view.tenants) {
      if (v.id == a.tenant_id) t = &v;
    }
    const std::string who = "tenant " + std::to_string(a.tenant_id);
    if (t == nullptr) {
      *why = "an action for " + who + ", which is not live";
      return false;
    }
    switch (a.kind) {
      case SwapAction::Kind::kSwapOut:
      case SwapAction::Kind::kSwapIn:
        if (t->command_pending || !commanded.insert(t->id).second) {
          *why = "a second swap command for " + who + " while one is pending";
          return false;
        }
        if (a.kind == SwapAction::Kind::kSwapOut && !t->swappable) {
          *why = "a swap-out of " + who + ", whose memory cannot move";
          return false;
        }
        if (a.kind == SwapAction::Kind::kSwapIn && t->swapped_bytes == 0) {
          *why = "a swap-in of " + who + ", which has no memory out";
          return false;
        }
        break;
      case SwapAction::Kind::kSetKvTarget:
      case SwapAction::Kind::kLiftKvTarget:
        if (t->kv_bytes == 0 && !t->kv_target_on) {
          *why = "a KV target for " + who + ", which has no KV pool";
          return false;
        }
        break;
      case SwapAction::Kind::kAnswerRetry:
      case SwapAction::Kind::kAnswerRefused:
        if (!t->wants_room || !answered.insert(t->id).second) {
          *why = "an answer to " + who + ", which has no request for room pending";
          return false;
        }
        break;
    }
  }
  return true;
}

void SwapEngine::apply(std::map<uint32_t, Tenant>& tenants, const slots::MemoryView&,
                       const slots::MemoryActions& actions, uint64_t now) {
  for (const SwapAction& a : actions.actions) {
    auto it = tenants.find(a.tenant_id);
    if (it == tenants.end()) continue;
    Tenant& t = it->second;
    switch (a.kind) {
      case SwapAction::Kind::kAnswerRetry:
        answer_room(t, GPUOS_MEM_RETRY, now);
        break;
      case SwapAction::Kind::kAnswerRefused:
        log::info("tenant %u: no tenant can make room for its allocation; it gets out-of-memory", t.id);
        answer_room(t, GPUOS_MEM_REFUSED, now);
        break;
      case SwapAction::Kind::kSwapOut: {
        // The slice can take all its movable memory (as far as the pool allows); it is cut to
        // what actually moved when the command is done.
        auto p = pools_.find(t.id);
        if (p == pools_.end() || !p->second.space) break;  // no pool yet: made on its first SWAP_POOL
        SwapSpace& space = *p->second.space;
        const uint64_t swapped = load(t.cb->swapped_bytes);
        const uint64_t swappable = load(t.cb->swappable_bytes);
        const uint64_t movable = swappable > swapped ? swappable - swapped : 0;
        const uint64_t slice = std::min(movable, space.largest_free());
        std::optional<uint64_t> off = slice ? space.allocate(slice) : std::nullopt;
        if (!off) break;  // (the policy saw pool_largest_free)
        t.swap.slices.push_back(*off);
        t.swap.swapped_before_cmd = swapped;
        std::atomic_ref<uint64_t>(t.grants->swap_slice_offset).store(*off, std::memory_order_relaxed);
        std::atomic_ref<uint64_t>(t.grants->swap_slice_bytes).store(slice, std::memory_order_relaxed);
        std::atomic_ref<uint64_t>(t.grants->swap_want_bytes).store(a.bytes, std::memory_order_relaxed);
        // (Early: it borrows, it makes way for a guaranteed tenant, or for a signalled one.)
        const uint64_t quantum_end = t.swap.resident_since_ns + opts_.quantum_ns;
        char early[96] = "";
        if (now < quantum_end) {
          std::snprintf(early, sizeof(early), ", %llu ms before its quantum is over",
                        static_cast<unsigned long long>((quantum_end - now) / 1000000));
        }
        log::info("tenant %u: swapping out at least %llu MiB%s", t.id, static_cast<unsigned long long>(a.bytes >> 20),
                  early);
        t.gate.held = true;
        publish_gate(t, now);
        send_command(t, GPUOS_SWAP_OUT);
        break;
      }
      case SwapAction::Kind::kSetKvTarget:
        set_kv_target(t, true, a.bytes, a.deadline_ms != 0 ? a.deadline_ms : kDefaultKvDeadlineMs, now);
        break;
      case SwapAction::Kind::kLiftKvTarget:
        set_kv_target(t, false, 0, 0, now);
        break;
      case SwapAction::Kind::kSwapIn:
        log::info("tenant %u: swapping in %llu MiB", t.id,
                  static_cast<unsigned long long>(load(t.cb->swapped_bytes) >> 20));
        send_command(t, GPUOS_SWAP_IN);
        break;
    }
  }
}

}  // namespace gpuos::daemon
