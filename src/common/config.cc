// SPDX-License-Identifier: Apache-2.0
#include "common/config.h"

#include <algorithm>
#include <cctype>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <grp.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "common/tenant_numbers.h"

namespace gpuos {
namespace {

std::string where(std::string_view source, const toml::source_region& r) {
  std::string s(source.empty() ? "<config>" : source);
  if (r.begin.line > 0) s += ":" + std::to_string(r.begin.line);
  return s;
}

const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    default: return "nothing";
  }
}

struct Ctx {
  std::string_view source;
  std::string error;
  // A key of before the policy slots, read where it was and kept in its policy's section.
  bool legacy(const toml::node& n, std::string_view table, std::string_view key, std::string_view policy,
              Config* c) {
    ConfigSection* sec = section(policy, c);
    if (sec->find(key) != nullptr) {
      return fail(n, table, key, "given twice (here and in [policy." + std::string(policy) + "])");
    }
    ConfigValue v;
    if (!scalar(n, table, key, &v)) return false;
    sec->entries.emplace_back(std::string(key), std::move(v));
    return true;
  }
  static ConfigSection* section(std::string_view policy, Config* c) {
    for (auto& sec : c->policy_sections) {
      if (sec.name == policy) return &sec;
    }
    c->policy_sections.emplace_back();
    c->policy_sections.back().name = std::string(policy);
    return &c->policy_sections.back();
  }
  bool scalar(const toml::node& n, std::string_view table, std::string_view key, ConfigValue* v) {
    v->where = where(source, n.source());
    v->table = std::string(table);
    if (n.is_string()) {
      v->kind = ConfigValue::Kind::kString;
      v->text = n.as_string()->get();
    } else if (n.is_integer()) {
      v->kind = ConfigValue::Kind::kInteger;
      v->integer = n.as_integer()->get();
    } else if (n.is_floating_point()) {
      v->kind = ConfigValue::Kind::kFloat;
      v->number = n.as_floating_point()->get();
    } else if (n.is_boolean()) {
      v->kind = ConfigValue::Kind::kBool;
      v->boolean = n.as_boolean()->get();
    } else {
      return fail(n, table, key, std::string("expected a string, number or boolean, got ") + type_name(n));
    }
    return true;
  }
  bool fail(const toml::node& n, std::string_view table, std::string_view key, const std::string& what) {
    error = where(source, n.source()) + ": [" + std::string(table) + "] " + std::string(key) + ": " + what;
    return false;
  }
  bool get_string(const toml::node& n, std::string_view table, std::string_view key, std::string* out) {
    if (!n.is_string()) return fail(n, table, key, std::string("expected a string, got ") + type_name(n));
    *out = n.as_string()->get();
    return true;
  }
  bool get_bool(const toml::node& n, std::string_view table, std::string_view key, bool* out) {
    if (!n.is_boolean()) return fail(n, table, key, std::string("expected true or false, got ") + type_name(n));
    *out = n.as_boolean()->get();
    return true;
  }
  bool get_uint(const toml::node& n, std::string_view table, std::string_view key, int64_t lo, int64_t hi,
                uint32_t* out) {
    if (!n.is_integer()) return fail(n, table, key, std::string("expected an integer, got ") + type_name(n));
    int64_t v = n.as_integer()->get();
    if (v < lo || v > hi) {
      return fail(n, table, key,
                  "value " + std::to_string(v) + " out of range " + std::to_string(lo) + ".." + std::to_string(hi));
    }
    *out = static_cast<uint32_t>(v);
    return true;
  }
};

