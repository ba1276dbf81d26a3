// SPDX-License-Identifier: Apache-2.0
// The daemon core and server in a thread, over a real socket.
#include <gtest/gtest.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/ipc.h"
#include "daemon/core/core.h"
#include "daemon/server/server.h"

namespace gpuos::daemon {
namespace {

struct Reply {
  long len = 0;
  int fd = -1;          // the first fd passed (fds[0])
  int fds[2] = {-1, -1};
  int nfds = 0;
  unsigned char buf[GPUOS_MSG_MAX_SIZE + 1] = {};
  uint32_t type() const {
    gpuos_msg_header h;
    std::memcpy(&h, buf, sizeof(h));
    return h.type;
  }
  template <typename M>
  M as() const {
    M m{};
    std::memcpy(&m, buf, sizeof(M));
    return m;
  }
};

Reply recv_reply(int sock, int timeout_ms = 2000) {
  Reply r;
  r.len = receive_message_fds(sock, r.buf, sizeof(r.buf), r.fds, 2, &r.nfds, timeout_ms);
  r.fd = r.fds[0];
  return r;
}

struct Listed {
  std::vector<gpuos_msg_gpu_info> gpus;
  std::vector<gpuos_msg_tenant_info> tenants;
  uint32_t end_count = UINT32_MAX;
};

class LiveDaemon : public ::testing::Test {
 protected:
  std::string dir, path;
  std::unique_ptr<Core> core;
  std::unique_ptr<Server> server;
  std::thread loop;
  bool stopped = false;
  // Whether gpuosd's core takes this test process (every tenant here) to run on: its tenants then
  // stay tenants when their connection closes (issue #62), until this says it exited.
  std::atomic<bool> this_process_runs{true};

  void SetUp() override {
    char tmpl[] = "/tmp/gpuosd-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
    path = dir + "/run/gpuosd.sock";  // the server creates run/
    CoreOptions co;
    co.max_tenants = 8;
    co.history = 4;
    co.gpus.push_back(GpuInfo{0, "Sim GPU", "GPU-00000000-0000-0000-0000-000000000000", 132, 16ull << 30, {}, 0});
    co.process_runs = [this](pid_t, uint64_t) { return this_process_runs.load(); };
    configure_core(co);
    core = std::make_unique<Core>(std::move(co));
    ServerOptions so;
    so.socket_path = path;
    so.daemon_uid = geteuid();
    so.max_connections = 16;
    so.tick_ms = 20;
    configure(so);
    server = std::make_unique<Server>(*core, so);
    std::string err;
    ASSERT_TRUE(server->start(&err)) << err;
    loop = std::thread([this] { server->run(); });
  }
  void TearDown() override {
    if (loop.joinable()) {
      server->request_stop();
      loop.join();
    }
    server.reset();
    core.reset();
    std::filesystem::remove_all(dir);
  }

  virtual void configure(ServerOptions&) {}
  virtual void configure_core(CoreOptions&) {}

  int connect() {
    int fd = connect_control_socket(path.c_str());
    EXPECT_GE(fd, 0) << std::strerror(-fd);
    return fd;
  }

  // Registers over a fresh connection; returns the socket, fills tenant id and the mapped blocks
  // (the grant block read-only, as a tenant can; unmap both).
  int register_tenant(const char* name, uint32_t* id, gpuos_control_block** cb,
                      const gpuos_grant_block** grants) {
    int s = connect();
    gpuos_msg_register m{};
    init_header(&m.hdr, GPUOS_MSG_REGISTER, sizeof(m), 7);
    m.pid = getpid();
    m.tenant_class = GPUOS_CLASS_GUARANTEED;
    m.weight = 100;
    copy_name(m.name, sizeof(m.name), name);
    EXPECT_EQ(send_message(s, &m, sizeof(m)), 0);
    Reply r = recv_reply(s);
    EXPECT_EQ(r.len, static_cast<long>(sizeof(gpuos_msg_register_reply)));
    EXPECT_EQ(r.type(), static_cast<uint32_t>(GPUOS_MSG_REGISTER_REPLY));
    auto rr = r.as<gpuos_msg_register_reply>();
    EXPECT_EQ(rr.status, GPUOS_OK) << rr.text;
    EXPECT_EQ(r.nfds, 2);
    *id = rr.tenant_id;
    void* g = mmap(nullptr, sizeof(gpuos_grant_block), PROT_READ, MAP_SHARED, r.fds[0], 0);
    EXPECT_NE(g, MAP_FAILED);
    void* p = mmap(nullptr, sizeof(gpuos_control_block), PROT_READ | PROT_WRITE, MAP_SHARED, r.fds[1], 0);
    EXPECT_NE(p, MAP_FAILED);
    for (int fd : r.fds) close(fd);
    *grants = static_cast<const gpuos_grant_block*>(g);
    *cb = static_cast<gpuos_control_block*>(p);
    return s;
  }

