// SPDX-License-Identifier: Apache-2.0
#include "client/client.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "common/budget_limits.h"
#include "common/ipc.h"

namespace gpuos::client {
namespace {

constexpr int kReplyTimeoutMs = 5000;

int connect_or_explain(const std::string& socket, std::string* err) {
  if (socket.empty()) {
    *err = "no control socket path (XDG_RUNTIME_DIR is not set?); pass --socket or set GPUOS_SOCKET";
    return -EINVAL;
  }
  char why[400];
  // Checks the socket directory and that the daemon is root's or ours: another user's daemon could
  // answer with anything.
  int fd = connect_to_daemon(socket.c_str(), why, sizeof(why));
  if (fd == -EACCES || fd == -EPERM) {
    *err = why;
  } else if (fd < 0) {
    *err = "no gpuosd answering on " + socket + " (" + std::strerror(-fd) +
           "); start one with `gpuos daemon`, or pass --socket";
  }
  return fd;
}

// Receives one reply and validates it. Returns its type or 0 with *err set.
uint32_t receive_valid(int fd, unsigned char* buf, std::size_t cap, long* len, std::string* err) {
  long n = receive_message(fd, buf, cap, nullptr, kReplyTimeoutMs);
  if (n == 0) {
    *err = "gpuosd closed the connection";
    return 0;
  }
  if (n < 0) {
    *err = std::string("no reply from gpuosd: ") + std::strerror(static_cast<int>(-n));
    return 0;
  }
  char why[GPUOS_TEXT_MAX];
  if (validate_message(buf, static_cast<std::size_t>(n), why, sizeof(why)) != GPUOS_OK) {
    *err = std::string("malformed reply from gpuosd: ") + why;
    return 0;
  }
  gpuos_msg_header h;
  std::memcpy(&h, buf, sizeof(h));
  *len = n;
  return h.type;
}

std::string reply_error(const gpuos_msg_reply& r) {
  std::string s = status_name(r.status);
  if (s == "error") s += " " + std::to_string(r.status);
  char text[GPUOS_TEXT_MAX + 1] = {};
  std::memcpy(text, r.text, GPUOS_TEXT_MAX);
  if (text[0] != '\0') s += std::string(": ") + printable(text);  // may quote what a tenant sent
  return s;
}

// Sends a request. A daemon that refused the connection itself (limit reached) has already replied
// and closed, so a failed send reads that reply to say why.
bool send_or_explain(int fd, const void* msg, std::size_t len, std::string* err) {
  int r = send_message(fd, msg, len);
  if (r == 0) return true;
  alignas(8) unsigned char buf[GPUOS_MSG_MAX_SIZE + 1];
  long n = receive_message(fd, buf, sizeof(buf), nullptr, 0);
  char why[GPUOS_TEXT_MAX];
  gpuos_msg_header h{};
  if (n > 0 && validate_message(buf, static_cast<std::size_t>(n), why, sizeof(why)) == GPUOS_OK) {
    std::memcpy(&h, buf, sizeof(h));
  }
  if (h.type == GPUOS_MSG_REPLY) {
    gpuos_msg_reply rep;
    std::memcpy(&rep, buf, sizeof(rep));
    *err = "gpuosd: " + reply_error(rep);
  } else {
    *err = std::string("send: ") + std::strerror(-r);
  }
  return false;
}

std::string cstr(const char* a, std::size_t n) { return std::string(a, strnlen(a, n)); }

// A request answered by one REPLY; its text (when OK) in *text.
bool simple_request(const std::string& socket, const void* msg, std::size_t len, std::string* err,
                    std::string* text = nullptr) {
  int fd = connect_or_explain(socket, err);
  if (fd < 0) return false;
  bool ok = false;
  if (!send_or_explain(fd, msg, len, err)) {
    // *err says why
  } else {
    alignas(8) unsigned char buf[GPUOS_MSG_MAX_SIZE + 1];
    long n = 0;
    uint32_t type = receive_valid(fd, buf, sizeof(buf), &n, err);
    if (type == GPUOS_MSG_REPLY) {
      gpuos_msg_reply r;
      std::memcpy(&r, buf, sizeof(r));
      if (r.status == GPUOS_OK) {
        ok = true;
        if (text != nullptr) *text = cstr(r.text, sizeof(r.text));
      } else {
        *err = "gpuosd: " + reply_error(r);
      }
    } else if (type != 0) {
      *err = "unexpected reply type " + std::to_string(type);
    }
  }
  close(fd);
  return ok;
}


// The daemon sends the bare 36-char UUID (the ABI field has no room for the prefix).
std::string gpu_uuid(const gpuos_msg_gpu_info& g) {
  std::string u = cstr(g.uuid, sizeof(g.uuid));
  if (!u.empty() && u.rfind("GPU-", 0) != 0) u = "GPU-" + u;
  return u;
}

std::string duration(uint64_t ns) {
  char b[32];
  if (ns == 0) return "0";
  if (ns < 1000000ull) std::snprintf(b, sizeof(b), "%.0fus", static_cast<double>(ns) / 1e3);
  else if (ns < 10000000000ull) std::snprintf(b, sizeof(b), "%.1fms", static_cast<double>(ns) / 1e6);
  else std::snprintf(b, sizeof(b), "%.1fs", static_cast<double>(ns) / 1e9);
  return b;
}

}  // namespace

std::string resolve_socket(const std::string& socket_opt, const Config& cfg, std::string* why, bool* answered) {
  if (answered != nullptr) *answered = true;  // (a path given is used as given)
  if (!socket_opt.empty()) return socket_opt;
  if (!cfg.socket.empty()) return cfg.socket;
  // The user's own socket, else the system gpuosd's: the one where a daemon answers.
  char buf[128] = "";
  char reason[700] = "";
  const int fd = connect_default_daemon(buf, sizeof(buf), reason, sizeof(reason));
  if (fd >= 0) {
    close(fd);
    return buf;
  }
  char own[128];
  if (!socket_path(own, sizeof(own))) {  // no socket of one's own (XDG_RUNTIME_DIR unset) and no system gpuosd
    if (why != nullptr) *why = reason;
    return "";
  }
  if (const char* env = std::getenv("GPUOS_SOCKET"); answered != nullptr && (env == nullptr || env[0] == '\0')) {
    *answered = false;
  }
  return own;  // none answers: the caller says so, naming the user's own socket
}

bool daemon_answers(const std::string& socket, std::string* err) {
  const int fd = connect_or_explain(socket, err);
  if (fd < 0) return false;
  close(fd);
  return true;
}

namespace {

// One LIST exchange with `flags`; false with *err on any failure (*refused_flags: gpuosd refused
// the flags themselves, so a daemon that predates one can be asked again without it).
bool list_once(const std::string& socket, uint32_t flags, Listing* out, std::string* err, bool* refused_flags) {
  *refused_flags = false;
  int fd = connect_or_explain(socket, err);
  if (fd < 0) return false;
  gpuos_msg_list m{};
  init_header(&m.hdr, GPUOS_MSG_LIST, sizeof(m), 1);
  m.flags = flags;
  bool ok = false;
  if (!send_or_explain(fd, &m, sizeof(m), err)) {
    close(fd);
    return false;
  }
  alignas(8) unsigned char buf[GPUOS_MSG_MAX_SIZE + 1];
  for (;;) {
    long n = 0;
    uint32_t type = receive_valid(fd, buf, sizeof(buf), &n, err);
    if (type == 0) break;
    if (type == GPUOS_MSG_GPU_INFO) {
      gpuos_msg_gpu_info g;
      std::memcpy(&g, buf, sizeof(g));
      out->gpus.push_back(g);
    } else if (type == GPUOS_MSG_TENANT_INFO) {
      gpuos_msg_tenant_info t;
      std::memcpy(&t, buf, sizeof(t));
      out->tenants.push_back(t);
    } else if (type == GPUOS_MSG_TENANT_GPU && (flags & GPUOS_LIST_WITH_GPUS) != 0) {
      gpuos_msg_tenant_gpu g;
      std::memcpy(&g, buf, sizeof(g));
      out->tenant_gpus.push_back(g);
    } else if (type == GPUOS_MSG_LIST_END || type == GPUOS_MSG_REPLY) {
      gpuos_msg_reply r;
      std::memcpy(&r, buf, sizeof(r));
      if (r.status != GPUOS_OK) {
        *err = "gpuosd: " + reply_error(r);
        *refused_flags = r.status == GPUOS_ERR_BAD_MESSAGE && reply_error(r).find("LIST flags") != std::string::npos;
      } else if (type == GPUOS_MSG_REPLY) {
        *err = "unexpected REPLY to LIST";
      } else if (r.count != out->tenants.size()) {
        *err = "gpuosd announced " + std::to_string(r.count) + " tenants but sent " +
               std::to_string(out->tenants.size());
      } else {
        ok = true;
      }
      break;
    } else {
      *err = "unexpected reply type " + std::to_string(type);
      break;
    }
  }
  close(fd);
  return ok;
}

}  // namespace

bool list_tenants(const std::string& socket, bool include_exited, Listing* out, std::string* err) {
  const uint32_t flags = include_exited ? GPUOS_LIST_INCLUDE_EXITED : 0;
  bool refused_flags = false;
  if (list_once(socket, flags | GPUOS_LIST_WITH_GPUS, out, err, &refused_flags)) return true;
  if (!refused_flags) return false;
  *out = Listing{};  // a gpuosd that predates TENANT_GPU: the listing without them
  return list_once(socket, flags, out, err, &refused_flags);
}

bool set_gate(const std::string& socket, uint32_t tenant_id, uint32_t gate, std::string* err) {
  gpuos_msg_set_gate m{};
  init_header(&m.hdr, GPUOS_MSG_SET_GATE, sizeof(m), 1);
  m.tenant_id = tenant_id;
  m.gate = gate;
  return simple_request(socket, &m, sizeof(m), err);
}

bool prepare_claim(const std::string& socket, const gpuos_msg_claim_prepare& m, std::string* socket_dir,
                   std::string* err) {
  return simple_request(socket, &m, sizeof(m), err, socket_dir);
}

bool unprepare_claim(const std::string& socket, const std::string& claim_uid, std::string* err) {
  gpuos_msg_claim_unprepare m{};
  init_header(&m.hdr, GPUOS_MSG_CLAIM_UNPREPARE, sizeof(m), 1);
  if (claim_uid.size() >= sizeof(m.claim_uid)) {
    *err = "claim uid \"" + printable(claim_uid) + "\" is too long";
    return false;
  }
  std::memcpy(m.claim_uid, claim_uid.data(), claim_uid.size());
  return simple_request(socket, &m, sizeof(m), err);
}

bool shutdown_daemon(const std::string& socket, std::string* err) {
  gpuos_msg_header h{};
  init_header(&h, GPUOS_MSG_SHUTDOWN, sizeof(h), 1);
  return simple_request(socket, &h, sizeof(h), err);
}

SpaceQuery query_space_domain(const std::string& socket, const std::string& domain, SpaceDomainInfo* out,
                              std::string* err) {
  if (domain.empty() || domain.size() >= GPUOS_DOMAIN_MAX) {
    *err = "a domain name has 1.." + std::to_string(GPUOS_DOMAIN_MAX - 1) + " bytes";
    return SpaceQuery::kFailed;
  }
  int fd = connect_or_explain(socket, err);
  if (fd < 0) return SpaceQuery::kNoDaemon;
  gpuos_msg_space_query m{};
  init_header(&m.hdr, GPUOS_MSG_SPACE_QUERY, sizeof(m), 1);
  copy_name(m.domain, sizeof(m.domain), domain.c_str());
  SpaceQuery result = SpaceQuery::kFailed;
  alignas(8) unsigned char buf[GPUOS_MSG_MAX_SIZE + 1];
  long n = 0;
  uint32_t type = send_or_explain(fd, &m, sizeof(m), err) ? receive_valid(fd, buf, sizeof(buf), &n, err) : 0;
  close(fd);
  if (type == GPUOS_MSG_REPLY) {
    gpuos_msg_reply r;
    std::memcpy(&r, buf, sizeof(r));
    *err = "gpuosd: " + reply_error(r);
    // A daemon that predates the message refuses it as unknown (validate_message's wording).
    if (r.status == GPUOS_ERR_BAD_MESSAGE && strnlen(r.text, sizeof(r.text)) < sizeof(r.text) &&
        std::strncmp(r.text, "unknown message type", 20) == 0) {
      result = SpaceQuery::kNotSupported;
    }
    return result;
  }
  if (type != GPUOS_MSG_SPACE_INFO) {
    if (type != 0) *err = "unexpected reply type " + std::to_string(type) + " to SPACE_QUERY";
    return result;
  }
  gpuos_msg_space_info r;
  std::memcpy(&r, buf, sizeof(r));
  // Everything from the wire is checked before it becomes the program's environment.
  if (!has_nul(r.mps_pipe_dir, sizeof(r.mps_pipe_dir)) || !has_nul(r.mps_log_dir, sizeof(r.mps_log_dir)) ||
      !has_nul(r.text, sizeof(r.text)) || r.available > 1) {
    *err = "malformed SPACE_INFO from gpuosd";
    return result;
  }
  const bool has_dirs = r.status == GPUOS_OK || r.status == GPUOS_ERR_PERMISSION;
  if (!has_dirs && r.status != GPUOS_ERR_NOT_FOUND && r.status != GPUOS_ERR_INTERNAL) {
    *err = "SPACE_INFO with unknown status " + std::to_string(r.status);
    return result;
  }
  auto plain_absolute = [](const char* p) {
    std::string_view v(p);
    if (v.empty() || v[0] != '/' || v.find("/../") != std::string_view::npos || v.ends_with("/..")) return false;
    return std::none_of(v.begin(), v.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
  };
  if (has_dirs && (!plain_absolute(r.mps_pipe_dir) || !plain_absolute(r.mps_log_dir))) {
    *err = "SPACE_INFO names MPS directories that are not plain absolute paths";
    return result;
  }
  out->status = static_cast<gpuos_status>(r.status);
  out->available = r.available != 0;
  out->pipe_dir = has_dirs ? r.mps_pipe_dir : "";
  out->log_dir = has_dirs ? r.mps_log_dir : "";
  out->text = printable(r.text);
  return SpaceQuery::kAnswered;
}

const char* gated_by_name(const gpuos_msg_tenant_info& t) {
  if (t.state == GPUOS_TENANT_EXITED) return "";
  if (t.gate_by & GPUOS_GATE_BY_ADMIN) return "admin";
  if (t.gate_by & GPUOS_GATE_BY_MEMORY) return "memory";
  if ((t.gate_by & GPUOS_GATE_BY_POLICY) || gated_gpus(t) != 0) return "policy";
  return "";
}

uint32_t gated_gpus(const gpuos_msg_tenant_info& t) {
  return t.state == GPUOS_TENANT_EXITED ? 0 : t.gate_by >> GPUOS_GATE_BY_POLICY_ON_GPUS_SHIFT;
}

const char* state_name(uint32_t state) {
  switch (state) {
    case GPUOS_TENANT_RUNNING: return "running";
    case GPUOS_TENANT_GATED: return "gated";
    case GPUOS_TENANT_EXITED: return "exited";
    default: return "unknown";
  }
}

const char* swap_state_name(uint32_t state) {
  switch (state) {
    case GPUOS_SWAP_RESIDENT: return "resident";
    case GPUOS_SWAP_SWAPPING_OUT: return "swapping-out";
    case GPUOS_SWAP_SWAPPED_OUT: return "swapped-out";
    case GPUOS_SWAP_SWAPPING_IN: return "swapping-in";
    default: return "unknown";
  }
}

std::string display_state(const gpuos_msg_tenant_info& t) {
  // Its connection closed while its process runs on: its state, and that (issue #62).
  if (t.state != GPUOS_TENANT_EXITED && t.detached != 0) {
    gpuos_msg_tenant_info attached = t;
    attached.detached = 0;
    return display_state(attached) + ",detached";
  }
  if (t.state != GPUOS_TENANT_EXITED && t.swap_state != GPUOS_SWAP_RESIDENT) return swap_state_name(t.swap_state);
  if (t.state == GPUOS_TENANT_GATED && std::strcmp(gated_by_name(t), "admin") == 0) return "held";
  if (const uint32_t gpus = gated_gpus(t); t.state == GPUOS_TENANT_RUNNING && gpus != 0) {
    // Gated on those GPUs only, running on its others: "gated:0" or "gated:0,2".
    std::string s = "gated:";
    for (uint32_t i = 0; i < 16; ++i) {
      if ((gpus >> i & 1u) != 0) s += (s.back() == ':' ? "" : ",") + std::to_string(i);
    }
    return s;
  }
  return state_name(t.state);
}

namespace {
// A budgeted tenant whose engine reports its phases: which of its steps and admissions is slower.
const char* slower_phase(const gpuos_msg_tenant_info& t) {
  return t.slowdown_admission_permille > t.slowdown_step_permille ? "admission" : "step";
}
}  // namespace

nlohmann::json listing_json(const Listing& l) {
  nlohmann::json j;
  j["schema_version"] = kPsJsonSchemaVersion;
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : l.gpus) {
    j["gpus"].push_back({{"index", g.index},
                         {"name", cstr(g.name, sizeof(g.name))},
                         {"uuid", gpu_uuid(g)},
                         {"sm_count", g.sm_count},
                         {"total_mem_bytes", g.total_mem_bytes},
                         {"used_mem_bytes", g.used_mem_bytes}});
  }
  j["tenants"] = nlohmann::json::array();
  for (const auto& t : l.tenants) {
    nlohmann::json o;
    o["id"] = t.tenant_id;
    o["pid"] = t.pid;
    o["uid"] = t.uid;
    o["name"] = cstr(t.name, sizeof(t.name));
    o["class"] = class_name(t.tenant_class);
    o["state"] = state_name(t.state);
    // Its connection closed while its process runs on: still the tenant, with no connection.
    o["detached"] = t.detached != 0;
    // Who holds a closed gate: "admin" (gpuos gate ID close; kept across a gpuosd restart), "memory"
    // or "policy"; null while open (or from a daemon that does not say).
    const char* by = gated_by_name(t);
    o["gated_by"] = by[0] != '\0' ? nlohmann::json(by) : nlohmann::json();
    // The GPUs the policy holds it on while it runs on its others (state "running"); [] otherwise.
    o["gated_gpus"] = nlohmann::json::array();
    for (uint32_t i = 0; i < 16; ++i) {
      if ((gated_gpus(t) >> i & 1u) != 0) o["gated_gpus"].push_back(i);
    }
    // The GPUs it works on, with its memory and gate there (live tenants; [] for exited ones).
    o["on_gpus"] = nlohmann::json::array();
    if (t.state != GPUOS_TENANT_EXITED) {
      for (const gpuos_msg_tenant_gpu& g : l.tenant_gpus) {
        if (g.tenant_id != t.tenant_id) continue;
        o["on_gpus"].push_back({{"gpu", g.gpu}, {"mem_used_bytes", g.mem_used_bytes}, {"gated", g.gated != 0}});
      }
    }
    o["priority"] = t.priority;
    o["weight"] = t.weight;
    // Kubernetes: its pod and the claim it came by (null when none).
    auto text_or_null = [](const char* p, std::size_t n) {
      const std::string v = cstr(p, n);
      return v.empty() ? nlohmann::json() : nlohmann::json(v);
    };
    o["pod_namespace"] = text_or_null(t.pod_namespace, sizeof(t.pod_namespace));
    o["pod_name"] = text_or_null(t.pod_name, sizeof(t.pod_name));
    o["pod_uid"] = text_or_null(t.pod_uid, sizeof(t.pod_uid));
    o["claim_uid"] = text_or_null(t.claim_uid, sizeof(t.claim_uid));
    o["launches"] = t.launches;
    o["graph_launches"] = t.graph_launches;
    o["captured_launches"] = t.captured_launches;
    o["gate_waits"] = t.gate_waits;
    o["gate_wait_ns"] = t.gate_wait_ns;
    o["gate_waiting_ms"] = t.gate_waiting_ms;  // the wait in progress (gate_wait_ns: finished ones)
    o["mem_used_bytes"] = t.mem_used_bytes;
    o["mem_peak_bytes"] = t.mem_peak_bytes;
    o["mem_quota_bytes"] = t.mem_quota_bytes;
    o["mem_borrow_bytes"] = t.mem_borrow_bytes;
    o["mem_imported_bytes"] = t.mem_imported_bytes;
    o["verified_mem_bytes"] = t.verified_mem_bytes;  // NVML's measure (0: not measured)
    if (t.kv_reserved_bytes != 0 || t.kv_resident_bytes != 0) {  // KV pools (include/gpuos/kv.h)
      o["kv_resident_bytes"] = t.kv_resident_bytes;
      o["kv_reserved_bytes"] = t.kv_reserved_bytes;
      o["kv_queue_depth"] = t.kv_queue_depth;
      // gpuosd's target for them (null: none; they may grow up to the quota)
      o["kv_target_bytes"] = t.kv_target_bytes != UINT64_MAX ? nlohmann::json(t.kv_target_bytes) : nlohmann::json();
    }
    if (t.engine_slots_capacity != 0) {  // its engine's batch slots, as it reports them
      o["engine_slots"] = {{"active", t.engine_slots_active},
                           {"capacity", t.engine_slots_capacity},
                           {"waiting", t.kv_queue_depth}};
    }
    o["violations"] = t.violations;
    // Chargeback (NVML): GPU time and its part of the GPUs' energy (0: not measured)
    o["gpu_seconds"] = static_cast<double>(t.gpu_time_ns) / 1e9;
    o["energy_joules"] = static_cast<double>(t.energy_mj) / 1e3;
    if (t.max_slowdown_permille != 0) {  // a latency budget: its slowdown as measured (null: not yet)
      o["max_slowdown"] = t.max_slowdown_permille / 1000.0;
      o["slowdown"] = t.slowdown_permille != 0 ? nlohmann::json(t.slowdown_permille / 1000.0) : nlohmann::json();
      if (t.slowdown_admission_permille != 0) {  // its admissions are marked (engine or timings): steps and admissions apart
        o["slowdown_step"] = t.slowdown_step_permille != 0 ? nlohmann::json(t.slowdown_step_permille / 1000.0) : nlohmann::json();
        o["slowdown_admission"] = t.slowdown_admission_permille / 1000.0;
        o["slowdown_binds"] = slower_phase(t);
      }
      o["be_share"] = t.be_share_permille / 1000.0;
      // In a spatial domain: MPS's cost its budget charges (measured from its kernels alone)
      if (t.mps_cost_permille != 0) o["mps_cost"] = t.mps_cost_permille / 1000.0;
      o["long_launches"] = t.long_launches;  // its own timings marked them long: nothing lent meanwhile
      // What held it unspent over the last probe period, or "spent" (null: not judged yet)
      o["budget_limit"] = t.budget_limit != 0 ? nlohmann::json(budget_limit_name(t.budget_limit)) : nlohmann::json();
    }
    if (t.pace_permille != 0) {  // paced now: its share of the GPU's time, its longest launch (null: any)
      o["pace_share"] = t.pace_permille / 1000.0;
      o["pace_max_kernel_us"] = t.pace_max_kernel_us != 0 ? nlohmann::json(t.pace_max_kernel_us) : nlohmann::json();
    }
    o["space_domain"] = std::string(t.space_domain, strnlen(t.space_domain, sizeof(t.space_domain)));
    o["space_sms"] = t.space_sms;
    o["space_mask"] = t.space_mask;
    o["space_active"] = t.space_active != 0;
    o["space_launches"] = t.space_launches;
    o["space_switches"] = t.space_switches;
    o["space_failures"] = t.space_failures;
    if (t.space_kernel_ns != 0) o["space_kernel_us"] = t.space_kernel_ns / 1000.0;  // mean, timed launches
    if (t.space_default_sms != 0) {  // being right-sized: the capacity it gave back
      o["space_default_sms"] = t.space_default_sms;
      o["space_saved_sms"] = t.space_default_sms > t.space_sms ? t.space_default_sms - t.space_sms : 0;
      if (t.space_sized_permille != 0) o["space_sized_latency"] = t.space_sized_permille / 1000.0;
    }
    o["alloc_calls"] = t.alloc_calls;
    o["alloc_failures"] = t.alloc_failures;
    o["registered_unix_ms"] = t.registered_unix_ms;
    o["exited_unix_ms"] = t.exited_unix_ms;
    o["swappable"] = t.swappable != 0;
    o["swap_state"] = swap_state_name(t.swap_state);
    o["swapped_bytes"] = t.swapped_bytes;
    o["swap_outs"] = t.swap_outs;
    o["swap_ins"] = t.swap_ins;
    o["swap_out_bytes"] = t.swap_out_bytes;
    o["swap_in_bytes"] = t.swap_in_bytes;
    o["swap_out_ns"] = t.swap_out_ns;
    o["swap_in_ns"] = t.swap_in_ns;
    o["max_swap_in_ns"] = t.max_swap_in_ns;
    o["mem_waits"] = t.mem_waits;
    o["mem_wait_ns"] = t.mem_wait_ns;
    j["tenants"].push_back(std::move(o));
  }
  return j;
}

std::string human_bytes(uint64_t b) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (b < 1024) return std::to_string(b) + " B";
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), v < 10 ? "%.2f %s" : (v < 100 ? "%.1f %s" : "%.0f %s"), v, kUnits[u]);
  return buf;
}