bool is_key(std::span<const KeyDoc> keys, std::string_view key) { return find_key_doc(keys, key) != nullptr; }
bool is_legacy(std::span<const std::string_view> keys, std::string_view key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// [daemon]'s keys, in format_config's order: the parser accepts these and no other.
constexpr KeyDoc kDaemonKeys[] = {
    {"socket", "Control socket; \"\": /run/gpuos/gpuosd.sock as root, else $XDG_RUNTIME_DIR/gpuos/gpuosd.sock"},
    {"admin_group", "Members may use admin commands (gpuos gate); root and gpuosd's uid always may; \"\": none"},
    {"log_level", "\"error\", \"warn\", \"info\" or \"debug\" (gpuosd --log-level overrides)"},
    {"history", "Exited tenants kept, with their final counters, for gpuos ps --all (0..65536)"},
    {"max_tenants", "Live tenants at once (1..4096); more registrations are refused"},
    {"max_connections_per_uid", "Open connections of one non-admin uid (0..65536; 0 = no cap)"},
    {"admin_connections", "Connection slots beyond max_tenants + 64 that only admins may take (1..1024)"},
    {"idle_timeout_ms", "A connection with no tenant that sends nothing this long is closed (0..3600000; 0 = never)"},
    {"kubelet_cgroup_roots", "The kubelet's pod cgroups (cgroup v2 paths): a process is in a pod only below these"},
    {"cgroup_mount", "Where gpuosd finds the host's cgroup v2 tree (pod cgroups are checked there)"},
};

// A cgroup v2 path as written in /proc/<pid>/cgroup: absolute, no "", "." or ".." segment.
bool plain_cgroup_path(const std::string& p) {
  if (p.size() < 2 || p[0] != '/' || p.back() == '/' || p.size() > 4096) return false;
  for (std::size_t at = 1; at <= p.size();) {
    const std::size_t end = std::min(p.find('/', at), p.size());
    const std::string seg = p.substr(at, end - at);
    if (seg.empty() || seg == "." || seg == "..") return false;
    at = end + 1;
  }
  return true;
}

bool parse_cgroup_roots(Ctx& cx, const toml::node& v, std::string_view key, std::vector<std::string>* out) {
  if (!v.is_array()) return cx.fail(v, "daemon", key, std::string("expected an array, got ") + type_name(v));
  out->clear();
  for (const toml::node& r : *v.as_array()) {
    std::string root;
    if (!cx.get_string(r, "daemon", key, &root)) return false;
    if (!plain_cgroup_path(root)) {
      return cx.fail(r, "daemon", key, "\"" + root + "\" is not an absolute cgroup path without \".\" or \"..\"");
    }
    out->push_back(root);
  }
  if (out->size() > 16) return cx.fail(v, "daemon", key, "at most 16 roots");
  return true;
}

bool parse_daemon(Ctx& cx, const toml::table& t, Config* c) {
  for (auto&& [k, v] : t) {
    std::string_view key = k.str();
    if (!is_key(kDaemonKeys, key)) return cx.fail(v, "daemon", key, "unknown key");
    if (key == "socket") {
      if (!cx.get_string(v, "daemon", key, &c->socket)) return false;
      if (!c->socket.empty() && c->socket[0] != '/') return cx.fail(v, "daemon", key, "must be an absolute path");
      if (c->socket.size() >= 108) return cx.fail(v, "daemon", key, "path longer than 107 bytes");
    } else if (key == "admin_group") {
      if (!cx.get_string(v, "daemon", key, &c->admin_group)) return false;
    } else if (key == "log_level") {
      std::string s;
      if (!cx.get_string(v, "daemon", key, &s)) return false;
      if (!log::parse_level(s, &c->log_level)) {
        return cx.fail(v, "daemon", key, "\"" + s + "\" is not one of error, warn, info, debug");
      }
    } else if (key == "history") {
      if (!cx.get_uint(v, "daemon", key, 0, 65536, &c->history)) return false;
    } else if (key == "max_tenants") {
      if (!cx.get_uint(v, "daemon", key, 1, 4096, &c->max_tenants)) return false;
    } else if (key == "max_connections_per_uid") {
      if (!cx.get_uint(v, "daemon", key, 0, 65536, &c->max_connections_per_uid)) return false;
    } else if (key == "admin_connections") {
      if (!cx.get_uint(v, "daemon", key, 1, 1024, &c->admin_connections)) return false;
    } else if (key == "idle_timeout_ms") {
      if (!cx.get_uint(v, "daemon", key, 0, 3600000, &c->idle_timeout_ms)) return false;
    } else if (key == "kubelet_cgroup_roots") {
      if (!parse_cgroup_roots(cx, v, key, &c->kubelet_cgroup_roots)) return false;
    } else if (key == "cgroup_mount") {
      if (!cx.get_string(v, "daemon", key, &c->cgroup_mount)) return false;
      if (c->cgroup_mount.empty() || c->cgroup_mount[0] != '/') return cx.fail(v, "daemon", key, "must be an absolute path");
    } else {
      return cx.fail(v, "daemon", key, "unknown key");
    }
  }
  return true;
}

constexpr KeyDoc kTenantsKeys[] = {
    {"on_no_daemon", "No gpuosd answers: \"passthrough\" (a warning, then ungoverned) or \"refuse\" (CUDA fails)"},
    {"default_class", "Class of gpuos run without --class: \"best-effort\" or \"guaranteed\""},
    {"guaranteed", "Who may register as guaranteed: \"admins\" or \"anyone\" (others get best-effort)"},
    {"mem_quota_cap", "Largest memory quota of a non-admin tenant (also one asking none), e.g. \"40GiB\"; \"\": none"},
    {"max_per_uid", "Live tenants of one non-admin uid at once (0..4096; 0 = no cap)"},
    {"max_slowdown", "Latency budget of guaranteed tenants without --max-slowdown, e.g. 1.25; 0 = none"},
};

bool parse_tenants(Ctx& cx, const toml::table& t, Config* c) {
  for (auto&& [k, v] : t) {
    std::string_view key = k.str();
    if (!is_key(kTenantsKeys, key)) return cx.fail(v, "tenants", key, "unknown key");
    if (key == "on_no_daemon") {
      std::string s;
      if (!cx.get_string(v, "tenants", key, &s)) return false;
      if (s != "passthrough" && s != "refuse") {
        return cx.fail(v, "tenants", key, "\"" + s + "\" is not one of passthrough, refuse");
      }
      c->on_no_daemon = s;
    } else if (key == "default_class") {
      std::string s;
      if (!cx.get_string(v, "tenants", key, &s)) return false;
      if (!parse_class(s, &c->default_class)) {
        return cx.fail(v, "tenants", key, "\"" + s + "\" is not one of guaranteed, best-effort");
      }
    } else if (key == "guaranteed") {
      std::string s;
      if (!cx.get_string(v, "tenants", key, &s)) return false;
      if (s != "admins" && s != "anyone") {
        return cx.fail(v, "tenants", key, "\"" + s + "\" is not one of admins, anyone");
      }
      c->guaranteed_for_anyone = s == "anyone";
    } else if (key == "mem_quota_cap") {
      std::string s;
      if (!cx.get_string(v, "tenants", key, &s)) return false;
      if (std::string why; !s.empty() && !parse_size(s, &c->mem_quota_cap_bytes, &why)) {
        return cx.fail(v, "tenants", key, why);
      }
      if (s.empty()) c->mem_quota_cap_bytes = 0;
    } else if (key == "max_per_uid") {
      if (!cx.get_uint(v, "tenants", key, 0, 4096, &c->max_tenants_per_uid)) return false;
    } else if (key == "max_slowdown") {
      // A number (1.25) or a string ("1.25"): the default latency budget of guaranteed tenants.
      std::string text;
      if (v.is_floating_point() || v.is_integer()) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.3f", v.is_integer() ? static_cast<double>(v.as_integer()->get())
                                                                : v.as_floating_point()->get());
        text = buf;
      } else if (!cx.get_string(v, "tenants", key, &text)) {
        return false;
      }
      if (text == "0" || text == "0.000" || text.empty()) {
        c->max_slowdown_permille = 0;
      } else if (!parse_slowdown_permille(text, &c->max_slowdown_permille)) {
        return cx.fail(v, "tenants", key,
                       text + " is not a slowdown " + slowdown_text(kMinSlowdownPermille) + ".." +
                           slowdown_text(kMaxSlowdownPermille) + " (e.g. 1.25; 0 = none)");
      }
    } else {
      return cx.fail(v, "tenants", key, "unknown key");
    }
  }
  return true;
}