  Listed list(bool include_exited) {
    Listed out;
    int s = connect();
    gpuos_msg_list m{};
    init_header(&m.hdr, GPUOS_MSG_LIST, sizeof(m), 11);
    m.flags = include_exited ? GPUOS_LIST_INCLUDE_EXITED : 0;
    EXPECT_EQ(send_message(s, &m, sizeof(m)), 0);
    for (;;) {
      Reply r = recv_reply(s);
      if (r.len <= 0) {
        ADD_FAILURE() << "listing ended early: " << r.len;
        break;
      }
      char why[GPUOS_TEXT_MAX];
      EXPECT_EQ(validate_message(r.buf, static_cast<std::size_t>(r.len), why, sizeof(why)), GPUOS_OK) << why;
      if (r.type() == GPUOS_MSG_GPU_INFO) out.gpus.push_back(r.as<gpuos_msg_gpu_info>());
      else if (r.type() == GPUOS_MSG_TENANT_INFO) out.tenants.push_back(r.as<gpuos_msg_tenant_info>());
      else {
        EXPECT_EQ(r.type(), static_cast<uint32_t>(GPUOS_MSG_LIST_END));
        out.end_count = r.as<gpuos_msg_reply>().count;
        break;
      }
    }
    close(s);
    return out;
  }

