// gpuosd core: the tenant table, the control blocks and the message handling, without sockets.
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

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/policy.h"
#include "daemon/space_planner.h"
#include "daemon/space_sizer.h"
#include "daemon/swap_planner.h"
#include "gpuos/abi.h"

namespace gpuos::daemon {

struct GpuInfo {
  uint32_t index = 0;
  std::string name;
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", "" if unknown
  uint32_t sm_count = 0;
  uint64_t total_mem_bytes = 0;
  // SMs of each group of the device's finest SM split (the partitions green contexts are made of;
  // the last group also takes the split's remainder); empty = unknown (sm_count in groups of 8).
  std::vector<uint32_t> sm_groups;
  uint32_t sm_group_min = 0;  // the driver's minimum partition size (the split's count); 0 = unknown
};

// Credentials of the peer of a connection (SO_PEERCRED at accept time) and whether it is an admin.
struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  bool admin = false;
};

// Per-connection state the core keeps in the server's connection record.
struct Connection {
  uint64_t id = 0;
  Peer peer;
  uint32_t tenant_id = 0;  // non-zero once this connection registered a tenant
};

// One datagram to send. fd (borrowed from the core; valid while the tenant lives) is passed with
// SCM_RIGHTS when >= 0.
struct Outgoing {
  std::vector<uint8_t> bytes;
  int fd = -1;
};

struct Outcome {
  std::vector<Outgoing> replies;
  bool close = false;            // close the connection after sending the replies
  bool shutdown = false;         // orderly daemon shutdown requested (SHUTDOWN by an admin)
  uint32_t registered = 0;       // tenant id registered by this message (server opens a pidfd)
};

// Counters of the core's life, for the metrics endpoint (gpuos_daemon_*).
struct CoreStats {
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
};

struct CoreOptions {
  uint32_t max_tenants = 256;
  uint32_t history = 256;
  std::vector<GpuInfo> gpus;
  std::unique_ptr<Policy> policy;               // null: the open policy
  // True: a non-admin peer asking for GUARANTEED is admitted as BEST_EFFORT (config
  // `[tenants] guaranteed = "admins"`, gpuosd's default). False here so tests opt in.
  bool guaranteed_needs_admin = false;
  // Non-zero: a non-admin tenant's memory quota is at most this (also when it asked for none).
  uint64_t mem_quota_cap_bytes = 0;
  // Memory oversubscription ([memory]): 0 = off (requests for room are refused at once). Each uid
  // gets its own pool of this size (a trust domain: tenants of one uid may see each other's
  // swapped memory, as they may see each other's processes).
  uint64_t swap_pool_bytes = 0;
  uint64_t swap_quantum_ns = 5'000'000'000ull;
  uint64_t swap_headroom_bytes = 2ull << 30;
  bool swap_prefault = true;  // allocate a new pool's pages in a helper thread
  // Spatial sharing: may this peer's tenant join spatial domain `domain`? "" = yes, else the reason
  // it may not (it is then admitted time-shared only). Null: no domain exists (config [spatial]).
  std::function<std::string(const std::string& domain, const Peer& peer)> space_admit;
  SpaceParams space;
  // Right-sizing of guaranteed spatial tenants that asked for no size (slack <= 0: off).
  SizerParams space_sizer;
  // What MPS adds to each kernel of a spatial tenant: a guaranteed one whose mean kernel is so
  // short that this exceeds the sizer's slack is warned about once (0: never).
  uint64_t mps_kernel_cost_ns = 320;
  std::function<uint64_t()> unix_ms;            // null: CLOCK_REALTIME in ms (injectable for tests)
  std::function<uint64_t()> mono_ns;            // null: CLOCK_MONOTONIC in ns (injectable for tests)
};

