// SPDX-License-Identifier: Apache-2.0
// The swap plan (plan_swaps, planner.h), as stages run in this order; one swap at a time, so the
// first stage that plans a swap, KV targets or a wait ends the plan:
//   room    allocations waiting for room: answered, or room made for them (a KV donor past its
//           deadline reclaimed, KV targets, a victim swapped out), or refused when they never fit;
//   return  swapped-out tenants that want to run: swapped in, or a victim swapped out first;
//   raise   KV targets that held long enough rise again (or are lifted) on GPUs where nothing
//           wants memory.
// The rules they make up are planner.h's; each stage can be asked alone by a test.
#pragma once

#include <cstdint>
#include <vector>

#include "policies/swap/planner.h"

namespace gpuos::policies::swap {

// The memory tenants may hold on GPU `dev`, and what of it no tenant holds now.
uint64_t capacity_of(const SwapParams& p, uint32_t dev);
uint64_t free_on(const std::vector<SwapTenant>& tenants, const SwapParams& p, uint32_t dev);

// --- room
// What to free for requester r with `free_now` free by the estimate: the driver said "full",
// whatever the estimate says, so what it still wants (its allocation, or with a quota what it may
// still allocate) on top of what the estimate shows free (all of it when the estimate shows
// enough: the estimate is wrong), plus the margin.
uint64_t room_needed(const SwapTenant& r, uint64_t free_now, uint64_t margin);
// r could never fit: what cannot move (the other tenants' unswappable bytes on its GPU) leaves
// too little of the capacity for what it holds (the allocation waiting included: its bytes are
// reserved first).
bool never_fits(const std::vector<SwapTenant>& tenants, const SwapTenant& r, const SwapParams& p);
// Room for requester r: appends what to do; true when the plan ends here (a swap, KV targets,
// or a wait for KV pages on their way back).
bool make_room_for(const SwapTenant& r, const std::vector<SwapTenant>& tenants, const SwapParams& p, uint64_t now,
                   const KvSettings& kv, std::vector<SwapAction>* out);
// Each request for room, signalled tenants first, then guaranteed ones, then by id (registration
// order).
bool make_room(const std::vector<SwapTenant>& tenants, const SwapParams& p, uint64_t now, const KvSettings& kv,
               std::vector<SwapAction>* out);

// --- return
// Swapped-out tenants that want to run: signalled, then guaranteed first, then the one out longest.
// True when it planned a swap.
bool bring_back(const std::vector<SwapTenant>& tenants, const SwapParams& p, uint64_t now,
                std::vector<SwapAction>* out);

// --- raise
// A KV target that held kv_hold_ns may rise.
bool may_rise(const SwapTenant& t, const SwapParams& p, uint64_t now);
// The KV targets that may rise, on GPUs where nothing wants memory, rise (or are lifted); the free
// memory (less the margin) is shared among the targets raised together.
void raise_kv_targets(const std::vector<SwapTenant>& tenants, const SwapParams& p, uint64_t now, const KvSettings& kv,
                      std::vector<SwapAction>* out);

}  // namespace gpuos::policies::swap
