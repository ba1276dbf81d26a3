// SPDX-License-Identifier: Apache-2.0
// The router (Core::handle_message, the pure message-handling function) without sockets: every
// kind of bad input, which message goes where, and the slots asked at each event. What registration
// does: core_admission_test.cc; each engine alone: its own *_engine_test.cc.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>

#include "common/ipc.h"
#include "daemon/core/core.h"
#include "tenant_side.h"

namespace gpuos::daemon {
namespace {

using tenant_side::decode;

uint32_t type_of(const Outgoing& o) {
  gpuos_msg_header h{};
  std::memcpy(&h, o.bytes.data(), sizeof(h));
  return h.type;
}

gpuos_msg_register make_register(pid_t pid, const char* name = "t") {
  gpuos_msg_register m = tenant_side::registration(pid, GPUOS_CLASS_BEST_EFFORT, name);
  m.hdr.seq = 42;
  return m;
}

struct Fixture : ::testing::Test {
  std::unique_ptr<Core> core;
  Connection conn;
  void SetUp() override { make_core(4, 3); }
  void make_core(uint32_t max_tenants, uint32_t history, std::unique_ptr<slots::TimeGate> policy = nullptr) {
    CoreOptions o;
    o.max_tenants = max_tenants;
    o.history = history;
    o.gpus.push_back(GpuInfo{0, "Sim", "GPU-0", 132, 1ull << 34, {}, 0});
    o.time_gate = std::move(policy);
    o.unix_ms = [] { return uint64_t{1700000000000}; };
    core = std::make_unique<Core>(std::move(o));
    conn = Connection{};
    conn.id = 1;
    conn.peer.pid = 1234;
    conn.peer.uid = 1000;
    conn.peer.admin = false;
  }
  template <typename M>
  Outcome send(const M& m) {
    return core->handle_message(conn, &m, sizeof(m));
  }
  // Expects exactly one REPLY with `st` and a close.
  void expect_refused(const Outcome& o, gpuos_status st, const char* text_part = nullptr) {
    ASSERT_EQ(o.replies.size(), 1u);
    EXPECT_TRUE(o.close);
    EXPECT_FALSE(o.shutdown);
    EXPECT_EQ(o.registered, 0u);
    uint32_t t = type_of(o.replies[0]);
    int32_t status;
    std::string text;
    if (t == GPUOS_MSG_REGISTER_REPLY) {
      auto r = decode<gpuos_msg_register_reply>(o.replies[0]);
      status = r.status;
      text = r.text;
      EXPECT_EQ(o.replies[0].fds[0], -1);
      EXPECT_EQ(o.replies[0].fds[1], -1);
    } else {
      ASSERT_EQ(t, static_cast<uint32_t>(GPUOS_MSG_REPLY));
      auto r = decode<gpuos_msg_reply>(o.replies[0]);
      status = r.status;
      text = r.text;
    }
    EXPECT_EQ(status, st) << text;
    if (text_part) {
      EXPECT_NE(text.find(text_part), std::string::npos) << text;
    }
    char why[GPUOS_TEXT_MAX];
    EXPECT_EQ(validate_message(o.replies[0].bytes.data(), o.replies[0].bytes.size(), why, sizeof(why)), GPUOS_OK);
  }
};

TEST_F(Fixture, MalformedDatagrams) {
  unsigned char buf[600] = {};
  expect_refused(core->handle_message(conn, buf, 0), GPUOS_ERR_BAD_MESSAGE, "shorter than a header");
  expect_refused(core->handle_message(conn, buf, 15), GPUOS_ERR_BAD_MESSAGE);

  gpuos_msg_list l{};
  init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 1);
  auto bad = l;
  bad.hdr.magic = 0xdeadbeef;
  expect_refused(send(bad), GPUOS_ERR_VERSION, "magic");
  bad = l;
  bad.hdr.abi_version = 3;
  expect_refused(send(bad), GPUOS_ERR_VERSION, "version");
  // A tenant of ABI v1 (one block it could write whole) is refused: it runs as on_no_daemon says.
  bad.hdr.abi_version = 1;
  expect_refused(send(bad), GPUOS_ERR_VERSION, "version");
  bad = l;
  bad.hdr.type = 0;
  expect_refused(send(bad), GPUOS_ERR_BAD_MESSAGE, "unknown message type");
  bad.hdr.type = 99;
  expect_refused(send(bad), GPUOS_ERR_BAD_MESSAGE, "unknown message type");
  bad = l;
  bad.hdr.size = sizeof(l) + 1;
  expect_refused(send(bad), GPUOS_ERR_BAD_MESSAGE);
  // Header right, datagram truncated / padded.
  expect_refused(core->handle_message(conn, &l, sizeof(l) - 1), GPUOS_ERR_BAD_MESSAGE);
  std::memcpy(buf, &l, sizeof(l));
  expect_refused(core->handle_message(conn, buf, sizeof(l) + 8), GPUOS_ERR_BAD_MESSAGE);
  expect_refused(core->handle_receive_error(conn, -EMSGSIZE), GPUOS_ERR_BAD_MESSAGE, "larger than");
  EXPECT_EQ(core->live_tenants(), 0u);
}

TEST_F(Fixture, MessagesMeantForTheOtherDirection) {
  for (uint32_t type : {GPUOS_MSG_REGISTER_REPLY, GPUOS_MSG_GPU_INFO, GPUOS_MSG_TENANT_INFO, GPUOS_MSG_LIST_END,
                        GPUOS_MSG_REPLY, GPUOS_MSG_TENANT_GPU}) {
    std::vector<unsigned char> b(message_size(type), 0);
    init_header(reinterpret_cast<gpuos_msg_header*>(b.data()), static_cast<gpuos_msg_type>(type),
                static_cast<uint32_t>(b.size()), 5);
    SCOPED_TRACE(type);
    expect_refused(core->handle_message(conn, b.data(), b.size()), GPUOS_ERR_BAD_MESSAGE, "sent by the daemon");
  }
}

TEST_F(Fixture, RegisterFieldValidation) {
  auto m = make_register(conn.peer.pid);
  m.tenant_class = 0;
  expect_refused(send(m), GPUOS_ERR_BAD_MESSAGE, "class");
  m.tenant_class = 3;
  expect_refused(send(m), GPUOS_ERR_BAD_MESSAGE, "class");
  m = make_register(conn.peer.pid);
  m.weight = 0;
  expect_refused(send(m), GPUOS_ERR_BAD_MESSAGE, "weight");
  m.weight = 10001;
  expect_refused(send(m), GPUOS_ERR_BAD_MESSAGE, "weight");
  m = make_register(conn.peer.pid);
  std::memset(m.name, 'x', sizeof(m.name));
  expect_refused(send(m), GPUOS_ERR_BAD_MESSAGE, "NUL");
  m = make_register(conn.peer.pid + 1);  // lying pid
  expect_refused(send(m), GPUOS_ERR_PERMISSION, "does not match");
  EXPECT_EQ(core->live_tenants(), 0u);
  EXPECT_EQ(conn.tenant_id, 0u);
}

TEST_F(Fixture, RegisterCreatesSealedControlBlockAndRefusesTwice) {
  auto m = make_register(conn.peer.pid, "hp");
  m.tenant_class = GPUOS_CLASS_GUARANTEED;
  m.weight = 10000;
  m.requested_mem_bytes = 1 << 20;
  Outcome o = send(m);
  ASSERT_EQ(o.replies.size(), 1u);
  EXPECT_FALSE(o.close);
  auto r = decode<gpuos_msg_register_reply>(o.replies[0]);
  EXPECT_EQ(r.status, GPUOS_OK);
  EXPECT_EQ(r.hdr.seq, 42u);
  EXPECT_EQ(r.tenant_id, 1u);
  EXPECT_EQ(r.tenant_class, static_cast<uint32_t>(GPUOS_CLASS_GUARANTEED));
  EXPECT_EQ(r.control_block_size, sizeof(gpuos_control_block));
  EXPECT_EQ(r.grant_block_size, sizeof(gpuos_grant_block));
  EXPECT_EQ(o.registered, 1u);
  // Both blocks go out, the grant block first. The seals hold: the tenant cannot shrink or grow
  // either file (core_security_test: nor write the grant block).
  for (int fd : o.replies[0].fds) {
    ASSERT_GE(fd, 0);
    EXPECT_NE(ftruncate(fd, 0), 0);
    EXPECT_NE(ftruncate(fd, 8192), 0);
  }
  const gpuos_control_block* cb = core->control_block(1);
  ASSERT_NE(cb, nullptr);
  EXPECT_EQ(cb->magic, GPUOS_ABI_MAGIC);
  EXPECT_EQ(cb->abi_version, GPUOS_ABI_VERSION);
  EXPECT_EQ(cb->size, sizeof(gpuos_control_block));
  EXPECT_EQ(cb->tenant_id, 1u);
  const gpuos_grant_block* g = core->grant_block(1);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->magic, GPUOS_ABI_MAGIC);
  EXPECT_EQ(g->abi_version, GPUOS_ABI_VERSION);
  EXPECT_EQ(g->size, sizeof(gpuos_grant_block));
  EXPECT_EQ(g->tenant_id, 1u);
  EXPECT_EQ(g->tenant_class, static_cast<uint32_t>(GPUOS_CLASS_GUARANTEED));
  EXPECT_EQ(g->gate, GPUOS_GATE_OPEN);
  EXPECT_EQ(g->daemon_alive, 1u);
  EXPECT_EQ(g->mem_quota_bytes, 1u << 20);