bool is_policy_name(std::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  for (char ch : name) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_')) return false;
  }
  return true;
}

// `policy = "<name>"` of a slot's table.
bool get_policy(Ctx& cx, const toml::node& v, std::string_view table, std::string* out) {
  std::string p;
  if (!cx.get_string(v, table, "policy", &p)) return false;
  if (!is_policy_name(p)) return cx.fail(v, table, "policy", "\"" + p + "\" is not a policy name ([a-z0-9_-]{1,32})");
  *out = p;
  return true;
}

constexpr KeyDoc kSchedulerKeys[] = {
    {"policy", "The time-gate slot's policy (gpuosd --policy overrides), one of:"},
};
// [scheduler]'s keys of before the policy slots: the priority policy's now ([policy.priority]).
constexpr std::string_view kSchedulerLegacyKeys[] = {"be_max_inflight", "idle_grace_us", "be_slice_ms",
                                                     "signal_grace_ms"};

bool parse_scheduler(Ctx& cx, const toml::table& t, Config* c) {
  for (auto&& [k, v] : t) {
    std::string_view key = k.str();
    if (!is_key(kSchedulerKeys, key) && !is_legacy(kSchedulerLegacyKeys, key)) {
      return cx.fail(v, "scheduler", key, "unknown key");
    }
    if (key == "policy") {
      if (!get_policy(cx, v, "scheduler", &c->policies.time_gate)) return false;
    } else if (is_legacy(kSchedulerLegacyKeys, key)) {
      if (!cx.legacy(v, "scheduler", key, "priority", c)) return false;
    } else {
      return cx.fail(v, "scheduler", key, "unknown key");
    }
  }
  return true;
}

// [policy.<name>] tables: kept as parsed, for their policy to check.
bool parse_policy_tables(Ctx& cx, const toml::table& t, Config* c) {
  for (auto&& [k, v] : t) {
    const std::string name(k.str());
    const std::string table = "policy." + name;
    if (!v.is_table()) return cx.fail(v, table, "", std::string("expected a table, got ") + type_name(v));
    if (!is_policy_name(name)) {
      return cx.fail(v, table, "", "\"" + name + "\" is not a policy name ([a-z0-9_-]{1,32})");
    }
    for (auto&& [kk, vv] : *v.as_table()) {
      std::string_view key = kk.str();
      ConfigSection* sec = Ctx::section(name, c);
      if (sec->find(key) != nullptr) {
        return cx.fail(vv, table, key, "given twice (here and in its table of before the policy slots)");
      }
      ConfigValue cv;
      if (!cx.scalar(vv, table, key, &cv)) return false;
      sec->entries.emplace_back(std::string(key), std::move(cv));
    }
  }
  return true;
}

constexpr KeyDoc kMemoryKeys[] = {
    {"swap_pool", "Host memory set aside per swappable tenant (gpuos run --swap), e.g. \"84GiB\"; \"\": off"},
    {"swap_quantum_ms", "Once its memory is back, a tenant keeps it this long against its peers (0..3600000)"},
    {"swap_headroom", "GPU memory per GPU kept out of what tenants may hold (contexts), and each swap's margin"},
    {"policy", "The memory slot's policy (gpuosd --memory-policy overrides), one of:"},
};

bool parse_memory(Ctx& cx, const toml::table& t, Config* c) {
  MemoryConfig& m = c->memory;
  for (auto&& [k, v] : t) {
    std::string_view key = k.str();
    if (!is_key(kMemoryKeys, key)) return cx.fail(v, "memory", key, "unknown key");
    if (key == "swap_pool" || key == "swap_headroom") {
      std::string s;
      if (!cx.get_string(v, "memory", key, &s)) return false;
      uint64_t* dst = key == "swap_pool" ? &m.swap_pool_bytes : &m.swap_headroom_bytes;
      if (s.empty() && key == "swap_pool") {
        *dst = 0;
      } else if (std::string why; !parse_size(s, dst, &why)) {
        return cx.fail(v, "memory", key, why);
      }
    } else if (key == "swap_quantum_ms") {
      if (!cx.get_uint(v, "memory", key, 0, 3600000, &m.swap_quantum_ms)) return false;
    } else if (key == "policy") {
      if (!get_policy(cx, v, "memory", &c->policies.memory)) return false;
    } else {
      return cx.fail(v, "memory", key, "unknown key");
    }
  }
  return true;
}

constexpr KeyDoc kVerifyKeys[] = {
    {"enabled", "On when NVML loads and matches gpuosd's GPUs; false: no check at all"},
    {"interval_ms", "How often every GPU is sampled (100..60000)"},
    {"enforce", "A tenant found grace_rounds in a row: \"report\", \"freeze\" (its cgroup v2) or \"kill\""},
    {"memory_slack", "NVML memory allowed beyond quota + borrow (NVML counts the CUDA context, ~0.5 GiB)"},
    {"gated_sm_util_percent", "SM use (percent) that counts as launching while gated the whole interval (1..100)"},
    {"grace_rounds", "Findings in a row before enforce acts (1..100)"},
};

