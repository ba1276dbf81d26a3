// SPDX-License-Identifier: Apache-2.0
// gpuosd core: a router over engines, without sockets. It keeps the tenant table and routes each
// message, exit and tick: a REGISTER through the admission stages (admission.h), every event to the
// engines of the three slots (GateEngine, SpaceEngine, SwapEngine: run_slot, slot_runner.h) and the
// usage check's VerifyEngine. Mechanism only: every decision (gates, SM partitions, swaps) comes
// from the policy in one of the slots (slots/slot.h), run guarded by a SlotRunner each.
//
// Core::handle_message is the pure message-handling function: bytes of one received datagram in,
// replies (and an optional fd to pass) plus an action out. Every message gets at least one reply
// except a valid ACTIVITY from the connection that registered the tenant (a tenant never reads a
// reply to it). The server (server.h) does the I/O; a
// fuzz harness can call handle_message directly with arbitrary bytes and a made-up Connection.
//
// Thread-safety: none. One thread (the event loop) owns a Core and calls everything on it.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/claim_desk.h"
#include "daemon/core/claims.h"
#include "daemon/core/enforcer.h"
#include "daemon/core/gate_engine.h"
#include "daemon/core/gpus.h"
#include "daemon/core/id_ledger.h"
#include "daemon/core/peer.h"
#include "daemon/core/reply.h"
#include "daemon/core/slot_runner.h"
#include "daemon/core/space_engine.h"
#include "daemon/core/swap_engine.h"
#include "daemon/core/tenant.h"
#include "daemon/core/tenant_info.h"
#include "daemon/core/usage_verifier.h"
#include "daemon/core/verify_engine.h"
#include "daemon/core/watchdog.h"
#include "gpuos/abi.h"
#include "slots/memory.h"
#include "slots/space.h"
#include "slots/time_gate.h"

