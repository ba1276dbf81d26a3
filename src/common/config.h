// SPDX-License-Identifier: Apache-2.0
// gpuos configuration (TOML), shared by gpuosd and the gpuos CLI.
//
//   [daemon]
//   socket = ""            # empty: default path (gpuos::socket_path)
//   admin_group = ""       # optional group whose members may use admin commands
//   log_level = "info"     # error | warn | info | debug
//   history = 256          # exited tenants kept for `ps --all` (0..65536)
//   max_tenants = 256      # live tenants at once (1..4096)
//   max_connections_per_uid = 64  # open connections of one non-admin uid (0..65536; 0 = no cap)
//   admin_connections = 16 # connection slots beyond max_tenants + 64 that only admins may take (1..1024)
//   idle_timeout_ms = 10000  # a connection without a tenant that sends nothing this long is closed
//                            # (0..3600000; 0 = never)
//   [tenants]
//   on_no_daemon = "passthrough"  # or "refuse"
//   default_class = "best-effort" # or "guaranteed"
//   guaranteed = "admins"         # who may register as guaranteed: "admins" or "anyone"
//   mem_quota_cap = ""            # largest memory quota a non-admin tenant gets, e.g. "40GiB"; "" = none
//   max_per_uid = 32              # live tenants of one non-admin uid at once (0..4096; 0 = no cap)
//   max_slowdown = 0              # latency budget of guaranteed tenants that declare none (gpuos run
//                                 # --max-slowdown), e.g. 1.25; 0 = none (as if alone). Spent on
//                                 # best-effort tenants by the time policy "budget"
//   [scheduler]
//   policy = "open"        # the time-gate slot's policy: "open" (no gating), "priority", "exclusive"
//   [policy.priority]      # the priority policy's settings (also read from [scheduler], their place
//                          # before the policy slots)
//   be_max_inflight = 2    # unfinished launches a best-effort tenant may have (0..1024)
//   idle_grace_us = 200    # idle this long after the last work before "not busy" (0..1000000)
//   be_slice_ms = 50       # best-effort time slice at weight 100 (1..10000)
//   signal_grace_ms = 1000 # a gated best-effort tenant woken by a signal (SIGTERM, Ctrl-C) runs
//                          # this long to act on it (0..60000; 0 = it waits its turn)
//   [memory]
//   policy = "swap"        # the memory slot's policy: "swap" or "resident" (never swaps out)
//   swap_pool = ""         # host memory set aside for swapped-out tenants, e.g. "84GiB"; "" = no
//                          # oversubscription (tenants of `gpuos run --swap` then stay resident)
//   swap_quantum_ms = 5000 # a tenant keeps its memory at least this long against its peers (0..3600000)
//   swap_headroom = "2GiB" # GPU memory kept free of tenants' allocations (contexts, libraries)
//   [policy.swap]          # the swap policy's settings: KV pools shrink to targets before swaps
//   kv_rule = "fair"       # which pools shrink: "fair" (largest first, levelled), "priority"
//                          # (best-effort, then low --priority, then large) or "queue" (fewest
//                          # waiting requests per GiB first)
//   kv_deadline_ms = 1000  # an engine's time to meet its target; then the rest is swapped out
//                          # (10..600000)
//   kv_hold_ms = 5000      # a target stays this long before it rises or is lifted (0..3600000)
//   [metrics]
//   listen = "127.0.0.1:9464"  # Prometheus /metrics over HTTP: "IPV4:PORT", "[IPV6]:PORT" or
//                              # "localhost:PORT"; "" disables
//   [spatial]                  # spatial sharing: one MPS control daemon per trust domain
//   mps_control = "nvidia-cuda-mps-control"  # the control binary; PATH lookup without a slash
//   mps_dir = ""               # "" = <directory of the control socket>/mps (see effective_mps_dir)
//   policy = "partition"       # the space slot's policy: "partition" or "unconfined"
//   [policy.partition]         # the partition policy's settings (also read from [spatial], their
//                              # place before the policy slots)
//   lend_after_ms = 20         # idle guaranteed tenants lend their SM groups after this long ...
//   lend_max_kernel_ms = 10    # ... to best-effort tenants whose kernels end within this (1..3600000)
//   be_reserve_groups = 2      # SM groups a guaranteed tenant leaves to best-effort tenants (1..63)
//   right_size_slack_pct = 4   # right-sizing: a guaranteed tenant that asked for no size gets the
//                              # fewest SMs that keep its measured kernel latency within this many
//                              # percent of its default partition's (0..50; 0 = off)
//   right_size_below_grid = false  # right-sizing may take a tenant below the block count of a
//                              # kernel that runs one block per SM (its fit cannot see that step)
//   mps_kernel_cost_ns = 370   # what MPS adds to each kernel of a client (0..1000000; 0 = no
//                              # warning): gpuosd warns about a guaranteed tenant whose kernels are
//                              # so short that this costs it more than the slack
//   budget_whole_gpu = true    # a guaranteed tenant with a latency budget (and no --sms) runs on
//                              # every SM, unconfined; best-effort tenants stay on the reserve
//                              # groups, paced by the budget (false: partitioned and right-sized)
//   [[spatial.domain]]         # zero or more; none = spatial sharing off
//   name = "team-a"            # [A-Za-z0-9_.-]{1,32}, not "." or "..", unique
//   users = ["alice", 1001]    # user names or uids allowed to join (besides admins); [] = admins only
//   gpus = [0, 1]              # GPU indices of the domain's control daemon; absent = all
//
// Every key is optional. Unknown tables or keys, wrong types and out-of-range values are errors
// that name the key and the line ("FILE:LINE: [daemon] history: ..."). The parse functions never
// throw: they return a Config or an error string. A [policy.<name>] table is kept as parsed
// (scalars only); its policy checks it (policies::check_policy_config, run by gpuosd and
// `gpuos config check`), with errors of the same form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "gpuos/abi.h"

