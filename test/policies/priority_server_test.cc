// SPDX-License-Identifier: Apache-2.0
// The priority policy in a real gpuosd core + server over real sockets, with fake tenants that
// write their control blocks and send ACTIVITY the way libgpuos.so does.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/ipc.h"
#include "daemon/core/core.h"
#include "daemon/server/server.h"
#include "policies/priority/priority.h"

namespace gpuos::policies {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct FakeTenant {
  int sock = -1;
  uint32_t id = 0;
  gpuos_control_block* cb = nullptr;
  const gpuos_grant_block* grants = nullptr;  // mapped read-only, as a tenant can
  uint32_t gate() const {
    return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(grants->gate)).load(std::memory_order_acquire);
  }
  void set_words(bool busy, bool waiting) {
    std::atomic_ref<uint32_t>(cb->busy).store(busy ? 1 : 0, std::memory_order_release);
    std::atomic_ref<uint32_t>(cb->waiting).store(waiting ? 1 : 0, std::memory_order_release);
  }
  void activity(bool busy, bool waiting) {
    set_words(busy, waiting);
    gpuos_msg_activity m{};
    init_header(&m.hdr, GPUOS_MSG_ACTIVITY, sizeof(m), 0);
    m.busy = busy;
    m.waiting = waiting;
    ASSERT_EQ(send_message(sock, &m, sizeof(m)), 0);
  }
};

// A periodic tick far beyond any test's life: whatever moves a gate in these tests is the message
// or the policy's own timer under test, so they assert that it moved, not how soon.
constexpr int kNoTick = 3'600'000;

class PriorityDaemon : public ::testing::Test {
 protected:
  std::string dir, path;
  std::unique_ptr<daemon::Core> core;
  std::unique_ptr<daemon::Server> server;
  std::thread loop;
  std::vector<FakeTenant> tenants;

  void start(int tick_ms, uint32_t be_slice_ms = 50) {
    char tmpl[] = "/tmp/gpuosd-prio-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
    path = dir + "/gpuosd.sock";
    daemon::CoreOptions co;
    co.one_tenant_per_pid = false;  // the fake tenants are all this process
    co.time_gate = std::make_unique<PriorityPolicy>(PriorityParams{2, 200, be_slice_ms});
    core = std::make_unique<daemon::Core>(std::move(co));
    daemon::ServerOptions so;
    so.socket_path = path;
    so.daemon_uid = geteuid();
    so.tick_ms = tick_ms;
    server = std::make_unique<daemon::Server>(*core, so);
    std::string err;
    ASSERT_TRUE(server->start(&err)) << err;
    loop = std::thread([this] { server->run(); });
  }
  void TearDown() override {
    if (loop.joinable()) {
      server->request_stop();
      loop.join();
    }
    for (FakeTenant& t : tenants) {
      if (t.cb) munmap(t.cb, sizeof(gpuos_control_block));
      if (t.grants) munmap(const_cast<gpuos_grant_block*>(t.grants), sizeof(gpuos_grant_block));
      if (t.sock >= 0) close(t.sock);
    }
    server.reset();
    core.reset();
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }

