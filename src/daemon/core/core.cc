// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/core.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/config.h"
#include "common/ipc.h"
#include "common/kube_names.h"
#include "common/log.h"
#include "common/clock.h"
#include "daemon/core/admission.h"
#include "daemon/core/control_block.h"
#include "slots/builtin.h"

namespace gpuos::daemon {
namespace {

CoreOptions with_at_most_max_devices(CoreOptions o) {
  if (o.gpus.size() > GPUOS_MAX_DEVICES) o.gpus.resize(GPUOS_MAX_DEVICES);
  return o;
}

}  // namespace

Core::Core(CoreOptions opts)
    : opts_(with_at_most_max_devices(std::move(opts))),
      gpu_map_(opts_.gpus),
      gpu_busy_(gpu_map_, opts_.gpus.size()),
      watchdog_(opts_.watchdog.stall_ns != 0 ? std::make_unique<Watchdog>(opts_.watchdog) : nullptr),
      time_("time gate", std::move(opts_.time_gate), [] { return slots::builtin_time_gate(); }),
      space_("space", std::move(opts_.space_policy), [] { return slots::builtin_space(); }),
      memory_("memory", std::move(opts_.memory_policy), [] { return slots::builtin_memory(); }),
      space_engine_(gpu_map_, opts_.gpus, opts_.space_group_sms),
      gate_engine_(gpu_map_, opts_.gpus.size(), space_engine_),
      swap_engine_(gpu_map_, opts_.gpus, opts_.swap),
      verify_engine_(std::move(opts_.verify), gpu_map_, [this](pid_t pid) { return start_time_of(pid); }, now_mono_ns()),
      ids_(opts_.id_ledger_path, opts_.pid_start_time),
      claims_(opts_.claims_path, opts_.claim_socket_root, opts_.gpus, opts_.mem_quota_cap_bytes, opts_.space_admit) {
  ids_.load();
  for (const auto& [id, e] : ids_.entries()) verify_engine_.add_survivor(e.pid, e.start);
  time_.set_watchdog(watchdog_.get());
  space_.set_watchdog(watchdog_.get());
  memory_.set_watchdog(watchdog_.get());
  // A failed time gate's admission settings go with it: the built-in admits with none.
  time_.on_fallback([this] { gate_engine_.reset(tenants_, now_mono_ns()); });
  space_.on_fallback([this] { space_engine_.reset(); });
}

Core::~Core() {
  for (auto& [id, t] : tenants_) destroy_tenant_blocks(t);
}

uint64_t Core::now_ms() const {
  if (opts_.unix_ms) return opts_.unix_ms();
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000u + static_cast<uint64_t>(ts.tv_nsec) / 1000000u;
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
  // A claim's socket is its tenants' only way in: nothing there is an admin's or another tenant's
  // business (a container's root is not gpuosd's).
  if (!conn.claim_uid.empty() && h.type != GPUOS_MSG_REGISTER && h.type != GPUOS_MSG_ACTIVITY &&
      h.type != GPUOS_MSG_SWAP_POOL) {
    std::snprintf(why, sizeof(why), "message type %u is not served on a claim's socket (tenants only)",
                  static_cast<unsigned>(h.type));
    return refuse(seq, GPUOS_ERR_PERMISSION, why);
  }
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
    case GPUOS_MSG_SPACE_QUERY: {
      gpuos_msg_space_query m;
      std::memcpy(&m, data, sizeof(m));
      return on_space_query(conn, m);
    }
    case GPUOS_MSG_CLAIM_PREPARE: {
      gpuos_msg_claim_prepare m;
      std::memcpy(&m, data, sizeof(m));
      return claims_.prepare(conn, m);
    }
    case GPUOS_MSG_CLAIM_UNPREPARE: {
      gpuos_msg_claim_unprepare m;
      std::memcpy(&m, data, sizeof(m));
      return claims_.unprepare(conn, m);
    }
    default:
      std::snprintf(why, sizeof(why), "message type %u is sent by the daemon, not to it",
                    static_cast<unsigned>(h.type));
      ++stats_.bad_messages;
      return refuse(seq, GPUOS_ERR_BAD_MESSAGE, why);
  }
}