namespace gpuos {

inline constexpr const char* kDefaultMpsControl = "nvidia-cuda-mps-control";
// Limits of [spatial]: a domain's pipe directory <mps_dir>/<name>/pipe holds the control daemon's
// sockets, and a socket path must stay below 108 bytes.
inline constexpr std::size_t kMaxSpatialDomains = 64;
inline constexpr std::size_t kMaxDomainName = 32;
inline constexpr std::size_t kMaxMpsDirLength = 48;

// A value of a policy's own table, [policy.<name>], kept as parsed for the policy to read.
struct ConfigValue {
  enum class Kind { kString, kInteger, kFloat, kBool };
  Kind kind = Kind::kString;
  std::string text;      // kString
  int64_t integer = 0;   // kInteger
  double number = 0;     // kFloat
  bool boolean = false;  // kBool
  std::string where;     // "FILE:LINE" for messages
  std::string table;     // the table it was written in: "policy.priority", or "scheduler" for a
                         // key of before the policy slots (see Config::policy_sections)
};

// A policy's settings: the keys of [policy.<name>] (and its keys of before the slots, still read
// where they were). The policy parses them itself (policies/registry.h) with the getters below,
// which name file, line, table and key in every error.
class ConfigSection {
 public:
  std::string name;  // the policy's name
  std::vector<std::pair<std::string, ConfigValue>> entries;  // in file order, keys unique

  const ConfigValue* find(std::string_view key) const;
  // Absent: true, *out untouched. Present: the value, or false and *error (wrong type, range).
  bool get_uint(std::string_view key, int64_t lo, int64_t hi, uint32_t* out, std::string* error) const;
  bool get_bool(std::string_view key, bool* out, std::string* error) const;
  bool get_string(std::string_view key, std::string* out, std::string* error) const;
  // False and *error for the first key no getter asked for ("unknown key").
  bool all_read(std::string* error) const;
  // "FILE:LINE: [table] key: what"
  static std::string error_at(const std::string& key, const ConfigValue& v, const std::string& what);