std::string partition_text(const gpuos_msg_tenant_info& t) {
  if (t.space_sms == 0) return "-";
  std::string sms = std::to_string(t.space_sms);
  if (t.space_default_sms != 0) sms += "/" + std::to_string(t.space_default_sms);
  return sms;
}

std::string budget_text(const gpuos_msg_tenant_info& t) {
  char b[48];
  if (t.max_slowdown_permille == 0 && t.pace_permille != 0) {  // a best-effort tenant paced beside one
    const int n = std::snprintf(b, sizeof(b), "paced %u%%", (t.pace_permille + 5) / 10);
    const uint32_t us = t.pace_max_kernel_us;
    if (us != 0 && us < 1000) std::snprintf(b + n, sizeof(b) - n, " <=%uus", us);
    if (us >= 1000) std::snprintf(b + n, sizeof(b) - n, " <=%.1fms", us / 1000.0);
    return b;
  }
  if (t.max_slowdown_permille == 0) return "-";
  const std::string measured = t.slowdown_permille == 0 ? "?" : [&] {
    char m[16];
    std::snprintf(m, sizeof(m), "%.2f", t.slowdown_permille / 1000.0);
    return std::string(m);
  }();
  std::snprintf(b, sizeof(b), "%s/%.2f be %u%%", measured.c_str(), t.max_slowdown_permille / 1000.0,
                (t.be_share_permille + 5) / 10);
  std::string text = b;
  // Its engine reports its phases: which of its steps (TPOT) and admissions (TTFT) is slower.
  if (t.slowdown_admission_permille != 0) text += std::string(" ") + slower_phase(t);
  // In a spatial domain: MPS's cost to it, which its budget sets aside before lending.
  if (t.mps_cost_permille != 0) text += " mps " + std::to_string((t.mps_cost_permille + 5) / 10) + "%";
  // Unspent: what held it (gpuosd's judgement over the last probe period).
  if (t.budget_limit != 0 && t.budget_limit != GPUOS_BUDGET_LIMIT_SPENT) {
    text += std::string(" held by ") + budget_limit_name(t.budget_limit);
  }
  return text;
}