namespace gpuos::daemon {

// Counters of the core's life, for the metrics endpoint (gpuos_daemon_*); the usage check's
// (VerifyStats) among them.
struct CoreStats : VerifyStats {
  uint64_t messages[GPUOS_MSG_TYPE_MAX + 1] = {};  // valid messages received, by type
  uint64_t bad_messages = 0;        // malformed (failed validation, unreadable, wrong direction)
  uint64_t tenants_registered = 0;
  uint64_t tenants_exited = 0;
};

// A live tenant as the metrics endpoint sees it (Core::tenant_stats).
struct TenantStat {
  gpuos_msg_tenant_info info;  // what LIST reports (state RUNNING or GATED)
  bool busy = false;           // the busy / waiting words now
  bool waiting = false;
  uint64_t busy_ns = 0;        // time the busy word was seen 1 (see Core::tenant_stats)
  uint64_t gate_wait_hist[GPUOS_GATE_WAIT_BUCKETS] = {};
  uint64_t mem_used_per_device[GPUOS_MAX_DEVICES] = {};
  uint64_t violations = 0;     // findings of the usage check against it
  uint64_t verified_mem_bytes = 0;  // its GPU memory as NVML measured it (0: not measured)
};

// gpuosd's answer to SPACE_QUERY (`gpuos run --space DOMAIN` asks before it runs the program).
struct SpaceDomainAnswer {
  gpuos_status status = GPUOS_ERR_NOT_FOUND;  // OK, NOT_FOUND (no such domain), PERMISSION (may not join)
  bool available = false;                     // its MPS control daemon answers
  std::string pipe_dir, log_dir;              // its MPS directories ("" for an unknown domain)
  std::string text;                           // why not (known domains, who may join, MPS state)
};

struct CoreOptions {
  uint32_t max_tenants = 256;
  // Live tenants of one non-admin uid at once (0 = no cap): one user cannot fill the table and
  // lock the others out.
  uint32_t max_tenants_per_uid = 0;
  // A second registration from a pid with a live tenant is refused (a process is one tenant). Off
  // only for tests whose fake tenants all live in the test's own process.
  bool one_tenant_per_pid = true;
  // Where gpuosd keeps which process had which tenant id (id_ledger.h), so that a tenant
  // re-registering after a restart gets its id back and nobody else can take it. "": no ledger, a
  // previous id is never honoured. pid_start_time: null = /proc (injectable for tests).
  std::string id_ledger_path;
  std::function<uint64_t(pid_t)> pid_start_time;
  // Whether the process of a start time runs on (neither gone, a zombie nor exiting: process_runs,
  // id_ledger.h). Null: /proc; with pid_start_time set (tests), that start time alone.
  std::function<bool(pid_t, uint64_t start_time)> process_runs;
  // Where gpuosd keeps the Kubernetes claims it admitted (claims.h); "" = in memory only. Their
  // sockets' directories are under claim_socket_root (the control socket's path; "" = claims are
  // refused).
  std::string claims_path;
  std::string claim_socket_root;
  // Facts about a peer process (injectable for tests): its pid inside its own pid namespace, and
  // its pod as the kubelet's cgroup proves it. Null: /proc, and pod_cgroups (pod_cgroup.h).
  std::function<pid_t(pid_t)> innermost_pid;
  std::function<std::string(pid_t)> pod_uid_of;
  PodCgroups pod_cgroups;
  uint32_t history = 256;
  std::vector<GpuInfo> gpus;
  // The policy of each slot; null: the slot's built-in (policies/builtin).
  std::unique_ptr<slots::TimeGate> time_gate;
  std::unique_ptr<slots::SpacePolicy> space_policy;
  std::unique_ptr<slots::MemoryPolicy> memory_policy;
  // The hooks' stall watchdog (stall_ns 0: none; gpuosd sets it, tests opt in).
  WatchdogOptions watchdog = [] {
    WatchdogOptions w;
    w.stall_ns = 0;
    return w;
  }();
  // True: a non-admin peer asking for GUARANTEED is admitted as BEST_EFFORT (config
  // `[tenants] guaranteed = "admins"`, gpuosd's default). False here so tests opt in.
  bool guaranteed_needs_admin = false;
  // Non-zero: a non-admin tenant's memory quota is at most this (also when it asked for none).
  uint64_t mem_quota_cap_bytes = 0;
  // The latency budget of a guaranteed tenant that declares none (config [tenants] max_slowdown).
  uint32_t default_max_slowdown_permille = 0;
  SwapOptions swap;
  // Spatial sharing: may this peer's tenant join spatial domain `domain`? "" = yes, else the reason
  // it may not (it is then admitted time-shared only). Null: no domain exists (config [spatial]).
  std::function<std::string(const std::string& domain, const Peer& peer)> space_admit;
  // SPACE_QUERY: what gpuosd's config and MPS supervisor say about a domain for this peer. Null: no
  // domain exists (every query is NOT_FOUND).
  std::function<SpaceDomainAnswer(const std::string& domain, const Peer& peer)> space_query;
  uint32_t space_group_sms = 8;  // the driver's minimum partition (written into spatial tenants' blocks)
  VerifyOptions verify;
  std::function<uint64_t()> unix_ms;            // null: CLOCK_REALTIME in ms (injectable for tests)
  std::function<uint64_t()> mono_ns;            // null: CLOCK_MONOTONIC in ns (injectable for tests)
};

class Core final {
 public:
  explicit Core(CoreOptions opts);
  ~Core();  // unmaps and closes every live control block (daemon_alive left as is)
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // Handles one received datagram of len bytes from conn. Never throws on any input.
  Outcome handle_message(Connection& conn, const void* data, std::size_t len);
  // A receive failed with -err (e.g. -EMSGSIZE for an oversized datagram): REPLY + close.
  Outcome handle_receive_error(Connection& conn, long neg_errno);
  // The connection is gone or its tenant's process exited. A process that exits: its tenant (if
  // any) becomes EXITED, its final counters go to the history, its blocks are unmapped and closed. A
  // process that runs on (it closed or shut down its connection itself) is still that tenant:
  // detached (Tenant::detached), its gate, hold and grants kept in its blocks and its lease renewed,
  // until it exits (noticed at a tick) or registers again; one that leaves while held escapes
  // (VerifyEngine::escaped). Idempotent.
  void connection_closed(Connection& conn);
  // Orderly daemon exit: daemon_alive = 0 and gate open in every live control block, waiters woken.
  // Connections closed after it end their tenants (the ledger keeps those whose process runs on).
  void shutdown();
  // Asks every slot again (the time gate's tick).
  void tick(uint64_t now_mono_ns);
  // When a slot wants to decide again (absolute CLOCK_MONOTONIC ns); 0 = no particular time.
  uint64_t next_tick_ns(uint64_t now_mono_ns);

  // The admin's way to set a gate (SET_GATE): CLOSED pins the gate against the time gate; OPEN
  // releases the pin, opens it and asks the time gate again at once.
  gpuos_status admin_set_gate(uint32_t tenant_id, uint32_t gate);