Outcome Core::on_register(Connection& conn, const gpuos_msg_register& asked) {
  const uint32_t seq = asked.hdr.seq;
  gpuos_msg_register m = asked;
  const Claim* claim = nullptr;
  auto refused = [&](const admission::Verdict& v) { return refuse_register(seq, v.status, v.why.c_str()); };
  if (auto v = admission::claim(claims_.store(), conn, &m, &claim); v.refused()) return refused(v);
  if (auto v = admission::validate(conn, m); v.refused()) return refused(v);
  if (auto v = admission::check_pid(conn, opts_.innermost_pid, &m); v.refused()) return refused(v);
  // The same process again, its tenant detached: this registration takes it over (its id, hold and
  // record). A detached tenant whose process is gone by now (its pid reused) ends first.
  const uint64_t start_time = start_time_of(m.pid);
  const Tenant* detached = nullptr;
  for (auto it = tenants_.begin(); it != tenants_.end(); ++it) {
    if (!it->second.detached || it->second.pid != m.pid) continue;
    if (it->second.start_time != start_time || !runs_on(it->second)) {
      end_tenant(it->first);
    } else if (it->second.uid == conn.peer.uid) {
      detached = &it->second;
    }
    break;
  }
  admission::Limits limits{opts_.max_tenants, opts_.max_tenants_per_uid, opts_.one_tenant_per_pid};
  limits.replaces = detached != nullptr ? detached->id : 0;
  if (auto v = admission::limits(limits, tenants_, conn, m.pid, claim); v.refused()) return refused(v);

  Tenant t;
  t.start_time = start_time;
  std::optional<Retained> back;
  t.id = admission::choose_id({tenants_, detached, ids_, history_, next_id_}, conn, m, t.start_time, &back);
  if (back) t.verify.usage = back->usage;
  admission::fill_identity(t, conn, m, claim, claims_.store(), opts_.pod_uid_of, opts_.pod_cgroups);
  const admission::AdmitOptions admit{opts_.guaranteed_needs_admin, opts_.mem_quota_cap_bytes,
                                      opts_.default_max_slowdown_permille, opts_.space_admit};
  slots::Admission adm;
  std::string lowered_why;
  if (auto v = admission::admit(admit, time_, gate_engine_, conn, claim, m, t, &adm, &lowered_why); v.refused()) {
    return refused(v);
  }
  const uint32_t gate = adm.initial_gate == GPUOS_GATE_CLOSED ? GPUOS_GATE_CLOSED : GPUOS_GATE_OPEN;
  // An admin's hold outlives the daemon: a tenant held before a restart is held again from its first
  // launch under this one (the policy's initial gate is still what it answered, for the release).
  const bool held = ids_.held(conn.peer.uid, m.pid) || (back && back->pinned);
  if (auto v = admission::grant(t, adm, gate, held, opts_.space_group_sms, now_mono_ns()); v.refused()) {
    return refused(v);
  }
  t.registered_unix_ms = now_ms();
  ++stats_.tenants_registered;
  if (t.id >= next_id_) next_id_ = t.id + 1;
  if (next_id_ == 0) next_id_ = 1;
  conn.tenant_id = t.id;

  gpuos_msg_register_reply r{};
  init_header(&r.hdr, GPUOS_MSG_REGISTER_REPLY, sizeof(r), seq);
  r.status = GPUOS_OK;
  r.tenant_id = t.id;
  r.control_block_size = sizeof(gpuos_control_block);
  r.grant_block_size = sizeof(gpuos_grant_block);
  r.tenant_class = t.tenant_class;
  std::string text = m.space_domain[0] != '\0' && !t.in_domain() ? "registered (time-shared: spatial domain refused)"
                                                                 : "registered";
  if (m.tenant_class == GPUOS_CLASS_GUARANTEED && t.tenant_class != GPUOS_CLASS_GUARANTEED) {
    text += "; best-effort: " + (lowered_why.empty() ? std::string("lowered by gpuosd") : lowered_why);
  }
  copy_name(r.text, sizeof(r.text), text.c_str());
  Outcome o;
  o.replies.push_back(encode(r));
  o.replies.back().fds = {t.grant_fd, t.control_fd};
  o.registered = t.id;

  log::info("tenant %u registered: pid %d uid %u name \"%s\" class %s priority %d weight %u gate %s "
            "max_inflight %u idle_grace_us %u max_slowdown %u.%03u%s%s",
            t.id, t.pid, static_cast<unsigned>(t.uid), t.name, class_name(t.tenant_class), t.priority, t.weight,
            held ? "held (an admin's hold from before gpuosd restarted)" : gate == GPUOS_GATE_OPEN ? "open" : "closed",
            adm.max_inflight, adm.idle_grace_us,
            t.granted.max_slowdown_permille / 1000, t.granted.max_slowdown_permille % 1000,
            t.in_domain() ? " space_domain " : "", t.space.domain);
  if (!t.kube.pod_uid.empty()) {
    log::info("tenant %u is in pod %s/%s (uid %s)%s%s", t.id, t.kube.pod_namespace.empty() ? "?" : t.kube.pod_namespace.c_str(),
              t.kube.pod_name.empty() ? "?" : t.kube.pod_name.c_str(), t.kube.pod_uid.c_str(), claim ? ", claim " : "",
              claim ? claim->uid.c_str() : "");
  }
  if (back) {
    retire_detached(t.id);
    log::info("tenant %u is pid %d again (it reconnected): its hold and usage-check record are kept", t.id, t.pid);
  }
  tenants_.emplace(t.id, t);
  ids_.record(t.id, t.uid, t.pid, held);
  const uint64_t now = now_mono_ns();
  time_.run("on_admitted", [&](slots::TimeGate& p) { p.on_admitted(t.id); });
  space_.run("on_admitted", [&](slots::SpacePolicy& p) { p.on_admitted(t.id); });
  memory_.run("on_admitted", [&](slots::MemoryPolicy& p) { p.on_admitted(t.id); });
  run_slot(time_, gate_engine_, tenants_, slots::Event::kAdmitted, t.id, now);
  run_slot(space_, space_engine_, tenants_, slots::Event::kAdmitted, t.id, now);
  return o;
}