uint64_t gate_wait_with_current_ns(const gpuos_msg_tenant_info& t) {
  const uint64_t current = uint64_t{t.gate_waiting_ms} * 1000000ull;
  return t.gate_wait_ns > UINT64_MAX - current ? UINT64_MAX : t.gate_wait_ns + current;
}

// A tenant's KV pools: resident bytes, and gpuosd's target for them ("12.0G/8.0G"; no target:
// "12.0G/-"); "-" without pools.
std::string kv_text(const gpuos_msg_tenant_info& t) {
  if (t.kv_reserved_bytes == 0 && t.kv_resident_bytes == 0) return "-";
  return human_bytes(t.kv_resident_bytes) + "/" + (t.kv_target_bytes != UINT64_MAX ? human_bytes(t.kv_target_bytes) : "-");
}

// A tenant's engine's batch slots as it reports them: in use/all, and "+N" requests waiting for
// one ("32/32 +5"); "-" when it reports none.
std::string slots_text(const gpuos_msg_tenant_info& t) {
  if (t.engine_slots_capacity == 0) return "-";
  std::string s = std::to_string(t.engine_slots_active) + "/" + std::to_string(t.engine_slots_capacity);
  if (t.kv_queue_depth != 0) s += " +" + std::to_string(t.kv_queue_depth);
  return s;
}