  // Introspection (tests, logging, metrics).
  std::size_t live_tenants() const { return tenants_.size(); }
  // The spatial domains live tenants are in (their MPS servers must outlive a gpuosd restart).
  std::set<std::string> live_space_domains() const;
  const std::deque<gpuos_msg_tenant_info>& history() const { return history_; }
  // A live tenant's blocks as gpuosd maps them (null: no such tenant).
  const gpuos_control_block* control_block(uint32_t tenant_id) const;
  const gpuos_grant_block* grant_block(uint32_t tenant_id) const;
  const std::vector<GpuInfo>& gpus() const { return opts_.gpus; }
  const slots::TimeGate& time_gate() const { return time_.policy(); }
  const slots::SpacePolicy& space_policy() const { return space_.policy(); }
  const slots::MemoryPolicy& memory_policy() const { return memory_.policy(); }
  // Failures per slot (a throw, a stall, a rejected action); after the first the slot runs its
  // built-in policy. policy_failures() is their sum.
  uint64_t time_gate_failures() const { return time_.failures(); }
  uint64_t space_failures() const { return space_.failures(); }
  uint64_t memory_failures() const { return memory_.failures(); }
  uint64_t policy_failures() const { return time_.failures() + space_.failures() + memory_.failures(); }
  uint64_t watchdog_stalls() const { return watchdog_ ? watchdog_->stalls() : 0; }
  bool pinned(uint32_t tenant_id) const;
  const CoreStats& stats() const { return stats_; }
  // Every live tenant's counters, after integrating its busy word up to now_mono_ns. Busy time is
  // integrated piecewise-constant between observations of the word: every ACTIVITY message (sent on
  // each busy change), every tick (100 ms while a tenant lives), every LIST, every call of this
  // function and the tenant's exit; an interval counts as busy when the word was 1 at its start.
  // The same observations date a gate wait in progress (BusyState::waiting_since_ns).
  std::vector<TenantStat> tenant_stats(uint64_t now_mono_ns);
  // Bytes held on GPU `index` by live tenants (sum of their per-device counters).
  uint64_t gpu_used_bytes(uint32_t index) const;
  // Time GPU `index` had work of at least one live tenant in flight, integrated like busy_ns from
  // the tenants' busy words (a tenant belongs to the GPUs it holds memory on; one that holds none
  // counts for GPU 0). Up to the latest observation; tenant_stats() observes up to its argument.
  uint64_t gpu_busy_ns(uint32_t index) const { return gpu_busy_.busy_ns(index); }
  // Chargeback (usage check): GPU `index`'s energy as its NVML counter grew over gpuosd's rounds,
  // and the part of it attributed to tenants, in millijoules (0: NVML gives no energy for it).
  uint64_t gpu_energy_mj(uint32_t index) const { return verify_engine_.gpu_energy_mj(index); }
  uint64_t gpu_energy_attributed_mj(uint32_t index) const { return verify_engine_.gpu_energy_attributed_mj(index); }

  // Claims (claims.h): the server listens for each; set once before serving.
  void set_claim_sockets(ClaimSockets* s) { claims_.set_sockets(s); }
  const ClaimStore& claims() const { return claims_.store(); }

  // Builds a REPLY (or LIST_END) message (reply.h).
  static Outgoing make_reply(uint32_t type, uint32_t seq, gpuos_status status, uint32_t count, const char* text) {
    return daemon::make_reply(type, seq, status, count, text);
  }

 private:
  Outcome on_register(Connection& conn, const gpuos_msg_register& m);
  Outcome on_list(Connection& conn, const gpuos_msg_list& m);
  Outcome on_set_gate(Connection& conn, const gpuos_msg_set_gate& m);
  Outcome on_shutdown(Connection& conn, const gpuos_msg_header& h);
  Outcome on_activity(Connection& conn, const gpuos_msg_activity& m);
  Outcome on_swap_pool(Connection& conn, const gpuos_msg_header& h);
  Outcome on_space_query(Connection& conn, const gpuos_msg_space_query& m);
  // Asks every slot with a fresh view (run_slot) and carries out its checked answer.
  void run_slots(slots::Event e, uint32_t tenant_id, uint64_t now);
  gpuos_msg_tenant_info snapshot(const Tenant& t, uint32_t state, uint64_t exited_ms) const {
    return tenant_info(t, state, exited_ms, gpu_map_, swap_engine_, space_engine_);
  }
  uint64_t now_ms() const;
  uint64_t now_mono_ns() const;

  CoreOptions opts_;
  GpuMap gpu_map_;
  GpuBusyClock gpu_busy_;
  std::unique_ptr<Watchdog> watchdog_;
  SlotRunner<slots::TimeGate> time_;
  SlotRunner<slots::SpacePolicy> space_;
  SlotRunner<slots::MemoryPolicy> memory_;
  SpaceEngine space_engine_;
  GateEngine gate_engine_;  // (after space_engine_: it caps spatial masks)
  SwapEngine swap_engine_;
  VerifyEngine verify_engine_;
  IdLedger ids_;
  ClaimDesk claims_;
  uint32_t next_id_ = 1;
  uint64_t start_time_of(pid_t pid) const;
  // A tenant's identity is its process, not its connection: whether its process runs on
  // (CoreOptions::process_runs; false where one pid may be several tenants: tests).
  bool runs_on(const Tenant& t) const;
  // Its connection closed, its process runs on: detached (Tenant::detached); an escape if held.
  void detach(Tenant& t);
  // The tenant ends: its process exited (or gpuosd shuts down). History, ledger, blocks, policies.
  void end_tenant(uint32_t id);
  // Its process registered again (a new connection): the detached tenant gives way to the new
  // registration of the same id (no history, the ledger kept).
  void retire_detached(uint32_t id);
  // Ends the detached tenants whose process is gone (each tick).
  void end_gone_detached();
  bool shutting_down_ = false;
  std::map<uint32_t, Tenant> tenants_;  // live tenants by id (detached ones included)
  std::deque<gpuos_msg_tenant_info> history_;
  CoreStats stats_;
  // The tick that decides on ACTIVITY held back beyond a tenant's rate (activity_rate.h; 0: none).
  uint64_t activity_tick_ns_ = 0;
};

}  // namespace gpuos::daemon