gpuos_status Core::admin_set_gate(uint32_t tenant_id, uint32_t gate) {
  if (gate != GPUOS_GATE_OPEN && gate != GPUOS_GATE_CLOSED) return GPUOS_ERR_BAD_MESSAGE;
  auto it = tenants_.find(tenant_id);
  if (it == tenants_.end()) return GPUOS_ERR_NOT_FOUND;
  Tenant& t = it->second;
  t.gate.pinned = gate == GPUOS_GATE_CLOSED;
  if (!t.gate.pinned) t.gate = GateState{.held = t.gate.held};
  publish_gate(t, now_mono_ns());
  ids_.set_held(tenant_id, t.gate.pinned);  // durable: a restarted gpuosd holds it again
  // The pin is gone: the time gate decides about this tenant again now, not at its next event.
  if (!t.gate.pinned) run_slot(time_, gate_engine_, tenants_, slots::Event::kAdmin, tenant_id, now_mono_ns());
  return GPUOS_OK;
}

bool Core::pinned(uint32_t tenant_id) const {
  auto it = tenants_.find(tenant_id);
  return it != tenants_.end() && it->second.gate.pinned;
}

Outcome Core::on_set_gate(Connection& conn, const gpuos_msg_set_gate& m) {
  char why[GPUOS_TEXT_MAX];
  if (!conn.peer.admin) return refuse_non_admin(m.hdr.seq, "SET_GATE", static_cast<unsigned>(conn.peer.uid));
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
  if (!conn.peer.admin) return refuse_non_admin(h.seq, "SHUTDOWN", static_cast<unsigned>(conn.peer.uid));
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
  const uint64_t now = now_mono_ns();
  if (!it->second.activity.take(now)) {
    // Beyond its rate (activity_rate.h): decided on at a tick shortly, from its words as they are.
    if (it->second.activity.deferred == 1) {
      log::warn("tenant %u sends ACTIVITY faster than %.0f a second: beyond that its changes are decided on at "
                "ticks %.0f ms apart", it->first, ActivityRate::kPerSecond, ActivityRate::kDeferNs / 1e6);
    }
    if (activity_tick_ns_ == 0) activity_tick_ns_ = now + ActivityRate::kDeferNs;
    return Outcome{};
  }
  observe_busy(it->second, now);
  gpu_busy_.observe(tenants_, now);
  const Tenant& t = it->second;
  log::debug("tenant %u activity: busy %u waiting %u (block: busy %u waiting %u)", t.id, m.busy, m.waiting,
             load(t.cb->busy), load(t.cb->waiting));
  run_slots(slots::Event::kActivity, t.id, now);
  return Outcome{};  // no reply: the tenant never reads one
}