  // REGISTER again on the same connection.
  expect_refused(send(make_register(conn.peer.pid)), GPUOS_ERR_BAD_MESSAGE, "already registered");
  EXPECT_EQ(core->live_tenants(), 1u);
  core->connection_closed(conn);
  EXPECT_EQ(core->live_tenants(), 0u);
  ASSERT_EQ(core->history().size(), 1u);
  EXPECT_EQ(core->history()[0].state, static_cast<uint32_t>(GPUOS_TENANT_EXITED));
  EXPECT_EQ(core->history()[0].exited_unix_ms, 1700000000000u);
  core->connection_closed(conn);  // idempotent
  EXPECT_EQ(core->history().size(), 1u);
}

TEST_F(Fixture, TenantTableLimitAndHistoryRing) {
  std::vector<Connection> conns(5);
  for (int i = 0; i < 5; ++i) {
    conns[i].id = 10 + i;
    conns[i].peer.pid = 100 + i;
    auto m = make_register(100 + i);
    Outcome o = core->handle_message(conns[i], &m, sizeof(m));
    if (i < 4) {
      ASSERT_EQ(decode<gpuos_msg_register_reply>(o.replies[0]).status, GPUOS_OK);
    } else {
      expect_refused(o, GPUOS_ERR_LIMIT, "max_tenants");
    }
  }
  for (auto& c : conns) core->connection_closed(c);
  EXPECT_EQ(core->live_tenants(), 0u);
  ASSERT_EQ(core->history().size(), 3u);  // ring of 3 keeps the newest
  EXPECT_EQ(core->history().front().tenant_id, 2u);
  EXPECT_EQ(core->history().back().tenant_id, 4u);
}

