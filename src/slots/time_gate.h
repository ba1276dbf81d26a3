// SPDX-License-Identifier: Apache-2.0
// The time-gate slot: which tenants may launch now (their gate words), and how a tenant is
// admitted. See slot.h for the hook table all slots share.
//
// Admin override (mechanism, not policy): an admin's SET_GATE to CLOSED pins that tenant's gate;
// the core leaves a pinned gate closed whatever the policy answers. An admin's SET_GATE to OPEN
// releases the pin and asks the policy again at once (Event::kAdmin). A gate the memory slot holds
// closed (the tenant's memory is out or moving) stays closed too; the policy's answer applies when
// it is released.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpuos/abi.h"
#include "slots/slot.h"

namespace gpuos::slots {

// One launch the tenant timed (control block timing_ring): its shape's key and its duration.
struct TimedLaunch {
  uint64_t key = 0;
  uint64_t ns = 0;
  bool operator==(const TimedLaunch&) const = default;
};

// What a time gate sees of a tenant. busy / waiting / signalled / gate are read from the control
// block when the view is made (untrusted words the tenant writes: a hint of what it does, never a
// licence to act on other tenants beyond this slot's own gates).
struct GateTenant {
  uint32_t id = 0;
  pid_t pid = 0;
  uid_t uid = 0;
  // Who its limits per user count against (signal reprieves): its claim ("claim UID") when it came by
  // one, else its uid ("uid N"). The core's word: pods all run as root, and a uid tells them apart
  // no more than a process id tells users apart.
  std::string owner;
  std::string name;
  std::string space_domain;  // spatial-sharing domain ("" = none): its tenants share in space
  bool space_confined = false;  // in a domain and placed on a partition (a space mask) on some GPU
  uint32_t tenant_class = 0;  // requested class in admit(), granted class elsewhere
  int32_t priority = 0;
  uint32_t weight = 0;
  uint64_t requested_mem_bytes = 0;
  bool busy = false;       // submitted work not finished (or within its idle grace)
  bool waiting = false;    // a thread is blocked at the closed gate
  bool signalled = false;  // a signal handler woke a thread blocked in gpuos
  uint32_t gate = GPUOS_GATE_OPEN;  // the gate word now (OPEN or CLOSED)
  uint64_t closed_gpus = 0;  // with an open gate: the GPUs on which it is closed all the same
  bool pinned = false;     // an admin closed this gate: the core keeps it closed
  // The GPUs it works on (bit i = gpuosd's GPU i): where it holds memory, by its own count and by
  // the usage check's (NVML; so a tenant that hides a GPU is found on it within a round). 0 = none
  // known yet: a policy counts it on every GPU.
  uint64_t gpus = 0;
  // Latency budget of a guaranteed tenant (per mille of its time alone; 0 = none: as if alone).
  uint32_t max_slowdown_permille = 0;
  // Its engine says it admits requests now (their prefill; gpuos_kv_report_phase): its own word,
  // so a policy may only let it withdraw what it lends others, never take more.
  bool admitting = false;
  // Busy in a launch its own timings mark long (control block launch_phase, interpose/launch_phase.h:
  // a prefill graph among decode steps, with no engine hint). The same trust as admitting.
  bool long_launch = false;
  // Its kernels in all its timed launches so far (a graph counts its kernel nodes), and their time
  // on the GPU (control block space_timed_*: its own word, which only its own budget reads).
  uint64_t timed_kernels = 0;
  uint64_t timed_ns = 0;
  // In a domain: the SM groups of its partition as the space slot planned it (the most on any GPU;
  // 0 = unconfined), before Pacing::groups trims it.
  uint32_t space_groups = 0;
  // Its launches timed since the last view (Admission::sample_period > 0; the tenant's own
  // report: durations are clamped to (0, 60 s], at most a ring's worth per view).
  std::vector<TimedLaunch> timed;
};

struct GateView {
  uint64_t now_ns = 0;  // CLOCK_MONOTONIC (injectable in tests)
  Event event = Event::kTick;
  uint32_t tenant_id = 0;  // the tenant the event is about; 0 for a tick
  std::vector<GateTenant> tenants;  // every live tenant, in id order
};

// How a best-effort tenant with an open gate spreads its launches (grant block pace_*,
// interpose/pacing.h): the share of wall time its GPU work may take (per mille, 1..1000; 0 = not
// paced), the longest launch it may start while paced (us; 0 = any), the GPU time it may use
// back to back (us; 0 = one launch at a time), and the GPUs on which it is paced (bit i =
// gpuosd's GPU i; 0 = all of them): on its others it runs unpaced.
struct Pacing {
  uint32_t permille = 0;
  uint32_t max_kernel_us = 0;
  uint32_t burst_us = 0;
  uint64_t gpus = 0;
  // In a spatial domain: at most this many SM groups of its partition (the highest), 0 = all of
  // them. The budget's knob in space (beside a guaranteed tenant on the whole GPU): the core trims
  // the tenant's space masks, and the interposer moves its next launch to the smaller partition.
  uint32_t groups = 0;
  bool operator==(const Pacing&) const = default;
};

struct GateAction {
  uint32_t id = 0;
  uint32_t gate = GPUOS_GATE_OPEN;
  // With an open gate: the GPUs (bit i = gpuosd's GPU i) on which the tenant may not launch now,
  // though it may on its others (a process driving several GPUs, one of them a guaranteed
  // tenant's). A bit for a GPU the tenant does not use is ignored; all of its GPUs, or a tenant
  // whose GPUs are not known yet, closes the whole gate.
  uint64_t closed_gpus = 0;
  Pacing pacing;  // only with an open gate, only for best-effort tenants
  bool operator==(const GateAction&) const = default;
};

// What the policy measured of a guaranteed tenant's latency budget (for LIST, ps, top, metrics).
struct BudgetReport {
  uint32_t id = 0;
  uint32_t slowdown_permille = 0;  // its slowdown against its time alone (0 = not measured yet)
  uint32_t be_share_permille = 0;  // the share of the GPU's time best-effort tenants are granted beside it
  // The same slowdown over its steps alone and over its admissions alone, when its engine reports
  // its phases (gpuos_kv_report_phase; 0 = none of that kind measured).
  uint32_t step_permille = 0;
  uint32_t admission_permille = 0;
  // In a spatial domain: MPS's cost to it that its budget charges (per mille of its time without
  // MPS; 0 = not in a domain).
  uint32_t mps_cost_permille = 0;
  uint32_t limit = 0;  // GPUOS_BUDGET_LIMIT_*: what held it unspent over the last probe period (0 = not judged)
  bool operator==(const BudgetReport&) const = default;
};

struct GateActions {
  std::vector<GateAction> gates;  // tenants not named keep their gate (and their pacing)
  uint64_t next_tick_ns = 0;      // when to decide again (absolute); 0 = the regular tick is enough
  std::vector<BudgetReport> budgets;  // tenants not named keep their last report
};

// The decision of admit(). The core pre-fills it with "admit as requested, gate open, quota =
// requested bytes, borrow = requested borrow, max_inflight 0, idle_grace_us 0, sample_period 0";
// the policy edits it. A policy may lower the class, never raise it (the core clamps). The core
// writes gate, quota, max_inflight, idle_grace_us and sample_period into the grant block before the
// tenant gets its fd.
struct Admission {
  gpuos_status status = GPUOS_OK;  // anything else refuses the registration with `reason`
  uint32_t granted_class = 0;
  uint64_t mem_quota_bytes = 0;    // 0 = unlimited
  uint64_t mem_borrow_bytes = 0;   // with a quota: more it may hold while the GPU has room
  uint32_t initial_gate = GPUOS_GATE_OPEN;
  uint32_t max_inflight = 0;       // >0: the tenant keeps at most this many launches unfinished
  uint32_t idle_grace_us = 0;      // the tenant reports idle only after this long without work
  uint32_t sample_period = 0;      // >0: it times one launch in about this many (GateTenant::timed)
  std::string reason;
};

class TimeGate : public Slot<GateView, GateActions> {
 public:
  // REGISTER passed validation; `t` is the tenant as it asked (t.id is the id it will get). The
  // tenant is not in any view yet. Optional: the default admits as pre-filled.
  virtual void admit(const GateTenant& t, Admission* admission) {}
};

}  // namespace gpuos::slots
