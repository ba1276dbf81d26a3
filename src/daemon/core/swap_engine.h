// SPDX-License-Identifier: Apache-2.0
// The memory slot's mechanism (memory oversubscription): each swappable tenant's own swap pool, the MemoryView of
// the live tenants, and carrying out the slot's actions: a victim's gate held closed while its
// memory is out or moving, SWAP_OUT / SWAP_IN commands in its control block with a slice of its
// pool, answers to requests for room; and noting the commands the tenants carried out.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "daemon/core/gpus.h"
#include "daemon/core/swap_pool.h"
#include "daemon/core/tenant.h"
#include "slots/memory.h"

namespace gpuos::daemon {

struct SwapOptions {
  // 0 = oversubscription off (requests for room are refused at once). Each swappable tenant gets a
  // pool of its own, of this size at most (no pool is shared: a uid is no trust domain across
  // containers, where every pod may run as root).
  uint64_t pool_bytes = 0;
  uint64_t quantum_ns = 5'000'000'000ull;
  uint64_t headroom_bytes = 2ull << 30;
  bool prefault = true;  // allocate a new pool's pages in a helper thread
  // GPU `gpu`'s free memory now as the driver counts it (gpuosd: NVML's nvmlDeviceGetMemoryInfo),
  // false when it cannot say; null: never known. A request for room is believed only against it
  // (refuse_beyond_grant): no tenant's word makes a GPU look full.
  std::function<bool(uint32_t gpu, uint64_t* free_bytes)> gpu_free;
};

class SwapEngine {
 public:
  using Policy = slots::MemoryPolicy;
  using View = slots::MemoryView;
  using Actions = slots::MemoryActions;

  SwapEngine(const GpuMap& gpus, const std::vector<GpuInfo>& info, SwapOptions opts);
  ~SwapEngine();  // closes the pools
  SwapEngine(const SwapEngine&) = delete;
  SwapEngine& operator=(const SwapEngine&) = delete;

  bool enabled() const { return opts_.pool_bytes != 0; }
  // SWAP_POOL: the tenant's own pool (made at its first request, freed when it exits; refused to a
  // tenant that is not swappable): GPUOS_OK with *fd (borrowed) and *bytes, or why not. No other
  // tenant ever gets this pool's fd.
  gpuos_status pool_for(const Tenant& t, int* fd, uint64_t* bytes);
  // The size of t's pool: pool_bytes, at most what its quota and borrow let it hold (and slack).
  uint64_t pool_bytes_for(const Tenant& t) const;
  // Notes the commands carried out since the last look (slices cut to what moved, gates released).
  void note_done(std::map<uint32_t, Tenant>& tenants, uint64_t now);
  // KV pools that gave memory back (their engine unmapped pages) made room for whoever waits; the
  // time is kept (a pool still giving back past its deadline is not overdue yet: make_view).
  void note_kv_release(std::map<uint32_t, Tenant>& tenants, uint64_t now);
  // A tenant's KV pool bytes as gpuosd believes them: its word, bounded by what it holds.
  uint64_t kv_bytes(const Tenant& t) const;
  // Notes what the tenants did since the last look (note_done, note_kv_release), screens the
  // requests for room (refuse_beyond_grant), and makes the view. Oversubscription off: every
  // request for room is refused, and false (no policy to ask).
  bool make_view(std::map<uint32_t, Tenant>& tenants, slots::Event e, uint32_t tenant_id, uint64_t now,
                 slots::MemoryView* out);
  // Whether the actions keep the slot's contract: known tenants; commands only to tenants with none
  // pending (one each), SWAP_OUT only to a swappable tenant, SWAP_IN only to one with memory out;
  // answers only to a request for room.
  bool check(const slots::MemoryView& view, const slots::MemoryActions& actions, std::string* why) const;
  void apply(std::map<uint32_t, Tenant>& tenants, const slots::MemoryView& view, const slots::MemoryActions& actions,
             uint64_t now);
  // Screens the pending requests for room before the policy sees them; a forged one must not
  // displace anybody. Every word of a request is the tenant's: a request reaches the policy only
  // backed by what gpuosd sees itself. Refused: one whose waiting allocation is not in the
  // requester's report (the interposer reserves it before it asks the driver), and one beyond its
  // grant (quota + borrow - what it holds, the larger of its report and NVML's measure), counting the
  // room already made for it since its report last grew (each request alone passed, ten in a row did
  // not). Then the failure itself: with the GPU's free memory known (SwapOptions::gpu_free, read
  // now), one that fits it with 1/16 of the GPU to spare is answered RETRY at once, displacing
  // nobody (no allocation of that size failed for lack of room), whatever the tenants' words say;
  // one that does not is a failure gpuosd saw, for the policy. Without that number only a tenant's
  // recorded need backs a request: its grant (quota + borrow, checked above), and the GPU full by
  // gpuosd's own count (every tenant's memory there, the larger of its report and NVML's measure,
  // and the waiting allocation, else RETRY at once); a tenant with no quota is refused. Left
  // waiting, unseen by the policy: one within kMinRoomIntervalNs of the tenant's last answer (a rate
  // per process).
  void refuse_beyond_grant(std::map<uint32_t, Tenant>& tenants, uint64_t now);
  static constexpr uint64_t kMinRoomIntervalNs = 100'000'000;
  // Oversubscription off: every request for room is refused.
  void refuse_all(std::map<uint32_t, Tenant>& tenants);
  // A tenant exited: its slices go back to its pool; the others' requests may fit now.
  void tenant_gone(Tenant& gone, std::map<uint32_t, Tenant>& tenants);
  void answer_room(Tenant& t, uint32_t answer, uint64_t now);

 private:
  slots::MemoryView build_view(std::map<uint32_t, Tenant>& tenants, slots::Event e, uint32_t tenant_id,
                               uint64_t now) const;
  void send_command(Tenant& t, uint32_t cmd);
  void set_kv_target(Tenant& t, bool on, uint64_t bytes, uint32_t deadline_ms, uint64_t now);
  void free_slices(Tenant& t);
  struct Pool {
    int fd = -1;
    std::unique_ptr<SwapSpace> space;
  };
  const GpuMap& gpus_;
  std::vector<uint64_t> capacity_;
  SwapOptions opts_;
  std::map<uint32_t, Pool> pools_;  // by tenant id, created on its first SWAP_POOL
};

}  // namespace gpuos::daemon