TEST_F(Fixture, ListReportsCountersAndGates) {
  auto m = make_register(conn.peer.pid, "be");
  Outcome reg = send(m);
  ASSERT_EQ(reg.registered, 1u);
  // The tenant's side: a second mapping of the passed control block.
  auto* cb = static_cast<gpuos_control_block*>(
      mmap(nullptr, sizeof(gpuos_control_block), PROT_READ | PROT_WRITE, MAP_SHARED, reg.replies[0].fds[1], 0));
  ASSERT_NE(cb, MAP_FAILED);
  const gpuos_grant_block* grants = core->grant_block(1);
  std::atomic_ref<uint64_t>(cb->launches).fetch_add(7);
  std::atomic_ref<uint64_t>(cb->mem_used_per_device[0]).store(3 << 20);
  std::atomic_ref<uint64_t>(cb->mem_peak_bytes).store(5 << 20);
  ASSERT_EQ(core->admin_set_gate(1, GPUOS_GATE_CLOSED), GPUOS_OK);
  EXPECT_EQ(grants->grant_epoch, 1u);

  Connection client;
  client.peer.admin = true;  // an admin's `gpuos ps`: every tenant
  client.id = 2;
  gpuos_msg_list l{};
  init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 9);
  Outcome o = core->handle_message(client, &l, sizeof(l));
  ASSERT_EQ(o.replies.size(), 3u);
  EXPECT_FALSE(o.close);
  auto g = decode<gpuos_msg_gpu_info>(o.replies[0]);
  EXPECT_EQ(g.used_mem_bytes, 3u << 20);
  EXPECT_EQ(g.sm_count, 132u);
  auto t = decode<gpuos_msg_tenant_info>(o.replies[1]);
  EXPECT_EQ(t.hdr.seq, 9u);
  EXPECT_EQ(t.launches, 7u);
  EXPECT_EQ(t.mem_peak_bytes, 5u << 20);
  EXPECT_EQ(t.state, static_cast<uint32_t>(GPUOS_TENANT_GATED));
  EXPECT_STREQ(t.name, "be");
  auto end = decode<gpuos_msg_reply>(o.replies[2]);
  EXPECT_EQ(type_of(o.replies[2]), static_cast<uint32_t>(GPUOS_MSG_LIST_END));
  EXPECT_EQ(end.count, 1u);

  l.flags = 0x80;
  expect_refused(core->handle_message(client, &l, sizeof(l)), GPUOS_ERR_BAD_MESSAGE, "flags");

  // Orderly shutdown: daemon_alive 0 and gate open.
  core->shutdown();
  EXPECT_EQ(grants->daemon_alive, 0u);
  EXPECT_EQ(grants->gate, GPUOS_GATE_OPEN);
  munmap(cb, sizeof(*cb));
}

TEST_F(Fixture, AdminOnlyMessages) {
  gpuos_msg_set_gate sg{};
  init_header(&sg.hdr, GPUOS_MSG_SET_GATE, sizeof(sg), 3);
  sg.tenant_id = 1;
  sg.gate = GPUOS_GATE_CLOSED;
  expect_refused(send(sg), GPUOS_ERR_PERMISSION, "admin");
  gpuos_msg_header sd{};
  init_header(&sd, GPUOS_MSG_SHUTDOWN, sizeof(sd), 4);
  expect_refused(send(sd), GPUOS_ERR_PERMISSION, "admin");

  conn.peer.admin = true;
  expect_refused(send(sg), GPUOS_ERR_NOT_FOUND, "no live tenant");
  auto m = make_register(conn.peer.pid);
  ASSERT_EQ(send(m).registered, 1u);
  sg.gate = 2;
  expect_refused(send(sg), GPUOS_ERR_BAD_MESSAGE, "gate value");
  sg.gate = GPUOS_GATE_CLOSED;
  Outcome ok = send(sg);
  ASSERT_EQ(ok.replies.size(), 1u);
  EXPECT_FALSE(ok.close);
  EXPECT_EQ(decode<gpuos_msg_reply>(ok.replies[0]).status, GPUOS_OK);
  EXPECT_EQ(core->grant_block(1)->gate, GPUOS_GATE_CLOSED);
  Outcome down = send(sd);
  EXPECT_TRUE(down.shutdown);
  EXPECT_EQ(decode<gpuos_msg_reply>(down.replies[0]).status, GPUOS_OK);
}

