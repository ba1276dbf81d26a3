// SPDX-License-Identifier: Apache-2.0
// The usage check's mechanism (trust but verify): every interval, NVML's view of the GPUs
// (usage_verifier.h) against what gpuosd granted, never against what a tenant reports. In the
// engines' shape: make_view (the round's sample and each tenant's grants, from its VerifyState),
// check (check_usage: the findings) and apply (counted, logged once per kind and tenant, and
// enforced as VerifyOptions::enforce says); tick runs a round when one is due. Chargeback rides on
// the same rounds. It has no policy slot: what a finding leads to is its options' enforce.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/enforce.h"
#include "daemon/core/enforcer.h"
#include "daemon/core/gpus.h"
#include "daemon/core/tenant.h"
#include "daemon/core/usage_verifier.h"

namespace gpuos::daemon {

// gpuosd's usage check (usage_verifier.h): off unless `sample` is set (gpuosd sets it when NVML
// loads; tests pass fakes).
struct VerifyOptions {
  std::function<UsageSample()> sample;
  uint64_t interval_ns = 1'000'000'000;
  CheckParams check;
  EnforceParams enforce;
  Enforcer* enforcer = nullptr;  // null: findings are only reported
  std::set<pid_t> ignored;       // processes that are no tenant by design (gpuosd itself)
  // Work a tenant had in flight when its gate closed (launched while open: a long kernel) is not a
  // launch while gated; its busy word says so, but a tenant writes that word, so the excuse lasts
  // this long at most. Work its interposer cannot see end (untracked work) is excused until its
  // last launch counted before the gate closed is this old (issue #62 item 7).
  uint64_t inflight_grace_ns = 30'000'000'000;
  // A tenant's process that just exited may still be on the GPU (its contexts torn down after its
  // connection closed, NVML's samples late): not an unregistered process for this long after.
  uint64_t exit_grace_ns = 5'000'000'000;
  // A tenant of the previous gpuosd (the id ledger's) that has not re-registered yet: not an
  // unregistered process for this long after gpuosd started (its library retries every second).
  uint64_t rejoin_grace_ns = 10'000'000'000;
};

// The usage check's counters (gpuos_daemon_*): findings against all tenants, rounds run, time spent
// in NVML, processes on the GPUs that are no tenant (last round), unregistered findings, freezes or
// kills carried out, and escapes (tenants that left their connection while held; each is also a
// violation).
struct VerifyStats {
  uint64_t violations = 0;
  uint64_t usage_rounds = 0;
  uint64_t usage_check_ns = 0;
  uint64_t unregistered_processes = 0;
  uint64_t unregistered_findings = 0;
  uint64_t enforcements = 0;
  uint64_t escapes = 0;
};

// The usage check's record of a tenant's closed times (VerifyState::closed_spans): a new span each
// time the GPUs its gate is closed on change (closed_gpus 0: open), excused from when work launched
// while open may still run (`closing`: its gate closed now, with the close facts publish_gate noted
// in v). Called by publish_gate with every gate it writes.
void note_closed_span(VerifyState* v, uint64_t closed_gpus, bool closing, uint64_t now);

class VerifyEngine {
 public:
  // One round's facts: NVML's sample, each live tenant's grants, the processes that are no
  // unregistered finding, the round's span since the last (0: the first round).
  struct View {
    UsageSample sample;
    std::vector<TenantGrant> grants;
    std::set<pid_t> tenant_pids;
    std::set<pid_t> ignored;
    uint64_t span_ns = 0;
  };
  // start_time: a process's start time (0: gone); started_ns: when gpuosd started (rejoin grace).
  VerifyEngine(VerifyOptions opts, const GpuMap& gpus, std::function<uint64_t(pid_t)> start_time,
               uint64_t started_ns);

  bool enabled() const { return static_cast<bool>(opts_.sample); }
  const VerifyOptions& options() const { return opts_; }
  // When the next round is due (absolute CLOCK_MONOTONIC ns; 0: the check is off). It runs with no
  // tenant too: a process on a GPU that never registered is a finding.
  uint64_t next_ns() const { return enabled() ? std::max<uint64_t>(next_at_ns_, 1) : 0; }
  // Runs a round if one is due.
  void tick(std::map<uint32_t, Tenant>& tenants, uint64_t now, VerifyStats* stats);