bool parse_verify(Ctx& cx, const toml::table& t, Config* c) {
  VerifyConfig& vc = c->verify;
  for (auto&& [k, v] : t) {
    std::string_view key = k.str();
    if (!is_key(kVerifyKeys, key)) return cx.fail(v, "verify", key, "unknown key");
    if (key == "enabled") {
      if (!cx.get_bool(v, "verify", key, &vc.enabled)) return false;
    } else if (key == "interval_ms") {
      if (!cx.get_uint(v, "verify", key, 100, 60000, &vc.interval_ms)) return false;
    } else if (key == "enforce") {
      if (!cx.get_string(v, "verify", key, &vc.enforce)) return false;
      if (vc.enforce != "report" && vc.enforce != "freeze" && vc.enforce != "kill") {
        return cx.fail(v, "verify", key, "\"" + vc.enforce + "\": expected \"report\", \"freeze\" or \"kill\"");
      }
    } else if (key == "memory_slack") {
      std::string sz;
      if (!cx.get_string(v, "verify", key, &sz)) return false;
      if (std::string why; !parse_size(sz, &vc.memory_slack_bytes, &why)) {
        return cx.fail(v, "verify", key, why);
      }
    } else if (key == "gated_sm_util_percent") {
      if (!cx.get_uint(v, "verify", key, 1, 100, &vc.gated_sm_util_percent)) return false;
    } else if (key == "grace_rounds") {
      if (!cx.get_uint(v, "verify", key, 1, 100, &vc.grace_rounds)) return false;
    } else {
      return cx.fail(v, "verify", key, "unknown key");
    }
  }
  return true;
}

constexpr KeyDoc kMetricsKeys[] = {
    {"listen", "\"IPV4:PORT\", \"[IPV6]:PORT\" or \"localhost:PORT\"; \"\": off (gpuosd --metrics-listen overrides)"},
};

bool parse_metrics(Ctx& cx, const toml::table& t, Config* c) {
  for (auto&& [k, v] : t) {
    std::string_view key = k.str();
    if (!is_key(kMetricsKeys, key)) return cx.fail(v, "metrics", key, "unknown key");
    if (key == "listen") {
      std::string s;
      if (!cx.get_string(v, "metrics", key, &s)) return false;
      ListenAddress a;
      std::string why;
      if (!s.empty() && !parse_listen_address(s, &a, &why)) return cx.fail(v, "metrics", key, why);
      c->metrics_listen = s;
    } else {
      return cx.fail(v, "metrics", key, "unknown key");
    }
  }
  return true;
}

constexpr KeyDoc kDomainKeys[] = {
    {"name", "Required: [A-Za-z0-9_.-], 1..32 characters, not \".\" or \"..\", unique", "\"vision\""},
    {"users", "User names or uids who may join besides the admins; [] = admins only", "[\"alice\", 1007]"},
    {"gpus", "GPU indices (as in gpuos ps) of the domain's MPS control daemon; absent = every GPU", "[0, 1]"},
};

bool parse_domain(Ctx& cx, const toml::node& node, std::size_t index, Config* c) {
  static constexpr std::string_view kT = "spatial.domain";
  if (!node.is_table()) {
    return cx.fail(node, "spatial", "domain",
                   "element " + std::to_string(index + 1) + ": expected a table, got " + type_name(node));
  }
  const toml::table& t = *node.as_table();
  SpatialDomain d;
  bool have_name = false;
  for (auto&& [k, v] : t) {
    std::string_view key = k.str();
    if (!is_key(kDomainKeys, key)) return cx.fail(v, kT, key, "unknown key");
    if (key == "name") {
      if (!cx.get_string(v, kT, key, &d.name)) return false;
      if (!is_valid_domain_name(d.name)) {
        return cx.fail(v, kT, key,
                       "\"" + d.name + "\" is not a domain name: 1.." + std::to_string(kMaxDomainName) +
                           " of A-Z a-z 0-9 _ . -, not \".\" or \"..\"");
      }
      if (c->spatial.find(d.name) != nullptr) {
        return cx.fail(v, kT, key, "\"" + d.name + "\" names two domains");
      }
      have_name = true;
    } else if (key == "users") {
      if (!v.is_array()) return cx.fail(v, kT, key, std::string("expected an array, got ") + type_name(v));
      for (const toml::node& u : *v.as_array()) {
        if (u.is_integer()) {
          int64_t uid = u.as_integer()->get();
          if (uid < 0 || uid > 4294967294ll) {
            return cx.fail(u, kT, key, "uid " + std::to_string(uid) + " out of range 0..4294967294");
          }
          d.users.push_back(std::to_string(uid));
        } else if (u.is_string()) {
          const std::string& name = u.as_string()->get();
          if (name.empty() || name.size() > 64) return cx.fail(u, kT, key, "a user name has 1..64 bytes");
          for (char ch : name) {
            if (static_cast<unsigned char>(ch) <= 0x20 || ch == ':' || ch == '/' || ch == 0x7f) {
              return cx.fail(u, kT, key, "\"" + name + "\" is not a user name or uid");
            }
          }
          if (name.find_first_not_of("0123456789") == std::string::npos) {
            uint64_t uid = 0;
            if (name.size() <= 10) {
              for (char ch : name) uid = uid * 10 + static_cast<uint64_t>(ch - '0');
            }
            if (name.size() > 10 || uid > 4294967294ull) {
              return cx.fail(u, kT, key, "uid " + name + " out of range 0..4294967294");
            }
            d.users.push_back(std::to_string(uid));  // canonical: no leading zeros
          } else {
            d.users.push_back(name);
          }
        } else {
          return cx.fail(u, kT, key, std::string("expected user names or uids, got ") + type_name(u));
        }
      }
    } else if (key == "gpus") {
      if (!v.is_array()) return cx.fail(v, kT, key, std::string("expected an array, got ") + type_name(v));
      if (v.as_array()->empty()) return cx.fail(v, kT, key, "empty (leave the key out for every GPU)");
      for (const toml::node& g : *v.as_array()) {
        uint32_t idx = 0;
        if (!cx.get_uint(g, kT, key, 0, 1023, &idx)) return false;
        for (uint32_t seen : d.gpus) {
          if (seen == idx) return cx.fail(g, kT, key, "GPU " + std::to_string(idx) + " listed twice");
        }
        d.gpus.push_back(idx);
      }
    } else {
      return cx.fail(v, kT, key, "unknown key");
    }
  }
  if (!have_name) return cx.fail(node, kT, "name", "missing (every domain needs a name)");
  if (c->spatial.domains.size() >= kMaxSpatialDomains) {
    return cx.fail(node, kT, "name", "more than " + std::to_string(kMaxSpatialDomains) + " domains");
  }
  c->spatial.domains.push_back(std::move(d));
  return true;
}