class LoweringPolicy final : public slots::TimeGate {
 public:
  const char* name() const override { return "test"; }
  void admit(const slots::GateTenant& v, slots::Admission* a) override {
    if (v.name == "nope") {
      a->status = GPUOS_ERR_REFUSED;
      a->reason = "not today";
    }
    if (v.name == "demote") a->granted_class = GPUOS_CLASS_BEST_EFFORT;
    if (v.name == "promote") a->granted_class = GPUOS_CLASS_GUARANTEED;  // must be ignored
    if (v.name == "closed") a->initial_gate = GPUOS_GATE_CLOSED;
  }
  void on_exit(uint32_t) override { ++exits; }
  slots::GateActions decide(const slots::GateView&) override { return {}; }
  int exits = 0;
};

TEST_F(Fixture, PolicyHooks) {
  auto p = std::make_unique<LoweringPolicy>();
  LoweringPolicy* pol = p.get();
  make_core(8, 8, std::move(p));
  expect_refused(send(make_register(conn.peer.pid, "nope")), GPUOS_ERR_REFUSED, "not today");

  auto m = make_register(conn.peer.pid, "demote");
  m.tenant_class = GPUOS_CLASS_GUARANTEED;
  Outcome o = send(m);
  EXPECT_EQ(decode<gpuos_msg_register_reply>(o.replies[0]).tenant_class,
            static_cast<uint32_t>(GPUOS_CLASS_BEST_EFFORT));
  core->connection_closed(conn);
  EXPECT_EQ(pol->exits, 1);

  o = send(make_register(conn.peer.pid, "promote"));
  EXPECT_EQ(decode<gpuos_msg_register_reply>(o.replies[0]).tenant_class,
            static_cast<uint32_t>(GPUOS_CLASS_BEST_EFFORT));
  core->connection_closed(conn);

  o = send(make_register(conn.peer.pid, "closed"));
  ASSERT_NE(o.registered, 0u);
  EXPECT_EQ(core->grant_block(o.registered)->gate, GPUOS_GATE_CLOSED);
}

// LIST says who holds a closed gate: the policy, an admin (gpuos gate ID close), or both.
TEST_F(Fixture, ListTellsAnAdminHoldFromAPolicyGate) {
  make_core(8, 8, std::make_unique<LoweringPolicy>());
  const uint32_t id = send(make_register(conn.peer.pid, "closed")).registered;  // the policy closes it
  ASSERT_NE(id, 0u);
  auto listed = [&] {
    Connection client;
    client.peer.admin = true;  // an admin's `gpuos ps`: every tenant
    client.id = 2;
    gpuos_msg_list l{};
    init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 9);
    Outcome o = core->handle_message(client, &l, sizeof(l));
    EXPECT_EQ(o.replies.size(), 3u);  // GPU_INFO, TENANT_INFO, LIST_END
    return decode<gpuos_msg_tenant_info>(o.replies.at(1));
  };
  gpuos_msg_tenant_info t = listed();
  EXPECT_EQ(t.state, static_cast<uint32_t>(GPUOS_TENANT_GATED));
  EXPECT_EQ(t.gate_by, GPUOS_GATE_BY_POLICY);
  ASSERT_EQ(core->admin_set_gate(id, GPUOS_GATE_CLOSED), GPUOS_OK);
  t = listed();
  EXPECT_EQ(t.state, static_cast<uint32_t>(GPUOS_TENANT_GATED));
  EXPECT_EQ(t.gate_by, GPUOS_GATE_BY_ADMIN | GPUOS_GATE_BY_POLICY);
  ASSERT_EQ(core->admin_set_gate(id, GPUOS_GATE_OPEN), GPUOS_OK);  // released: the policy (open) decides
  t = listed();
  EXPECT_EQ(t.state, static_cast<uint32_t>(GPUOS_TENANT_RUNNING));
  EXPECT_EQ(t.gate_by, 0u);
  core->connection_closed(conn);
  EXPECT_EQ(core->history().back().gate_by, 0u);  // an exited tenant has no gate
}

