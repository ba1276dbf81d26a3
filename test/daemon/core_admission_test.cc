// SPDX-License-Identifier: Apache-2.0
// Registration through the router: what each admission stage (admission.h) does to a REGISTER,
// end to end through Core::handle_message (the stages alone: admission_test.cc).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <string>

#include "common/ipc.h"
#include "daemon/core/core.h"
#include "tenant_side.h"

namespace gpuos::daemon {
namespace {

using tenant_side::decode;

gpuos_msg_register make_register(pid_t pid, const char* name = "t") {
  gpuos_msg_register m = tenant_side::registration(pid, GPUOS_CLASS_BEST_EFFORT, name);
  m.hdr.seq = 42;
  return m;
}

}  // namespace
}  // namespace gpuos::daemon

namespace gpuos::daemon {
namespace {

// A tenant never raises its own class: with guaranteed_needs_admin (gpuosd's default config), a
// non-admin asking for GUARANTEED is admitted as BEST_EFFORT; an admin gets what it asked for.
TEST(GuaranteedClass, OnlyAdminsMayRegisterAsGuaranteed) {
  CoreOptions o;
  o.guaranteed_needs_admin = true;
  o.unix_ms = [] { return uint64_t{1700000000000}; };
  Core core(std::move(o));
  for (bool admin : {false, true}) {
    Connection c;
    c.id = admin ? 2 : 1;
    c.peer.pid = admin ? 2000 : 1000;
    c.peer.uid = admin ? 0 : 1000;
    c.peer.admin = admin;
    auto m = make_register(c.peer.pid);
    m.tenant_class = GPUOS_CLASS_GUARANTEED;
    Outcome out = core.handle_message(c, &m, sizeof(m));
    ASSERT_NE(out.registered, 0u);
    auto r = decode<gpuos_msg_register_reply>(out.replies.at(0));
    EXPECT_EQ(r.status, GPUOS_OK);
    const uint32_t want = admin ? GPUOS_CLASS_GUARANTEED : GPUOS_CLASS_BEST_EFFORT;
    EXPECT_EQ(r.tenant_class, want) << (admin ? "admin" : "non-admin");
    EXPECT_EQ(core.grant_block(out.registered)->tenant_class, want);
    // The reply says why, for the tenant to tell its user (issue #25).
    EXPECT_STREQ(r.text, admin ? "registered"
                               : "registered; best-effort: guaranteed is for admins and uid 1000 is not one, see "
                                 "[tenants] guaranteed");
  }
}

}  // namespace
}  // namespace gpuos::daemon

