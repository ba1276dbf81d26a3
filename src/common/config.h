// SPDX-License-Identifier: Apache-2.0
// gpuos configuration (TOML), shared by gpuosd and the gpuos CLI.
//
// Tables: [daemon], [tenants], [scheduler], [memory], [verify], [metrics], [spatial] with
// [[spatial.domain]] (parsed here), and [policy.<name>] (kept as parsed for its policy). Every key,
// its default and one line on what it does: `gpuos config defaults` (packaging/gpuos.toml), written
// from the KeyDoc lists beside each table's parser (config.cc, and each policy's folder) and from
// the defaults of the structs below; docs/OPERATIONS.md's table says more of each.
//
// Every key is optional. Unknown tables or keys, wrong types and out-of-range values are errors
// that name the key and the line ("FILE:LINE: [daemon] history: ..."). The parse functions never
// throw: they return a Config or an error string. A [policy.<name>] table is kept as parsed
// (scalars only); its policy checks it (policies::check_policy_config, run by gpuosd and
// `gpuos config check`), with errors of the same form.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
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

// A key of a config table and, in one line, what it does: each table's parser keeps a list of them
// beside its code ([daemon]'s in config.cc, [policy.<name>]'s in its policy's folder), and
// `gpuos config defaults` writes the line above the key (one source: packaging/gpuos.toml is that
// command's output, and docs/OPERATIONS.md's table is held to the lists by a test).
struct KeyDoc {
  constexpr KeyDoc() = default;
  constexpr KeyDoc(std::string_view k, std::string_view d, std::string_view e = {}) : key(k), doc(d), example(e) {}
  std::string_view key;
  std::string_view doc;      // one line: "# " + doc fits in 100 columns
  std::string_view example;  // a value to show for a key without a default ([[spatial.domain]]'s)
};
// Two lists as one (a policy that reads another's keys too: budget reads priority's four).
template <std::size_t A, std::size_t B>
constexpr std::array<KeyDoc, A + B> join_key_docs(const KeyDoc (&a)[A], const KeyDoc (&b)[B]) {
  std::array<KeyDoc, A + B> out{};
  for (std::size_t i = 0; i < A; ++i) out[i] = a[i];
  for (std::size_t i = 0; i < B; ++i) out[A + i] = b[i];
  return out;
}
// A table of gpuos's own ([daemon], [tenants], [scheduler], [memory], [verify], [metrics],
// [spatial], and [[spatial.domain]]'s keys as "spatial.domain"): its keys, which are exactly the
// keys its parser accepts (besides the policies' keys of before the slots), in the order
// format_config writes them, and what the table is for (any length; wrapped when written).
struct TableDoc {
  std::string_view table;
  std::string_view about;
  std::span<const KeyDoc> keys;
};
std::span<const TableDoc> config_tables();
// The documented line of `key` in `keys`, null when it has none.
const KeyDoc* find_key_doc(std::span<const KeyDoc> keys, std::string_view key);

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
  // The keys the getters were asked for so far, in order: a policy's factory run on an empty
  // section asks for every key it knows (tests hold its KeyDoc list to them).
  const std::vector<std::string>& keys_read() const { return read_; }
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
  // Where the kubelet's pod cgroups are (cgroup v2 paths: systemd driver, cgroupfs driver) and where
  // the cgroup v2 hierarchy is mounted: a process is in a pod only in the kubelet's cgroup of it,
  // whose directories are root's (daemon/core/pod_cgroup.h).
  std::vector<std::string> kubelet_cgroup_roots{"/kubepods.slice", "/kubepods"};
  std::string cgroup_mount = "/sys/fs/cgroup";
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