  FakeTenant reg(const char* name, uint32_t cls, int32_t prio, uint32_t weight = 100) {
    FakeTenant t;
    t.sock = connect_control_socket(path.c_str());
    EXPECT_GE(t.sock, 0);
    gpuos_msg_register m{};
    init_header(&m.hdr, GPUOS_MSG_REGISTER, sizeof(m), 1);
    m.pid = getpid();
    m.tenant_class = cls;
    m.priority = prio;
    m.weight = weight;
    copy_name(m.name, sizeof(m.name), name);
    EXPECT_EQ(send_message(t.sock, &m, sizeof(m)), 0);
    unsigned char buf[GPUOS_MSG_MAX_SIZE + 1];
    int fds[2] = {-1, -1};
    int nfds = 0;
    long n = receive_message_fds(t.sock, buf, sizeof(buf), fds, 2, &nfds, 2000);
    EXPECT_EQ(n, static_cast<long>(sizeof(gpuos_msg_register_reply)));
    gpuos_msg_register_reply r{};
    std::memcpy(&r, buf, sizeof(r));
    EXPECT_EQ(r.status, GPUOS_OK) << r.text;
    EXPECT_EQ(nfds, 2);
    t.id = r.tenant_id;
    void* g = mmap(nullptr, sizeof(gpuos_grant_block), PROT_READ, MAP_SHARED, fds[0], 0);
    EXPECT_NE(g, MAP_FAILED);
    void* p = mmap(nullptr, sizeof(gpuos_control_block), PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
    EXPECT_NE(p, MAP_FAILED);
    for (int fd : fds) close(fd);
    t.grants = static_cast<const gpuos_grant_block*>(g);
    t.cb = static_cast<gpuos_control_block*>(p);
    tenants.push_back(t);
    return t;
  }

  // Waits until pred() holds or the timeout passes (a ceiling for a loaded machine: the tests
  // assert what moved a gate, never how fast).
  template <typename P>
  void wait_until(P pred, std::chrono::milliseconds timeout = 20000ms) {
    auto t0 = Clock::now();
    while (!pred() && Clock::now() - t0 < timeout) std::this_thread::sleep_for(100us);
  }
};

TEST_F(PriorityDaemon, GuaranteedActivityGatesTheBestEffortAtOnce) {
  start(kNoTick);  // no periodic tick within the test: only ACTIVITY can move the gates
  FakeTenant hp = reg("hp", GPUOS_CLASS_GUARANTEED, 10);
  FakeTenant be = reg("be", GPUOS_CLASS_BEST_EFFORT, 0);
  EXPECT_EQ(be.gate(), GPUOS_GATE_OPEN);
  EXPECT_EQ(be.grants->max_inflight, 2u);
  EXPECT_EQ(be.grants->idle_grace_us, 200u);
  EXPECT_EQ(hp.grants->max_inflight, 0u);
  EXPECT_EQ(hp.grants->idle_grace_us, 200u);

  hp.activity(true, false);
  wait_until([&] { return be.gate() == GPUOS_GATE_CLOSED; });
  EXPECT_EQ(be.gate(), GPUOS_GATE_CLOSED);
  EXPECT_EQ(hp.gate(), GPUOS_GATE_OPEN);

  // No reply ever comes for ACTIVITY.
  unsigned char buf[GPUOS_MSG_MAX_SIZE + 1];
  EXPECT_EQ(receive_message(hp.sock, buf, sizeof(buf), nullptr, 50), -ETIMEDOUT);

  // A BE registering now gets a block whose gate is already closed.
  FakeTenant late = reg("late", GPUOS_CLASS_BEST_EFFORT, 0);
  EXPECT_EQ(late.gate(), GPUOS_GATE_CLOSED);

  hp.activity(false, false);
  wait_until([&] { return be.gate() == GPUOS_GATE_OPEN && late.gate() == GPUOS_GATE_OPEN; });
  EXPECT_EQ(be.gate(), GPUOS_GATE_OPEN);
  EXPECT_EQ(late.gate(), GPUOS_GATE_OPEN);

  // A busy HP that exits releases the BEs at once.
  hp.activity(true, false);
  wait_until([&] { return be.gate() == GPUOS_GATE_CLOSED; });
  ASSERT_EQ(be.gate(), GPUOS_GATE_CLOSED);
  close(hp.sock);
  tenants[0].sock = -1;
  wait_until([&] { return be.gate() == GPUOS_GATE_OPEN; });
  EXPECT_EQ(be.gate(), GPUOS_GATE_OPEN);
  EXPECT_EQ(core->policy_failures(), 0u);
}

TEST_F(PriorityDaemon, TheControlBlockWordsAreAuthoritativeAtTheTick) {
  start(/*tick_ms=*/20);
  FakeTenant hp = reg("hp", GPUOS_CLASS_GUARANTEED, 0);
  FakeTenant be = reg("be", GPUOS_CLASS_BEST_EFFORT, 0);
  hp.set_words(true, false);  // the ACTIVITY message was lost
  wait_until([&] { return be.gate() == GPUOS_GATE_CLOSED; });
  EXPECT_EQ(be.gate(), GPUOS_GATE_CLOSED);
  hp.set_words(false, false);
  wait_until([&] { return be.gate() == GPUOS_GATE_OPEN; });
  EXPECT_EQ(be.gate(), GPUOS_GATE_OPEN);
}

TEST_F(PriorityDaemon, BestEffortSlicesRotateOnThePolicyTimer) {
  start(kNoTick, /*be_slice_ms=*/20);  // only the policy's own timer can rotate
  FakeTenant a = reg("a", GPUOS_CLASS_BEST_EFFORT, 0, 100);
  FakeTenant b = reg("b", GPUOS_CLASS_BEST_EFFORT, 0, 100);
  a.activity(false, true);
  b.activity(false, true);
  wait_until([&] { return a.gate() != b.gate(); });
  ASSERT_NE(a.gate(), b.gate()) << "exactly one slice owner";
  const bool a_first = a.gate() == GPUOS_GATE_OPEN;
  FakeTenant& second = a_first ? b : a;
  wait_until([&] { return second.gate() == GPUOS_GATE_OPEN; });
  EXPECT_EQ(second.gate(), GPUOS_GATE_OPEN);  // the 20 ms slice ended: there is no tick
  EXPECT_NE(a.gate(), b.gate());
  // The owner stops needing the GPU: the other gets it at once.
  second.activity(false, false);
  FakeTenant& first = a_first ? a : b;
  wait_until([&] { return first.gate() == GPUOS_GATE_OPEN && second.gate() == GPUOS_GATE_OPEN; });
  EXPECT_EQ(first.gate(), GPUOS_GATE_OPEN);   // one runnable: every BE gate open
  EXPECT_EQ(second.gate(), GPUOS_GATE_OPEN);
}

}  // namespace
}  // namespace gpuos::policies