// SPACE_QUERY: `gpuos run --space` asks gpuosd, which owns the config, about a domain.
TEST_F(Fixture, SpaceQueryAnswersFromTheDaemonsConfig) {
  auto query = [&](const char* domain) {
    gpuos_msg_space_query q{};
    init_header(&q.hdr, GPUOS_MSG_SPACE_QUERY, sizeof(q), 5);
    std::strncpy(q.domain, domain, sizeof(q.domain) - 1);
    return send(q);
  };
  Outcome o = query("vision");  // no domains at all
  ASSERT_EQ(o.replies.size(), 1u);
  EXPECT_FALSE(o.close);
  ASSERT_EQ(type_of(o.replies[0]), static_cast<uint32_t>(GPUOS_MSG_SPACE_INFO));
  auto none = decode<gpuos_msg_space_info>(o.replies[0]);
  EXPECT_EQ(none.hdr.seq, 5u);
  EXPECT_EQ(none.status, GPUOS_ERR_NOT_FOUND);
  EXPECT_NE(std::string(none.text).find("defines no [[spatial.domain]]"), std::string::npos) << none.text;
  EXPECT_EQ(none.mps_pipe_dir[0], '\0');

  CoreOptions opts;
  std::string asked;
  opts.space_query = [&](const std::string& domain, const Peer& peer) {
    asked = domain + " uid " + std::to_string(peer.uid);
    SpaceDomainAnswer a;
    if (domain == "long") {
      a.status = GPUOS_OK;
      a.pipe_dir = "/" + std::string(200, 'x');
      return a;
    }
    if (domain != "vision") {
      a.text = "no such trust domain in gpuosd's config (known: vision)";
      return a;
    }
    a.status = peer.uid == 1000 ? GPUOS_OK : GPUOS_ERR_PERMISSION;
    a.pipe_dir = "/run/gpuos/mps/vision/pipe";
    a.log_dir = "/run/gpuos/mps/vision/log";
    a.text = "unavailable: not started yet";
    return a;
  };
  core = std::make_unique<Core>(std::move(opts));
  auto vision = decode<gpuos_msg_space_info>(query("vision").replies.at(0));
  EXPECT_EQ(asked, "vision uid 1000");
  EXPECT_EQ(vision.status, GPUOS_OK);
  EXPECT_EQ(vision.available, 0u);
  EXPECT_STREQ(vision.mps_pipe_dir, "/run/gpuos/mps/vision/pipe");
  EXPECT_STREQ(vision.mps_log_dir, "/run/gpuos/mps/vision/log");
  EXPECT_STREQ(vision.text, "unavailable: not started yet");
  EXPECT_EQ(decode<gpuos_msg_space_info>(query("other").replies.at(0)).status, GPUOS_ERR_NOT_FOUND);
  // Paths the message cannot carry whole are not sent cut.
  auto cut = decode<gpuos_msg_space_info>(query("long").replies.at(0));
  EXPECT_EQ(cut.status, GPUOS_ERR_INTERNAL);
  EXPECT_EQ(cut.mps_pipe_dir[0], '\0');
  conn.peer.uid = 1001;
  EXPECT_EQ(decode<gpuos_msg_space_info>(query("vision").replies.at(0)).status, GPUOS_ERR_PERMISSION);

  gpuos_msg_space_query bad{};
  init_header(&bad.hdr, GPUOS_MSG_SPACE_QUERY, sizeof(bad), 6);
  std::memset(bad.domain, 'a', sizeof(bad.domain));
  expect_refused(send(bad), GPUOS_ERR_BAD_MESSAGE, "NUL");
}

// A poor man's fuzz pass: random bytes, and random bodies behind valid headers, never crash and
// always get at least one well-formed reply.
TEST_F(Fixture, RandomInputNeverCrashes) {
  std::mt19937 rng(12345);
  unsigned char buf[GPUOS_MSG_MAX_SIZE + 1];
  for (int i = 0; i < 4000; ++i) {
    std::size_t len = rng() % sizeof(buf);
    for (auto& b : buf) b = static_cast<unsigned char>(rng());
    if (i % 2 == 0) {
      uint32_t type = 1 + rng() % GPUOS_MSG_TYPE_MAX;
      len = message_size(type);
      init_header(reinterpret_cast<gpuos_msg_header*>(buf), static_cast<gpuos_msg_type>(type),
                  static_cast<uint32_t>(len), i);
    }
    conn.peer.admin = (i % 3) == 0;
    const bool registered = conn.tenant_id != 0;
    gpuos_msg_header h{};
    if (len >= sizeof(h)) std::memcpy(&h, buf, sizeof(h));
    Outcome o = core->handle_message(conn, buf, len);
    if (o.replies.empty()) {
      // Only a valid ACTIVITY from the tenant's own connection goes unanswered.
      ASSERT_TRUE(registered);
      ASSERT_EQ(h.type, static_cast<uint32_t>(GPUOS_MSG_ACTIVITY));
      ASSERT_FALSE(o.close);
    }
    if (o.close) core->connection_closed(conn);
    // Register now and then so that ACTIVITY from a tenant's connection is exercised too.
    if (i % 50 == 0 && conn.tenant_id == 0) {
      auto m = make_register(conn.peer.pid);
      ASSERT_NE(send(m).registered, 0u);
    }
  }
}

gpuos_msg_activity make_activity(uint32_t busy, uint32_t waiting) {
  gpuos_msg_activity m{};
  init_header(&m.hdr, GPUOS_MSG_ACTIVITY, sizeof(m), 77);
  m.busy = busy;
  m.waiting = waiting;
  return m;
}

// Records what the core hands to the time gate, and answers what the test tells it to.
class RecordingPolicy final : public slots::TimeGate {
 public:
  const char* name() const override { return "recording"; }
  void admit(const slots::GateTenant& v, slots::Admission* a) override {
    a->max_inflight = 5;
    a->idle_grace_us = 300;
    if (throw_in == "admit") throw std::runtime_error("boom");
  }
  slots::GateActions decide(const slots::GateView& v) override {
    events.push_back(v.event);
    if (v.event == slots::Event::kActivity || v.event == slots::Event::kAdmin) {
      ++activities;
      for (const auto& t : v.tenants) {
        if (t.id == v.tenant_id) last = t;
      }
      last_now = v.now_ns;
    }
    seen_ids.clear();
    for (const auto& t : v.tenants) seen_ids.push_back(t.id);
    if (throw_in == slots::event_name(v.event)) {
      if (v.event == slots::Event::kActivity) throw 42;  // not even a std::exception
      throw std::runtime_error("boom");
    }
    slots::GateActions a;
    for (const auto& [id, gate] : gates) a.gates.push_back({id, gate, 0, {}});
    a.next_tick_ns = next_in == 0 ? 0 : v.now_ns + next_in;
    return a;
  }
  uint64_t next_in = 7;  // when it asks to decide again (0: no particular time)
  int activities = 0;
  std::vector<slots::Event> events;
  slots::GateTenant last;
  uint64_t last_now = 0;
  std::vector<uint32_t> seen_ids;
  std::map<uint32_t, uint32_t> gates;  // what decide answers
  std::string throw_in;                // the event (or "admit") to throw in
};

