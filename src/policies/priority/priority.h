// SPDX-License-Identifier: Apache-2.0
// The `priority` scheduling policy: compute multiplexing in time. Guaranteed tenants run as if
// alone; best-effort (BE) tenants fill the time no guaranteed tenant uses, sharing it by weight.
//
// Rules (decided by decide_priority, a pure function of the tenants' words and the policy state):
//  - A tenant "wants the GPU" (is active) when its control block says busy or waiting. A waiting
//    word of a tenant an admin pinned closed does not count (it cannot run anyway); its busy word
//    does (its submitted work is still on the GPU).
//  - Guaranteed tenants: a guaranteed tenant's gate is closed only while an active guaranteed tenant
//    of strictly higher priority exists; equal priorities share, ungated. BE tenants never gate
//    a guaranteed one.
//  - BE tenants: every BE gate is closed while any guaranteed tenant is active. The BE yields
//    within the drain time of its bounded in-flight work (max_inflight = be_max_inflight).
//  - No guaranteed tenant active, 0 or 1 runnable BE (busy or waiting, not pinned): every BE gate
//    is open (work conserving: nobody who waits is held while the GPU is idle).
//  - 2+ runnable BE: weighted round robin. One slice owner at a time has its gate open, all other
//    BE gates are closed. A slice lasts be_slice_ms * weight / 100 (at least 1 ms); at its end, or
//    as soon as the owner stops being runnable, the gate passes to the next runnable BE in id order
//    (wrapping). Slice lengths proportional to weight make each runnable BE's share of the BE time
//    follow its weight over one round; an owner that goes idle early forfeits the rest of its slice
//    (it did not need it). A slice interrupted by a guaranteed tenant is resumed with its remaining
//    length when the guaranteed tenants are idle again. The time each BE held a slice is kept in
//    PriorityState::granted_ns (for logs and tests).
//  - When rotation starts (a second BE becomes runnable), the first owner is a BE already running
//    (busy and not waiting: its work is on the GPU) if there is one, so the GPU is not drained
//    needlessly; otherwise the next in round-robin order.
//
//  - A BE woken by a signal at its closed gate (SIGTERM, Ctrl-C: the program has a signal to act
//    on, and Python, for one, runs its handler only once the CUDA call returns) gets its gate open
//    for signal_grace_ms, whoever is active, so it can stop or checkpoint. A rare, user-made event:
//    its cost to a guaranteed tenant is bounded by the grace.
//
//  - Several GPUs: a guaranteed tenant gates only the tenants that work on one of its GPUs
//    (GateTenant::gpus; a tenant with none known yet counts as on every GPU), and only on those
//    GPUs: a best-effort tenant on another GPU runs beside it, and one that works on that GPU and
//    others (a process driving several) has its gate closed there and open on the others
//    (GateAction::closed_gpus). A best-effort slice, though, holds all of its owner's group's GPUs. The best-effort rotation is per group of GPUs: runnable BE
//    tenants that share a GPU (directly or through others) rotate among themselves, by the rules
//    above, and a group pauses only while a guaranteed tenant on one of its GPUs is active. So the
//    ranks of a job spread over GPUs, one per GPU, never wait for each other's slices (each waits
//    for its peers in every collective: a node-wide rotation made every collective wait for the
//    next hand-over).
//
//  - Spatial sharing (mixed mode): tenants of one spatial domain do not gate each other; they share
//    the GPU in space (disjoint SM partitions, space_planner.h). A guaranteed tenant of domain D
//    closes the gates of tenants outside D only, and best-effort tenants of a domain take no part
//    in the best-effort rotation (they run confined to their partitions beside the others).
//
// Known limit: gating acts at launch time. A BE kernel already running on the GPU when a guaranteed
// tenant becomes busy keeps the GPU until the hardware time-slices or the kernel ends; max_inflight
// bounds how much BE work can be queued behind it. Long launches (opt-in, be_max_kernel_us): a BE
// launch expected to run longer (a graph never timed counts as long) waits until every guaranteed
// tenant on its GPUs it shares time with has been idle for be_idle_hold_ms, so one launched in a
// pause between a server's steps does not hold its next step for its whole length (a 100 ms
// prefill graph of batch inference did, 30x a server's TTFT p99). Mechanism: the BE's open gate
// comes with pacing at the full share (interpose/pacing.h) during the hold; it times its launches.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "policies/long_launch_hold.h"
#include "policies/registry.h"
#include "slots/time_gate.h"