// "namespace/name" of a tenant's pod, its uid alone when only that is known, "-" for none.
std::string pod_text(const gpuos_msg_tenant_info& t) {
  const std::string ns = cstr(t.pod_namespace, sizeof(t.pod_namespace));
  const std::string name = cstr(t.pod_name, sizeof(t.pod_name));
  const std::string uid = cstr(t.pod_uid, sizeof(t.pod_uid));
  if (!name.empty()) return printable(ns + "/" + name);
  return uid.empty() ? "-" : "pod " + printable(uid);
}

std::string gpus_text(const Listing& l, const gpuos_msg_tenant_info& t) {
  std::string s;
  if (t.state != GPUOS_TENANT_EXITED) {
    for (const gpuos_msg_tenant_gpu& g : l.tenant_gpus) {
      if (g.tenant_id == t.tenant_id) s += (s.empty() ? "" : ",") + std::to_string(g.gpu);
    }
  }
  return s.empty() ? "-" : s;
}

std::string listing_table(const Listing& l) {
  std::string s;
  char line[1024];
  for (const auto& g : l.gpus) {
    std::snprintf(line, sizeof(line), "GPU %u: %s  %s  %u SMs  %s / %s used by gpuos tenants\n", g.index,
                  printable(cstr(g.name, sizeof(g.name))).c_str(), printable(gpu_uuid(g)).c_str(), g.sm_count,
                  human_bytes(g.used_mem_bytes).c_str(), human_bytes(g.total_mem_bytes).c_str());
    s += line;
  }
  if (l.gpus.empty()) s += "no GPUs known to gpuosd\n";
  // The KV column only when some tenant has KV pools, the POD column only when some tenant runs
  // in a Kubernetes pod.
  const bool kv = std::any_of(l.tenants.begin(), l.tenants.end(), [](const gpuos_msg_tenant_info& t) {
    return t.kv_reserved_bytes != 0 || t.kv_resident_bytes != 0;
  });
  const bool pods = std::any_of(l.tenants.begin(), l.tenants.end(), [](const gpuos_msg_tenant_info& t) {
    return cstr(t.pod_uid, sizeof(t.pod_uid)) != "";
  });
  // The SLOTS column only when some tenant's engine reports its batch slots.
  const bool slots = std::any_of(l.tenants.begin(), l.tenants.end(),
                                 [](const gpuos_msg_tenant_info& t) { return t.engine_slots_capacity != 0; });
  // The GPUS column only on a node with several GPUs.
  const bool several_gpus = l.gpus.size() > 1;
  // The columns after SMS, each padded but the last (no trailing blanks).
  auto tail = [&](const std::string& gpus_cell, const std::string& budget, const std::string& slots_cell,
                  const std::string& kv_cell, const std::string& pod) {
    std::vector<std::pair<std::string, int>> cols;
    if (several_gpus) cols.push_back({gpus_cell, 8});
    cols.push_back({budget, 18});
    if (slots) cols.push_back({slots_cell, 12});
    if (kv) cols.push_back({kv_cell, 20});
    if (pods) cols.push_back({pod, 0});
    std::string out;
    for (std::size_t i = 0; i < cols.size(); ++i) {
      out += cols[i].first;
      if (i + 1 < cols.size()) out += std::string(std::max<int>(1, cols[i].second + 1 - static_cast<int>(cols[i].first.size())), ' ');
    }
    return out;
  };
  const char* row_format = "%-5s %-8s %-20s %-12s %-12s %10s %8s %10s %10s %10s %8s %s\n";
  std::snprintf(line, sizeof(line), row_format, "ID", "PID", "NAME", "CLASS", "STATE", "LAUNCHES", "GRAPHS", "MEM",
                "PEAK", "GATE-WAIT", "SMS", tail("GPUS", "BUDGET", "SLOTS", "KV/TARGET", "POD").c_str());
  s += line;
  for (const auto& t : l.tenants) {
    const std::string sms = partition_text(t);
    // The name is the tenant's own choice: escaped, so it cannot drive the terminal.
    const std::string name = printable(cstr(t.name, sizeof(t.name)));
    std::snprintf(line, sizeof(line), row_format, std::to_string(t.tenant_id).c_str(), std::to_string(t.pid).c_str(),
                  name.c_str(), class_name(t.tenant_class), display_state(t).c_str(), std::to_string(t.launches).c_str(),
                  std::to_string(t.graph_launches).c_str(), human_bytes(t.mem_used_bytes).c_str(),
                  human_bytes(t.mem_peak_bytes).c_str(), duration(gate_wait_with_current_ns(t)).c_str(), sms.c_str(),
                  tail(several_gpus ? gpus_text(l, t) : "", budget_text(t), slots ? slots_text(t) : "",
                       kv ? kv_text(t) : "", pods ? pod_text(t) : "")
                      .c_str());
    s += line;
  }
  return s;
}

std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

std::string exe_dir() {
  std::string e = self_exe();
  std::size_t slash = e.find_last_of('/');
  return slash == std::string::npos ? "" : e.substr(0, slash);
}

}  // namespace gpuos::client