class Core final : private GateControl {
 public:
  explicit Core(CoreOptions opts);
  ~Core() override;  // unmaps and closes every live control block (daemon_alive left as is)
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // Handles one received datagram of len bytes from conn. Never throws on any input.
  Outcome handle_message(Connection& conn, const void* data, std::size_t len);
  // A receive failed with -err (e.g. -EMSGSIZE for an oversized datagram): REPLY + close.
  Outcome handle_receive_error(Connection& conn, long neg_errno);
  // The connection is gone or its tenant's process exited: the tenant (if any) becomes EXITED, its
  // final counters go to the history, its control block is unmapped and closed. Idempotent.
  void connection_closed(Connection& conn);
  // Orderly daemon exit: daemon_alive = 0 and gate open in every live control block, waiters woken.
  void shutdown();
  // Runs the policy's tick hook.
  void tick(uint64_t now_mono_ns);
  // When the policy wants its next tick (absolute CLOCK_MONOTONIC ns); 0 = no particular time.
  uint64_t next_tick_ns(uint64_t now_mono_ns);

  // The policy's way to set a gate (GateControl): skips tenants an admin pinned.
  gpuos_status set_gate(uint32_t tenant_id, uint32_t gate) override;
  // The admin's way (SET_GATE): CLOSED pins the gate against the policy; OPEN releases the pin,
  // opens it and lets the policy decide again at once.
  gpuos_status admin_set_gate(uint32_t tenant_id, uint32_t gate);

  // Introspection (tests, logging).
  std::size_t live_tenants() const { return tenants_.size(); }
  // The spatial domains live tenants are in (their MPS servers must outlive a gpuosd restart).
  std::set<std::string> live_space_domains() const {
    std::set<std::string> out;
    for (const auto& [id, t] : tenants_) {
      if (t.space_domain[0] != '\0') out.insert(t.space_domain);
    }
    return out;
  }
  const std::deque<gpuos_msg_tenant_info>& history() const { return history_; }
  const gpuos_control_block* control_block(uint32_t tenant_id) const;
  const std::vector<GpuInfo>& gpus() const { return opts_.gpus; }
  const Policy& policy() const { return *opts_.policy; }
  // Times a policy hook threw; after the first the core runs the built-in open policy.
  uint64_t policy_failures() const { return policy_failures_; }
  bool pinned(uint32_t tenant_id) const;
  const CoreStats& stats() const { return stats_; }
  // Every live tenant's counters, after integrating its busy word up to now_mono_ns. Busy time is
  // integrated piecewise-constant between observations of the word: every ACTIVITY message (sent on
  // each busy change), every tick (100 ms while a tenant lives), every call of this function and the
  // tenant's exit; an interval counts as busy when the word was 1 at its start.
  std::vector<TenantStat> tenant_stats(uint64_t now_mono_ns);
  // Bytes held on GPU `index` by live tenants (sum of their per-device counters).
  uint64_t gpu_used_bytes(uint32_t index) const;
  // Time GPU `index` had work of at least one live tenant in flight, integrated like busy_ns from
  // the tenants' busy words (a tenant belongs to the GPUs it holds memory on; one that holds none
  // counts for GPU 0). Up to the latest observation; tenant_stats() observes up to its argument.
  uint64_t gpu_busy_ns(uint32_t index) const;

  // Builds a REPLY (or LIST_END) message.
  static Outgoing make_reply(uint32_t type, uint32_t seq, gpuos_status status, uint32_t count,
                             const char* text);