  gpuos_msg_reply request(const void* msg, std::size_t len, bool expect_close) {
    int s = connect();
    EXPECT_EQ(send_message(s, msg, len), 0);
    Reply r = recv_reply(s);
    EXPECT_EQ(r.type(), static_cast<uint32_t>(GPUOS_MSG_REPLY));
    if (expect_close) {
      EXPECT_EQ(recv_reply(s).len, 0) << "connection should be closed";
    }
    close(s);
    return r.as<gpuos_msg_reply>();
  }
};

TEST_F(LiveDaemon, SocketModeAndDirectory) {
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, geteuid() == 0 ? 0666u : 0600u);
  ASSERT_EQ(::stat((dir + "/run").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(LiveDaemon, RegisterCountListExit) {
  uint32_t id = 0;
  gpuos_control_block* cb = nullptr;
  const gpuos_grant_block* grants = nullptr;
  int s = register_tenant("hp", &id, &cb, &grants);
  ASSERT_NE(cb, nullptr);
  EXPECT_EQ(cb->magic, GPUOS_ABI_MAGIC);
  EXPECT_EQ(cb->tenant_id, id);
  EXPECT_EQ(grants->tenant_id, id);
  EXPECT_EQ(grants->daemon_alive, 1u);
  EXPECT_EQ(grants->gate, GPUOS_GATE_OPEN);
  std::atomic_ref<uint64_t>(cb->launches).fetch_add(41, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(cb->graph_launches).fetch_add(2, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(cb->mem_used_per_device[0]).store(64 << 20, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(cb->mem_used_bytes).store(64 << 20, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(cb->mem_peak_bytes).store(96 << 20, std::memory_order_relaxed);

  Listed l = list(false);
  ASSERT_EQ(l.gpus.size(), 1u);
  EXPECT_STREQ(l.gpus[0].name, "Sim GPU");
  EXPECT_STREQ(l.gpus[0].uuid, "00000000-0000-0000-0000-000000000000");  // bare: no room for "GPU-"
  EXPECT_EQ(l.gpus[0].used_mem_bytes, 64u << 20);
  ASSERT_EQ(l.tenants.size(), 1u);
  EXPECT_EQ(l.end_count, 1u);
  EXPECT_EQ(l.tenants[0].tenant_id, id);
  EXPECT_EQ(l.tenants[0].pid, getpid());
  EXPECT_EQ(l.tenants[0].uid, geteuid());
  EXPECT_EQ(l.tenants[0].state, static_cast<uint32_t>(GPUOS_TENANT_RUNNING));
  EXPECT_EQ(l.tenants[0].launches, 41u);
  EXPECT_EQ(l.tenants[0].graph_launches, 2u);
  EXPECT_STREQ(l.tenants[0].name, "hp");
  EXPECT_NE(l.tenants[0].registered_unix_ms, 0u);

  // More counting after the listing, then the connection closes: the process runs on, so it is
  // still the tenant (detached), counted through its block; then the process exits.
  std::atomic_ref<uint64_t>(cb->launches).fetch_add(1, std::memory_order_relaxed);
  close(s);
  Listed d;
  for (int i = 0; i < 100; ++i) {
    d = list(false);
    if (!d.tenants.empty() && d.tenants[0].detached == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(d.tenants.size(), 1u);
  EXPECT_EQ(d.tenants[0].detached, 1u);
  EXPECT_EQ(d.tenants[0].state, static_cast<uint32_t>(GPUOS_TENANT_RUNNING));
  EXPECT_EQ(d.tenants[0].launches, 42u);
  this_process_runs = false;  // noticed at a tick (20 ms)
  Listed h;
  for (int i = 0; i < 100; ++i) {
    h = list(true);
    if (!h.tenants.empty() && h.tenants[0].state == GPUOS_TENANT_EXITED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(h.tenants.size(), 1u);
  EXPECT_EQ(h.tenants[0].state, static_cast<uint32_t>(GPUOS_TENANT_EXITED));
  EXPECT_EQ(h.tenants[0].launches, 42u);
  EXPECT_EQ(h.tenants[0].mem_peak_bytes, 96u << 20);
  EXPECT_NE(h.tenants[0].exited_unix_ms, 0u);
  EXPECT_EQ(list(false).tenants.size(), 0u);
  EXPECT_EQ(list(false).gpus[0].used_mem_bytes, 0u);
  munmap(cb, sizeof(*cb));
  munmap(const_cast<gpuos_grant_block*>(grants), sizeof(*grants));
}

TEST_F(LiveDaemon, SetGateWakesAFutexWaiter) {
  uint32_t id = 0;
  gpuos_control_block* cb = nullptr;
  const gpuos_grant_block* grants = nullptr;
  int s = register_tenant("be", &id, &cb, &grants);
  gpuos_msg_set_gate g{};
  init_header(&g.hdr, GPUOS_MSG_SET_GATE, sizeof(g), 3);
  g.tenant_id = id;
  g.gate = GPUOS_GATE_CLOSED;
  EXPECT_EQ(request(&g, sizeof(g), false).status, GPUOS_OK);
  EXPECT_EQ(std::atomic_ref<uint32_t>(const_cast<uint32_t&>(grants->gate)).load(), GPUOS_GATE_CLOSED);
  EXPECT_EQ(std::atomic_ref<uint32_t>(const_cast<uint32_t&>(grants->grant_epoch)).load(), 1u);
  EXPECT_EQ(list(false).tenants.at(0).state, static_cast<uint32_t>(GPUOS_TENANT_GATED));

  // A tenant thread waits at the closed gate (shared futex, its own mapping); opening wakes it.
  // Its wait's timeout is far beyond the test's life: a wait that ended by timing out is counted
  // (a wake, not a timeout, must end it, however slow the machine).
  std::atomic<bool> woke{false};
  std::atomic<int> timeouts{0};
  std::thread waiter([&] {
    while (std::atomic_ref<uint32_t>(const_cast<uint32_t&>(grants->gate)).load(std::memory_order_acquire) == GPUOS_GATE_CLOSED) {
      timespec ts{120, 0};
      if (syscall(SYS_futex, &grants->gate, FUTEX_WAIT, GPUOS_GATE_CLOSED, &ts, nullptr, 0) != 0 && errno == ETIMEDOUT)
        ++timeouts;
    }
    woke = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(woke.load());
  g.gate = GPUOS_GATE_OPEN;
  EXPECT_EQ(request(&g, sizeof(g), false).status, GPUOS_OK);
  waiter.join();
  EXPECT_TRUE(woke.load());
  EXPECT_EQ(timeouts.load(), 0) << "the waiter timed out instead of being woken";

  g.tenant_id = id + 100;
  EXPECT_EQ(request(&g, sizeof(g), true).status, GPUOS_ERR_NOT_FOUND);
  close(s);
  munmap(cb, sizeof(*cb));
  munmap(const_cast<gpuos_grant_block*>(grants), sizeof(*grants));
}

TEST_F(LiveDaemon, GarbageIsRefusedAndOthersAreStillServed) {
  int s = connect();
  const char junk[] = "hello";
  ASSERT_EQ(send_message(s, junk, sizeof(junk)), 0);
  Reply r = recv_reply(s);
  ASSERT_EQ(r.type(), static_cast<uint32_t>(GPUOS_MSG_REPLY));
  EXPECT_EQ(r.as<gpuos_msg_reply>().status, GPUOS_ERR_BAD_MESSAGE);
  EXPECT_EQ(recv_reply(s).len, 0);  // closed
  close(s);

  std::vector<unsigned char> big(4096, 0xab);
  init_header(reinterpret_cast<gpuos_msg_header*>(big.data()), GPUOS_MSG_LIST, 4096, 1);
  EXPECT_EQ(request(big.data(), big.size(), true).status, GPUOS_ERR_BAD_MESSAGE);

  // A lying pid over a real socket.
  s = connect();
  gpuos_msg_register m{};
  init_header(&m.hdr, GPUOS_MSG_REGISTER, sizeof(m), 1);
  m.pid = getpid() + 1;
  m.tenant_class = GPUOS_CLASS_BEST_EFFORT;
  m.weight = 1;
  ASSERT_EQ(send_message(s, &m, sizeof(m)), 0);
  r = recv_reply(s);
  ASSERT_EQ(r.type(), static_cast<uint32_t>(GPUOS_MSG_REGISTER_REPLY));
  EXPECT_EQ(r.as<gpuos_msg_register_reply>().status, GPUOS_ERR_PERMISSION);
  EXPECT_EQ(r.fd, -1);
  close(s);

  // A client that disconnects mid-listing does not hurt either.
  s = connect();
  gpuos_msg_list l{};
  init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 1);
  send_message(s, &l, sizeof(l));
  close(s);

  Listed ok = list(false);
  EXPECT_EQ(ok.gpus.size(), 1u);
  EXPECT_EQ(ok.end_count, 0u);
}

TEST_F(LiveDaemon, RefusesToStartOverALiveDaemon) {
  CoreOptions co;
  Core other(std::move(co));
  ServerOptions so;
  so.socket_path = path;
  Server second(other, so);
  std::string err;
  EXPECT_FALSE(second.start(&err));
  EXPECT_NE(err.find("already serving"), std::string::npos) << err;
  EXPECT_EQ(list(false).gpus.size(), 1u);  // the first one is untouched
}

TEST(Server, RemovesAStaleSocketButNotOtherFiles) {
  char tmpl[] = "/tmp/gpuosd-stale-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string path = std::string(tmpl) + "/s.sock";
  {  // a socket file nobody listens on
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, path.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    close(fd);
  }
  CoreOptions co;
  Core core(std::move(co));
  ServerOptions so;
  so.socket_path = path;
  {
    Server s(core, so);
    std::string err;
    EXPECT_TRUE(s.start(&err)) << err;
  }
  unlink(path.c_str());
  FILE* f = std::fopen(path.c_str(), "w");
  std::fclose(f);
  Server s2(core, so);
  std::string err;
  EXPECT_FALSE(s2.start(&err));
  EXPECT_NE(err.find("not a socket"), std::string::npos) << err;
  std::filesystem::remove_all(tmpl);
}

TEST_F(LiveDaemon, ShutdownReleasesTenantsAndRemovesTheSocket) {
  uint32_t id = 0;
  gpuos_control_block* cb = nullptr;
  const gpuos_grant_block* grants = nullptr;
  int s = register_tenant("x", &id, &cb, &grants);
  gpuos_msg_set_gate g{};
  init_header(&g.hdr, GPUOS_MSG_SET_GATE, sizeof(g), 3);
  g.tenant_id = id;
  g.gate = GPUOS_GATE_CLOSED;
  EXPECT_EQ(request(&g, sizeof(g), false).status, GPUOS_OK);
  gpuos_msg_header h{};
  init_header(&h, GPUOS_MSG_SHUTDOWN, sizeof(h), 5);
  EXPECT_EQ(request(&h, sizeof(h), false).status, GPUOS_OK);
  loop.join();
  EXPECT_EQ(std::atomic_ref<uint32_t>(const_cast<uint32_t&>(grants->daemon_alive)).load(), 0u);
  EXPECT_EQ(std::atomic_ref<uint32_t>(const_cast<uint32_t&>(grants->gate)).load(), GPUOS_GATE_OPEN);
  struct stat st;
  EXPECT_NE(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(recv_reply(s).len, 0);  // the tenant's connection was closed
  close(s);
  munmap(cb, sizeof(*cb));
  munmap(const_cast<gpuos_grant_block*>(grants), sizeof(*grants));
}

}  // namespace
}  // namespace gpuos::daemon

namespace gpuos::daemon {
namespace {

// --- Socket directory and lock-out (issue #22: other local users are untrusted) ---

// gpuosd refuses a socket directory in which someone else could put their own socket: writable by
// group or others, a symlink, or another user's.
TEST(Server, RefusesAnUnsafeSocketDirectory) {
  char tmpl[] = "/tmp/gpuosd-dir-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string base = tmpl;
  CoreOptions co;
  Core core(std::move(co));
  auto start_in = [&](const std::string& dir, std::string* err) {
    ServerOptions so;
    so.socket_path = dir + "/gpuosd.sock";
    Server s(core, so);
    return s.start(err);
  };
  std::string err;
  ASSERT_EQ(mkdir((base + "/open").c_str(), 0700), 0);
  ASSERT_EQ(chmod((base + "/open").c_str(), 0777), 0);
  EXPECT_FALSE(start_in(base + "/open", &err));
  EXPECT_NE(err.find("writable by others"), std::string::npos) << err;
  ASSERT_EQ(mkdir((base + "/group").c_str(), 0700), 0);
  ASSERT_EQ(chmod((base + "/group").c_str(), 0770), 0);
  EXPECT_FALSE(start_in(base + "/group", &err));
  EXPECT_NE(err.find("writable by its group"), std::string::npos) << err;
  ASSERT_EQ(mkdir((base + "/good").c_str(), 0755), 0);
  ASSERT_EQ(symlink((base + "/good").c_str(), (base + "/link").c_str()), 0);
  EXPECT_FALSE(start_in(base + "/link", &err));
  EXPECT_NE(err.find("is a symlink"), std::string::npos) << err;
  if (geteuid() == 0) {  // another user's directory (only root can make one here)
    ASSERT_EQ(mkdir((base + "/theirs").c_str(), 0755), 0);
    ASSERT_EQ(chown((base + "/theirs").c_str(), 65534, 65534), 0);
    EXPECT_FALSE(start_in(base + "/theirs", &err));
    EXPECT_NE(err.find("owned by uid 65534"), std::string::npos) << err;
  }
  EXPECT_TRUE(start_in(base + "/good", &err)) << err;
  std::filesystem::remove_all(base);
}

// While alive, the calling thread acts as another user: the raw setresuid syscall changes only this
// thread's credentials (glibc's wrapper would change every thread's, the server's too). Sockets it
// opens carry that uid in SO_PEERCRED for their whole life.
class AsUser {
 public:
  explicit AsUser(uid_t uid) { ok_ = syscall(SYS_setresuid, -1, uid, -1) == 0; }
  ~AsUser() {
    if (ok_) syscall(SYS_setresuid, -1, 0, -1);
  }
  bool ok() const { return ok_; }

 private:
  bool ok_ = false;
};

class LockOut : public LiveDaemon {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to act as a second user";
    LiveDaemon::SetUp();
    // The other user must reach the socket: the directories stay root's and 0755 (check_socket_dir).
    chmod(dir.c_str(), 0755);
    chmod((dir + "/run").c_str(), 0755);
  }
  // Opens n connections as uid, each asking for a listing: an accepted one gets it and stays open,
  // a refused one gets ERR_LIMIT (its reason in *why) and is closed.
  std::vector<int> open_as(uid_t uid, int n, int* refused, std::string* why) {
    std::vector<int> held;
    AsUser as(uid);
    EXPECT_TRUE(as.ok());
    for (int i = 0; i < n; ++i) {
      int s = connect_control_socket(path.c_str());
      EXPECT_GE(s, 0) << std::strerror(-s);
      gpuos_msg_list m{};
      init_header(&m.hdr, GPUOS_MSG_LIST, sizeof(m), 1);
      send_message(s, &m, sizeof(m));  // may fail (EPIPE) once refused: the reply is queued anyway
      bool accepted = false;
      for (;;) {
        Reply r = recv_reply(s, 10000);
        if (r.len <= 0) break;
        if (r.type() == GPUOS_MSG_LIST_END) {
          accepted = true;
          break;
        }
        if (r.type() == GPUOS_MSG_REPLY) {
          EXPECT_EQ(r.as<gpuos_msg_reply>().status, GPUOS_ERR_LIMIT);
          *why = r.as<gpuos_msg_reply>().text;
          break;
        }
      }
      if (accepted) {
        held.push_back(s);
      } else {
        ++*refused;
        close(s);
      }
    }
    return held;
  }
};

class PerUidCap : public LockOut {
  void configure(ServerOptions& so) override {
    so.max_connections = 16;
    so.max_connections_per_uid = 4;
    so.admin_connections = 2;
  }
};

// One user opening many idle connections gets only its share; the others (root here) still get in.
TEST_F(PerUidCap, OneUidGetsAtMostItsShare) {
  int refused = 0;
  std::string why;
  std::vector<int> held = open_as(65534, 10, &refused, &why);
  EXPECT_EQ(held.size(), 4u);
  EXPECT_EQ(refused, 6);
  EXPECT_NE(why.find("from uid 65534"), std::string::npos) << why;
  EXPECT_EQ(list(false).gpus.size(), 1u);  // root is served
  for (int s : held) close(s);
  // Its slots are free again once the daemon has seen those closes (asynchronously: retried).
  std::vector<int> more;
  for (int i = 0; i < 1000 && more.empty(); ++i) {
    int again = 0;
    more = open_as(65534, 1, &again, &why);
    if (more.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(more.size(), 1u);
  for (int s : more) close(s);
}

class AdminReserve : public LockOut {
  void configure(ServerOptions& so) override {
    so.max_connections = 8;
    so.max_connections_per_uid = 0;  // no cap: one user can take every ordinary slot
    so.admin_connections = 2;
  }
};

// Non-admins holding every ordinary slot do not lock out root: `gpuos ps` and `gpuos gate` still work.
TEST_F(AdminReserve, AdminsGetInWhenOthersHoldEverySlot) {
  int refused = 0;
  std::string why;
  std::vector<int> held = open_as(65534, 10, &refused, &why);
  EXPECT_EQ(held.size(), 8u);
  EXPECT_EQ(refused, 2);
  EXPECT_NE(why.find("reserved for admins"), std::string::npos) << why;
  EXPECT_EQ(list(false).gpus.size(), 1u);
  gpuos_msg_set_gate g{};
  init_header(&g.hdr, GPUOS_MSG_SET_GATE, sizeof(g), 3);
  g.tenant_id = 12345;
  g.gate = GPUOS_GATE_CLOSED;
  EXPECT_EQ(request(&g, sizeof(g), true).status, GPUOS_ERR_NOT_FOUND);  // served, not refused
  // The reserve is bounded too: admins hold both reserved slots, a third admin connection is refused.
  int a = connect(), b = connect();
  int c = connect_control_socket(path.c_str());
  ASSERT_GE(c, 0);
  gpuos_msg_list m{};
  init_header(&m.hdr, GPUOS_MSG_LIST, sizeof(m), 1);
  send_message(c, &m, sizeof(m));
  Reply r = recv_reply(c, 10000);
  ASSERT_GT(r.len, 0);
  EXPECT_EQ(r.type(), static_cast<uint32_t>(GPUOS_MSG_REPLY));
  EXPECT_EQ(r.as<gpuos_msg_reply>().status, GPUOS_ERR_LIMIT);
  close(a);
  close(b);
  close(c);
  for (int s : held) close(s);
}

constexpr const char* kClaimPod = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d";

// Claims' sockets (issue #42, 4) in a live daemon; the test process is its admin and prepares them.
class ClaimSocketsLive : public LiveDaemon {
 protected:
  void configure_core(CoreOptions& co) override {
    co.claims_path = dir + "/run/claims.txt";
    co.claim_socket_root = path;
    co.one_tenant_per_pid = false;  // this one process plays several tenants
  }
  // Prepares a claim of pod `pod`; its socket's path.
  std::string prepare(const std::string& uid, const char* pod = kClaimPod) {
    gpuos_msg_claim_prepare m{};
    init_header(&m.hdr, GPUOS_MSG_CLAIM_PREPARE, sizeof(m), 7);
    copy_name(m.claim_uid, sizeof(m.claim_uid), uid.c_str());
    copy_name(m.claim_namespace, sizeof(m.claim_namespace), "inference");
    copy_name(m.claim_name, sizeof(m.claim_name), ("c-" + uid.substr(0, 8)).c_str());
    copy_name(m.pod_name, sizeof(m.pod_name), "llm-0");
    copy_name(m.pod_uid, sizeof(m.pod_uid), pod);
    m.tenant_class = GPUOS_CLASS_BEST_EFFORT;
    m.weight = 100;
    gpuos_msg_reply r = request(&m, sizeof(m), false);
    EXPECT_EQ(r.status, GPUOS_OK) << r.text;
    return std::string(r.text) + "/gpuosd.sock";
  }
  // Connects to a socket, sends m, and returns the socket and the daemon's first answer.
  template <typename M>
  static int talk(const std::string& where, const M& m, Reply* r) {
    int s = connect_control_socket(where.c_str());
    EXPECT_GE(s, 0) << std::strerror(-s);
    send_message(s, &m, sizeof(m));  // may fail (EPIPE) once refused: the refusal is queued anyway
    *r = recv_reply(s, 10000);
    return s;
  }
  static gpuos_msg_register registration() {
    gpuos_msg_register m{};
    init_header(&m.hdr, GPUOS_MSG_REGISTER, sizeof(m), 7);
    m.pid = getpid();
    m.tenant_class = GPUOS_CLASS_BEST_EFFORT;
    m.weight = 100;
    copy_name(m.name, sizeof(m.name), "in-pod");
    return m;
  }
};

// A host process (this test: in gpuosd's own namespaces, in no pod), root included, is refused on a
// claim's socket with the reason; before, it was served with the claim's settings.
TEST_F(ClaimSocketsLive, AHostProcessIsRefusedOnAClaimsSocket) {
  const std::string sock = prepare("11111111-2222-4333-8444-555555555555");
  struct stat st;
  ASSERT_EQ(::stat(sock.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  Reply answer;
  int s = talk(sock, registration(), &answer);
  ASSERT_GT(answer.len, 0);
  ASSERT_EQ(answer.type(), static_cast<uint32_t>(GPUOS_MSG_REPLY));  // not a REGISTER_REPLY
  auto r = answer.as<gpuos_msg_reply>();
  EXPECT_EQ(r.status, GPUOS_ERR_PERMISSION);
  EXPECT_NE(std::string(r.text).find("serves its claim's containers only"), std::string::npos) << r.text;
  EXPECT_NE(std::string(r.text).find("host process"), std::string::npos) << r.text;
  close(s);
  EXPECT_EQ(list(false).gpus.size(), 1u);  // gpuosd's own socket serves it as before
}

constexpr const char* kOtherPod = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";
// The pod the stand-in below puts the next peer in (every peer is this test process).
std::atomic<const char*> g_peer_pod{kClaimPod};

// The claim's containers (a stand-in says which pod each peer is in) are served, and their
// connections count against their pod, not their uid.
class ClaimSocketsPerPod : public ClaimSocketsLive {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to act as a second user";
    ClaimSocketsLive::SetUp();
    chmod(dir.c_str(), 0755);
    chmod((dir + "/run").c_str(), 0755);
  }
  void configure(ServerOptions& so) override {
    so.max_connections = 32;
    so.max_connections_per_uid = 4;
    so.claim_peer_of = [](pid_t pid, uid_t uid) {
      ClaimPeer p;
      p.pid = pid;
      p.uid = uid;
      p.pod_uid = g_peer_pod.load();
      p.ns_known = true;
      return p;
    };
  }
};

// Issue #62 item 3: connections were capped per uid, and pods all run as root: root in pod A held
// uid 0's whole share, and pod B's tenants were refused (and ran ungoverned). A pod's connections
// count against its pod, on all of its claims' sockets together (issue #42, 4: 50 on each of 5
// claims' filled the table), and a host user's against its uid: each still gets in.
TEST_F(ClaimSocketsPerPod, APodCannotTakeAnotherPodsConnections) {
  const std::string a1 = prepare("11111111-2222-4333-8444-555555555555");
  const std::string a2 = prepare("22222222-2222-4333-8444-555555555555");
  const std::string b = prepare("33333333-2222-4333-8444-555555555555", kOtherPod);
  std::vector<int> held;
  Reply r;
  auto served = [&](const std::string& sock) {
    held.push_back(talk(sock, registration(), &r));
    return r.len > 0 && r.type() == GPUOS_MSG_REGISTER_REPLY && r.as<gpuos_msg_register_reply>().status == GPUOS_OK;
  };
  g_peer_pod = kClaimPod;  // root in pod A: two tenants on each of its claims' sockets
  for (const std::string* sock : {&a1, &a1, &a2, &a2}) EXPECT_TRUE(served(*sock));
  EXPECT_FALSE(served(a2)) << "served beyond the pod's share";
  ASSERT_EQ(r.type(), static_cast<uint32_t>(GPUOS_MSG_REPLY));
  EXPECT_EQ(r.as<gpuos_msg_reply>().status, GPUOS_ERR_LIMIT);
  EXPECT_NE(std::string(r.as<gpuos_msg_reply>().text).find(std::string("from pod ") + kClaimPod), std::string::npos)
      << r.as<gpuos_msg_reply>().text;
  g_peer_pod = kOtherPod;  // root in pod B, an honest tenant beside it
  EXPECT_TRUE(served(b)) << (r.len > 0 ? r.as<gpuos_msg_reply>().text : "no answer");
  g_peer_pod = kClaimPod;
  {
    AsUser as(65534);  // a host user's connections: its uid's share
    ASSERT_TRUE(as.ok());
    gpuos_msg_list l{};
    init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 1);
    held.push_back(talk(path, l, &r));
    EXPECT_EQ(r.type(), static_cast<uint32_t>(GPUOS_MSG_GPU_INFO));
  }
  for (int s : held) close(s);
}

// Claim sockets whose peers' pods gpuosd proves itself (claim_peer_of, the real one) from a fake
// /proc/<pid>/cgroup of this test process and a fake cgroup tree (issue #62 item 2).
class ClaimSocketsByCgroup : public ClaimSocketsLive {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to make root's and another user's cgroup directories";
    ClaimSocketsLive::SetUp();
    const std::string me = dir + "/proc/" + std::to_string(getpid());
    std::filesystem::create_directories(me);
    std::filesystem::create_directories(dir + "/proc/self");
    std::filesystem::create_directory_symlink("/proc/self/ns", dir + "/proc/self/ns");
    std::filesystem::create_directory_symlink("/proc/" + std::to_string(getpid()) + "/ns", me + "/ns");
    for (const std::string& d : {kubelet_container(), forged()}) std::filesystem::create_directories(dir + "/cg" + d);
    ::chmod(dir.c_str(), 0755);
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/cg")) ::chmod(e.path().c_str(), 0755);
    ::chmod((dir + "/cg").c_str(), 0755);
    // systemd delegates user@<uid>.service and all below it to its user.
    const std::string user = "/user.slice/user-65534.slice/user@65534.service";
    for (const std::string& d : {user, user + "/app.slice", forged()}) {
      ASSERT_EQ(::chown((dir + "/cg" + d).c_str(), 65534, 65534), 0);
    }
  }
  void configure(ServerOptions& so) override {
    so.claim_peer_of = [this](pid_t pid, uid_t uid) {
      return claim_peer_of(pid, uid, dir + "/proc", PodCgroups{{"/kubepods.slice", "/kubepods"}, dir + "/cg"});
    };
  }
  void in_cgroup(const std::string& path) {
    std::ofstream(dir + "/proc/" + std::to_string(getpid()) + "/cgroup") << "0::" << path << "\n";
  }
  static std::string kubelet_pod() {
    std::string uid = kClaimPod;
    for (char& c : uid) c = c == '-' ? '_' : c;
    return "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid + ".slice";
  }
  static std::string kubelet_container() { return kubelet_pod() + "/cri-containerd-0123.scope"; }
  static std::string forged() {
    return "/user.slice/user-65534.slice/user@65534.service/app.slice/pod" + std::string(kClaimPod) + ".scope";
  }
  // Registers on sock; the refusal's text, "" when served.
  std::string refusal_on(const std::string& sock) {
    Reply r;
    int s = talk(sock, registration(), &r);
    close(s);
    if (r.len > 0 && r.type() == GPUOS_MSG_REGISTER_REPLY) {
      EXPECT_EQ(r.as<gpuos_msg_register_reply>().status, GPUOS_OK);
      return "";
    }
    EXPECT_EQ(r.type(), static_cast<uint32_t>(GPUOS_MSG_REPLY));
    EXPECT_EQ(r.as<gpuos_msg_reply>().status, GPUOS_ERR_PERMISSION);
    return r.as<gpuos_msg_reply>().text;
  }
};

// A user's own cgroup named after the claim's pod, and the kubelet's path of that pod with a
// directory a user owns, are refused on the claim's socket with the reason; the kubelet's own
// cgroup of the pod, root's all the way, is served.
TEST_F(ClaimSocketsByCgroup, APodIsProvenByTheKubeletsCgroupNotByAName) {
  const std::string sock = prepare("11111111-2222-4333-8444-555555555555");
  in_cgroup(forged());
  std::string why = refusal_on(sock);
  EXPECT_NE(why.find("not under the kubelet's cgroup roots"), std::string::npos) << why;
  EXPECT_NE(why.find("serves its claim's containers only"), std::string::npos) << why;

  in_cgroup(kubelet_container());
  EXPECT_EQ(refusal_on(sock), "");

  ASSERT_EQ(::chown((dir + "/cg" + kubelet_pod()).c_str(), 65534, 65534), 0);
  why = refusal_on(sock);
  EXPECT_NE(why.find("owned by uid 65534"), std::string::npos) << why;

  in_cgroup("/kubepods.slice/../user.slice/pod" + std::string(kClaimPod) + ".scope");
  why = refusal_on(sock);
  EXPECT_NE(why.find("\"..\""), std::string::npos) << why;
}

std::atomic<uint64_t> g_fake_idle_ns{1000000000ull};

class QueueBound : public LiveDaemon {
  void configure(ServerOptions& so) override { so.max_queued_replies = 2; }
};

// One answer longer than the bound (GPU_INFO, TENANT_INFO, LIST_END: 3) is served whole: the bound
// is on what a peer leaves unread, not on the length of an answer.
TEST_F(QueueBound, ALongAnswerIsServedWhole) {
  uint32_t id = 0;
  gpuos_control_block* cb = nullptr;
  const gpuos_grant_block* grants = nullptr;
  int tenant = register_tenant("t", &id, &cb, &grants);
  Listed l = list(false);
  EXPECT_EQ(l.gpus.size(), 1u);
  ASSERT_EQ(l.tenants.size(), 1u);
  EXPECT_EQ(l.end_count, 1u);
  close(tenant);
  munmap(cb, sizeof(*cb));
  munmap(const_cast<gpuos_grant_block*>(grants), sizeof(*grants));
}

class IdleTimeout : public LiveDaemon {
  void configure(ServerOptions& so) override {
    so.idle_timeout_ms = 10000;
    so.idle_clock = [] { return g_fake_idle_ns.load(); };  // advanced by the test, not by waiting
  }
};

bool still_open(int s) {
  pollfd p{s, POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

// A connection that never registers nor sends anything is closed after the idle timeout; a tenant's
// connection (quiet by design) is not.
TEST_F(IdleTimeout, SilentConnectionsAreClosedTenantsAreNot) {
  int silent = connect();
  uint32_t id = 0;
  gpuos_control_block* cb = nullptr;
  const gpuos_grant_block* grants = nullptr;
  int tenant = register_tenant("quiet", &id, &cb, &grants);
  list(false);  // served after both were accepted (in order)
  g_fake_idle_ns += 9000000000ull;
  list(false);
  list(false);  // a loop turn after the one that served the first: any sweep has run
  EXPECT_TRUE(still_open(silent));
  g_fake_idle_ns += 1000000001ull;
  list(false);  // wakes the loop; the sweep after it closes the silent one
  EXPECT_EQ(recv_reply(silent, 10000).len, 0) << "the silent connection was not closed";
  EXPECT_TRUE(still_open(tenant));
  Listed l = list(false);
  ASSERT_EQ(l.tenants.size(), 1u);
  EXPECT_EQ(l.tenants[0].tenant_id, id);
  close(silent);
  close(tenant);
  munmap(cb, sizeof(*cb));
  munmap(const_cast<gpuos_grant_block*>(grants), sizeof(*grants));
}

}  // namespace
}  // namespace gpuos::daemon