constexpr KeyDoc kSpatialKeys[] = {
    {"mps_control", "The MPS control binary: a name (looked up in PATH) or an absolute path"},
    {"mps_dir", "Directory of the domains' MPS directories (absolute, <= 48 bytes); \"\": mps beside the socket"},
    {"policy", "The space slot's policy (gpuosd --space-policy overrides), one of:"},
};
// [spatial]'s keys of before the policy slots: the partition policy's now ([policy.partition]).
constexpr std::string_view kSpatialLegacyKeys[] = {"lend_after_ms",        "lend_max_kernel_ms",    "be_reserve_groups",
                                                   "right_size_slack_pct", "right_size_below_grid", "mps_kernel_cost_ns"};

bool parse_spatial(Ctx& cx, const toml::table& t, Config* c) {
  SpatialConfig& s = c->spatial;
  for (auto&& [k, v] : t) {
    std::string_view key = k.str();
    // ([[spatial.domain]] tables are the array `domain`: their keys are kDomainKeys.)
    if (!is_key(kSpatialKeys, key) && !is_legacy(kSpatialLegacyKeys, key) && key != "domain") {
      return cx.fail(v, "spatial", key, "unknown key");
    }
    if (key == "mps_control") {
      if (!cx.get_string(v, "spatial", key, &s.mps_control)) return false;
      if (s.mps_control.empty()) return cx.fail(v, "spatial", key, "empty");
      if (s.mps_control.find('\0') != std::string::npos) return cx.fail(v, "spatial", key, "contains a NUL byte");
      if (s.mps_control.find('/') != std::string::npos && s.mps_control[0] != '/') {
        return cx.fail(v, "spatial", key, "must be a command name (looked up in PATH) or an absolute path");
      }
    } else if (is_legacy(kSpatialLegacyKeys, key)) {
      if (!cx.legacy(v, "spatial", key, "partition", c)) return false;
    } else if (key == "policy") {
      if (!get_policy(cx, v, "spatial", &c->policies.space)) return false;
    } else if (key == "mps_dir") {
      if (!cx.get_string(v, "spatial", key, &s.mps_dir)) return false;
      if (!s.mps_dir.empty() && s.mps_dir[0] != '/') return cx.fail(v, "spatial", key, "must be an absolute path");
      if (s.mps_dir.find('\0') != std::string::npos) return cx.fail(v, "spatial", key, "contains a NUL byte");
      if (s.mps_dir.size() > kMaxMpsDirLength) {
        return cx.fail(v, "spatial", key,
                       "longer than " + std::to_string(kMaxMpsDirLength) +
                           " bytes (the MPS sockets under <mps_dir>/<domain>/pipe must fit in 107 bytes)");
      }
    } else if (key == "domain") {
      if (!v.is_array()) {
        return cx.fail(v, "spatial", key,
                       std::string("expected an array of tables ([[spatial.domain]]), got ") + type_name(v));
      }
      std::size_t i = 0;
      for (const toml::node& d : *v.as_array()) {
        if (!parse_domain(cx, d, i++, c)) return false;
      }
    } else {
      return cx.fail(v, "spatial", key, "unknown key");
    }
  }
  return true;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(ch));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// Sizes as written back: in the largest binary unit that holds them whole ("2GiB"), else bytes.
std::string size_text(uint64_t bytes) {
  static constexpr std::pair<const char*, int> kUnits[] = {{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}};
  for (const auto& [unit, shift] : kUnits) {
    if (bytes != 0 && bytes % (uint64_t{1} << shift) == 0) return std::to_string(bytes >> shift) + unit;
  }
  return std::to_string(bytes);
}

// gpuos's own tables, in format_config's order.
constexpr TableDoc kTables[] = {
    {"daemon", "gpuosd itself: its control socket, who administers it, its limits.", kDaemonKeys},
    {"tenants",
     "Tenants: programs run under libgpuos.so (gpuos run). A process is always one tenant; a non-admin "
     "asking for guaranteed is admitted as best-effort.",
     kTenantsKeys},
    {"scheduler",
     "The time-gate slot: when each tenant's launches may go to the GPU. Each policy with settings "
     "reads its own [policy.<name>] table, below.",
     kSchedulerKeys},
    {"memory",
     "Device memory: oversubscription for tenants started with gpuos run --swap (each pins its "
     "pool of host memory once), and the memory slot's policy.",
     kMemoryKeys},
    {"verify",
     "The usage check: gpuosd samples every process's real GPU memory and SM use through NVML "
     "(libnvidia-ml.so.1, or $GPUOS_NVML_LIBRARY), independent of what tenants report: a tenant over "
     "its quota, one that launched while its gate was closed, a process on a GPU that is no tenant. "
     "A process that never registered is only reported.",
     kVerifyKeys},
    {"metrics",
     "Prometheus metrics over HTTP (GET /metrics). Anyone who can reach the endpoint sees tenant "
     "names, pids and uids: keep it on loopback unless the network is trusted.",
     kMetricsKeys},
    {"spatial",
     "Spatial sharing: tenants of one trust domain run kernels at the same time on disjoint SMs as "
     "clients of one MPS server per domain; gpuosd starts and watches its control daemon. MPS has no "
     "fault isolation (a GPU fault in one client ends all its clients): put only tenants that may take "
     "each other down in one domain. Tenants of other domains or none are time-shared.",
     kSpatialKeys},
    {"spatial.domain",
     "One table per trust domain; none: spatial sharing off. Tenants join with gpuos run --space NAME.",
     kDomainKeys},
};

}  // namespace