 private:
  mutable std::vector<std::string> read_;
};

// Which policy runs in each slot (slots/slot.h). Names are checked against the policies gpuos has
// by policies::check_policy_config (the config library does not know them).
struct PolicyChoice {
  std::string time_gate = "open";   // [scheduler] policy
  std::string space = "partition";  // [spatial] policy
  std::string memory = "swap";      // [memory] policy
};

// A TCP listen address of [metrics] listen: numeric IPv4 "A.B.C.D:PORT", IPv6 "[ADDR]:PORT", or
// "localhost:PORT" (= 127.0.0.1). PORT 0..65535 (0: the kernel picks one). No name resolution.
struct MemoryConfig {
  uint64_t swap_pool_bytes = 0;
  uint32_t swap_quantum_ms = 5000;
  uint64_t swap_headroom_bytes = 2ull << 30;
};

// [verify]: gpuosd's check of each process's real GPU memory and activity through NVML, independent
// of what tenants report (daemon/usage_verifier.h).
struct VerifyConfig {
  bool enabled = true;             // on when NVML loads; off: no check at all
  uint32_t interval_ms = 1000;     // 100..60000
  std::string enforce = "report";  // "report" | "freeze" (cgroup v2) | "kill"
  uint64_t memory_slack_bytes = 1ull << 30;  // NVML counts the CUDA context (~0.5 GiB on an H200)
  uint32_t gated_sm_util_percent = 20;       // SM use of a tenant gated the whole interval
  uint32_t grace_rounds = 2;                 // findings in a row before enforce acts (1..100)
};

// One trust domain of [[spatial.domain]]: tenants in it may share GPUs in space (as clients of one
// MPS control daemon), so a GPU fault of one of them takes down the others.
struct SpatialDomain {
  std::string name;
  // User names or decimal uids (a TOML integer is stored as its decimal text) that may join besides
  // the admins; empty = admins only. Names are resolved when used (MpsSupervisor::allows).
  std::vector<std::string> users;
  std::vector<uint32_t> gpus;  // GPU indices (unique); empty = every GPU
};

struct SpatialConfig {
  std::string mps_control = kDefaultMpsControl;
  std::string mps_dir;  // "" = derived from the control socket (effective_mps_dir)
  std::vector<SpatialDomain> domains;  // empty: spatial sharing off
  const SpatialDomain* find(std::string_view name) const {
    for (const auto& d : domains) {
      if (d.name == name) return &d;
    }
    return nullptr;
  }
};

struct ListenAddress {
  int family = 0;       // AF_INET or AF_INET6
  std::string host;     // numeric, without brackets
  uint16_t port = 0;
};
bool parse_listen_address(std::string_view text, ListenAddress* out, std::string* why);
inline constexpr const char* kDefaultMetricsListen = "127.0.0.1:9464";

struct Config {
  // [daemon]
  std::string socket;       // "" = default path
  std::string admin_group;  // "" = none
  log::Level log_level = log::Level::kInfo;
  uint32_t history = 256;
  uint32_t max_tenants = 256;
  // Lock-out guards of the control socket (daemon::ServerOptions): one uid cannot take every
  // connection, admins always find a slot, silent connections do not hold theirs for ever.
  uint32_t max_connections_per_uid = 64;  // 0 = no cap
  uint32_t admin_connections = 16;
  uint32_t idle_timeout_ms = 10000;  // 0 = never
  // [tenants]
  std::string on_no_daemon = "passthrough";  // "passthrough" | "refuse"
  gpuos_class default_class = GPUOS_CLASS_BEST_EFFORT;
  // Only admins (uid 0, the daemon's uid, admin_group) may register as guaranteed; others asking
  // for it are admitted as best-effort. "anyone" lifts that.
  bool guaranteed_for_anyone = false;
  // Non-admin tenants get at most this memory quota (also when they ask for none); 0 = no cap.
  uint64_t mem_quota_cap_bytes = 0;
  // Live tenants of one non-admin uid at once (0 = no cap): one user cannot fill the table.
  uint32_t max_tenants_per_uid = 32;
  // Latency budget of a guaranteed tenant that declares none (gpuos run --max-slowdown), per mille
  // of its time alone; 0 = none (guaranteed means as if alone). Best-effort tenants have none.
  uint32_t max_slowdown_permille = 0;
  // [scheduler] policy, [spatial] policy, [memory] policy
  PolicyChoice policies;
  // [policy.<name>]: one section per policy with settings. Keys of before the slots are still read
  // where they were and land in their policy's section: [scheduler] be_max_inflight, idle_grace_us,
  // be_slice_ms, signal_grace_ms (policy "priority"); [spatial] lend_after_ms, lend_max_kernel_ms,
  // be_reserve_groups, right_size_slack_pct, right_size_below_grid, mps_kernel_cost_ns ("partition").
  std::vector<ConfigSection> policy_sections;
  const ConfigSection* section(std::string_view policy) const {
    for (const auto& sec : policy_sections) {
      if (sec.name == policy) return &sec;
    }
    return nullptr;
  }
  // [memory]
  MemoryConfig memory;
  // [verify]
  VerifyConfig verify;
  // [metrics]
  std::string metrics_listen = kDefaultMetricsListen;  // "" = no metrics endpoint
  // [spatial]
  SpatialConfig spatial;

