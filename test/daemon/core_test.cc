// The pure message-handling function: every kind of bad input, without sockets.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "common/ipc.h"
#include "daemon/core.h"

namespace gpuos::daemon {
namespace {

template <typename M>
M decode(const Outgoing& o) {
  M m{};
  EXPECT_EQ(o.bytes.size(), sizeof(M));
  std::memcpy(&m, o.bytes.data(), std::min(o.bytes.size(), sizeof(M)));
  return m;
}

uint32_t type_of(const Outgoing& o) {
  gpuos_msg_header h{};
  std::memcpy(&h, o.bytes.data(), sizeof(h));
  return h.type;
}

gpuos_msg_register make_register(pid_t pid, const char* name = "t") {
  gpuos_msg_register m{};
  init_header(&m.hdr, GPUOS_MSG_REGISTER, sizeof(m), 42);
  m.pid = pid;
  m.tenant_class = GPUOS_CLASS_BEST_EFFORT;
  m.weight = 100;
  copy_name(m.name, sizeof(m.name), name);
  return m;
}

struct Fixture : ::testing::Test {
  std::unique_ptr<Core> core;
  Connection conn;
  void SetUp() override { make_core(4, 3); }
  void make_core(uint32_t max_tenants, uint32_t history, std::unique_ptr<Policy> policy = nullptr) {
    CoreOptions o;
    o.max_tenants = max_tenants;
    o.history = history;
    o.gpus.push_back(GpuInfo{0, "Sim", "GPU-0", 132, 1ull << 34});
    o.policy = std::move(policy);
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
      EXPECT_EQ(o.replies[0].fd, -1);
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
  bad.hdr.abi_version = 2;
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
                        GPUOS_MSG_REPLY}) {
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
  EXPECT_EQ(o.registered, 1u);
  int fd = o.replies[0].fd;
  ASSERT_GE(fd, 0);
  // The seals hold: the tenant cannot shrink or grow the file.
  EXPECT_NE(ftruncate(fd, 0), 0);
  EXPECT_NE(ftruncate(fd, 8192), 0);
  const gpuos_control_block* cb = core->control_block(1);
  ASSERT_NE(cb, nullptr);
  EXPECT_EQ(cb->magic, GPUOS_ABI_MAGIC);
  EXPECT_EQ(cb->abi_version, GPUOS_ABI_VERSION);
  EXPECT_EQ(cb->size, sizeof(gpuos_control_block));
  EXPECT_EQ(cb->tenant_id, 1u);
  EXPECT_EQ(cb->tenant_class, static_cast<uint32_t>(GPUOS_CLASS_GUARANTEED));
  EXPECT_EQ(cb->gate, GPUOS_GATE_OPEN);
  EXPECT_EQ(cb->daemon_alive, 1u);
  EXPECT_EQ(cb->mem_quota_bytes, 1u << 20);

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
  // The tenant's side: a second mapping of the passed fd.
  auto* cb = static_cast<gpuos_control_block*>(
      mmap(nullptr, sizeof(gpuos_control_block), PROT_READ | PROT_WRITE, MAP_SHARED, reg.replies[0].fd, 0));
  ASSERT_NE(cb, MAP_FAILED);
  std::atomic_ref<uint64_t>(cb->launches).fetch_add(7);
  std::atomic_ref<uint64_t>(cb->mem_used_per_device[0]).store(3 << 20);
  std::atomic_ref<uint64_t>(cb->mem_peak_bytes).store(5 << 20);
  ASSERT_EQ(core->set_gate(1, GPUOS_GATE_CLOSED), GPUOS_OK);
  EXPECT_EQ(cb->grant_epoch, 1u);

  Connection client;
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
  EXPECT_EQ(cb->daemon_alive, 0u);
  EXPECT_EQ(cb->gate, GPUOS_GATE_OPEN);
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
  EXPECT_EQ(core->control_block(1)->gate, GPUOS_GATE_CLOSED);
  Outcome down = send(sd);
  EXPECT_TRUE(down.shutdown);
  EXPECT_EQ(decode<gpuos_msg_reply>(down.replies[0]).status, GPUOS_OK);
}

TEST(Authorisation, IsAdmin) {
  EXPECT_TRUE(is_admin(0, 1000, {}, std::nullopt));
  EXPECT_TRUE(is_admin(1000, 1000, {}, std::nullopt));
  EXPECT_FALSE(is_admin(1001, 1000, {1001, 27}, std::nullopt));
  EXPECT_FALSE(is_admin(1001, 1000, {1001, 27}, gid_t{50}));
  EXPECT_TRUE(is_admin(1001, 1000, {1001, 50}, gid_t{50}));
  // peer_groups of this process contains its own gid.
  auto g = peer_groups(getpid(), getuid(), getgid());
  EXPECT_NE(std::find(g.begin(), g.end(), getgid()), g.end());
}

class LoweringPolicy final : public Policy {
 public:
  const char* name() const override { return "test"; }
  void on_register(const TenantView& v, Admission* a) override {
    if (v.name == "nope") {
      a->status = GPUOS_ERR_REFUSED;
      a->reason = "not today";
    }
    if (v.name == "demote") a->granted_class = GPUOS_CLASS_BEST_EFFORT;
    if (v.name == "promote") a->granted_class = GPUOS_CLASS_GUARANTEED;  // must be ignored
    if (v.name == "closed") a->initial_gate = GPUOS_GATE_CLOSED;
  }
  void on_exit(const TenantView& v, GateControl&) override { ++exits; }
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
  EXPECT_EQ(core->control_block(o.registered)->gate, GPUOS_GATE_CLOSED);
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
    Outcome o = core->handle_message(conn, buf, len);
    ASSERT_FALSE(o.replies.empty());
    if (o.close) core->connection_closed(conn);
  }
}

}  // namespace
}  // namespace gpuos::daemon