namespace gpuos::policies {

struct PriorityParams {
  uint32_t be_max_inflight = 2;
  uint32_t idle_grace_us = 200;
  uint32_t be_slice_ms = 50;
  uint32_t signal_grace_ms = 1000;
  // Long launches (PriorityPolicy only: the budget policy bounds them from each budget): 0 = off.
  uint32_t be_max_kernel_us = 0;
  uint32_t be_idle_hold_ms = 20;
};

// Best-effort tenants time one launch in about this many (and every graph launch they can) while
// be_max_kernel_us is set: the pacing's expected durations.
inline constexpr uint32_t kLongLaunchSamplePeriod = 8;

// The inputs of one decision for one tenant (from a daemon::TenantView).
struct PriorityTenant {
  uint32_t id = 0;
  uint32_t tenant_class = GPUOS_CLASS_BEST_EFFORT;
  int32_t priority = 0;
  uint32_t weight = 100;
  bool busy = false;
  bool waiting = false;
  bool pinned = false;
  std::string domain;  // spatial-sharing domain ("" = none)
  bool signalled = false;  // a signal handler woke a thread of it blocked at its closed gate
  uint64_t gpus = 0;       // the GPUs it works on (slots::GateTenant::gpus; 0 = every GPU)
  std::string owner;       // whose reprieves it counts against (slots::GateTenant::owner; "" = its own)
};

// The best-effort rotation of one group of GPUs.
struct BeRotation {
  uint32_t owner = 0;               // BE slice owner while 2+ BE are runnable; 0 = no rotation
  uint32_t last_owner = 0;          // round-robin position (the previous owner)
  uint64_t slice_start_ns = 0;
  uint64_t slice_end_ns = 0;
  bool paused = false;              // owner's slice interrupted by a guaranteed tenant
  uint64_t paused_remaining_ns = 0;
  std::vector<uint32_t> members;    // its runnable BE at the last decision, in id order
};

// What the policy remembers between decisions.
struct PriorityState {
  // One rotation per group of GPUs that runnable BE tenants connect (two BE that share a GPU are
  // in one group; one whose GPUs are not known yet joins every group): keyed by the group's GPUs
  // (all bits: every GPU).
  std::map<uint64_t, BeRotation> rotations;
  bool guaranteed_active = false;   // as of the last decision (any GPU)
  std::map<uint32_t, uint64_t> granted_ns;  // BE id -> total time it held a slice
  std::map<uint32_t, uint64_t> reprieve_until_ns;  // BE id -> its gate is open until then (a signal)
  // Owner (reprieve_owner: a user, a claim) -> when its last reprieve began. `signalled` is the
  // tenant's own word: one that keeps it set, or ten processes of one user taking turns, must not
  // run beside a guaranteed tenant on reprieves end to end (reprieve_cooldown_ns).
  std::map<std::string, uint64_t> reprieve_granted_ns;

  // The rotation BE `id` is part of (null: none), and whether any rotation runs now.
  const BeRotation* rotation_of(uint32_t id) const;
  bool rotating() const;
  // The owner of the one rotation running (0: none); for a single group of GPUs.
  uint32_t owner() const;
};

using GateDecision = slots::GateAction;

struct PriorityDecision {
  std::vector<GateDecision> gates;  // one per input tenant, same order
  uint64_t next_tick_ns = 0;        // end of the current slice; 0 = no timer needed
};

// Slice length of a BE of this weight.
uint64_t be_slice_ns(const PriorityParams& p, uint32_t weight);

// The decision for all live tenants (any order; ids unique) at time now. Updates *state.
PriorityDecision decide_priority(const std::vector<PriorityTenant>& tenants, const PriorityParams& params,
                                 PriorityState* state, uint64_t now_ns);

// Its settings: [policy.priority] (or [scheduler], their place before the slots).
bool parse_priority_params(const ConfigSection& section, PriorityParams* out, std::string* error);
// Its keys alone, for a policy that adds its own (budget.h); and its settings as TOML lines.
bool read_priority_keys(const ConfigSection& section, PriorityParams* p, std::string* error);
// What read_priority_keys reads, in its order.
inline constexpr KeyDoc kPriorityCommonKeys[] = {
    {"be_max_inflight", "Unfinished launches a best-effort tenant may have (0..1024; 0 = unbounded)"},
    {"idle_grace_us", "A tenant counts as idle this long after its work finished (0..1000000 us)"},
    {"be_slice_ms", "Best-effort time slice at weight 100 (1..10000 ms); weight W gets W/100 of it"},
    {"signal_grace_ms", "A gated best-effort tenant that gets a signal runs this long to act on it (0..60000)"},
};
std::string format_priority_params(const PriorityParams& p);

class PriorityPolicy final : public slots::TimeGate {
 public:
  explicit PriorityPolicy(PriorityParams params) : params_(params) {}
  const char* name() const override { return "priority"; }
  void admit(const slots::GateTenant& t, slots::Admission* admission) override;
  slots::GateActions decide(const slots::GateView& view) override;
  void on_exit(uint32_t tenant_id) override {
    guaranteed_idle_.erase(tenant_id);
    pacing_.erase(tenant_id);
  }

  const PriorityState& state() const { return state_; }
  const PriorityParams& params() const { return params_; }

 private:
  // Kernel-length awareness: the pacing of each BE tenant with an open gate (full share, long
  // launches bounded) while a guaranteed tenant on its GPUs went idle less than the hold ago.
  void hold_long_launches(const slots::GateView& view, PriorityDecision* d);

  PriorityParams params_;
  PriorityState state_;
  std::map<uint32_t, IdleClock> guaranteed_idle_;  // by guaranteed tenant, while the bound is set
  std::map<uint32_t, slots::Pacing> pacing_;       // what the core publishes for each paced tenant
};

extern const PolicyEntry kPriorityPolicy;

}  // namespace gpuos::policies