std::span<const TableDoc> config_tables() { return kTables; }

const KeyDoc* find_key_doc(std::span<const KeyDoc> keys, std::string_view key) {
  for (const KeyDoc& k : keys) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

bool parse_listen_address(std::string_view text, ListenAddress* out, std::string* why) {
  std::string t(text);
  std::size_t colon = t.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == t.size()) {
    *why = "\"" + t + "\" is not HOST:PORT (e.g. \"127.0.0.1:9464\", \"[::1]:9464\")";
    return false;
  }
  std::string host = t.substr(0, colon), port = t.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoul(port) > 65535) {
    *why = "port \"" + port + "\" is not a number 0..65535";
    return false;
  }
  ListenAddress a;
  a.port = static_cast<uint16_t>(std::stoul(port));
  unsigned char buf[sizeof(in6_addr)];
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    a.host = host.substr(1, host.size() - 2);
    a.family = AF_INET6;
    if (inet_pton(AF_INET6, a.host.c_str(), buf) != 1) {
      *why = "\"" + a.host + "\" is not a numeric IPv6 address";
      return false;
    }
  } else {
    a.host = host == "localhost" ? "127.0.0.1" : host;
    a.family = AF_INET;
    if (inet_pton(AF_INET, a.host.c_str(), buf) != 1) {
      *why = "\"" + host + "\" is not a numeric IPv4 address, [IPv6] or localhost (no name lookups)";
      return false;
    }
  }
  *out = a;
  return true;
}

bool parse_class(std::string_view text, gpuos_class* out) {
  if (text == "guaranteed") *out = GPUOS_CLASS_GUARANTEED;
  else if (text == "best-effort") *out = GPUOS_CLASS_BEST_EFFORT;
  else return false;
  return true;
}

const char* class_name(uint32_t c) {
  switch (c) {
    case GPUOS_CLASS_GUARANTEED: return "guaranteed";
    case GPUOS_CLASS_BEST_EFFORT: return "best-effort";
    default: return "unknown";
  }
}

ConfigResult parse_config(std::string_view text, std::string_view source_name) {
  ConfigResult res;
  Config c;
  c.source = std::string(source_name);
  Ctx cx{source_name, {}};
  try {
    toml::table root = toml::parse(text, source_name);
    for (auto&& [k, v] : root) {
      std::string_view key = k.str();
      if (key != "daemon" && key != "tenants" && key != "scheduler" && key != "metrics" && key != "memory" &&
          key != "spatial" && key != "policy" && key != "verify") {
        res.error = where(source_name, v.source()) + ": unknown " + (v.is_table() ? "table [" : "key \"") +
                    std::string(key) + (v.is_table() ? "]" : "\"") +
                    " (expected [daemon], [tenants], [scheduler], [memory], [metrics], [spatial], [verify] or "
                    "[policy.<name>])";
        return res;
      }
      if (!v.is_table()) {
        res.error = where(source_name, v.source()) + ": " + std::string(key) + ": expected a table, got " +
                    type_name(v);
        return res;
      }
      bool ok = key == "daemon"    ? parse_daemon(cx, *v.as_table(), &c)
                : key == "tenants" ? parse_tenants(cx, *v.as_table(), &c)
                : key == "metrics" ? parse_metrics(cx, *v.as_table(), &c)
                : key == "memory"  ? parse_memory(cx, *v.as_table(), &c)
                : key == "verify"  ? parse_verify(cx, *v.as_table(), &c)
                : key == "spatial" ? parse_spatial(cx, *v.as_table(), &c)
                : key == "policy"  ? parse_policy_tables(cx, *v.as_table(), &c)
                                   : parse_scheduler(cx, *v.as_table(), &c);
      if (!ok) {
        res.error = cx.error;
        return res;
      }
    }
  } catch (const toml::parse_error& e) {
    res.error = where(source_name, e.source()) + ": TOML syntax error: " + std::string(e.description());
    return res;
  } catch (const std::exception& e) {
    res.error = std::string(source_name) + ": " + e.what();
    return res;
  }
  res.config = std::move(c);
  return res;
}

ConfigResult load_config_file(const std::string& path) {
  ConfigResult res;
  // A directory opens and reads as empty, which would parse as the defaults: refuse it by name.
  if (struct stat st; ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    res.error = path + ": is a directory, not a config file";
    return res;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    res.error = path + ": cannot open config file: " + std::strerror(errno);
    return res;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    res.error = path + ": read error";
    return res;
  }
  return parse_config(ss.str(), path);
}

ConfigResult load_config(const std::string& cli_path) {
  if (!cli_path.empty()) return load_config_file(cli_path);
  if (const char* env = std::getenv("GPUOS_CONFIG"); env != nullptr && env[0] != '\0') {
    return load_config_file(env);
  }
  // $GPUOS_SYSTEM_CONFIG stands in for /etc/gpuos/gpuos.toml: tests point it at a private path so
  // that no host's config reaches them.
  const char* sys = std::getenv("GPUOS_SYSTEM_CONFIG");
  const std::string system_path = sys != nullptr && sys[0] != '\0' ? sys : kSystemConfigPath;
  struct stat st;
  if (::stat(system_path.c_str(), &st) == 0) return load_config_file(system_path);
  ConfigResult res;
  res.config = Config{};
  return res;
}

bool resolve_host_config(const Config& c, HostConfig* out, std::string* why) {
  HostConfig h;
  if (!c.admin_group.empty()) {
    group gr;
    group* res = nullptr;
    std::vector<char> buf(16384);
    int rc;
    while ((rc = getgrnam_r(c.admin_group.c_str(), &gr, buf.data(), buf.size(), &res)) == ERANGE && buf.size() < (1u << 22)) {
      buf.resize(buf.size() * 2);
    }
    if (rc != 0 || res == nullptr) {
      *why = (c.source.empty() ? std::string("<config>") : c.source) + ": [daemon] admin_group: \"" + c.admin_group +
             "\": " + (rc != 0 ? std::string("cannot look up the group: ") + std::strerror(rc) : "no such group on this host");
      return false;
    }
    h.has_admin_gid = true;
    h.admin_gid = gr.gr_gid;
  }
  *out = h;
  return true;
}