  std::string source;  // file the values came from; "" = built-in defaults
};

struct ConfigResult {
  std::optional<Config> config;  // set on success
  std::string error;             // set on failure
  explicit operator bool() const { return config.has_value(); }
};

// Parses TOML text; source_name is used in error messages and stored in Config::source.
ConfigResult parse_config(std::string_view text, std::string_view source_name);
// Reads and parses a file; a missing or unreadable file is an error.
ConfigResult load_config_file(const std::string& path);
// The config location rule: cli_path if non-empty, else $GPUOS_CONFIG if set and non-empty, else
// /etc/gpuos/gpuos.toml (or $GPUOS_SYSTEM_CONFIG, which tests point at a private path) if it exists,
// else the built-in defaults (an explicitly named file that does not exist is an error).
ConfigResult load_config(const std::string& cli_path);
inline constexpr const char* kSystemConfigPath = "/etc/gpuos/gpuos.toml";

// What a config names on this host, resolved: the checks a parsed config can still fail on the
// machine that runs it. policies::check_startup_config runs them for gpuosd and `gpuos config check`.
struct HostConfig {
  bool has_admin_gid = false;  // [daemon] admin_group is set (and names a group)
  uint32_t admin_gid = 0;
};
// False with *why ("FILE: [daemon] admin_group: ...") when admin_group names no group here.
bool resolve_host_config(const Config& c, HostConfig* out, std::string* why);

// The effective configuration as TOML text (every key, with its value).
std::string format_config(const Config& c);

// [[spatial.domain]] name rule: 1..32 of [A-Za-z0-9_.-], and not "." or ".." (it names a directory).
bool is_valid_domain_name(std::string_view name);
// The directory holding every domain's MPS directories: [spatial] mps_dir if set, else
// <directory of socket_path>/mps, where socket_path is the control socket in effect (gpuosd's, or
// the one `gpuos run` resolved). So a root gpuosd uses /run/gpuos/mps, a user's gpuosd
// $XDG_RUNTIME_DIR/gpuos/mps, and a CLI pointed at a daemon's socket finds that daemon's domains.
std::string effective_mps_dir(const Config& c, const std::string& socket_path);
// <mps_dir>/<domain>/pipe (CUDA_MPS_PIPE_DIRECTORY) and <mps_dir>/<domain>/log
// (CUDA_MPS_LOG_DIRECTORY); <mps_dir>/<domain>/status is the supervisor's one-line state.
std::string mps_pipe_dir(const std::string& mps_dir, std::string_view domain);
std::string mps_log_dir(const std::string& mps_dir, std::string_view domain);
std::string mps_status_file(const std::string& mps_dir, std::string_view domain);

// "guaranteed" / "best-effort" <-> gpuos_class. class_name returns "unknown" for other values.
bool parse_class(std::string_view text, gpuos_class* out);
const char* class_name(uint32_t tenant_class);

// Parses a size: a decimal number (up to 6 digits after a point) and an optional unit, B, K, M, G or
// T, each also as KB/KiB/Ki and so on, case-insensitive, a space allowed before it. Every unit is
// binary, as GPU memory is counted: 8G = 8GB = 8GiB = 8 * 2^30 bytes; 1.5GiB = 1610612736 (a size
// with a fraction of a byte, 0.3K, is refused). The one size parser of gpuos: the config's sizes and `gpuos run
// --mem/--borrow`. False (and *why, if given: the text quoted and what is wrong) for anything else,
// zero bytes, or more than 2^64 - 1.
bool parse_size(std::string_view text, uint64_t* bytes, std::string* why = nullptr);

}  // namespace gpuos