struct ActivityFixture : Fixture {
  RecordingPolicy* pol = nullptr;
  uint64_t mono = 5000;
  void SetUp() override {
    auto p = std::make_unique<RecordingPolicy>();
    pol = p.get();
    CoreOptions o;
    o.max_tenants = 8;
    o.time_gate = std::move(p);
    o.mono_ns = [this] { return mono; };
    core = std::make_unique<Core>(std::move(o));
    conn = Connection{};
    conn.id = 1;
    conn.peer.pid = 1234;
    conn.peer.uid = 1000;
  }
  gpuos_control_block* map_block(const Outcome& reg) {
    void* p = mmap(nullptr, sizeof(gpuos_control_block), PROT_READ | PROT_WRITE, MAP_SHARED, reg.replies[0].fds[1], 0);
    EXPECT_NE(p, MAP_FAILED);
    return static_cast<gpuos_control_block*>(p);
  }
};

TEST_F(ActivityFixture, RefusedFromAConnectionWithoutATenant) {
  expect_refused(send(make_activity(1, 0)), GPUOS_ERR_PERMISSION, "registered");
  EXPECT_EQ(pol->activities, 0);
  // An admin's connection is no better.
  conn.peer.admin = true;
  expect_refused(send(make_activity(0, 0)), GPUOS_ERR_PERMISSION);
  EXPECT_EQ(pol->activities, 0);
}

TEST_F(ActivityFixture, AcceptedFromTheTenantsOwnConnectionWithoutAReply) {
  Outcome reg = send(make_register(conn.peer.pid, "be"));
  ASSERT_EQ(reg.registered, 1u);
  EXPECT_EQ(pol->events, (std::vector<slots::Event>{slots::Event::kAdmitted}));
  gpuos_control_block* cb = map_block(reg);
  // The admission's daemon-written fields are in the grant block before the fds go out.
  EXPECT_EQ(core->grant_block(1)->max_inflight, 5u);
  EXPECT_EQ(core->grant_block(1)->idle_grace_us, 300u);

  std::atomic_ref<uint32_t>(cb->busy).store(1);
  Outcome o = send(make_activity(1, 0));
  EXPECT_TRUE(o.replies.empty());
  EXPECT_FALSE(o.close);
  EXPECT_FALSE(o.shutdown);
  ASSERT_EQ(pol->activities, 1);
  EXPECT_EQ(pol->last.id, 1u);
  EXPECT_TRUE(pol->last.busy);
  EXPECT_FALSE(pol->last.waiting);
  EXPECT_EQ(pol->last_now, 5000u);

  // The block's words are authoritative, not the message's echo.
  std::atomic_ref<uint32_t>(cb->busy).store(0);
  std::atomic_ref<uint32_t>(cb->waiting).store(1);
  o = send(make_activity(1, 0));
  EXPECT_TRUE(o.replies.empty());
  EXPECT_FALSE(pol->last.busy);
  EXPECT_TRUE(pol->last.waiting);
  EXPECT_EQ(core->live_tenants(), 1u);

  // Values other than 0/1 are malformed (REPLY + close, like other misuse).
  expect_refused(send(make_activity(2, 0)), GPUOS_ERR_BAD_MESSAGE, "0 or 1");
  expect_refused(send(make_activity(0, 7)), GPUOS_ERR_BAD_MESSAGE, "0 or 1");
  // A truncated ACTIVITY fails validation before anything else.
  auto m = make_activity(1, 0);
  expect_refused(core->handle_message(conn, &m, sizeof(m) - 4), GPUOS_ERR_BAD_MESSAGE);
  EXPECT_EQ(pol->activities, 2);
  munmap(cb, sizeof(*cb));
}

TEST_F(ActivityFixture, BeyondItsRateATenantsActivityIsDecidedOnAtATick) {
  // ACTIVITY is a wake-up, and each one costs a decision over every tenant: beyond a tenant's rate
  // (activity_rate.h) its words are decided on at a tick shortly after, so one that flips them in a
  // loop cannot keep gpuosd deciding, and no change is lost.
  pol->next_in = 0;
  Outcome reg = send(make_register(conn.peer.pid, "flood"));
  ASSERT_EQ(reg.registered, 1u);
  gpuos_control_block* cb = map_block(reg);
  const int burst = static_cast<int>(ActivityRate::kBurst);
  for (int i = 0; i < burst + 500; ++i) {
    std::atomic_ref<uint32_t>(cb->busy).store(i % 2);
    EXPECT_TRUE(send(make_activity(i % 2, 0)).replies.empty());
  }
  EXPECT_EQ(pol->activities, burst) << "a decision per message up to the burst";
  EXPECT_EQ(core->next_tick_ns(mono), mono + ActivityRate::kDeferNs) << "the held-back changes get a tick";
  std::atomic_ref<uint32_t>(cb->busy).store(1);
  mono += ActivityRate::kDeferNs;
  core->tick(mono);
  EXPECT_EQ(pol->events.back(), slots::Event::kTick);
  EXPECT_EQ(core->next_tick_ns(mono), 0u) << "decided: nothing held back";
  // At its rate again (a second later the bucket is full): each message decides at once.
  mono += 1'000'000'000;
  send(make_activity(1, 0));
  EXPECT_EQ(pol->activities, burst + 1);
  EXPECT_TRUE(pol->last.busy);
  munmap(cb, sizeof(*cb));
}