std::string format_config(const Config& c) {
  std::string s;
  s += "# source: " + (c.source.empty() ? std::string("built-in defaults") : c.source) + "\n";
  s += "[daemon]\n";
  s += "socket = " + quote(c.socket) + "\n";
  s += "admin_group = " + quote(c.admin_group) + "\n";
  s += "log_level = " + quote(log::level_name(c.log_level)) + "\n";
  s += "history = " + std::to_string(c.history) + "\n";
  s += "max_tenants = " + std::to_string(c.max_tenants) + "\n";
  s += "max_connections_per_uid = " + std::to_string(c.max_connections_per_uid) + "\n";
  s += "admin_connections = " + std::to_string(c.admin_connections) + "\n";
  s += "idle_timeout_ms = " + std::to_string(c.idle_timeout_ms) + "\n";
  s += "kubelet_cgroup_roots = [";
  for (std::size_t i = 0; i < c.kubelet_cgroup_roots.size(); ++i) {
    s += (i ? ", " : "") + quote(c.kubelet_cgroup_roots[i]);
  }
  s += "]\n";
  s += "cgroup_mount = " + quote(c.cgroup_mount) + "\n";
  s += "[tenants]\n";
  s += "on_no_daemon = " + quote(c.on_no_daemon) + "\n";
  s += "default_class = " + quote(class_name(c.default_class)) + "\n";
  s += "guaranteed = " + quote(c.guaranteed_for_anyone ? "anyone" : "admins") + "\n";
  s += "mem_quota_cap = " + quote(c.mem_quota_cap_bytes ? size_text(c.mem_quota_cap_bytes) : "") + "\n";
  s += "max_per_uid = " + std::to_string(c.max_tenants_per_uid) + "\n";
  s += "max_slowdown = " + (c.max_slowdown_permille != 0 ? slowdown_text(c.max_slowdown_permille) : "0") + "\n";
  s += "[scheduler]\n";
  s += "policy = " + quote(c.policies.time_gate) + "\n";
  s += "[memory]\n";
  s += "swap_pool = " + quote(c.memory.swap_pool_bytes ? size_text(c.memory.swap_pool_bytes) : "") + "\n";
  s += "swap_quantum_ms = " + std::to_string(c.memory.swap_quantum_ms) + "\n";
  s += "swap_headroom = " + quote(size_text(c.memory.swap_headroom_bytes)) + "\n";
  s += "policy = " + quote(c.policies.memory) + "\n";
  s += "[verify]\n";
  s += std::string("enabled = ") + (c.verify.enabled ? "true" : "false") + "\n";
  s += "interval_ms = " + std::to_string(c.verify.interval_ms) + "\n";
  s += "enforce = " + quote(c.verify.enforce) + "\n";
  s += "memory_slack = " + quote(size_text(c.verify.memory_slack_bytes)) + "\n";
  s += "gated_sm_util_percent = " + std::to_string(c.verify.gated_sm_util_percent) + "\n";
  s += "grace_rounds = " + std::to_string(c.verify.grace_rounds) + "\n";
  s += "[metrics]\n";
  s += "listen = " + quote(c.metrics_listen) + "\n";
  s += "[spatial]\n";
  s += "mps_control = " + quote(c.spatial.mps_control) + "\n";
  s += "mps_dir = " + quote(c.spatial.mps_dir) + "\n";
  s += "policy = " + quote(c.policies.space) + "\n";
  if (c.spatial.domains.empty()) s += "# no [[spatial.domain]]: spatial sharing off\n";
  for (const SpatialDomain& d : c.spatial.domains) {
    s += "[[spatial.domain]]\n";
    s += "name = " + quote(d.name) + "\n";
    s += "users = [";
    for (std::size_t i = 0; i < d.users.size(); ++i) s += (i ? ", " : "") + quote(d.users[i]);
    s += "]\n";
    if (d.gpus.empty()) {
      s += "# gpus: all\n";
    } else {
      s += "gpus = [";
      for (std::size_t i = 0; i < d.gpus.size(); ++i) s += (i ? ", " : "") + std::to_string(d.gpus[i]);
      s += "]\n";
    }
  }
  for (const ConfigSection& sec : c.policy_sections) {
    s += "[policy." + sec.name + "]\n";
    for (const auto& [key, v] : sec.entries) {
      s += key + " = ";
      switch (v.kind) {
        case ConfigValue::Kind::kString: s += quote(v.text); break;
        case ConfigValue::Kind::kInteger: s += std::to_string(v.integer); break;
        case ConfigValue::Kind::kFloat: {
          char buf[64];
          std::snprintf(buf, sizeof(buf), "%.17g", v.number);
          s += buf;
          if (std::strpbrk(buf, ".eEn") == nullptr) s += ".0";  // stays a float when read back
          break;
        }
        case ConfigValue::Kind::kBool: s += v.boolean ? "true" : "false"; break;
      }
      s += "\n";
    }
  }
  return s;
}

const ConfigValue* ConfigSection::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

namespace {
const char* kind_name(const ConfigValue& v) {
  switch (v.kind) {
    case ConfigValue::Kind::kString: return "string";
    case ConfigValue::Kind::kInteger: return "integer";
    case ConfigValue::Kind::kFloat: return "float";
    case ConfigValue::Kind::kBool: return "boolean";
  }
  return "nothing";
}
}  // namespace

std::string ConfigSection::error_at(const std::string& key, const ConfigValue& v, const std::string& what) {
  return v.where + ": [" + v.table + "] " + key + ": " + what;
}