void Core::connection_closed(Connection& conn) {
  if (conn.tenant_id == 0) return;
  auto it = tenants_.find(conn.tenant_id);
  conn.tenant_id = 0;
  if (it == tenants_.end()) return;
  // A tenant's identity is its process, not its connection (issue #62): a process that closed or
  // shut down its connection itself runs on, and is still this tenant.
  if (!shutting_down_ && runs_on(it->second)) {
    detach(it->second);
    return;
  }
  end_tenant(it->first);
}

bool Core::runs_on(const Tenant& t) const {
  if (!opts_.one_tenant_per_pid || t.start_time == 0) return false;
  if (opts_.process_runs) return opts_.process_runs(t.pid, t.start_time);
  if (opts_.pid_start_time) return opts_.pid_start_time(t.pid) == t.start_time;
  return process_runs(t.pid, t.start_time);
}

void Core::detach(Tenant& t) {
  t.detached = true;
  // Its blocks stay mapped on both sides: its gate, grants, swap commands and lease (renewed at each
  // tick) still reach it, and its library keeps obeying them (gate_binds); the usage check judges
  // it as the tenant it is. It has no connection: what it would say (ACTIVITY) gpuosd reads at ticks.
  const char* held_by = t.gate.pinned ? "an admin held its gate closed" : t.gate.held ? "its memory was held out" : nullptr;
  if (held_by == nullptr) {
    log::info("tenant %u (pid %d, \"%s\") closed its connection but runs on: it stays this tenant, its gate and "
              "grants binding through its blocks, until it exits or registers again",
              t.id, static_cast<int>(t.pid), t.name);
    return;
  }
  std::set<pid_t> others;
  for (const auto& [id, o] : tenants_) {
    if (id != t.id) others.insert(o.pid);
  }
  verify_engine_.escaped(t, held_by, others, &stats_);
}

void Core::end_tenant(uint32_t id) {
  auto it = tenants_.find(id);
  if (it == tenants_.end()) return;
  const uint64_t now = now_mono_ns();
  observe_busy(it->second, now);
  Tenant t = it->second;
  tenants_.erase(it);
  gpu_busy_.observe(tenants_, now);
  // gpuosd shuts down while the process runs on: its ledger entry (id, hold) waits for the next
  // gpuosd, and it did not exit (an operator reading the log at a restart must not think so).
  const bool outlives_daemon = shutting_down_ && runs_on(t);
  if (!outlives_daemon) ++stats_.tenants_exited;
  gpuos_msg_tenant_info fin = snapshot(t, GPUOS_TENANT_EXITED, now_ms());
  if (opts_.history > 0) {
    history_.push_back(fin);
    while (history_.size() > opts_.history) history_.pop_front();
  }
  swap_engine_.tenant_gone(t, tenants_);
  if (!outlives_daemon) ids_.forget(t.id);
  verify_engine_.tenant_exited(t.pid, now);  // still on the GPU for a moment: no unregistered process
  char space[96] = "";  // placed launches, and those that followed the one before directly (spatial.h)
  if (fin.space_launches != 0) {
    std::snprintf(space, sizeof space, " space_launches %llu space_joins_skipped %llu",
                  static_cast<unsigned long long>(fin.space_launches),
                  static_cast<unsigned long long>(load(t.cb->space_joins_skipped)));
  }
  destroy_tenant_blocks(t);
  log::info(
      "tenant %u %s: pid %d name \"%s\" launches %llu graph_launches %llu captured %llu gate_waits %llu "
      "gate_wait_ms %.3f mem_peak_bytes %llu alloc_calls %llu alloc_failures %llu%s",
      fin.tenant_id, outlives_daemon ? "runs on without gpuosd (the next one adopts it)" : "exited", fin.pid, fin.name,
      static_cast<unsigned long long>(fin.launches),
      static_cast<unsigned long long>(fin.graph_launches), static_cast<unsigned long long>(fin.captured_launches),
      static_cast<unsigned long long>(fin.gate_waits), static_cast<double>(fin.gate_wait_ns) / 1e6,
      static_cast<unsigned long long>(fin.mem_peak_bytes), static_cast<unsigned long long>(fin.alloc_calls),
      static_cast<unsigned long long>(fin.alloc_failures), space);
  time_.run("on_exit", [&](slots::TimeGate& p) { p.on_exit(t.id); });
  space_.run("on_exit", [&](slots::SpacePolicy& p) { p.on_exit(t.id); });
  memory_.run("on_exit", [&](slots::MemoryPolicy& p) { p.on_exit(t.id); });
  run_slots(slots::Event::kExit, t.id, now);
}

