#include "daemon/core.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/futex.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/ipc.h"
#include "daemon/config.h"
#include "daemon/clock.h"
#include "daemon/log.h"

namespace gpuos::daemon {
namespace {

template <typename T>
T load(const T& field) {
  return std::atomic_ref<T>(const_cast<T&>(field)).load(std::memory_order_relaxed);
}

template <typename Msg>
Outgoing encode(const Msg& m) {
  Outgoing o;
  o.bytes.resize(sizeof(Msg));
  std::memcpy(o.bytes.data(), &m, sizeof(Msg));
  return o;
}

void futex_wake_all(uint32_t* word) {
  // Shared (not FUTEX_PRIVATE_FLAG): tenants wait on the same page through their own mapping.
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

int create_control_block(uint32_t tenant_id, uint32_t tenant_class, uint64_t mem_quota_bytes,
                         uint32_t initial_gate, gpuos_control_block** out) {
  int fd = memfd_create("gpuos-tenant", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -errno;
  if (ftruncate(fd, sizeof(gpuos_control_block)) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  void* p = mmap(nullptr, sizeof(gpuos_control_block), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return -e;
  }
  // A tenant must not be able to shrink the file under the daemon's mapping (SIGBUS) or grow it.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    munmap(p, sizeof(gpuos_control_block));
    close(fd);
    return -e;
  }
  auto* cb = static_cast<gpuos_control_block*>(p);  // zero-filled by ftruncate
  cb->magic = GPUOS_ABI_MAGIC;
  cb->abi_version = GPUOS_ABI_VERSION;
  cb->size = sizeof(gpuos_control_block);
  cb->tenant_id = tenant_id;
  cb->tenant_class = tenant_class;
  cb->mem_quota_bytes = mem_quota_bytes;
  std::atomic_ref<uint32_t>(cb->daemon_alive).store(1, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(cb->gate).store(initial_gate, std::memory_order_release);
  *out = cb;
  return fd;
}

bool is_admin(uid_t peer_uid, uid_t daemon_uid, const std::vector<gid_t>& peer_groups,
              std::optional<gid_t> admin_gid) {
  if (peer_uid == 0 || peer_uid == daemon_uid) return true;
  if (admin_gid && std::find(peer_groups.begin(), peer_groups.end(), *admin_gid) != peer_groups.end()) {
    return true;
  }
  return false;
}

std::vector<gid_t> peer_groups(pid_t pid, uid_t uid, gid_t gid) {
  std::vector<gid_t> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  bool found = false;
  while (in && std::getline(in, line)) {
    bool is_gid = line.rfind("Gid:", 0) == 0;
    bool is_groups = line.rfind("Groups:", 0) == 0;
    if (!is_gid && !is_groups) continue;
    std::istringstream ss(line.substr(line.find(':') + 1));
    long long g;
    while (ss >> g) {
      if (g >= 0) out.push_back(static_cast<gid_t>(g));
    }
    if (is_groups) found = true;
  }
  if (found) return out;
  out.clear();
  out.push_back(gid);
  struct passwd pw;
  struct passwd* res = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) == 0 && res != nullptr) {
    int n = 64;
    std::vector<gid_t> groups(static_cast<std::size_t>(n));
    if (getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0 && n > 64) {
      groups.resize(static_cast<std::size_t>(n));
      getgrouplist(pw.pw_name, gid, groups.data(), &n);
    }
    groups.resize(static_cast<std::size_t>(std::max(n, 0)));
    out.insert(out.end(), groups.begin(), groups.end());
  }
  return out;
}

Core::Core(CoreOptions opts) : opts_(std::move(opts)) {
  if (!opts_.policy) opts_.policy = make_open_policy();
  if (opts_.gpus.size() > GPUOS_MAX_DEVICES) opts_.gpus.resize(GPUOS_MAX_DEVICES);
}

Core::~Core() {
  for (auto& [id, t] : tenants_) {
    munmap(t.cb, sizeof(gpuos_control_block));
    close(t.memfd);
  }
  for (auto& [uid, pool] : pools_) close(pool.fd);
}

template <typename F>
bool Core::guarded(const char* hook, F&& f) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    policy_failed(hook, e.what());
  } catch (...) {
    policy_failed(hook, "unknown exception");
  }
  return false;
}

uint64_t Core::now_ms() const {
  if (opts_.unix_ms) return opts_.unix_ms();
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000u + static_cast<uint64_t>(ts.tv_nsec) / 1000000u;
}

Outgoing Core::make_reply(uint32_t type, uint32_t seq, gpuos_status status, uint32_t count, const char* text) {
  gpuos_msg_reply r{};
  init_header(&r.hdr, static_cast<gpuos_msg_type>(type), sizeof(r), seq);
  r.status = status;
  r.count = count;
  copy_name(r.text, sizeof(r.text), text);
  return encode(r);
}

Outcome Core::refuse(uint32_t seq, gpuos_status st, const char* why) {
  Outcome o;
  o.replies.push_back(make_reply(GPUOS_MSG_REPLY, seq, st, 0, why));
  o.close = true;
  return o;
}

Outcome Core::refuse_register(uint32_t seq, gpuos_status st, const char* why) {
  gpuos_msg_register_reply r{};
  init_header(&r.hdr, GPUOS_MSG_REGISTER_REPLY, sizeof(r), seq);
  r.status = st;
  r.control_block_size = sizeof(gpuos_control_block);
  copy_name(r.text, sizeof(r.text), why);
  Outcome o;
  o.replies.push_back(encode(r));
  o.close = true;
  return o;
}

Outcome Core::handle_receive_error(Connection& conn, long neg_errno) {
  char why[GPUOS_TEXT_MAX];
  if (neg_errno == -EMSGSIZE) {
    std::snprintf(why, sizeof(why), "datagram larger than %u bytes", GPUOS_MSG_MAX_SIZE);
  } else {
    std::snprintf(why, sizeof(why), "receive failed: %s", std::strerror(static_cast<int>(-neg_errno)));
  }
  log::debug("connection %llu (pid %d): %s", static_cast<unsigned long long>(conn.id),
             static_cast<int>(conn.peer.pid), why);
  ++stats_.bad_messages;
  return refuse(0, GPUOS_ERR_BAD_MESSAGE, why);
}

Outcome Core::handle_message(Connection& conn, const void* data, std::size_t len) {
  char why[GPUOS_TEXT_MAX];
  uint32_t seq = 0;
  if (len >= sizeof(gpuos_msg_header)) {
    gpuos_msg_header h;
    std::memcpy(&h, data, sizeof(h));
    seq = h.seq;
  }
  gpuos_status st = validate_message(data, len, why, sizeof(why));
  if (st != GPUOS_OK) {
    log::debug("connection %llu (pid %d): invalid message: %s", static_cast<unsigned long long>(conn.id),
               static_cast<int>(conn.peer.pid), why);
    ++stats_.bad_messages;
    return refuse(seq, st, why);
  }
  gpuos_msg_header h;
  std::memcpy(&h, data, sizeof(h));
  if (h.type <= GPUOS_MSG_TYPE_MAX) ++stats_.messages[h.type];
  // Copy into properly aligned structs (the buffer may be anything).
  switch (h.type) {
    case GPUOS_MSG_REGISTER: {
      gpuos_msg_register m;
      std::memcpy(&m, data, sizeof(m));
      return on_register(conn, m);
    }
    case GPUOS_MSG_LIST: {
      gpuos_msg_list m;
      std::memcpy(&m, data, sizeof(m));
      return on_list(conn, m);
    }
    case GPUOS_MSG_SET_GATE: {
      gpuos_msg_set_gate m;
      std::memcpy(&m, data, sizeof(m));
      return on_set_gate(conn, m);
    }
    case GPUOS_MSG_SHUTDOWN:
      return on_shutdown(conn, h);
    case GPUOS_MSG_ACTIVITY: {
      gpuos_msg_activity m;
      std::memcpy(&m, data, sizeof(m));
      return on_activity(conn, m);
    }
    case GPUOS_MSG_SWAP_POOL:
      return on_swap_pool(conn, h);
    default:
      std::snprintf(why, sizeof(why), "message type %u is sent by the daemon, not to it",
                    static_cast<unsigned>(h.type));
      ++stats_.bad_messages;
      return refuse(seq, GPUOS_ERR_BAD_MESSAGE, why);
  }
}

Outcome Core::on_register(Connection& conn, const gpuos_msg_register& m) {
  char why[GPUOS_TEXT_MAX];
  const uint32_t seq = m.hdr.seq;
  if (conn.tenant_id != 0) {
    return refuse_register(seq, GPUOS_ERR_BAD_MESSAGE, "this connection already registered a tenant");
  }
  if (!has_nul(m.name, sizeof(m.name))) return refuse_register(seq, GPUOS_ERR_BAD_MESSAGE, "name is not NUL-terminated");
  if (!has_nul(m.space_domain, sizeof(m.space_domain))) {
    return refuse_register(seq, GPUOS_ERR_BAD_MESSAGE, "space_domain is not NUL-terminated");
  }
  if (m.tenant_class != GPUOS_CLASS_GUARANTEED && m.tenant_class != GPUOS_CLASS_BEST_EFFORT) {
    std::snprintf(why, sizeof(why), "unknown tenant class %u", m.tenant_class);
    return refuse_register(seq, GPUOS_ERR_BAD_MESSAGE, why);
  }
  if (m.weight < 1 || m.weight > 10000) {
    std::snprintf(why, sizeof(why), "weight %u out of range 1..10000", m.weight);
    return refuse_register(seq, GPUOS_ERR_BAD_MESSAGE, why);
  }
  if (m.pid != conn.peer.pid) {
    std::snprintf(why, sizeof(why), "pid %d does not match the socket peer (pid %d)", m.pid,
                  static_cast<int>(conn.peer.pid));
    log::warn("refused registration: %s", why);
    return refuse_register(seq, GPUOS_ERR_PERMISSION, why);
  }
  if (tenants_.size() >= opts_.max_tenants) {
    std::snprintf(why, sizeof(why), "tenant table full (max_tenants = %u)", opts_.max_tenants);
    log::warn("refused registration of pid %d: %s", m.pid, why);
    return refuse_register(seq, GPUOS_ERR_LIMIT, why);
  }

  Tenant t;
  t.id = next_id_;
  // Re-registration after a daemon restart: keep the id the tenant had if this daemon never used
  // it (not live, not in the history), so ps, metrics and admins keep seeing the same tenant.
  if (const uint32_t prev = m.previous_tenant_id; prev != 0 && tenants_.count(prev) == 0 &&
      std::none_of(history_.begin(), history_.end(), [&](const gpuos_msg_tenant_info& h) { return h.tenant_id == prev; }) &&
      prev >= next_id_ && prev < 0x80000000u) {  // (bounded: a lying tenant cannot wrap the ids)
    t.id = prev;
  }
  while (tenants_.count(t.id) != 0 || t.id == 0) ++t.id;  // never two live tenants with one id
  t.pid = m.pid;
  t.uid = conn.peer.uid;
  t.tenant_class = m.tenant_class;
  t.priority = m.priority;
  t.weight = m.weight;
  t.requested_mem_bytes = m.requested_mem_bytes;
  copy_name(t.name, sizeof(t.name), m.name);
  if (m.space_domain[0] != '\0') {
    // Spatial sharing is only among tenants of one trust domain (MPS gives no fault isolation):
    // the config says who may join. A tenant that may not is admitted, time-shared.
    std::string no = opts_.space_admit ? opts_.space_admit(m.space_domain, conn.peer)
                                       : std::string("no spatial domains are configured");
    if (no.empty()) {
      copy_name(t.space_domain, sizeof(t.space_domain), m.space_domain);
      t.space_sms = m.space_sms;
    } else {
      log::warn("pid %d (%s) asked for spatial domain \"%s\": %s; admitted time-shared", m.pid, t.name,
                m.space_domain, no.c_str());
    }
  }

  if (m.tenant_class == GPUOS_CLASS_GUARANTEED && opts_.guaranteed_needs_admin && !conn.peer.admin) {
    // A tenant never raises its own class: guaranteed is granted to admins only.
    log::warn("pid %d (%s, uid %u) asked for guaranteed; admitted as best-effort (not an admin)", m.pid,
              t.name, static_cast<unsigned>(conn.peer.uid));
    t.tenant_class = GPUOS_CLASS_BEST_EFFORT;
  }
  Admission prefilled;
  prefilled.granted_class = t.tenant_class;
  prefilled.mem_quota_bytes = m.requested_mem_bytes;
  prefilled.mem_borrow_bytes = m.requested_borrow_bytes;
  const uint64_t cap = opts_.mem_quota_cap_bytes;
  // A tenant never grants itself more memory than the config allows: for a non-admin, quota and
  // borrowable bytes together stay within the cap.
  auto apply_cap = [&](Admission& a) {
    if (cap == 0 || conn.peer.admin) return;
    if (a.mem_quota_bytes == 0 || a.mem_quota_bytes > cap) a.mem_quota_bytes = cap;
    a.mem_borrow_bytes = std::min(a.mem_borrow_bytes, cap - a.mem_quota_bytes);
  };
  apply_cap(prefilled);
  Admission adm = prefilled;
  if (!guarded("on_register", [&] { opts_.policy->on_register(view(t), &adm); })) adm = prefilled;
  if (adm.status != GPUOS_OK) {
    std::snprintf(why, sizeof(why), "refused by policy %s: %s", opts_.policy->name(), adm.reason.c_str());
    log::info("registration of pid %d (%s): %s", m.pid, t.name, why);
    return refuse_register(seq, adm.status, why);
  }
  // Lower only: GUARANTEED(1) is above BEST_EFFORT(2).
  if (adm.granted_class == GPUOS_CLASS_GUARANTEED || adm.granted_class == GPUOS_CLASS_BEST_EFFORT) {
    if (!(t.tenant_class == GPUOS_CLASS_BEST_EFFORT && adm.granted_class == GPUOS_CLASS_GUARANTEED)) {
      t.tenant_class = adm.granted_class;
    }
  }
  apply_cap(adm);
  if (adm.mem_quota_bytes == 0) adm.mem_borrow_bytes = 0;  // borrowing is on top of a quota
  if (adm.mem_borrow_bytes > UINT64_MAX - adm.mem_quota_bytes) adm.mem_borrow_bytes = UINT64_MAX - adm.mem_quota_bytes;
  uint32_t gate = adm.initial_gate == GPUOS_GATE_CLOSED ? GPUOS_GATE_CLOSED : GPUOS_GATE_OPEN;

  int fd = create_control_block(t.id, t.tenant_class, adm.mem_quota_bytes, gate, &t.cb);
  if (fd < 0) {
    std::snprintf(why, sizeof(why), "cannot create control block: %s", std::strerror(-fd));
    log::error("registration of pid %d: %s", m.pid, why);
    return refuse_register(seq, GPUOS_ERR_INTERNAL, why);
  }
  std::atomic_ref<uint32_t>(t.cb->max_inflight).store(adm.max_inflight, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(t.cb->idle_grace_us).store(adm.idle_grace_us, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(t.cb->mem_borrow_bytes).store(adm.mem_borrow_bytes, std::memory_order_relaxed);
  if (t.space_domain[0] != '\0') {
    std::atomic_ref<uint32_t>(t.cb->space_group_sms).store(opts_.space.group_sms, std::memory_order_relaxed);
    std::atomic_ref<uint32_t>(t.cb->space_enabled).store(1, std::memory_order_release);
  }
  t.memfd = fd;
  t.policy_gate = gate;
  t.registered_unix_ms = now_ms();
  t.obs_ns = now_mono_ns();
  t.resident_since_ns = t.obs_ns;
  ++stats_.tenants_registered;
  if (t.id >= next_id_) next_id_ = t.id + 1;
  if (next_id_ == 0) next_id_ = 1;
  conn.tenant_id = t.id;

  gpuos_msg_register_reply r{};
  init_header(&r.hdr, GPUOS_MSG_REGISTER_REPLY, sizeof(r), seq);
  r.status = GPUOS_OK;
  r.tenant_id = t.id;
  r.control_block_size = sizeof(gpuos_control_block);
  r.tenant_class = t.tenant_class;
  copy_name(r.text, sizeof(r.text),
            m.space_domain[0] != '\0' && t.space_domain[0] == '\0' ? "registered (time-shared: spatial domain refused)"
                                                                  : "registered");
  Outcome o;
  o.replies.push_back(encode(r));
  o.replies.back().fd = fd;
  o.registered = t.id;

  log::info("tenant %u registered: pid %d uid %u name \"%s\" class %s priority %d weight %u gate %s "
            "max_inflight %u idle_grace_us %u%s%s",
            t.id, t.pid, static_cast<unsigned>(t.uid), t.name, class_name(t.tenant_class), t.priority, t.weight,
            gate == GPUOS_GATE_OPEN ? "open" : "closed", adm.max_inflight, adm.idle_grace_us,
            t.space_domain[0] ? " space_domain " : "", t.space_domain);
  auto it = tenants_.emplace(t.id, t).first;  // (no structured binding: clang 14 cannot capture one)
  guarded("on_admitted", [&] { opts_.policy->on_admitted(view(it->second), *this); });
  run_space();
  return o;
}

gpuos_msg_tenant_info Core::snapshot(const Tenant& t, uint32_t state, uint64_t exited_ms) const {
  gpuos_msg_tenant_info i{};
  init_header(&i.hdr, GPUOS_MSG_TENANT_INFO, sizeof(i), 0);
  const gpuos_control_block& cb = *t.cb;
  i.tenant_id = t.id;
  i.pid = t.pid;
  i.uid = t.uid;
  i.tenant_class = t.tenant_class;
  i.state = state;
  i.priority = t.priority;
  i.weight = t.weight;
  copy_name(i.name, sizeof(i.name), t.name);
  i.launches = load(cb.launches);
  i.graph_launches = load(cb.graph_launches);
  i.captured_launches = load(cb.captured_launches);
  i.gate_waits = load(cb.gate_waits);
  i.gate_wait_ns = load(cb.gate_wait_ns);
  i.mem_used_bytes = load(cb.mem_used_bytes);
  i.mem_peak_bytes = load(cb.mem_peak_bytes);
  i.mem_quota_bytes = load(cb.mem_quota_bytes);
  i.alloc_calls = load(cb.alloc_calls);
  i.alloc_failures = load(cb.alloc_failures);
  i.registered_unix_ms = t.registered_unix_ms;
  i.exited_unix_ms = exited_ms;
  i.swappable = load(cb.swappable);
  i.swap_state = load(cb.swap_state);
  i.swapped_bytes = load(cb.swapped_bytes);
  i.swap_outs = load(cb.swap_outs);
  i.swap_ins = load(cb.swap_ins);
  i.swap_out_bytes = load(cb.swap_out_bytes);
  i.swap_in_bytes = load(cb.swap_in_bytes);
  i.swap_out_ns = load(cb.swap_out_ns);
  i.swap_in_ns = load(cb.swap_in_ns);
  i.max_swap_in_ns = load(cb.max_swap_in_ns);
  i.mem_waits = load(cb.mem_waits);
  i.mem_wait_ns = load(cb.mem_wait_ns);
  i.mem_borrow_bytes = load(cb.mem_borrow_bytes);
  i.mem_imported_bytes = load(cb.mem_imported_bytes);
  copy_name(i.space_domain, sizeof(i.space_domain), t.space_domain);
  const uint32_t home = home_gpu(t);
  const int home_ordinal = ordinal_of(t, home);
  i.space_mask = home_ordinal >= 0 ? load(cb.space_mask[home_ordinal]) : 0;
  for (const GpuInfo& g : opts_.gpus) {
    if (g.index == home) i.space_sms = space_mask_sms(i.space_mask, SpaceGpu{g.index, g.sm_count, g.sm_groups},
                                                      opts_.space.group_sms);
  }
  i.space_active = load(cb.space_active);
  i.space_launches = load(cb.space_launches);
  i.space_switches = load(cb.space_switches);
  i.space_failures = load(cb.space_failures);
  if (const uint64_t kernels = load(cb.space_timed_kernels); kernels != 0) {
    i.space_kernel_ns = static_cast<uint32_t>(std::min<uint64_t>(load(cb.space_timed_ns) / kernels, UINT32_MAX));
  }
  if (t.space_sized_sms != 0 && t.space_sms == 0) {
    i.space_default_sms = t.space_default_sms;
    i.space_sized_permille = static_cast<uint32_t>(std::lround(std::clamp(t.space_sized_latency, 0.0, 1e6) * 1000));
  }
  return i;
}

Outcome Core::on_list(Connection& conn, const gpuos_msg_list& m) {
  if ((m.flags & ~GPUOS_LIST_INCLUDE_EXITED) != 0) {
    char why[GPUOS_TEXT_MAX];
    std::snprintf(why, sizeof(why), "unknown LIST flags 0x%x", m.flags);
    return refuse(m.hdr.seq, GPUOS_ERR_BAD_MESSAGE, why);
  }
  Outcome o;
  const uint32_t seq = m.hdr.seq;
  for (const GpuInfo& g : opts_.gpus) {
    gpuos_msg_gpu_info gi{};
    init_header(&gi.hdr, GPUOS_MSG_GPU_INFO, sizeof(gi), seq);
    gi.index = g.index;
    gi.sm_count = g.sm_count;
    gi.total_mem_bytes = g.total_mem_bytes;
    uint64_t used = 0;
    if (g.index < GPUOS_MAX_DEVICES) {
      for (const auto& [id, t] : tenants_) used += used_on_gpu(t, g.index);
    }
    gi.used_mem_bytes = used;
    copy_name(gi.name, sizeof(gi.name), g.name.c_str());
    // gpuos_msg_gpu_info::uuid (40 bytes) cannot hold "GPU-" + 36 + NUL: it carries the bare 36-char
    // UUID and clients print the "GPU-" prefix.
    const char* uuid = g.uuid.c_str();
    if (g.uuid.rfind("GPU-", 0) == 0) uuid += 4;
    copy_name(gi.uuid, sizeof(gi.uuid), uuid);
    o.replies.push_back(encode(gi));
  }
  uint32_t count = 0;
  if (m.flags & GPUOS_LIST_INCLUDE_EXITED) {
    for (gpuos_msg_tenant_info i : history_) {
      i.hdr.seq = seq;
      o.replies.push_back(encode(i));
      ++count;
    }
  }
  for (const auto& [id, t] : tenants_) {
    uint32_t gate = std::atomic_ref<uint32_t>(t.cb->gate).load(std::memory_order_acquire);
    gpuos_msg_tenant_info i =
        snapshot(t, gate == GPUOS_GATE_OPEN ? GPUOS_TENANT_RUNNING : GPUOS_TENANT_GATED, 0);
    i.hdr.seq = seq;
    o.replies.push_back(encode(i));
    ++count;
  }
  o.replies.push_back(make_reply(GPUOS_MSG_LIST_END, seq, GPUOS_OK, count, "end"));
  return o;
}

void Core::write_gate(gpuos_control_block* cb, uint32_t gate) {
  if (std::atomic_ref<uint32_t>(cb->gate).load(std::memory_order_relaxed) == gate) return;
  std::atomic_ref<uint32_t>(cb->grant_epoch).fetch_add(1, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(cb->gate).store(gate, std::memory_order_release);
  futex_wake_all(&cb->gate);
}

gpuos_status Core::set_gate(uint32_t tenant_id, uint32_t gate) {
  if (gate != GPUOS_GATE_OPEN && gate != GPUOS_GATE_CLOSED) return GPUOS_ERR_BAD_MESSAGE;
  auto it = tenants_.find(tenant_id);
  if (it == tenants_.end()) return GPUOS_ERR_NOT_FOUND;
  Tenant& t = it->second;
  if (t.pinned) return GPUOS_ERR_REFUSED;
  t.policy_gate = gate;
  if (!t.held) write_gate(t.cb, gate);  // a held gate opens when the memory is back
  return GPUOS_OK;
}

gpuos_status Core::admin_set_gate(uint32_t tenant_id, uint32_t gate) {
  if (gate != GPUOS_GATE_OPEN && gate != GPUOS_GATE_CLOSED) return GPUOS_ERR_BAD_MESSAGE;
  auto it = tenants_.find(tenant_id);
  if (it == tenants_.end()) return GPUOS_ERR_NOT_FOUND;
  Tenant& t = it->second;
  t.pinned = gate == GPUOS_GATE_CLOSED;
  if (!t.pinned) t.policy_gate = GPUOS_GATE_OPEN;
  write_gate(t.cb, t.held ? GPUOS_GATE_CLOSED : gate);
  if (!t.pinned) {
    // The pin is gone: the policy decides about this tenant again now, not at its next event.
    guarded("on_activity", [&] { opts_.policy->on_activity(view(t), *this, now_mono_ns()); });
  }
  return GPUOS_OK;
}

bool Core::pinned(uint32_t tenant_id) const {
  auto it = tenants_.find(tenant_id);
  return it != tenants_.end() && it->second.pinned;
}

void Core::for_each_tenant(const std::function<void(const TenantView&)>& fn) {
  for (const auto& [id, t] : tenants_) fn(view(t));
}

uint64_t Core::now_mono_ns() {
  if (opts_.mono_ns) return opts_.mono_ns();
  return monotonic_ns();
}

void Core::policy_failed(const char* hook, const char* what) {
  ++policy_failures_;
  log::error("policy \"%s\" threw in %s: %s; switching to the built-in open policy (failure %llu)",
             opts_.policy->name(), hook, what, static_cast<unsigned long long>(policy_failures_));
  opts_.policy = make_open_policy();
  for (auto& [id, t] : tenants_) {
    std::atomic_ref<uint32_t>(t.cb->max_inflight).store(0, std::memory_order_relaxed);
    t.policy_gate = GPUOS_GATE_OPEN;
    if (!t.pinned && !t.held) write_gate(t.cb, GPUOS_GATE_OPEN);
  }
}

Outcome Core::on_set_gate(Connection& conn, const gpuos_msg_set_gate& m) {
  char why[GPUOS_TEXT_MAX];
  if (!conn.peer.admin) {
    std::snprintf(why, sizeof(why), "SET_GATE needs an admin (uid %u is not)", static_cast<unsigned>(conn.peer.uid));
    log::warn("refused: %s", why);
    return refuse(m.hdr.seq, GPUOS_ERR_PERMISSION, why);
  }
  gpuos_status st = admin_set_gate(m.tenant_id, m.gate);
  if (st == GPUOS_ERR_BAD_MESSAGE) {
    std::snprintf(why, sizeof(why), "gate value %u is neither open (0) nor closed (1)", m.gate);
    return refuse(m.hdr.seq, st, why);
  }
  if (st == GPUOS_ERR_NOT_FOUND) {
    std::snprintf(why, sizeof(why), "no live tenant %u", m.tenant_id);
    return refuse(m.hdr.seq, st, why);
  }
  log::info("tenant %u gate %s by uid %u", m.tenant_id,
            m.gate == GPUOS_GATE_OPEN ? "opened (admin pin released; the policy decides again)"
                                      : "closed and pinned (policies leave it closed until an admin opens it)",
            static_cast<unsigned>(conn.peer.uid));
  Outcome o;
  o.replies.push_back(make_reply(GPUOS_MSG_REPLY, m.hdr.seq, GPUOS_OK, 0,
                                 m.gate == GPUOS_GATE_OPEN ? "gate open" : "gate closed"));
  return o;
}

Outcome Core::on_shutdown(Connection& conn, const gpuos_msg_header& h) {
  if (!conn.peer.admin) {
    char why[GPUOS_TEXT_MAX];
    std::snprintf(why, sizeof(why), "SHUTDOWN needs an admin (uid %u is not)", static_cast<unsigned>(conn.peer.uid));
    log::warn("refused: %s", why);
    return refuse(h.seq, GPUOS_ERR_PERMISSION, why);
  }
  log::info("shutdown requested by pid %d uid %u", static_cast<int>(conn.peer.pid),
            static_cast<unsigned>(conn.peer.uid));
  Outcome o;
  o.replies.push_back(make_reply(GPUOS_MSG_REPLY, h.seq, GPUOS_OK, 0, "shutting down"));
  o.close = true;
  o.shutdown = true;
  return o;
}

Outcome Core::on_activity(Connection& conn, const gpuos_msg_activity& m) {
  char why[GPUOS_TEXT_MAX];
  if (conn.tenant_id == 0) {
    std::snprintf(why, sizeof(why), "ACTIVITY is accepted only on the connection that registered a tenant");
    log::warn("refused from pid %d: %s", static_cast<int>(conn.peer.pid), why);
    return refuse(m.hdr.seq, GPUOS_ERR_PERMISSION, why);
  }
  if (m.busy > 1 || m.waiting > 1) {
    std::snprintf(why, sizeof(why), "ACTIVITY busy %u / waiting %u: each must be 0 or 1", m.busy, m.waiting);
    log::warn("tenant %u: %s", conn.tenant_id, why);
    return refuse(m.hdr.seq, GPUOS_ERR_BAD_MESSAGE, why);
  }
  auto it = tenants_.find(conn.tenant_id);
  if (it == tenants_.end()) return Outcome{};  // cannot happen: connection_closed clears tenant_id
  observe_busy(it->second, now_mono_ns());
  observe_gpus(now_mono_ns());
  const Tenant& t = it->second;
  TenantView v = view(t);
  log::debug("tenant %u activity: busy %u waiting %u (block: busy %d waiting %d)", t.id, m.busy, m.waiting,
             v.busy ? 1 : 0, v.waiting ? 1 : 0);
  guarded("on_activity", [&] { opts_.policy->on_activity(v, *this, now_mono_ns()); });
  run_space();
  run_swaps(now_mono_ns());
  return Outcome{};  // no reply: the tenant never reads one
}

TenantView Core::view(const Tenant& t) const {
  TenantView v;
  v.id = t.id;
  v.pid = t.pid;
  v.uid = t.uid;
  v.name = t.name;
  v.tenant_class = t.tenant_class;
  v.priority = t.priority;
  v.weight = t.weight;
  v.requested_mem_bytes = t.requested_mem_bytes;
  v.space_domain = t.space_domain;
  if (t.cb != nullptr) {
    v.busy = load(t.cb->busy) != 0;
    v.waiting = load(t.cb->waiting) != 0;
    v.signalled = load(t.cb->signalled) != 0;
    v.gate = std::atomic_ref<uint32_t>(t.cb->gate).load(std::memory_order_acquire);
  }
  v.pinned = t.pinned;
  return v;
}

void Core::connection_closed(Connection& conn) {
  if (conn.tenant_id == 0) return;
  auto it = tenants_.find(conn.tenant_id);
  conn.tenant_id = 0;
  if (it == tenants_.end()) return;
  observe_busy(it->second, now_mono_ns());
  Tenant t = it->second;
  tenants_.erase(it);
  observe_gpus(now_mono_ns());
  ++stats_.tenants_exited;
  gpuos_msg_tenant_info fin = snapshot(t, GPUOS_TENANT_EXITED, now_ms());
  if (opts_.history > 0) {
    history_.push_back(fin);
    while (history_.size() > opts_.history) history_.pop_front();
  }
  TenantView gone = view(t);  // the last busy/waiting words, before the block goes away
  free_slices(t);
  for (auto& [oid, o] : tenants_) {
    if (load(o.cb->mem_request_seq) != o.room_answered_seq) o.room_made = true;  // its memory is free now
  }
  char space[96] = "";  // placed launches, and those that followed the one before directly (spatial.h)
  if (fin.space_launches != 0) {
    std::snprintf(space, sizeof space, " space_launches %llu space_joins_skipped %llu",
                  static_cast<unsigned long long>(fin.space_launches),
                  static_cast<unsigned long long>(load(t.cb->space_joins_skipped)));
  }
  munmap(t.cb, sizeof(gpuos_control_block));
  close(t.memfd);
  t.cb = nullptr;
  log::info(
      "tenant %u exited: pid %d name \"%s\" launches %llu graph_launches %llu captured %llu gate_waits %llu "
      "gate_wait_ms %.3f mem_peak_bytes %llu alloc_calls %llu alloc_failures %llu%s",
      fin.tenant_id, fin.pid, fin.name, static_cast<unsigned long long>(fin.launches),
      static_cast<unsigned long long>(fin.graph_launches), static_cast<unsigned long long>(fin.captured_launches),
      static_cast<unsigned long long>(fin.gate_waits), static_cast<double>(fin.gate_wait_ns) / 1e6,
      static_cast<unsigned long long>(fin.mem_peak_bytes), static_cast<unsigned long long>(fin.alloc_calls),
      static_cast<unsigned long long>(fin.alloc_failures), space);
  guarded("on_exit", [&] { opts_.policy->on_exit(gone, *this); });
  run_space();
  run_swaps(now_mono_ns());
}

void Core::shutdown() {
  for (auto& [id, t] : tenants_) {
    std::atomic_ref<uint32_t>(t.cb->daemon_alive).store(0, std::memory_order_release);
    std::atomic_ref<uint32_t>(t.cb->grant_epoch).fetch_add(1, std::memory_order_relaxed);
    // A held tenant's memory is out or moving: it opens its gate itself once the memory is back.
    if (!t.held) std::atomic_ref<uint32_t>(t.cb->gate).store(GPUOS_GATE_OPEN, std::memory_order_release);
    futex_wake_all(&t.cb->gate);
  }
}

void Core::tick(uint64_t now_mono_ns) {
  for (auto& [id, t] : tenants_) observe_busy(t, now_mono_ns);
  observe_gpus(now_mono_ns);
  guarded("tick", [&] { opts_.policy->tick(now_mono_ns, *this); });
  run_space();
  run_swaps(now_mono_ns);
}

uint64_t Core::next_tick_ns(uint64_t now_mono_ns) {
  uint64_t next = 0;
  guarded("next_tick_ns", [&] { next = opts_.policy->next_tick_ns(now_mono_ns); });
  if (space_replan_at_ns_ != 0 && (next == 0 || space_replan_at_ns_ < next)) next = space_replan_at_ns_;
  return next;
}

const gpuos_control_block* Core::control_block(uint32_t tenant_id) const {
  auto it = tenants_.find(tenant_id);
  return it == tenants_.end() ? nullptr : it->second.cb;
}

void Core::observe_busy(Tenant& t, uint64_t now) {
  if (t.cb == nullptr) return;
  if (now > t.obs_ns && t.obs_busy) t.busy_ns += now - t.obs_ns;
  if (now >= t.obs_ns) t.obs_ns = now;
  t.obs_busy = load(t.cb->busy) != 0;
}

std::vector<TenantStat> Core::tenant_stats(uint64_t now_mono_ns) {
  std::vector<TenantStat> out;
  out.reserve(tenants_.size());
  for (auto& [id, t] : tenants_) {
    observe_busy(t, now_mono_ns);
    uint32_t gate = std::atomic_ref<uint32_t>(t.cb->gate).load(std::memory_order_acquire);
    TenantStat st;
    st.info = snapshot(t, gate == GPUOS_GATE_OPEN ? GPUOS_TENANT_RUNNING : GPUOS_TENANT_GATED, 0);
    st.busy = t.obs_busy;
    st.waiting = load(t.cb->waiting) != 0;
    st.busy_ns = t.busy_ns;
    for (int i = 0; i < GPUOS_GATE_WAIT_BUCKETS; ++i) st.gate_wait_hist[i] = load(t.cb->gate_wait_hist[i]);
    for (uint32_t g = 0; g < GPUOS_MAX_DEVICES; ++g) st.mem_used_per_device[g] = used_on_gpu(t, g);
    out.push_back(st);
  }
  observe_gpus(now_mono_ns);
  return out;
}

void Core::observe_gpus(uint64_t now) {
  if (gpu_busy_.empty()) gpu_busy_.resize(std::max<std::size_t>(1, std::min<std::size_t>(opts_.gpus.size(), GPUOS_MAX_DEVICES)));
  for (std::size_t g = 0; g < gpu_busy_.size(); ++g) {
    GpuBusy& b = gpu_busy_[g];
    if (now > b.obs_ns && b.busy) b.busy_ns += now - b.obs_ns;
    if (now >= b.obs_ns) b.obs_ns = now;
    b.busy = false;
    for (const auto& [id, t] : tenants_) {
      if (!t.obs_busy) continue;
      bool holds_any = false;
      for (int d = 0; d < GPUOS_MAX_DEVICES && !holds_any; ++d) holds_any = load(t.cb->mem_used_per_device[d]) != 0;
      if (holds_any ? used_on_gpu(t, static_cast<uint32_t>(g)) != 0 : g == 0) {
        b.busy = true;
        break;
      }
    }
  }
}

uint64_t Core::gpu_busy_ns(uint32_t index) const {
  return index < gpu_busy_.size() ? gpu_busy_[index].busy_ns : 0;
}

uint64_t Core::gpu_used_bytes(uint32_t index) const {
  uint64_t used = 0;
  if (index >= GPUOS_MAX_DEVICES) return 0;
  for (const auto& [id, t] : tenants_) used += used_on_gpu(t, index);
  return used;
}

Outcome Core::on_swap_pool(Connection& conn, const gpuos_msg_header& h) {
  if (conn.tenant_id == 0) {
    return refuse(h.seq, GPUOS_ERR_PERMISSION, "SWAP_POOL is accepted only on the connection that registered a tenant");
  }
  gpuos_msg_swap_pool_reply r{};
  init_header(&r.hdr, GPUOS_MSG_SWAP_POOL_REPLY, sizeof(r), h.seq);
  Outcome o;
  auto it = tenants_.find(conn.tenant_id);
  if (opts_.swap_pool_bytes == 0 || it == tenants_.end()) {
    r.status = GPUOS_ERR_REFUSED;  // swapping is off: the tenant's memory stays resident
    o.replies.push_back(encode(r));
    return o;
  }
  SwapPool& pool = pools_[it->second.uid];
  if (pool.fd < 0) {
    int fd = memfd_create("gpuos-swap-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    // Sparse until used; sealed so that no tenant can shrink it under the others (SIGBUS).
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(opts_.swap_pool_bytes)) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      log::error("cannot create a %llu-byte swap pool: %s", static_cast<unsigned long long>(opts_.swap_pool_bytes),
                 std::strerror(errno));
      if (fd >= 0) close(fd);
      pools_.erase(it->second.uid);
      r.status = GPUOS_ERR_INTERNAL;
      o.replies.push_back(encode(r));
      return o;
    }
    pool.fd = fd;
    pool.space = std::make_unique<SwapSpace>(opts_.swap_pool_bytes);
    // Allocate the pool's pages now, off the event loop: the tenant that pins the pool would
    // otherwise fault them in (zero-filled) one by one, several times slower.
    if (int fd2 = opts_.swap_prefault ? dup(fd) : -1; fd2 >= 0) {
      const off_t len = static_cast<off_t>(opts_.swap_pool_bytes);
      std::thread([fd2, len] {
        if (fallocate(fd2, 0, 0, len) != 0) log::warn("swap pool: fallocate: %s", std::strerror(errno));
        close(fd2);
      }).detach();
    }
    log::info("swap pool of %llu MiB created for uid %u", static_cast<unsigned long long>(opts_.swap_pool_bytes >> 20),
              static_cast<unsigned>(it->second.uid));
  }
  r.status = GPUOS_OK;
  r.pool_bytes = pool.space->size();
  o.replies.push_back(encode(r));
  o.replies.back().fd = pool.fd;
  return o;
}

void Core::hold_gate(Tenant& t) {
  t.held = true;
  write_gate(t.cb, GPUOS_GATE_CLOSED);
}

void Core::release_gate(Tenant& t) {
  t.held = false;
  write_gate(t.cb, t.pinned ? GPUOS_GATE_CLOSED : t.policy_gate);
}

void Core::send_swap_command(Tenant& t, uint32_t cmd) {
  std::atomic_ref<uint32_t>(t.cb->swap_command).store(cmd, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(t.cb->swap_command_seq).fetch_add(1, std::memory_order_release);
  futex_wake_all(&t.cb->swap_command_seq);
  t.swap_cmd = cmd;
}

void Core::answer_room(Tenant& t, uint32_t answer) {
  const uint32_t seq = load(t.cb->mem_request_seq);
  std::atomic_ref<uint32_t>(t.cb->mem_answer).store(answer, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(t.cb->mem_answer_seq).store(seq, std::memory_order_release);
  futex_wake_all(&t.cb->mem_answer_seq);
  t.room_answered_seq = seq;
  t.room_made = false;
  // Room made: its memory is on the GPU from now, and its quantum against its peers starts now
  // (counted from registration, a tenant that waited a quantum for room would be displaced again
  // as soon as it got it, the two taking turns at every swap).
  if (answer == GPUOS_MEM_RETRY) t.resident_since_ns = now_mono_ns();
}

void Core::free_slices(Tenant& t) {
  auto p = pools_.find(t.uid);
  for (uint64_t off : t.slices) {
    if (p != pools_.end() && p->second.space) p->second.space->free(off);
  }
  t.slices.clear();
}

void Core::run_swaps(uint64_t now) {
  if (opts_.swap_pool_bytes == 0) {
    for (auto& [id, t] : tenants_) {
      if (load(t.cb->mem_request_seq) != t.room_answered_seq) answer_room(t, GPUOS_MEM_REFUSED);
    }
    return;
  }
  // 1. Commands carried out since the last look.
  for (auto& [id, t] : tenants_) {
    if (t.swap_cmd == GPUOS_SWAP_NONE || load(t.cb->swap_done_seq) != load(t.cb->swap_command_seq)) continue;
    const uint32_t state = load(t.cb->swap_state);
    if (t.swap_cmd == GPUOS_SWAP_OUT) {
      const uint64_t swapped = load(t.cb->swapped_bytes);
      const uint64_t moved = swapped > t.swapped_before_cmd ? swapped - t.swapped_before_cmd : 0;
      auto p = pools_.find(t.uid);
      if (!t.slices.empty() && p != pools_.end() && p->second.space) p->second.space->shrink(t.slices.back(), moved);
      if (moved == 0 && !t.slices.empty()) t.slices.pop_back();
      if (state == GPUOS_SWAP_SWAPPED_OUT && moved > 0) {
        if (t.swapped_before_cmd == 0) t.out_since_ns = now;
        log::info("tenant %u swapped out %llu MiB (%llu MiB out in all)", t.id,
                  static_cast<unsigned long long>(moved >> 20), static_cast<unsigned long long>(swapped >> 20));
        for (auto& [oid, o] : tenants_) {
          o.swap_in_failed = false;
          if (load(o.cb->mem_request_seq) != o.room_answered_seq) o.room_made = true;
        }
      } else {
        log::warn("tenant %u did not swap out (state %u); leaving it alone for 10 s", t.id, state);
        t.no_victim_until_ns = now + 10'000'000'000ull;
        if (state == GPUOS_SWAP_RESIDENT) release_gate(t);
      }
    } else if (t.swap_cmd == GPUOS_SWAP_IN) {
      if (state == GPUOS_SWAP_RESIDENT) {
        log::info("tenant %u swapped in (longest swap-in %.1f ms)", t.id,
                  static_cast<double>(load(t.cb->max_swap_in_ns)) / 1e6);
        free_slices(t);
        t.resident_since_ns = now;
        release_gate(t);
      } else {
        // No room after all (an estimate was off, or an exited tenant's memory is still being
        // torn down): a victim goes first, or, with none, the same swap-in again a little later.
        t.swap_in_failed = true;
        t.swap_in_retry_ns = now + 500'000'000ull;
      }
    }
    t.swap_cmd = GPUOS_SWAP_NONE;
  }
  // 2. What next.
  SwapParams params;
  for (const GpuInfo& g : opts_.gpus) {
    params.capacity.push_back(g.total_mem_bytes > opts_.swap_headroom_bytes ? g.total_mem_bytes - opts_.swap_headroom_bytes : 0);
  }
  params.quantum_ns = opts_.swap_quantum_ns;
  params.margin_bytes = opts_.swap_headroom_bytes;
  std::vector<SwapTenant> view;
  for (auto& [id, t] : tenants_) {
    const gpuos_control_block& cb = *t.cb;
    SwapTenant s;
    s.id = t.id;
    // Its GPU: where most of its memory is; for a request for room, the waiting allocation's.
    s.device = home_gpu(t);
    s.guaranteed = t.tenant_class == GPUOS_CLASS_GUARANTEED;
    s.swappable = load(cb.swappable) != 0;
    const uint32_t state = load(cb.swap_state);
    s.command_pending = t.swap_cmd != GPUOS_SWAP_NONE;
    s.resident = state == GPUOS_SWAP_RESIDENT && !s.command_pending;
    s.swapped_out = state == GPUOS_SWAP_SWAPPED_OUT && !s.command_pending;
    s.waiting = load(cb.waiting) != 0;
    s.signalled = load(cb.signalled) != 0;
    s.busy = load(cb.busy) != 0;
    s.wants_room = load(cb.mem_request_seq) != t.room_answered_seq;
    if (const int32_t wd = load(cb.mem_wanted_device); s.wants_room && wd >= 0 && wd < GPUOS_MAX_DEVICES) {
      if (const int g = gpu_of(t, wd); g >= 0) s.device = static_cast<uint32_t>(g);
    }
    s.wanted_bytes = load(cb.mem_wanted_bytes);
    const uint64_t quota = load(cb.mem_quota_bytes);
    s.room_made = t.room_made;
    s.swap_in_failed = t.swap_in_failed && now < t.swap_in_retry_ns;
    const uint64_t swapped = load(cb.swapped_bytes);
    const uint64_t movable = load(cb.swappable_bytes);
    const uint64_t used = load(cb.mem_used_bytes);
    s.movable_bytes = movable > swapped ? movable - swapped : 0;
    s.swapped_bytes = swapped;
    s.resident_bytes = used > swapped ? used - swapped : 0;
    const uint64_t borrow = load(cb.mem_borrow_bytes);
    s.quota_left_bytes = quota > used ? quota - used : 0;
    s.borrowed_bytes = quota != 0 && borrow != 0 && used > quota ? used - quota : 0;
    s.resident_since_ns = t.resident_since_ns;
    s.out_since_ns = t.out_since_ns;
    s.no_victim_until_ns = t.no_victim_until_ns;
    auto p = pools_.find(t.uid);
    s.pool_largest_free = p != pools_.end() && p->second.space ? p->second.space->largest_free() : 0;
    view.push_back(s);
  }
  for (const SwapAction& a : plan_swaps(view, params, now)) {
    auto it = tenants_.find(a.tenant_id);
    if (it == tenants_.end()) continue;
    Tenant& t = it->second;
    switch (a.kind) {
      case SwapAction::Kind::kAnswerRetry:
        answer_room(t, GPUOS_MEM_RETRY);
        break;
      case SwapAction::Kind::kAnswerRefused:
        log::info("tenant %u: no tenant can make room for its allocation; it gets out-of-memory", t.id);
        answer_room(t, GPUOS_MEM_REFUSED);
        break;
      case SwapAction::Kind::kSwapOut: {
        // The slice can take all its movable memory (as far as the pool allows); it is cut to
        // what actually moved when the command is done.
        SwapPool& pool = pools_[t.uid];
        const uint64_t swapped = load(t.cb->swapped_bytes);
        const uint64_t movable = load(t.cb->swappable_bytes) - swapped;
        const uint64_t slice = pool.space ? std::min(movable, pool.space->largest_free()) : 0;
        std::optional<uint64_t> off = slice ? pool.space->allocate(slice) : std::nullopt;
        if (!off) break;  // (the planner checked; a pool is made on the tenant's first SWAP_POOL)
        t.slices.push_back(*off);
        t.swapped_before_cmd = swapped;
        std::atomic_ref<uint64_t>(t.cb->swap_slice_offset).store(*off, std::memory_order_relaxed);
        std::atomic_ref<uint64_t>(t.cb->swap_slice_bytes).store(slice, std::memory_order_relaxed);
        std::atomic_ref<uint64_t>(t.cb->swap_want_bytes).store(a.bytes, std::memory_order_relaxed);
        log::info("tenant %u: swapping out at least %llu MiB", t.id, static_cast<unsigned long long>(a.bytes >> 20));
        hold_gate(t);
        send_swap_command(t, GPUOS_SWAP_OUT);
        break;
      }
      case SwapAction::Kind::kSwapIn:
        log::info("tenant %u: swapping in %llu MiB", t.id,
                  static_cast<unsigned long long>(load(t.cb->swapped_bytes) >> 20));
        send_swap_command(t, GPUOS_SWAP_IN);
        break;
    }
  }
}

std::string format_gpu_uuid(const uint8_t b[16]) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

uint32_t Core::home_gpu(const Tenant& t) const {
  uint32_t home = 0;
  uint64_t most = 0;
  for (uint32_t g = 0; g < GPUOS_MAX_DEVICES; ++g) {
    const uint64_t b = used_on_gpu(t, g);
    if (b > most) most = b, home = g;
  }
  if (most == 0) {  // no memory yet: the first GPU it launched on, if any
    for (uint32_t g = 0; g < GPUOS_MAX_DEVICES; ++g) {
      if (launched_on_gpu(t, g)) return g;
    }
  }
  return home;
}

bool Core::launched_on_gpu(const Tenant& t, uint32_t gpu) const {
  const int o = ordinal_of(t, gpu);
  return o >= 0 && o < 32 && (load(t.cb->space_devices) >> o & 1u) != 0;
}

int Core::ordinal_of(const Tenant& t, uint32_t gpu) const {
  if (gpu >= GPUOS_MAX_DEVICES) return -1;
  const uint32_t n = std::atomic_ref<uint32_t>(t.cb->device_count).load(std::memory_order_acquire);
  if (n != t.mapped_device_count) {
    // The tenant published (or re-published) its devices: match their UUIDs to gpuosd's GPUs.
    for (uint32_t g = 0; g < GPUOS_MAX_DEVICES; ++g) t.ordinal_of_gpu[g] = n == 0 ? static_cast<int8_t>(g) : -1;
    for (uint32_t o = 0; o < n && o < GPUOS_MAX_DEVICES; ++o) {
      uint8_t b[16];
      for (int i = 0; i < 16; ++i) b[i] = std::atomic_ref<uint8_t>(t.cb->device_uuid[o][i]).load(std::memory_order_relaxed);
      const std::string text = format_gpu_uuid(b);
      for (const GpuInfo& g : opts_.gpus) {
        if (g.index < GPUOS_MAX_DEVICES && g.uuid == text) t.ordinal_of_gpu[g.index] = static_cast<int8_t>(o);
      }
    }
    t.mapped_device_count = n;
  }
  return t.ordinal_of_gpu[gpu];
}

int Core::gpu_of(const Tenant& t, int ordinal) const {
  for (uint32_t g = 0; g < GPUOS_MAX_DEVICES; ++g) {
    if (ordinal_of(t, g) == ordinal) return static_cast<int>(g);
  }
  return -1;
}

uint64_t Core::used_on_gpu(const Tenant& t, uint32_t gpu) const {
  const int o = ordinal_of(t, gpu);
  return o >= 0 ? load(t.cb->mem_used_per_device[o]) : 0;
}

uint32_t Core::right_size_tenant(Tenant& t, uint64_t now) {
  if (opts_.space_sizer.slack <= 0 || t.tenant_class != GPUOS_CLASS_GUARANTEED || t.space_domain[0] == '\0') return 0;
  // Sized only while it shares its GPU, in its domain, with best-effort tenants: the SMs it does
  // not need go to them. Its ceiling is the partition the planner gives it unsized: an even share,
  // among the guaranteed tenants there that asked for no size, of the groups the others did not
  // ask for (`gpuos run --sms`). Each guaranteed tenant is sized within its own share, so one
  // tenant's moves never change another's ceiling.
  const uint32_t home = home_gpu(t);
  bool shared = false;
  uint32_t unsized = 1, asked_groups = 0;
  const uint32_t group_sms = std::max<uint32_t>(opts_.space.group_sms, 1);
  for (const auto& [id, o] : tenants_) {
    if (o.id == t.id || std::strcmp(o.space_domain, t.space_domain) != 0 || home_gpu(o) != home) continue;
    if (o.tenant_class != GPUOS_CLASS_GUARANTEED) {
      shared = true;
    } else if (o.space_sms != 0) {
      asked_groups += (o.space_sms + group_sms - 1) / group_sms;
    } else {
      ++unsized;
    }
  }
  const GpuInfo* gpu = nullptr;
  for (const GpuInfo& g : opts_.gpus) {
    if (g.index == home) gpu = &g;
  }
  const auto reset_sizing = [&t] {
    t.space_sizer = SizerState{};
    t.space_sized_sms = 0;
    t.space_default_sms = 0;
    t.space_sized_latency = 0;
  };
  if (!shared || gpu == nullptr) {
    reset_sizing();
    return 0;
  }
  const SpaceGpu sg{gpu->index, gpu->sm_count, gpu->sm_groups};
  const uint32_t groups = space_groups(sg, opts_.space.group_sms);
  if (groups < 2) return 0;
  const uint32_t share = space_default_groups(groups, asked_groups, unsized, true, opts_.space);
  std::vector<uint32_t> sizes;  // SMs of groups 0..g-1, g = 1 .. groups
  for (uint32_t g = 1; g <= groups; ++g) sizes.push_back(space_mask_sms(g >= 64 ? ~0ull : (1ull << g) - 1, sg, opts_.space.group_sms));
  const uint32_t ceiling = sizes[std::min(share, groups) - 1];
  if (t.space_default_sms != 0 && t.space_default_sms != ceiling) {
    // Its share changed (a guaranteed tenant came or went): everything it measured was judged
    // against the old ceiling; start again from the new one.
    log::info("tenant %u (%s): its default partition is now %u SMs (was %u): right-sizing starts again", t.id, t.name,
              ceiling, t.space_default_sms);
    reset_sizing();
  }
  std::vector<ShapeSamples> shapes;
  // Not read (the tenant was writing them): what it had, or the ceiling (never "unsized", which
  // the planner would read as the rest of the guaranteed groups).
  if (!read_shape_samples(*t.cb, &shapes)) return t.space_sized_sms != 0 ? t.space_sized_sms : ceiling;
  const SizerDecision d = right_size(shapes, sizes, ceiling, opts_.space_sizer, &t.space_sizer, now);
  if (!t.space_cost_warned) {
    const double cost = partition_cost(shapes, ceiling, gpu->sm_count, opts_.space_sizer.min_samples);
    if (cost > 1.0 + opts_.space_sizer.slack) {
      t.space_cost_warned = true;
      log::warn("tenant %u (%s): its kernels run %.2fx as long on its %u-SM default partition as on the whole GPU "
                "(%u SMs): spatial sharing cannot keep it within %.0f%% of running alone; for that, run it outside "
                "domain \"%s\" (time-shared: best-effort tenants then wait for its idle time)",
                t.id, t.name, cost, ceiling, gpu->sm_count, opts_.space_sizer.slack * 100, t.space_domain);
    }
  }
  if (t.space_sized_sms == 0) log::info("tenant %u (%s): right-sizing from its %u-SM default partition", t.id, t.name, ceiling);
  const uint32_t before = t.space_sized_sms != 0 ? t.space_sized_sms : ceiling;
  // The debug trace, each time the decision or the measured figure (to 1%) changes: the sizer is
  // asked at every sample report.
  char traced[64];
  std::snprintf(traced, sizeof(traced), "%u %s %.2f", d.sms, d.why, d.measured);
  if (d.measured > 0 && log::enabled(log::Level::kDebug) && t.space_sizer_traced != traced) {
    t.space_sizer_traced = traced;
    std::string points;
    for (const ShapeSamples& s : shapes) {
      for (const LatencyPoint& p : s.points) {
        points += " " + std::to_string(s.key % 10000) + "@" + std::to_string(p.sms) + ":" + std::to_string(p.count) +
                  "x" + std::to_string(static_cast<uint64_t>(p.mean_ns / 1000)) + "us";
      }
    }
    log::debug("tenant %u (%s): sizer at %u SMs, t=%.3f s: %s, measured %.3f of %.0f us at %u SMs; table%s", t.id,
               t.name, before, now / 1e9, d.why, d.measured, d.ref_ns / 1000, ceiling, points.c_str());
  }
  if (d.sms != before) {
    char hold[64] = "";
    if (d.hold_ns != 0) std::snprintf(hold, sizeof(hold), "; not below %u SMs for %.0f s", d.sms, d.hold_ns / 1e9);
    log::info("tenant %u (%s): right-sized %u -> %u SMs of %u (%s; latency %.3f of its %u-SM figure%s)", t.id, t.name,
              before, d.sms, ceiling, d.why, d.predicted, ceiling, hold);
  }
  if (std::strcmp(d.why, "confirm") == 0) {
    log::info("tenant %u (%s): %u SMs read %.3f of its %u-SM figure, a little over the slack: judged again on new "
              "samples before moving up", t.id, t.name, d.sms, d.measured, ceiling);
  }
  if (d.grid_blocks != 0 && t.space_grid_logged_sms != d.sms) {
    t.space_grid_logged_sms = d.sms;
    log::info("tenant %u (%s): right-sizing holds %u SMs: a main kernel of %u blocks runs one per SM there and "
              "would put two on some SMs below (set [spatial] right_size_below_grid to go on)",
              t.id, t.name, d.sms, d.grid_blocks);
  }
  t.space_sized_sms = d.sms;
  t.space_default_sms = ceiling;
  if (d.sms != before) t.space_sized_latency = 0;  // a new size: nothing measured there yet
  if (d.measured > 0 && d.sms == before) t.space_sized_latency = d.measured;
  return d.sms;
}

void Core::warn_if_mps_costs_slack(Tenant& t) {
  if (t.space_mps_warned || t.tenant_class != GPUOS_CLASS_GUARANTEED || t.space_domain[0] == '\0') return;
  if (load(t.cb->space_samples) < kMpsCostMinSamples) return;
  const double cost = mps_cost(load(t.cb->space_timed_kernels), load(t.cb->space_timed_ns), opts_.mps_kernel_cost_ns);
  const double slack = opts_.space_sizer.slack > 0 ? opts_.space_sizer.slack : SizerParams{}.slack;
  if (cost <= slack) return;
  t.space_mps_warned = true;
  log::warn("tenant %u (%s): its kernels take %.1f us on average, and an MPS client's kernel about %.2f us more: "
            "%.0f%% of its GPU time, more than its %.0f%% slack; spatial sharing cannot keep it within its slack of "
            "running alone. For that, run it outside domain \"%s\" (time-shared)",
            t.id, t.name, load(t.cb->space_timed_ns) / 1e3 / static_cast<double>(load(t.cb->space_timed_kernels)),
            opts_.mps_kernel_cost_ns / 1e3, cost * 100, slack * 100, t.space_domain);
}

void Core::run_space() {
  bool any = false;
  for (const auto& [id, t] : tenants_) any = any || t.space_domain[0] != '\0';
  space_replan_at_ns_ = 0;
  if (!any) return;
  const uint64_t now = now_mono_ns();
  std::vector<SpaceGpu> gpus;
  for (const GpuInfo& g : opts_.gpus) gpus.push_back(SpaceGpu{g.index, g.sm_count, g.sm_groups});
  std::vector<SpaceTenant> in;
  bool sizing = false;  // a tenant is being right-sized: look at its samples again soon
  for (auto& [id, t] : tenants_) {
    SpaceTenant s;
    s.id = t.id;
    s.domain = t.space_domain;
    s.tenant_class = t.tenant_class;
    s.priority = t.priority;
    s.weight = t.weight;
    s.want_sms = t.space_sms != 0 ? t.space_sms : right_size_tenant(t, now);
    warn_if_mps_costs_slack(t);
    sizing = sizing || t.space_sized_sms != 0;
    s.busy = load(t.cb->busy) != 0 || load(t.cb->waiting) != 0;
    if (s.busy) {
      t.space_idle_since_ns = 0;
    } else {
      if (t.space_idle_since_ns == 0) t.space_idle_since_ns = now;
      s.idle_ns = now - t.space_idle_since_ns;
    }
    for (uint32_t g = 0; g < GPUOS_MAX_DEVICES && g < 32; ++g) {
      if (used_on_gpu(t, g) != 0 || launched_on_gpu(t, g)) s.gpus |= 1u << g;
    }
    if (s.tenant_class == GPUOS_CLASS_BEST_EFFORT && !s.domain.empty()) {
      // How long taking lent groups back from it could take (the planner lends only below a bound).
      std::vector<ShapeSamples> shapes;
      if (read_shape_samples(*t.cb, &shapes)) t.space_longest_kernel_ns = longest_kernel_ns(shapes);
      s.kernel_ns = t.space_longest_kernel_ns;
    }
    in.push_back(std::move(s));
  }
  const std::map<uint32_t, SpaceMasks> plan = plan_space(gpus, in, opts_.space);
  if (const uint64_t wait = space_next_lend_ns(in, opts_.space); wait != 0) space_replan_at_ns_ = now + wait;
  constexpr uint64_t kSizingPeriodNs = 100'000'000;  // a busy tenant sends no ACTIVITY: poll its samples
  if (sizing && (space_replan_at_ns_ == 0 || space_replan_at_ns_ > now + kSizingPeriodNs)) {
    space_replan_at_ns_ = now + kSizingPeriodNs;
  }
  for (auto& [id, t] : tenants_) {
    if (t.space_domain[0] == '\0') continue;
    if (auto p = plan.find(id); p != plan.end()) write_space_masks(t, p->second);
    // Planned with its device map as it stands (ordinal_of refreshed it while `in` was built): the
    // tenant may wait for this at start (await_space_plan). Stored after its masks.
    std::atomic_ref<uint32_t>(t.cb->space_planned_devices).store(t.mapped_device_count, std::memory_order_release);
  }
}

void Core::write_space_masks(Tenant& t, const SpaceMasks& per_gpu) {
  // The plan is per GPU; the control block per the tenant's device ordinals.
  uint64_t by_ordinal[GPUOS_MAX_DEVICES] = {};
  for (uint32_t g = 0; g < GPUOS_MAX_DEVICES; ++g) {
    if (const int o = ordinal_of(t, g); o >= 0) by_ordinal[o] = per_gpu[g];
  }
  bool changed = false;
  for (uint32_t o = 0; o < GPUOS_MAX_DEVICES; ++o) {
    std::atomic_ref<uint64_t> word(t.cb->space_mask[o]);
    if (word.load(std::memory_order_relaxed) == by_ordinal[o]) continue;
    word.store(by_ordinal[o], std::memory_order_release);
    changed = true;
    log::debug("tenant %u: SM groups on its device %u now 0x%llx", t.id, o, static_cast<unsigned long long>(by_ordinal[o]));
  }
  if (changed) std::atomic_ref<uint32_t>(t.cb->space_epoch).fetch_add(1, std::memory_order_release);
}

}  // namespace gpuos::daemon