bool ConfigSection::get_uint(std::string_view key, int64_t lo, int64_t hi, uint32_t* out, std::string* error) const {
  read_.emplace_back(key);
  const ConfigValue* v = find(key);
  if (v == nullptr) return true;
  if (v->kind != ConfigValue::Kind::kInteger) {
    *error = error_at(std::string(key), *v, std::string("expected an integer, got ") + kind_name(*v));
    return false;
  }
  if (v->integer < lo || v->integer > hi) {
    *error = error_at(std::string(key), *v,
                      "value " + std::to_string(v->integer) + " out of range " + std::to_string(lo) + ".." +
                          std::to_string(hi));
    return false;
  }
  *out = static_cast<uint32_t>(v->integer);
  return true;
}

bool ConfigSection::get_bool(std::string_view key, bool* out, std::string* error) const {
  read_.emplace_back(key);
  const ConfigValue* v = find(key);
  if (v == nullptr) return true;
  if (v->kind != ConfigValue::Kind::kBool) {
    *error = error_at(std::string(key), *v, std::string("expected true or false, got ") + kind_name(*v));
    return false;
  }
  *out = v->boolean;
  return true;
}

bool ConfigSection::get_string(std::string_view key, std::string* out, std::string* error) const {
  read_.emplace_back(key);
  const ConfigValue* v = find(key);
  if (v == nullptr) return true;
  if (v->kind != ConfigValue::Kind::kString) {
    *error = error_at(std::string(key), *v, std::string("expected a string, got ") + kind_name(*v));
    return false;
  }
  *out = v->text;
  return true;
}

bool ConfigSection::all_read(std::string* error) const {
  for (const auto& [k, v] : entries) {
    if (std::find(read_.begin(), read_.end(), k) == read_.end()) {
      *error = error_at(k, v, "unknown key");
      return false;
    }
  }
  return true;
}

bool is_valid_domain_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxDomainName || name == "." || name == "..") return false;
  for (char ch : name) {
    bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '.' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

std::string effective_mps_dir(const Config& c, const std::string& socket_path) {
  if (!c.spatial.mps_dir.empty()) return c.spatial.mps_dir;
  std::size_t slash = socket_path.find_last_of('/');
  if (slash == std::string::npos) return "mps";  // not absolute: callers reject it
  return socket_path.substr(0, slash) + "/mps";
}

std::string mps_pipe_dir(const std::string& mps_dir, std::string_view domain) {
  return mps_dir + "/" + std::string(domain) + "/pipe";
}
std::string mps_log_dir(const std::string& mps_dir, std::string_view domain) {
  return mps_dir + "/" + std::string(domain) + "/log";
}
std::string mps_status_file(const std::string& mps_dir, std::string_view domain) {
  return mps_dir + "/" + std::string(domain) + "/status";
}

bool parse_size(std::string_view text, uint64_t* bytes, std::string* why) {
  auto fail = [&](const std::string& what) {
    if (why != nullptr) *why = what;
    return false;
  };
  const std::string kWant = "want a size such as 8GiB, 8G, 1.5GiB, 512MiB or a byte count";
  std::size_t i = 0;
  uint64_t whole = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    const uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (whole > (UINT64_MAX - d) / 10) return fail("\"" + std::string(text) + "\" is too large");
    whole = whole * 10 + d;
    ++i;
  }
  if (i == 0) return fail("\"" + std::string(text) + "\" is not a size (" + kWant + ")");
  // A decimal fraction of up to 6 digits, exact: 1.5GiB is 1610612736 bytes.
  uint64_t frac = 0, frac_scale = 1;
  if (i < text.size() && text[i] == '.') {
    ++i;
    const std::size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (i - start >= 6) return fail("\"" + std::string(text) + "\": at most 6 digits after the point");
      frac = frac * 10 + static_cast<uint64_t>(text[i] - '0');
      frac_scale *= 10;
      ++i;
    }
    if (i == start) return fail("\"" + std::string(text) + "\" is not a size (" + kWant + ")");
  }
  while (i < text.size() && text[i] == ' ') ++i;  // "8 GiB"
  std::string unit;
  for (; i < text.size(); ++i) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  // Every unit is binary (K = KB = KiB = 1024 bytes), as GPU memory is counted: 8G = 8GB = 8GiB.
  static constexpr std::pair<const char*, int> kUnits[] = {
      {"", 0},     {"b", 0},     {"k", 10},  {"kb", 10}, {"ki", 10}, {"kib", 10}, {"m", 20},  {"mb", 20},
      {"mi", 20},  {"mib", 20},  {"g", 30},  {"gb", 30}, {"gi", 30}, {"gib", 30}, {"t", 40},  {"tb", 40},
      {"ti", 40},  {"tib", 40}};
  int shift = -1;
  for (const auto& [name, sh] : kUnits) {
    if (unit == name) shift = sh;
  }
  if (shift < 0) {
    return fail("\"" + std::string(text) + "\": unknown unit \"" + unit + "\" (B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB)");
  }
  if (frac_scale > 1 && shift == 0) return fail("\"" + std::string(text) + "\": a byte count is a whole number");
  if (whole > (UINT64_MAX >> shift)) return fail("\"" + std::string(text) + "\" is too large");
  // frac < 10^6, shift <= 40: no overflow. A fraction of a byte (0.3K is 307.2) is refused, as a
  // fractional byte count is: a size is a whole number of bytes.
  if ((frac << shift) % frac_scale != 0) {
    return fail("\"" + std::string(text) + "\": not a whole number of bytes (" + kWant + ")");
  }
  const uint64_t from_frac = (frac << shift) / frac_scale;
  const uint64_t n = whole << shift;
  if (n > UINT64_MAX - from_frac) return fail("\"" + std::string(text) + "\" is too large");
  if (n + from_frac == 0) return fail("\"" + std::string(text) + "\" is zero bytes");
  *bytes = n + from_frac;
  return true;
}

}  // namespace gpuos
