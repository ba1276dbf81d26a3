// Memory oversubscription in gpuosd, split as everywhere in gpuos: the core carries out swaps (gate
// held closed, SWAP_OUT / SWAP_IN commands in the control block, answers to memory requests); this
// file holds the two small pieces it needs to decide: the allocator of the swap pool's slices and
// the swap policy, a pure function from what the tenants look like now to what to do next.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace gpuos::daemon {

// Slices of the swap pool (byte offsets into one memfd), first fit, aligned to 2 MiB.
class SwapSpace {
 public:
  explicit SwapSpace(uint64_t bytes);
  std::optional<uint64_t> allocate(uint64_t bytes);  // the slice's offset, or none
  void free(uint64_t offset);                        // a slice allocate() returned
  void shrink(uint64_t offset, uint64_t bytes);      // keeps the slice's first `bytes` (0: frees it)
  uint64_t largest_free() const;
  uint64_t free_bytes() const;
  uint64_t size() const { return size_; }

 private:
  static uint64_t align(uint64_t bytes);
  uint64_t size_;
  std::map<uint64_t, uint64_t> free_;  // offset -> size, coalesced
  std::map<uint64_t, uint64_t> used_;  // offset -> size
};

// What the swap policy sees of a live tenant.
struct SwapTenant {
  uint32_t id = 0;
  uint32_t device = 0;           // the GPU it holds (most of) its memory on; for a request for room,
                                 // the GPU of the waiting allocation
  bool guaranteed = false;
  bool swappable = false;        // its allocations can move (gpuos run --swap)
  bool resident = true;          // swap state RESIDENT (memory on the GPU)
  bool swapped_out = false;      // swap state SWAPPED_OUT (some or all of its movable memory is out)
  bool command_pending = false;  // a SWAP_OUT / SWAP_IN is being carried out
  bool waiting = false;          // a thread is blocked at its closed gate: it wants to run
  bool signalled = false;        // a signal handler woke a thread blocked in gpuos (at the gate or
                                 // waiting for room): it has a signal to act on (SIGTERM, Ctrl-C)
  bool busy = false;
  bool wants_room = false;       // an allocation of it waits for room (unanswered request)
  bool room_made = false;        // ... and memory was freed since it asked
  uint64_t wanted_bytes = 0;     // ... for an allocation of this size
  bool swap_in_failed = false;   // its last swap-in found no room; needs a victim first
  uint64_t movable_bytes = 0;    // resident bytes a swap-out would move
  uint64_t swapped_bytes = 0;    // bytes a swap-in would bring back
  uint64_t resident_bytes = 0;   // bytes it holds on the GPU now (movable or not), including an
                                 // allocation waiting for room (its bytes are reserved first)
  uint64_t quota_left_bytes = 0; // its memory quota minus what it holds (0: no quota)
  uint64_t borrowed_bytes = 0;   // what it holds beyond its quota (borrowed while there was room)
  uint64_t resident_since_ns = 0;
  uint64_t out_since_ns = 0;        // when its memory started to be out (swapped_out)
  uint64_t no_victim_until_ns = 0;  // a swap-out of it failed: leave it alone until then
  uint64_t pool_largest_free = 0;   // the largest slice its swap pool can give now
};

struct SwapParams {
  std::vector<uint64_t> capacity;  // per GPU: memory tenants may hold (total minus headroom)
  uint64_t quantum_ns = 0;         // a tenant keeps its memory at least this long against peers
  uint64_t margin_bytes = 0;       // made free on top of what is needed (estimates are rough)
};

struct SwapAction {
  enum class Kind { kSwapOut, kSwapIn, kAnswerRetry, kAnswerRefused };
  Kind kind;
  uint32_t tenant_id;
  uint64_t bytes = 0;  // kSwapOut: how much to move (whole allocations, at least this much)
  bool operator==(const SwapAction&) const = default;
};

// The swap policy. One swap at a time (they share the PCIe link, and each decision needs the
// previous one's outcome): nothing new while a command is pending. Only as much memory moves as
// is needed (plus a margin), so tenants that do not fit together trade the difference, not their
// whole footprint. Rules:
//  - A request for room is answered "retry" once memory was freed since it was made; otherwise a
//    victim moves out what the request needs (with a quota: what the requester may still
//    allocate). Without a victim it waits, unless it could never fit beside the memory that
//    cannot move (other tenants' unswappable bytes): then "refused" (the allocation fails).
//  - A swapped-out tenant that wants to run is swapped in when it fits, else a victim moves out
//    the difference first; the one out longest goes first (guaranteed tenants before the rest), so
//    a victim's memory does not come back before the tenant it made room for.
//  - A signalled tenant (a signal to act on, which it can only once gpuos lets its call return)
//    goes first, and its peers' quantum does not hold it back: stopping a swapped-out job with
//    SIGTERM or Ctrl-C takes a swap, not the rest of another tenant's quantum.
//  - Everything is per GPU: only a tenant on the beneficiary's GPU can make room there.
//  - Victims: swappable, with movable memory on the GPU, not the beneficiary; a best-effort tenant
//    never displaces a guaranteed one; peers (same class) only after the victim held its memory
//    for a quantum, unless it holds borrowed memory (beyond its quota): borrowers give it back
//    first, quantum or not. Then idle victims, then best-effort, then the one resident longest.
std::vector<SwapAction> plan_swaps(const std::vector<SwapTenant>& tenants, const SwapParams& params,
                                   uint64_t now_ns);

}  // namespace gpuos::daemon
