// SPDX-License-Identifier: Apache-2.0
// A live tenant as gpuosd's core keeps it: who it is, its control block, and the mechanism state of
// each concern (gate, device map, spatial masks, swap, busy time). Policies never see this record;
// they see the views the core makes of it (slots/*.h) and keep their own per-tenant state.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "gpuos/abi.h"
#include "daemon/core/activity_rate.h"
#include "daemon/core/usage_window.h"
#include "slots/time_gate.h"

namespace gpuos::daemon {

// A relaxed load of a control-block word the tenant may write at any time.
template <typename T>
T load(const T& field) {
  return std::atomic_ref<T>(const_cast<T&>(field)).load(std::memory_order_relaxed);
}

// The gate word as the mechanisms set it: an admin's pin and the memory slot's hold override the
// time gate's answer.
struct GateState {
  static constexpr uint32_t kAllOrdinals = ~0u;
  uint32_t policy_gate = GPUOS_GATE_OPEN;  // what the time gate (or an admin's open) asked for
  bool pinned = false;                     // an admin closed the gate
  bool held = false;                       // the memory slot holds it closed: memory out or moving
  // With policy_gate open: the GPUs the time gate closed it on all the same (gpuosd's indexes,
  // GateAction::closed_gpus), and those as the tenant's device ordinals (GateEngine::map_closed_gpus;
  // kAllOrdinals: every device it has, or its devices are not known yet: the whole gate).
  uint64_t closed_gpus = 0;
  uint32_t closed_ordinals = 0;
  // Open or closed for the tenant as a whole (a partial gate is open).
  uint32_t effective() const { return pinned || held ? GPUOS_GATE_CLOSED : policy_gate; }
  // The grant block's gate word: CLOSED, PARTIAL (closed_ordinals say where) or OPEN.
  uint32_t word() const {
    if (effective() == GPUOS_GATE_CLOSED || closed_ordinals == kAllOrdinals) return GPUOS_GATE_CLOSED;
    return closed_ordinals != 0 ? GPUOS_GATE_PARTIAL : GPUOS_GATE_OPEN;
  }
};

// What gpuosd granted the tenant, as it wrote it into the grant block (which the tenant can only
// read): the core decides on these, never on words read back from shared memory.
struct Granted {
  uint32_t tenant_class = 0;
  uint64_t quota_bytes = 0;   // 0 = unlimited
  uint64_t borrow_bytes = 0;
  uint32_t max_inflight = 0;
  uint32_t idle_grace_us = 0;
  uint32_t sample_period = 0;
  uint32_t max_slowdown_permille = 0;  // its latency budget (guaranteed tenants; 0 = none)
  slots::Pacing pacing;                // best-effort: the pacing written last (grant block)
  uint32_t pace_ordinals = 0;          // ... and its GPUs as the tenant's ordinals (pace_devices)
  // The most it may hold: quota + borrow (saturated); 0 = unlimited.
  uint64_t limit_bytes() const {
    if (quota_bytes == 0) return 0;
    return borrow_bytes > UINT64_MAX - quota_bytes ? UINT64_MAX : quota_bytes + borrow_bytes;
  }
};

// A latency budget as the time gate measured it (GateActions::budgets), and how far gpuosd has
// read the tenant's timing_ring.
struct BudgetState {
  uint64_t timing_read = 0;
  uint32_t slowdown_permille = 0;
  uint32_t be_share_permille = 0;
  uint32_t step_permille = 0;       // its steps' and its admissions' slowdowns (BudgetReport)
  uint32_t admission_permille = 0;
  uint32_t mps_cost_permille = 0;   // what its budget charges for MPS (BudgetReport)
  uint32_t limit = 0;               // what held it unspent (BudgetReport, GPUOS_BUDGET_LIMIT_*)
};

// The tenant's device ordinals -> gpuosd's GPUs (from the control block's device_uuid; identity
// until the tenant published them). Cached: recomputed when device_count changes.
struct DeviceMap {
  uint32_t mapped_device_count = 0;
  int8_t ordinal_of_gpu[GPUOS_MAX_DEVICES] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
};

// Spatial sharing: the domain it was admitted to and what the space slot granted last.
struct SpaceState {
  char domain[GPUOS_DOMAIN_MAX] = {};  // "" = none
  uint32_t asked_sms = 0;              // REGISTER space_sms
  uint64_t masks[GPUOS_MAX_DEVICES] = {};    // the SM masks written, by device ordinal
  uint64_t planned[GPUOS_MAX_DEVICES] = {};  // ... as the space slot planned them, before the group cap
  uint32_t group_cap = 0;  // at most this many groups of each planned mask (the time gate's Pacing::groups; 0 = all)
  uint32_t sized_sms = 0;              // right-sized to this (0 = not sized), for LIST
  uint32_t default_sms = 0;
  double sized_latency = 0;
};

// Memory oversubscription: the command in flight and the facts the memory slot decides on.
struct SwapState {
  uint32_t cmd = GPUOS_SWAP_NONE;  // command being carried out; NONE: nothing pending
  std::vector<uint64_t> slices;    // its slices of its own pool (offsets) while memory is out
  uint64_t swapped_before_cmd = 0; // swapped_bytes when the pending SWAP_OUT was sent
  uint64_t resident_since_ns = 0;
  uint64_t out_since_ns = 0;
  uint64_t no_victim_until_ns = 0;
  bool swap_in_failed = false;
  uint64_t swap_in_retry_ns = 0;   // after a failed swap-in: try again then, victim or not
  uint32_t room_answered_seq = 0;  // last mem_request_seq answered
  bool room_made = false;          // memory was freed since its pending request
  // Requests for room as gpuosd screens them (SwapEngine::refuse_beyond_grant): when the last was
  // answered (the next waits kMinRoomIntervalNs), and the room made for it (RETRY answers' wanted
  // bytes) since its report last grew, with that report.
  uint64_t room_answered_ns = 0;
  uint64_t room_retried_bytes = 0;
  uint64_t room_retried_used = 0;
};

// KV pools (include/gpuos/kv.h): the target gpuosd set them (SwapEngine, the memory slot's
// kSetKvTarget), and their size when last seen.
struct KvState {
  bool target_on = false;
  uint64_t target_bytes = 0;
  uint64_t target_since_ns = 0;
  uint32_t deadline_ms = 0;
  uint64_t seen_bytes = 0;
  uint64_t released_ns = 0;  // when its pools were last seen smaller than before
};

// What the usage check holds against a process (VerifyEngine): kept across a reconnect
// (Retained).
struct UsageRecord {
  uint64_t violations = 0;
  uint32_t findings_in_a_row = 0;
  uint32_t finding_kinds_logged = 0;
  bool enforced = false;
  // The window of the usage check (CheckParams::window_rounds): its last rounds' figures.
  UsageWindow window;
};

// The usage check's state of a tenant (VerifyEngine, usage_verifier.h): its GPU memory as NVML
// measured it last (0 = not measured), what it holds against it, and its gate at the last round
// (closed, and the grant epoch then: the same epoch now means the gate did not move in between).
struct VerifyState {
  uint64_t mem_bytes = 0;
  uint64_t gpus = 0;  // the GPUs NVML saw the process on (bit i = gpuosd's GPU i)
  uint64_t context_bytes = UINT64_MAX;  // least NVML measured beyond its report (its contexts)
  bool launched = false;  // a round has seen it launch (its contexts are sized from the next one)
  // Chargeback (apportion_round): its GPU time and part of the GPUs' energy, summed over rounds.
  uint64_t gpu_time_ns = 0;
  uint64_t energy_mj = 0;
  UsageRecord usage;
  uint64_t gated_gpus = 0;  // the GPUs its gate was closed on at the last round (all bits: whole)
  uint32_t grant_epoch = 0;
  // Work it launched while open and still had in flight when its gate last closed (its busy word
  // then, and busy_transitions: the same busy period while that count stays), when a round first
  // saw it so (0: not yet; the grace runs from there), and whether the last round excused it.
  // Noted by publish_gate where the gate closes.
  bool inflight_at_close = false;
  uint64_t close_transitions = 0;
  uint64_t inflight_since_ns = 0;
  bool excused_last_round = false;
  // Work whose end its interposer cannot see (control block untracked_work: per-thread default
  // streams, or more streams than it tracks): its busy word falls to 0 after a short quiet period
  // though a kernel launched while open still runs (issue #62 item 7). Such a tenant's last counted
  // launch before its gate closed (launch_seen_ns: the round that saw its launch count move last,
  // round_launches that count; UINT64_MAX: moved since the last round, timed by the next) excuses
  // its use until that launch is inflight_grace_ns old. Noted by publish_gate.
  uint64_t round_launches = 0;
  uint64_t launch_seen_ns = 0;
  bool untracked_at_close = false;
  uint64_t close_launch_ns = 0;
  // The GPUs its gate was closed on the whole last round (gated_settled).
  uint64_t gated_last = 0;
  // The times its gate was closed, newest last (at most kClosedSpans; the usage check drops those
  // older than its window): publish_gate notes each, the sub-round duty check reads them (issue #62
  // item 7). Its busy period as first seen busy at a close (busy_transitions then, and when): the
  // excuse of work in flight at a close runs from there, so a busy word held up across closes
  // excuses inflight_grace_ns at most.
  ClosedSpans closed_spans;
  uint64_t busy_period_transitions = 0;
  uint64_t busy_period_since_ns = 0;
  // Its pacing as granted, for the check against what it used: since when it is paced without a
  // break (0: not paced; a new set of GPUs is a break), the share granted integrated over time
  // since the last round (per mille x ns, up to pace_at_ns), and the rounds in a row it was paced
  // the whole round. GateEngine notes each new pacing (note_pacing), the usage check reads it.
  uint64_t pace_since_ns = 0;
  uint64_t pace_at_ns = 0;
  uint64_t pace_permille_ns = 0;
  uint32_t paced_rounds = 0;
  // The pacing `before` gives way to `after` at `now`: the share granted so far is integrated.
  void note_pacing(const slots::Pacing& before, const slots::Pacing& after, uint64_t now) {
    pace_permille_ns += (now - std::min(now, pace_at_ns)) * before.permille;
    pace_at_ns = now;
    if (after.permille == 0) {
      pace_since_ns = 0;
    } else if (pace_since_ns == 0 || after.gpus != before.gpus) {
      pace_since_ns = now;
    }
  }
};

// Kubernetes: the claim it was admitted under ("" = none) and its pod ("" = not known; the uid
// alone when only the process's cgroup path named it).
struct KubeState {
  std::string claim_uid;
  std::string pod_namespace, pod_name, pod_uid;
};

// Busy time, integrated piecewise-constant between observations of the busy word; and the gate
// wait in progress, which the tenant's counters show only once it ends.
struct BusyState {
  bool busy = false;
  uint64_t obs_ns = 0;
  uint64_t busy_ns = 0;
  // When gpuosd first saw the waiting word set while it held the gate closed (0 = not waiting).
  uint64_t waiting_since_ns = 0;
};

struct Tenant {
  uint32_t id = 0;
  pid_t pid = 0;
  uint64_t start_time = 0;  // its process's start time at registration (id_ledger.h; 0: not known)
  uid_t uid = 0;
  uint32_t tenant_class = 0;
  int32_t priority = 0;
  uint32_t weight = 0;
  uint64_t requested_mem_bytes = 0;
  char name[GPUOS_NAME_MAX] = {};
  uint64_t registered_unix_ms = 0;
  // Its two shared blocks (include/gpuos/abi.h; control_block.h makes them), both mapped writable
  // here. The grant block's memfd is sealed against new writable mappings: the tenant reads it.
  int grant_fd = -1;
  int control_fd = -1;
  gpuos_grant_block* grants = nullptr;  // what gpuosd decided (it alone writes it)
  gpuos_control_block* cb = nullptr;    // what the tenant reports (untrusted input)
  GateState gate;
  Granted granted;
  VerifyState verify;
  mutable DeviceMap devices;
  SpaceState space;
  SwapState swap;
  BusyState busy;
  ActivityRate activity;
  BudgetState budget;
  KvState kv;
  KubeState kube;
  // Its connection closed while its process runs on (Core::connection_closed): it is still this
  // tenant, with its gate, hold, grants and usage-check record, all carried by its blocks (gpuosd
  // renews its lease); it has no connection. It ends when the process exits or registers again.
  bool detached = false;
  bool in_domain() const { return space.domain[0] != '\0'; }
  // Whom its limits per user count against (slots::GateTenant::owner): its claim, else its uid.
  std::string owner() const { return kube.claim_uid.empty() ? "uid " + std::to_string(uid) : "claim " + kube.claim_uid; }
};

// A tenant's identity is its process, not its connection: what a detached tenant (Tenant::detached)
// hands on when its process registers again (admission::choose_id), whatever it asks for: its id,
// an admin's hold and the usage check's record.
struct Retained {
  uint64_t start_time = 0;
  uid_t uid = 0;
  uint32_t id = 0;
  bool pinned = false;  // an admin's hold (also in the ledger, where there is one)
  UsageRecord usage;
};

}  // namespace gpuos::daemon