  // The round's stages. make_view samples NVML and notes each tenant's round in its VerifyState
  // (gate, pacing, measured memory) and chargeback; check compares; apply counts, logs, enforces
  // and keeps each tenant's window.
  void make_view(std::map<uint32_t, Tenant>& tenants, uint64_t now, View* out, VerifyStats* stats);
  std::vector<Finding> check(const View& view, std::vector<RoundFigures>* figures) const;
  void apply(std::map<uint32_t, Tenant>& tenants, const View& view, const std::vector<Finding>& findings,
             const std::vector<RoundFigures>& figures, VerifyStats* stats);

  // A tenant of the previous gpuosd (the id ledger's) that may still run: no unregistered process
  // until it re-registers or the rejoin grace ends.
  void add_survivor(pid_t pid, uint64_t start_time) { survivors_[pid] = start_time; }
  // A tenant's process exited now: still on the GPU for a moment, no unregistered process.
  void tenant_exited(pid_t pid, uint64_t now) { exited_at_ns_[pid] = now; }
  // A tenant left while its gate was held (`held_by`: an admin's hold, the memory slot's): it closed
  // its connection and its process runs on (Core::connection_closed). It stays the tenant; this
  // counts it (escapes, violations), logs it as escaped and enforces at once as `enforce` says (a
  // fact, not a sample: no grace rounds). `others`: the other tenants' pids (a freeze must not stop
  // them).
  void escaped(Tenant& t, const char* held_by, const std::set<pid_t>& others, VerifyStats* stats);

  // Chargeback: GPU `index`'s energy as its NVML counter grew over the rounds, and the part of it
  // attributed to tenants, in millijoules (0: NVML gives no energy for it).
  uint64_t gpu_energy_mj(uint32_t index) const;
  uint64_t gpu_energy_attributed_mj(uint32_t index) const;

 private:
  void charge_round(std::map<uint32_t, Tenant>& tenants, const View& view);
  VerifyOptions opts_;
  const GpuMap& gpus_;
  std::function<uint64_t(pid_t)> start_time_;
  uint64_t started_ns_;
  uint64_t next_at_ns_ = 0;   // the next round
  uint64_t last_at_ns_ = 0;   // the last round
  // Per GPU: the energy counter at the last round that read it, the energy counted since (its
  // growth over rounds) and the part of it attributed to tenants, in mJ.
  struct GpuEnergyCount {
    bool seen = false;
    uint64_t last_mj = 0;
    uint64_t total_mj = 0;
    uint64_t attributed_mj = 0;
  };
  std::map<uint32_t, GpuEnergyCount> gpu_energy_;
  // Enforces `a` on tenant t (its finding or its escape), counts and logs what happened.
  void enforce_on_tenant(Tenant& t, EnforceAction a, const std::set<pid_t>& others, VerifyStats* stats);
  // Freezes or kills pid (of `uid`, started at `start`) as `a` says; false, with why, when not done.
  bool enforce(pid_t pid, uid_t uid, unsigned long long start, EnforceAction a, const std::set<pid_t>& others,
               std::string* why);
  std::set<pid_t> unregistered_logged_;  // processes already reported as unregistered
  // Processes that are no tenant, found in rounds in a row (pid -> rounds; its start time when first
  // found), and those enforced already.
  struct Unregistered {
    uint64_t start = 0;
    uint32_t rounds = 0;
    bool enforced = false;
  };
  std::map<pid_t, Unregistered> unregistered_;
  // Not unregistered processes (VerifyOptions::exit_grace_ns, rejoin_grace_ns): tenants that
  // exited lately (pid -> when), and the previous gpuosd's tenants still running when this one
  // started (pid -> process start time), until they re-register.
  std::map<pid_t, uint64_t> exited_at_ns_;
  std::map<pid_t, uint64_t> survivors_;
};

}  // namespace gpuos::daemon