TEST(ActivityRate, ABucketOfBurstRefilledAtTheRate) {
  ActivityRate r;
  int taken = 0;
  for (int i = 0; i < 3000; ++i) taken += r.take(1000) ? 1 : 0;
  EXPECT_EQ(taken, static_cast<int>(ActivityRate::kBurst));
  EXPECT_EQ(r.deferred, 3000 - ActivityRate::kBurst);
  EXPECT_FALSE(r.take(1000 + 10'000)) << "10 us: a fifth of a token";
  EXPECT_TRUE(r.take(1000 + 100'000)) << "100 us: two tokens";
  EXPECT_TRUE(r.take(1000 + 100'000));
  EXPECT_FALSE(r.take(1000 + 100'000));
  EXPECT_FALSE(r.take(500)) << "a clock that goes back refills nothing";
}

TEST_F(ActivityFixture, AdminPinBeatsThePolicy) {
  std::vector<Connection> conns(2);
  for (int i = 0; i < 2; ++i) {
    conns[i].id = 10 + i;
    conns[i].peer.pid = 100 + i;
    auto m = make_register(100 + i);
    ASSERT_EQ(core->handle_message(conns[i], &m, sizeof(m)).registered, static_cast<uint32_t>(i + 1));
  }
  // Admin closes tenant 2: pinned.
  Connection admin;
  admin.id = 99;
  admin.peer.admin = true;
  gpuos_msg_set_gate sg{};
  init_header(&sg.hdr, GPUOS_MSG_SET_GATE, sizeof(sg), 3);
  sg.tenant_id = 2;
  sg.gate = GPUOS_GATE_CLOSED;
  ASSERT_EQ(decode<gpuos_msg_reply>(core->handle_message(admin, &sg, sizeof(sg)).replies[0]).status, GPUOS_OK);
  EXPECT_TRUE(core->pinned(2));
  EXPECT_EQ(core->grant_block(2)->gate, GPUOS_GATE_CLOSED);
  // The policy cannot open a pinned gate, but may close the other one; the view shows live tenants
  // in id order.
  pol->gates = {{1, GPUOS_GATE_CLOSED}, {2, GPUOS_GATE_OPEN}};
  auto a = make_activity(0, 0);
  EXPECT_TRUE(core->handle_message(conns[1], &a, sizeof(a)).replies.empty());
  EXPECT_EQ(pol->seen_ids, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(core->grant_block(1)->gate, GPUOS_GATE_CLOSED);
  EXPECT_EQ(core->grant_block(2)->gate, GPUOS_GATE_CLOSED);
  // A store of the same value is not a grant change.
  uint32_t epoch = core->grant_block(1)->grant_epoch;
  EXPECT_TRUE(core->handle_message(conns[0], &a, sizeof(a)).replies.empty());
  EXPECT_EQ(core->grant_block(1)->grant_epoch, epoch);
  // The admin opens it: pin released and the policy is asked again at once.
  pol->gates.clear();
  int before = pol->activities;
  sg.gate = GPUOS_GATE_OPEN;
  ASSERT_EQ(decode<gpuos_msg_reply>(core->handle_message(admin, &sg, sizeof(sg)).replies[0]).status, GPUOS_OK);
  EXPECT_FALSE(core->pinned(2));
  EXPECT_EQ(core->grant_block(2)->gate, GPUOS_GATE_OPEN);
  EXPECT_EQ(pol->activities, before + 1);
  EXPECT_EQ(pol->events.back(), slots::Event::kAdmin);
  EXPECT_EQ(pol->last.id, 2u);
  for (auto& c : conns) core->connection_closed(c);
}

// Issue #25: a tenant blocked at its closed gate the whole time shows the wait in progress (its
// own counter grows only when a wait ends), by gpuosd's clock and only while gpuosd holds the gate
// closed: the tenant's waiting word alone proves nothing.
TEST_F(ActivityFixture, ListShowsTheGateWaitInProgress) {
  Outcome reg = send(make_register(conn.peer.pid, "be"));
  ASSERT_EQ(reg.registered, 1u);
  gpuos_control_block* cb = map_block(reg);
  auto listed = [&] {
    Connection client;
    client.peer.admin = true;  // an admin's `gpuos ps`: every tenant
    client.id = 2;
    gpuos_msg_list l{};
    init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 9);
    Outcome o = core->handle_message(client, &l, sizeof(l));
    EXPECT_GE(o.replies.size(), 2u);
    return decode<gpuos_msg_tenant_info>(o.replies.at(o.replies.size() - 2));  // the last before LIST_END
  };
  // Waiting at an open gate: not believed.
  std::atomic_ref<uint32_t>(cb->waiting).store(1);
  EXPECT_TRUE(send(make_activity(0, 1)).replies.empty());
  mono += 2'000'000'000;
  EXPECT_EQ(listed().gate_waiting_ms, 0u);

  // gpuosd closes the gate; the tenant's ACTIVITY says it waits: counted from then.
  ASSERT_EQ(core->admin_set_gate(1, GPUOS_GATE_CLOSED), GPUOS_OK);
  EXPECT_TRUE(send(make_activity(0, 1)).replies.empty());
  mono += 5'000'000'000;
  gpuos_msg_tenant_info t = listed();
  EXPECT_EQ(t.gate_waiting_ms, 5000u);
  EXPECT_EQ(t.gate_wait_ns, 0u);  // no wait has ended
  EXPECT_EQ(t.state, static_cast<uint32_t>(GPUOS_TENANT_GATED));
  mono += 1'500'000'000;
  EXPECT_EQ(listed().gate_waiting_ms, 6500u);

  // Open, the wait is over whatever the word says; closed again, a new wait starts at the first
  // observation (a LIST here: the tenant sent nothing).
  ASSERT_EQ(core->admin_set_gate(1, GPUOS_GATE_OPEN), GPUOS_OK);
  mono += 1'000'000'000;
  EXPECT_EQ(listed().gate_waiting_ms, 0u);
  ASSERT_EQ(core->admin_set_gate(1, GPUOS_GATE_CLOSED), GPUOS_OK);
  EXPECT_EQ(listed().gate_waiting_ms, 0u);
  mono += 250'000'000;
  EXPECT_EQ(listed().gate_waiting_ms, 250u);
  // The tenant stops waiting (its wait then counts in gate_wait_ns, which it writes).
  std::atomic_ref<uint32_t>(cb->waiting).store(0);
  EXPECT_TRUE(send(make_activity(0, 0)).replies.empty());
  mono += 1'000'000'000;
  EXPECT_EQ(listed().gate_waiting_ms, 0u);
  core->connection_closed(conn);
  munmap(cb, sizeof(*cb));
}

TEST_F(ActivityFixture, AThrowingPolicyFallsBackToOpen) {
  core->tick(100);
  EXPECT_EQ(core->next_tick_ns(100), 107u);
  Outcome reg = send(make_register(conn.peer.pid));
  ASSERT_EQ(reg.registered, 1u);
  Connection c2;
  c2.id = 2;
  c2.peer.pid = 77;
  auto m2 = make_register(77);
  ASSERT_EQ(core->handle_message(c2, &m2, sizeof(m2)).registered, 2u);
  pol->gates = {{1, GPUOS_GATE_CLOSED}};
  core->tick(200);
  ASSERT_EQ(core->grant_block(1)->gate, GPUOS_GATE_CLOSED);
  ASSERT_EQ(core->admin_set_gate(2, GPUOS_GATE_CLOSED), GPUOS_OK);  // pinned by an admin
  EXPECT_EQ(core->policy_failures(), 0u);
  EXPECT_STREQ(core->time_gate().name(), "recording");

  pol->throw_in = "activity";
  Outcome o = send(make_activity(1, 0));
  EXPECT_TRUE(o.replies.empty());  // the tenant is not punished for the policy's bug
  EXPECT_FALSE(o.close);
  EXPECT_EQ(core->policy_failures(), 1u);
  EXPECT_EQ(core->time_gate_failures(), 1u);
  EXPECT_STREQ(core->time_gate().name(), "open");
  EXPECT_EQ(core->grant_block(1)->gate, GPUOS_GATE_OPEN);    // opened
  EXPECT_EQ(core->grant_block(1)->max_inflight, 0u);         // unbounded again
  EXPECT_EQ(core->grant_block(2)->gate, GPUOS_GATE_CLOSED);  // the admin's pin stays
  EXPECT_EQ(core->next_tick_ns(100), 0u);
  // Everything goes on under the open policy.
  send(make_activity(0, 0));
  core->tick(1);
  EXPECT_EQ(core->policy_failures(), 1u);
  core->connection_closed(conn);
  core->connection_closed(c2);
}

TEST_F(ActivityFixture, AThrowingAdmitStillAdmitsAsRequested) {
  pol->throw_in = "admit";
  Outcome reg = send(make_register(conn.peer.pid));
  ASSERT_EQ(reg.registered, 1u);
  EXPECT_EQ(decode<gpuos_msg_register_reply>(reg.replies[0]).status, GPUOS_OK);
  EXPECT_EQ(core->policy_failures(), 1u);
  EXPECT_EQ(core->grant_block(1)->max_inflight, 0u);  // the pre-filled admission, not the half-made one
  EXPECT_EQ(core->grant_block(1)->gate, GPUOS_GATE_OPEN);
  core->connection_closed(conn);
}

TEST_F(ActivityFixture, AThrowingTickFallsBackToo) {
  pol->throw_in = "tick";
  core->tick(1);
  EXPECT_EQ(core->policy_failures(), 1u);
  EXPECT_STREQ(core->time_gate().name(), "open");
}

TEST_F(ActivityFixture, ARejectedActionFallsBackToo) {
  ASSERT_EQ(send(make_register(conn.peer.pid)).registered, 1u);
  pol->gates = {{1, GPUOS_GATE_CLOSED}, {9, GPUOS_GATE_CLOSED}};  // 9 is nobody
  core->tick(1);
  EXPECT_EQ(core->time_gate_failures(), 1u);
  EXPECT_STREQ(core->time_gate().name(), "open");
  EXPECT_EQ(core->grant_block(1)->gate, GPUOS_GATE_OPEN);  // none of the rejected answer was applied
  core->connection_closed(conn);
}

}  // namespace
}  // namespace gpuos::daemon