void Core::retire_detached(uint32_t id) {
  auto it = tenants_.find(id);
  if (it == tenants_.end() || !it->second.detached) return;
  Tenant t = it->second;
  tenants_.erase(it);
  // Its memory is back on the GPU (its library swaps in before it registers again): its pool and
  // slices go; the new registration gets a pool of its own if it asks.
  swap_engine_.tenant_gone(t, tenants_);
  destroy_tenant_blocks(t);
  // The policies forget it and admit it again (same id) with the new registration.
  time_.run("on_exit", [&](slots::TimeGate& p) { p.on_exit(t.id); });
  space_.run("on_exit", [&](slots::SpacePolicy& p) { p.on_exit(t.id); });
  memory_.run("on_exit", [&](slots::MemoryPolicy& p) { p.on_exit(t.id); });
}

void Core::end_gone_detached() {
  std::vector<uint32_t> gone;
  for (const auto& [id, t] : tenants_) {
    if (t.detached && !runs_on(t)) gone.push_back(id);
  }
  for (uint32_t id : gone) end_tenant(id);
}

void Core::run_slots(slots::Event e, uint32_t tenant_id, uint64_t now) {
  run_slot(time_, gate_engine_, tenants_, e, tenant_id, now);
  run_slot(space_, space_engine_, tenants_, e, tenant_id, now);
  run_slot(memory_, swap_engine_, tenants_, e, tenant_id, now);
}

uint64_t Core::now_mono_ns() const { return opts_.mono_ns ? opts_.mono_ns() : monotonic_ns(); }

std::set<std::string> Core::live_space_domains() const {
  std::set<std::string> out;
  for (const auto& [id, t] : tenants_) {
    if (t.in_domain()) out.insert(t.space.domain);
  }
  return out;
}

uint64_t Core::start_time_of(pid_t pid) const {
  return opts_.pid_start_time ? opts_.pid_start_time(pid) : process_start_time(pid);
}

void Core::shutdown() {
  shutting_down_ = true;
  for (auto& [id, t] : tenants_) {
    std::atomic_ref<uint32_t>(t.grants->daemon_alive).store(0, std::memory_order_release);
    std::atomic_ref<uint32_t>(t.grants->grant_epoch).fetch_add(1, std::memory_order_relaxed);
    // A held tenant's memory is out or moving: it opens its gate itself once the memory is back.
    if (!t.gate.held) write_gate(t.grants, GPUOS_GATE_OPEN);
    futex_wake_all(&t.grants->gate);
  }
}