 private:
  struct Tenant {
    uint32_t id = 0;
    pid_t pid = 0;
    uid_t uid = 0;
    uint32_t tenant_class = 0;
    int32_t priority = 0;
    uint32_t weight = 0;
    uint64_t requested_mem_bytes = 0;
    char name[GPUOS_NAME_MAX] = {};
    uint64_t registered_unix_ms = 0;
    int memfd = -1;
    gpuos_control_block* cb = nullptr;
    bool pinned = false;  // an admin closed the gate: policies leave it alone
    uint32_t policy_gate = GPUOS_GATE_OPEN;  // what the policy (or an admin's open) asked for
    // spatial sharing (run_space)
    char space_domain[GPUOS_DOMAIN_MAX] = {};  // "" = none
    uint32_t space_sms = 0;                   // SMs asked for (REGISTER space_sms)
    uint64_t space_idle_since_ns = 0;         // when run_space first saw it idle; 0 while active
    SizerState space_sizer;                   // right-sizing (guaranteed, no size asked for)
    uint32_t space_sized_sms = 0;             // what the sizer chose last (0 = not sized)
    uint32_t space_default_sms = 0;           // the sizer's ceiling: the default partition
    uint64_t space_longest_kernel_ns = 0;     // best-effort: its longest kernel as last read (0 = none)
    bool space_cost_warned = false;           // said once that its partition costs it its slack
    bool space_mps_warned = false;            // said once that MPS costs it its slack (warn_if_mps_costs_slack)
    double space_sized_latency = 0;           // measured at the current size / at the ceiling (0 = none yet)
    std::string space_sizer_traced;           // the sizer's last decision in the debug log (logged on change)
    uint32_t space_grid_logged_sms = 0;       // the size at which "stops at the grid" was logged
    // Its device ordinals -> gpuosd's GPUs (from the control block's device_uuid; identity until
    // the tenant published them). Cached: recomputed when device_count changes.
    mutable uint32_t mapped_device_count = 0;
    mutable int8_t ordinal_of_gpu[GPUOS_MAX_DEVICES] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    // memory oversubscription (run_swaps)
    bool held = false;        // gate held closed: the tenant's memory is out or moving
    uint32_t swap_cmd = GPUOS_SWAP_NONE;  // command being carried out; NONE: nothing pending
    std::vector<uint64_t> slices;   // its slices of pools_[uid] (offsets) while memory is out
    uint64_t swapped_before_cmd = 0;  // swapped_bytes when the pending SWAP_OUT was sent
    uint64_t resident_since_ns = 0;
    uint64_t out_since_ns = 0;
    uint64_t no_victim_until_ns = 0;
    bool swap_in_failed = false;
    uint64_t swap_in_retry_ns = 0;   // after a failed swap-in: try again then, victim or not
    uint32_t room_answered_seq = 0;  // last mem_request_seq answered
    bool room_made = false;          // memory was freed since its pending request
    // busy-time integration (observe_busy)
    bool obs_busy = false;
    uint64_t obs_ns = 0;
    uint64_t busy_ns = 0;
  };
  void observe_busy(Tenant& t, uint64_t now_mono_ns);
  // Integrates per-GPU busy time up to now and takes the new state from the live tenants' last
  // observed busy words. Call after observe_busy at every observation point.
  void observe_gpus(uint64_t now_mono_ns);
  struct GpuBusy {
    bool busy = false;
    uint64_t obs_ns = 0;
    uint64_t busy_ns = 0;
  };
  std::vector<GpuBusy> gpu_busy_;  // one per GPU (at least one)

