// SPDX-License-Identifier: Apache-2.0
// The priority policy's decision (decide_priority, priority.h), as stages run in this order, each a
// function of the tenants, the settings and the state it reads or moves:
//   guaranteed  which guaranteed tenants are active, and the highest priority among them;
//   rotate      the best-effort rotation of each group of GPUs (slices, pauses, hand-overs);
//   reprieve    the signalled best-effort tenants' reprieves from the gate, granted and expired;
//   gates       each tenant's gate, from the above;
//   forget      the granted time of tenants that are gone.
// The rules they make up are priority.h's; each stage can be asked alone by a test.
#pragma once

#include <climits>
#include <cstdint>
#include <map>
#include <vector>

#include "policies/priority/priority.h"

namespace gpuos::policies::priority {

// The active guaranteed tenants: whether there is one, and their highest priority.
struct GuaranteedActive {
  bool any = false;
  int32_t top = INT32_MIN;
};
GuaranteedActive active_guaranteed(const std::vector<PriorityTenant>& tenants);

// Runnable best-effort tenants outside spatial domains (busy or waiting, not pinned), in id order:
// the round-robin order.
std::vector<const PriorityTenant*> runnable_best_effort(const std::vector<PriorityTenant>& tenants);

// Each group of GPUs that the runnable BE connect rotates, one decision (a group keeps its
// rotation while its GPUs stay the same); the slices of groups gone end. Replaces st->rotations
// and counts the granted time. Returns the soonest slice end (0: no timer).
uint64_t rotate_groups(const std::vector<PriorityTenant>& tenants, const std::vector<const PriorityTenant*>& runnable,
                       const PriorityParams& params, PriorityState* st, uint64_t now);

// How long after a reprieve began its owner's tenants get none again: 10 s, or 20 graces if longer
// (a program acting on Ctrl-C or SIGTERM needs one; a tenant that keeps writing `signalled` gets no
// more than that).
uint64_t reprieve_cooldown_ns(const PriorityParams& params);
// Whose reprieves t counts against: its owner (a user, a claim), or t alone when it has none.
std::string reprieve_owner(const PriorityTenant& t);
// Grants a reprieve to each signalled BE waiting at its gate that may have one now: one per owner
// per cooldown, which the owner's tenants signalled while it runs join (a Ctrl-C to a process
// group) and end with. Ends those run out or of tenants gone. Returns the soonest reprieve end
// (0: none).
uint64_t update_reprieves(const std::vector<PriorityTenant>& tenants, const PriorityParams& params, PriorityState* st,
                          uint64_t now);

// The GPUs on which tenant t (one of `tenants`) has its gate closed, before any reprieve: where a
// guaranteed tenant it would slow is active, or, for a time-shared BE, all of its GPUs while a
// slice not its own runs on one of them.
uint64_t closed_gpus(const PriorityTenant& t, const std::vector<PriorityTenant>& tenants, const GuaranteedActive& g,
                     const std::map<uint64_t, BeRotation>& rotations);
// The gate of tenant t with `closed` GPUs closed: closed outright when that is all of its GPUs (or
// its GPUs are not known yet), else open with those GPUs closed.
GateDecision gate_of(const PriorityTenant& t, uint64_t closed);

// Forgets the granted time of tenants that are gone.
void forget_gone(const std::vector<PriorityTenant>& tenants, PriorityState* st);

}  // namespace gpuos::policies::priority
