// gpuos configuration (TOML), shared by gpuosd and the gpuos CLI.
//
//   [daemon]
//   socket = ""            # empty: default path (gpuos::socket_path)
//   admin_group = ""       # optional group whose members may use admin commands
//   log_level = "info"     # error | warn | info | debug
//   history = 256          # exited tenants kept for `ps --all` (0..65536)
//   max_tenants = 256      # live tenants at once (1..4096)
//   [tenants]
//   on_no_daemon = "passthrough"  # or "refuse"
//   default_class = "best-effort" # or "guaranteed"
//   guaranteed = "admins"         # who may register as guaranteed: "admins" or "anyone"
//   mem_quota_cap = ""            # largest memory quota a non-admin tenant gets, e.g. "40GiB"; "" = none
//   [scheduler]
//   policy = "open"        # one of kSchedulerPolicies: "open" (no gating) or "priority"
//   be_max_inflight = 2    # priority: unfinished launches a best-effort tenant may have (0..1024)
//   idle_grace_us = 200    # priority: idle this long after the last work before "not busy" (0..1000000)
//   be_slice_ms = 50       # priority: best-effort time slice at weight 100 (1..10000)
//   [memory]
//   swap_pool = ""         # host memory set aside for swapped-out tenants, e.g. "84GiB"; "" = no
//                          # oversubscription (tenants of `gpuos run --swap` then stay resident)
//   swap_quantum_ms = 5000 # a tenant keeps its memory at least this long against its peers (0..3600000)
//   swap_headroom = "2GiB" # GPU memory kept free of tenants' allocations (contexts, libraries)
//   [metrics]
//   listen = "127.0.0.1:9464"  # Prometheus /metrics over HTTP: "IPV4:PORT", "[IPV6]:PORT" or
//                              # "localhost:PORT"; "" disables
//
// Every key is optional. Unknown tables or keys, wrong types and out-of-range values are errors
// that name the key and the line ("FILE:LINE: [daemon] history: ..."). The parse functions never
// throw: they return a Config or an error string.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/log.h"
#include "gpuos/abi.h"

namespace gpuos {

// Names accepted for [scheduler] policy / gpuosd --policy. gpuos::policies::make_policy builds each
// of them (a test checks the two agree).
inline constexpr const char* kSchedulerPolicies[] = {"open", "priority"};
bool is_scheduler_policy(std::string_view name);

struct SchedulerConfig {
  std::string policy = "open";
  uint32_t be_max_inflight = 2;
  uint32_t idle_grace_us = 200;
  uint32_t be_slice_ms = 50;
};

// A TCP listen address of [metrics] listen: numeric IPv4 "A.B.C.D:PORT", IPv6 "[ADDR]:PORT", or
// "localhost:PORT" (= 127.0.0.1). PORT 0..65535 (0: the kernel picks one). No name resolution.
struct MemoryConfig {
  uint64_t swap_pool_bytes = 0;
  uint32_t swap_quantum_ms = 5000;
  uint64_t swap_headroom_bytes = 2ull << 30;
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
  // [tenants]
  std::string on_no_daemon = "passthrough";  // "passthrough" | "refuse"
  gpuos_class default_class = GPUOS_CLASS_BEST_EFFORT;
  // Only admins (uid 0, the daemon's uid, admin_group) may register as guaranteed; others asking
  // for it are admitted as best-effort. "anyone" lifts that.
  bool guaranteed_for_anyone = false;
  // Non-admin tenants get at most this memory quota (also when they ask for none); 0 = no cap.
  uint64_t mem_quota_cap_bytes = 0;
  // [scheduler]
  SchedulerConfig scheduler;
  // [memory]
  MemoryConfig memory;
  // [metrics]
  std::string metrics_listen = kDefaultMetricsListen;  // "" = no metrics endpoint

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
// /etc/gpuos/gpuos.toml if it exists, else the built-in defaults (an explicitly named file that
// does not exist is an error).
ConfigResult load_config(const std::string& cli_path);
inline constexpr const char* kSystemConfigPath = "/etc/gpuos/gpuos.toml";

// The effective configuration as TOML text (every key, with its value).
std::string format_config(const Config& c);

// "guaranteed" / "best-effort" <-> gpuos_class. class_name returns "unknown" for other values.
bool parse_class(std::string_view text, gpuos_class* out);
const char* class_name(uint32_t tenant_class);

// Parses a size: a decimal number with an optional binary unit (B, KiB/K, MiB/M, GiB/G, TiB/T;
// case-insensitive). Returns false for anything else, zero, or an overflow.
bool parse_size(const std::string& text, uint64_t* bytes);

}  // namespace gpuos