  Outcome on_register(Connection& conn, const gpuos_msg_register& m);
  Outcome on_list(Connection& conn, const gpuos_msg_list& m);
  Outcome on_set_gate(Connection& conn, const gpuos_msg_set_gate& m);
  Outcome on_shutdown(Connection& conn, const gpuos_msg_header& h);
  Outcome on_activity(Connection& conn, const gpuos_msg_activity& m);
  Outcome on_swap_pool(Connection& conn, const gpuos_msg_header& h);
  // Memory oversubscription: notes finished swap commands, asks the swap policy (plan_swaps) what
  // to do next and does it. Called after every tenant event and on every tick.
  void run_swaps(uint64_t now_ns);
  // Recomputes every spatial tenant's SM partitions (space_planner) and publishes changed masks.
  void run_space();
  // The SMs a guaranteed spatial tenant should get, from its latency samples (0 = no opinion).
  uint32_t right_size_tenant(Tenant& t, uint64_t now);
  // Warns once about a guaranteed spatial tenant whose kernels are so short that what MPS adds to
  // each (opts_.mps_kernel_cost_ns) exceeds its latency slack, after kMpsCostMinSamples timed launches.
  void warn_if_mps_costs_slack(Tenant& t);
  static constexpr uint64_t kMpsCostMinSamples = 64;
  // The GPU holding most of the tenant's memory; with none, the first it launched on (spatial
  // tenants report that); else 0.
  uint32_t home_gpu(const Tenant& t) const;
  // Writes a tenant's planned SM groups (one mask per GPU) into its control block, by its device
  // ordinals, and bumps space_epoch if any changed.
  void write_space_masks(Tenant& t, const SpaceMasks& per_gpu);
  // Whether a spatial tenant launched on GPU index `gpu` (control block space_devices).
  bool launched_on_gpu(const Tenant& t, uint32_t gpu) const;
  // The tenant's device ordinal of GPU index `gpu` (-1: it does not see that GPU). Its per-device
  // control-block words are indexed by its ordinals, which CUDA_VISIBLE_DEVICES may reorder.
  int ordinal_of(const Tenant& t, uint32_t gpu) const;
  // The GPU index of the tenant's ordinal (-1: none of gpuosd's GPUs).
  int gpu_of(const Tenant& t, int ordinal) const;
  // The tenant's memory on GPU index `gpu`.
  uint64_t used_on_gpu(const Tenant& t, uint32_t gpu) const;
  void hold_gate(Tenant& t);
  void release_gate(Tenant& t);
  void send_swap_command(Tenant& t, uint32_t cmd);
  void answer_room(Tenant& t, uint32_t answer);
  void free_slices(Tenant& t);
  // GateControl
  void for_each_tenant(const std::function<void(const TenantView&)>& fn) override;
  uint64_t now_mono_ns() override;
  // Runs a policy hook; if it throws: count, log, switch to the open policy. False if it threw.
  template <typename F>
  bool guarded(const char* hook, F&& f);
  void policy_failed(const char* hook, const char* what);
  void write_gate(gpuos_control_block* cb, uint32_t gate);
  Outcome refuse(uint32_t seq, gpuos_status st, const char* why);
  Outcome refuse_register(uint32_t seq, gpuos_status st, const char* why);
  gpuos_msg_tenant_info snapshot(const Tenant& t, uint32_t state, uint64_t exited_ms) const;
  TenantView view(const Tenant& t) const;
  uint64_t now_ms() const;

  CoreOptions opts_;
  uint32_t next_id_ = 1;
  uint64_t space_replan_at_ns_ = 0;  // run_space must run again then (lending starts); 0 = no need
  std::map<uint32_t, Tenant> tenants_;  // live tenants by id
  std::deque<gpuos_msg_tenant_info> history_;
  uint64_t policy_failures_ = 0;
  CoreStats stats_;
  struct SwapPool {
    int fd = -1;
    std::unique_ptr<SwapSpace> space;
  };
  std::map<uid_t, SwapPool> pools_;  // created on a tenant's first SWAP_POOL
};

// Creates a sealed memfd holding an initialised control block (gate OPEN, daemon_alive 1) and maps
// it. Returns the fd, or -errno with *cb untouched.
int create_control_block(uint32_t tenant_id, uint32_t tenant_class, uint64_t mem_quota_bytes,
                         uint32_t initial_gate, gpuos_control_block** cb);

// Authorisation: uid 0, the daemon's own uid, or a member of admin_gid (if set).
bool is_admin(uid_t peer_uid, uid_t daemon_uid, const std::vector<gid_t>& peer_groups,
              std::optional<gid_t> admin_gid);
// The peer's gids: the Gid: and Groups: lines of /proc/<pid>/status; falls back to getgrouplist on
// the uid's passwd entry. Empty if neither works.
std::vector<gid_t> peer_groups(pid_t pid, uid_t uid, gid_t gid);

// Finds the GPUs through the driver table (library: null = $GPUOS_DRIVER_LIBRARY or libcuda.so.1).
// On any failure returns what it found so far (often nothing) and writes a reason into *warning.
std::vector<GpuInfo> discover_gpus(const char* library, std::string* warning);
// A GPU UUID as gpuosd shows it: "GPU-" and the 16 bytes in the 8-4-4-4-12 hex form.
std::string format_gpu_uuid(const uint8_t bytes[16]);

}  // namespace gpuos::daemon