void Core::tick(uint64_t now_mono_ns) {
  if (activity_tick_ns_ != 0 && now_mono_ns >= activity_tick_ns_) activity_tick_ns_ = 0;
  // Renews every closed gate's lease (GPUOS_GATE_LEASE_NS): after a stall longer than that
  // (SIGSTOP, a hung hook) gated tenants ran on their own; from now they obey their gates again.
  for (auto& [id, t] : tenants_) {
    observe_busy(t, now_mono_ns);
    std::atomic_ref<uint64_t>(t.grants->daemon_heartbeat_ns).store(now_mono_ns, std::memory_order_release);
  }
  gpu_busy_.observe(tenants_, now_mono_ns);
  end_gone_detached();
  run_slots(slots::Event::kTick, 0, now_mono_ns);
  verify_engine_.tick(tenants_, now_mono_ns, &stats_);
}

uint64_t Core::next_tick_ns(uint64_t now_mono_ns) {
  uint64_t next = gate_engine_.next_ns();
  const uint64_t space = space_engine_.next_ns();
  if (space != 0 && (next == 0 || space < next)) next = space;
  // The usage check runs with no tenant too: a process on a GPU that never registered is a finding.
  if (const uint64_t v = verify_engine_.next_ns(); v != 0 && (next == 0 || v < next)) next = v;
  if (activity_tick_ns_ != 0 && (next == 0 || activity_tick_ns_ < next)) next = activity_tick_ns_;
  return next;
}

const gpuos_control_block* Core::control_block(uint32_t tenant_id) const {
  auto it = tenants_.find(tenant_id);
  return it == tenants_.end() ? nullptr : it->second.cb;
}

const gpuos_grant_block* Core::grant_block(uint32_t tenant_id) const {
  auto it = tenants_.find(tenant_id);
  return it == tenants_.end() ? nullptr : it->second.grants;
}

Outcome Core::on_swap_pool(Connection& conn, const gpuos_msg_header& h) {
  if (conn.tenant_id == 0) {
    return refuse(h.seq, GPUOS_ERR_PERMISSION, "SWAP_POOL is accepted only on the connection that registered a tenant");
  }
  gpuos_msg_swap_pool_reply r{};
  init_header(&r.hdr, GPUOS_MSG_SWAP_POOL_REPLY, sizeof(r), h.seq);
  Outcome o;
  auto it = tenants_.find(conn.tenant_id);
  int fd = -1;
  uint64_t bytes = 0;
  r.status = it == tenants_.end() ? GPUOS_ERR_REFUSED : swap_engine_.pool_for(it->second, &fd, &bytes);
  r.pool_bytes = r.status == GPUOS_OK ? bytes : 0;
  o.replies.push_back(encode(r));
  if (r.status == GPUOS_OK) o.replies.back().fds[0] = fd;
  return o;
}

Outcome Core::on_space_query(Connection& conn, const gpuos_msg_space_query& m) {
  if (!has_nul(m.domain, sizeof(m.domain))) {
    return refuse(m.hdr.seq, GPUOS_ERR_BAD_MESSAGE, "SPACE_QUERY domain is not NUL-terminated");
  }
  SpaceDomainAnswer a;
  if (opts_.space_query) {
    a = opts_.space_query(m.domain, conn.peer);
  } else {
    a.text = "gpuosd's config defines no [[spatial.domain]] (spatial sharing is off)";
  }
  gpuos_msg_space_info r{};
  init_header(&r.hdr, GPUOS_MSG_SPACE_INFO, sizeof(r), m.hdr.seq);
  r.status = a.status;
  // Paths that do not fit are not sent cut: the client would set a wrong directory.
  if (a.pipe_dir.size() < sizeof(r.mps_pipe_dir) && a.log_dir.size() < sizeof(r.mps_log_dir)) {
    r.available = a.available ? 1 : 0;
    copy_name(r.mps_pipe_dir, sizeof(r.mps_pipe_dir), a.pipe_dir.c_str());
    copy_name(r.mps_log_dir, sizeof(r.mps_log_dir), a.log_dir.c_str());
  } else if (r.status != GPUOS_ERR_NOT_FOUND) {
    r.status = GPUOS_ERR_INTERNAL;
    a.text = "the domain's MPS directories are longer than the protocol carries";
  }
  copy_name(r.text, sizeof(r.text), a.text.c_str());
  Outcome o;
  o.replies.push_back(encode(r));
  return o;
}

}  // namespace gpuos::daemon