namespace gpuos::daemon {
namespace {

// A tenant never grants itself more memory than the config allows: with a cap, a non-admin's quota
// is min(asked, cap) and "no quota" means the cap; admins are not capped.
TEST(MemoryQuotaCap, NonAdminQuotaIsCapped) {
  CoreOptions o;
  o.mem_quota_cap_bytes = 1 << 30;
  o.unix_ms = [] { return uint64_t{1700000000000}; };
  Core core(std::move(o));
  struct Case {
    bool admin;
    uint64_t asked;
    uint64_t want;
  };
  const Case cases[] = {{false, 0, 1 << 30}, {false, 4ull << 30, 1 << 30}, {false, 1 << 20, 1 << 20},
                        {true, 0, 0}, {true, 4ull << 30, 4ull << 30}};
  int i = 0;
  for (const Case& c : cases) {
    Connection conn;
    conn.id = 10 + i;
    conn.peer.pid = 3000 + i;
    conn.peer.uid = c.admin ? 0 : 1000;
    conn.peer.admin = c.admin;
    ++i;
    auto m = make_register(conn.peer.pid);
    m.requested_mem_bytes = c.asked;
    Outcome out = core.handle_message(conn, &m, sizeof(m));
    ASSERT_NE(out.registered, 0u);
    EXPECT_EQ(core.grant_block(out.registered)->mem_quota_bytes, c.want)
        << "admin " << c.admin << " asked " << c.asked;
  }
}

// Borrowed memory comes on top of a quota and, for a non-admin, within the cap with it.
TEST(MemoryQuotaCap, BorrowIsOnTopOfTheQuotaAndWithinTheCap) {
  CoreOptions o;
  o.mem_quota_cap_bytes = 8ull << 30;
  o.unix_ms = [] { return uint64_t{1700000000000}; };
  Core core(std::move(o));
  struct Case {
    bool admin;
    uint64_t quota, borrow;
    uint64_t want_quota, want_borrow;
  };
  const Case cases[] = {
      {false, 2ull << 30, 4ull << 30, 2ull << 30, 4ull << 30},   // fits the cap: as asked
      {false, 6ull << 30, 4ull << 30, 6ull << 30, 2ull << 30},   // quota + borrow cut to the cap
      {false, 0, 4ull << 30, 8ull << 30, 0},                     // "no quota" is the cap; nothing left
      {true, 0, 4ull << 30, 0, 0},                               // no quota: nothing to borrow on top of
      {true, 16ull << 30, 16ull << 30, 16ull << 30, 16ull << 30}};  // admins are not capped
  int i = 0;
  for (const Case& c : cases) {
    Connection conn;
    conn.id = 20 + i;
    conn.peer.pid = 4000 + i;
    conn.peer.uid = c.admin ? 0 : 1000;
    conn.peer.admin = c.admin;
    ++i;
    auto m = make_register(conn.peer.pid);
    m.requested_mem_bytes = c.quota;
    m.requested_borrow_bytes = c.borrow;
    Outcome out = core.handle_message(conn, &m, sizeof(m));
    ASSERT_NE(out.registered, 0u);
    const gpuos_grant_block* g = core.grant_block(out.registered);
    EXPECT_EQ(g->mem_quota_bytes, c.want_quota) << "case " << i;
    EXPECT_EQ(g->mem_borrow_bytes, c.want_borrow) << "case " << i;
  }
}

// After a daemon restart a tenant asks for the id it had; it gets it if the ledger the previous
// daemon left says the id was this very process's, and unless that would reuse an id.
struct Adoption : ::testing::Test {
  char dir[64] = "/tmp/gpuos-ledger-XXXXXX";
  std::string path;
  void SetUp() override {
    ASSERT_NE(mkdtemp(dir), nullptr);
    path = std::string(dir) + "/tenant-ids";
  }
  void TearDown() override {
    unlink(path.c_str());
    rmdir(dir);
  }
  // Processes' start times: pid * 10 (pid 999: a process started after the ledger was written;
  // those in `gone`: no process).
  static inline std::set<pid_t> gone;
  static uint64_t start_of(pid_t pid) {
    return gone.count(pid) != 0 ? 0 : pid == 999 ? 1 : static_cast<uint64_t>(pid) * 10;
  }
  std::unique_ptr<Core> restart() {
    CoreOptions o;
    o.unix_ms = [] { return uint64_t{1700000000000}; };
    o.id_ledger_path = path;
    o.pid_start_time = start_of;
    return std::make_unique<Core>(std::move(o));
  }
  static uint32_t reg(Core& core, pid_t pid, uint32_t prev, uid_t uid = 1000) {
    Connection conn;
    conn.id = 100 + pid;
    conn.peer.pid = pid;
    conn.peer.uid = uid;
    auto m = make_register(pid);
    m.previous_tenant_id = prev;
    return core.handle_message(conn, &m, sizeof(m)).registered;
  }
};

TEST_F(Adoption, ReRegistrationKeepsItsIdWhenUnused) {
  {
    std::ofstream f(path);
    f << "5 1000 501 5010\n9 1000 509 5090\n12 1000 999 77\nnot a line\n";
  }
  auto core = restart();
  EXPECT_EQ(reg(*core, 501, 5), 5u);            // its own id, free on the fresh daemon
  EXPECT_EQ(reg(*core, 502, 0), 6u);            // new tenants continue after it
  EXPECT_EQ(reg(*core, 503, 5), 7u);            // taken (live): a new id
  EXPECT_EQ(reg(*core, 504, 2), 8u);            // not its own (and below the ids handed out)
  EXPECT_EQ(reg(*core, 505, 0xfffffff0u), 10u); // absurd ids are not honoured (9 is kept for pid 509)
  EXPECT_EQ(reg(*core, 999, 12), 11u);          // pid 999 is another process now (start time)
  EXPECT_EQ(reg(*core, 509, 9), 9u);            // its id was kept for it
}

TEST_F(Adoption, ANewTenantDoesNotTakeTheIdOfASurvivorYetToReRegister) {
  {
    std::ofstream f(path);
    f << "1 1000 501 5010\n";
  }
  auto core = restart();
  EXPECT_EQ(reg(*core, 600, 0), 2u);
  EXPECT_EQ(reg(*core, 501, 1), 1u);
}

// An admin's hold (gpuos gate ID close) is gpuosd's own state: a restarted gpuosd holds the tenant
// again when it re-registers, until an admin releases it.
TEST_F(Adoption, AnAdminHoldOutlivesTheDaemon) {
  auto core = restart();
  const uint32_t id = reg(*core, 700, 0);
  ASSERT_NE(id, 0u);
  ASSERT_EQ(core->admin_set_gate(id, GPUOS_GATE_CLOSED), GPUOS_OK);
  {
    std::ifstream f(path);
    std::string line;
    ASSERT_TRUE(std::getline(f, line));
    EXPECT_EQ(line, std::to_string(id) + " 1000 700 7000 held");
  }
  auto again = restart();  // gpuosd died and came back; the tenant re-registers
  ASSERT_EQ(reg(*again, 700, id), id);
  EXPECT_TRUE(again->pinned(id));
  EXPECT_EQ(again->grant_block(id)->gate, GPUOS_GATE_CLOSED);
  EXPECT_FALSE(again->pinned(reg(*again, 701, 0)));  // nobody else is held
  ASSERT_EQ(again->admin_set_gate(id, GPUOS_GATE_OPEN), GPUOS_OK);
  auto third = restart();  // released: not held after the next restart
  ASSERT_EQ(reg(*third, 700, id), id);
  EXPECT_FALSE(third->pinned(id));
  EXPECT_EQ(third->grant_block(id)->gate, GPUOS_GATE_OPEN);
}

TEST_F(Adoption, AHoldFollowsTheProcessWhateverIdItGets) {
  {
    std::ofstream f(path);
    f << "3 1000 503 5030 held\n5 1000 505 5050\n7 1000 507 5070 held\n";
  }
  auto core = restart();
  EXPECT_EQ(reg(*core, 505, 5), 5u);
  EXPECT_EQ(reg(*core, 503, 3), 3u);  // below the ids handed out, but kept for it
  EXPECT_TRUE(core->pinned(3));
  EXPECT_FALSE(core->pinned(5));
  const uint32_t id = reg(*core, 507, 0);  // does not ask for its id (a new id), still held
  EXPECT_EQ(id, 6u);
  EXPECT_TRUE(core->pinned(id));
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(text, "3 1000 503 5030 held\n5 1000 505 5050\n6 1000 507 5070 held\n");  // one entry per process
}

TEST_F(Adoption, AHoldIsNotTakenByAnotherUser) {
  {
    std::ofstream f(path);
    f << "3 1000 503 5030 held\n";
  }
  auto core = restart();
  const uint32_t id = reg(*core, 503, 3, 65534);  // the same pid, another uid: not that process
  EXPECT_NE(id, 3u);
  EXPECT_FALSE(core->pinned(id));
}

TEST_F(Adoption, AnotherUserCannotTakeAnId) {
  {
    std::ofstream f(path);
    f << "40 1000 501 5010\n";
  }
  auto core = restart();
  EXPECT_NE(reg(*core, 601, 40, 65534), 40u);  // the attacker asks first: not its id
  EXPECT_NE(reg(*core, 501, 40, 65534), 40u);  // ... not even with the victim's pid (wrong uid)
}

TEST_F(Adoption, TheLedgerFollowsRegistrationsAndExits) {
  auto core = restart();
  Connection conn;
  conn.id = 1;
  conn.peer.pid = 700;
  conn.peer.uid = 1000;
  auto m = make_register(700);
  const uint32_t id = core->handle_message(conn, &m, sizeof(m)).registered;
  ASSERT_NE(id, 0u);
  {
    std::ifstream f(path);
    std::string line;
    ASSERT_TRUE(std::getline(f, line));
    EXPECT_EQ(line, std::to_string(id) + " 1000 700 7000");
  }
  auto again = restart();  // a restart while it lives: it gets its id back
  EXPECT_EQ(reg(*again, 700, id), id);
  core->connection_closed(conn);
  {
    std::ifstream f(path);  // its connection closed, its process runs on: still its id
    std::string line;
    EXPECT_TRUE(std::getline(f, line));
  }
  gone.insert(700);
  core->tick(1'000'000'000);
  gone.clear();
  std::ifstream f(path);
  std::string line;
  EXPECT_FALSE(std::getline(f, line)) << line;  // it exited: forgotten
}

// gpuosd stops while a tenant runs on: the tenant did not exit (its count and the log line say it
// runs on; its ledger entry waits for the next gpuosd), and one whose process is gone did.
TEST_F(Adoption, AShutdownCountsOnlyTheTenantsThatExited) {
  auto core = restart();
  Connection alive, dead;
  alive.id = 1;
  alive.peer.pid = 700;
  alive.peer.uid = 1000;
  dead.id = 2;
  dead.peer.pid = 701;
  dead.peer.uid = 1000;
  auto m = make_register(700);
  ASSERT_NE(core->handle_message(alive, &m, sizeof(m)).registered, 0u);
  m = make_register(701);
  ASSERT_NE(core->handle_message(dead, &m, sizeof(m)).registered, 0u);
  gone.insert(701);
  core->shutdown();
  core->connection_closed(alive);
  core->connection_closed(dead);
  gone.clear();
  EXPECT_EQ(core->stats().tenants_exited, 1u);
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(text, "1 1000 700 7000\n");
}

}  // namespace
}  // namespace gpuos::daemon
