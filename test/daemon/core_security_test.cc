// SPDX-License-Identifier: Apache-2.0
// Attacks of a hostile tenant on the core (issue #22), each as the review found it on the driver
// double: the tenant rewrites words gpuosd owns (now in the sealed grant block), forges the usage
// words it writes, registers again and again, or asks for a swap pool it has no use for. Each test failed
// on the core before the fix.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>
#include <set>
#include <string>

#include "common/ipc.h"
#include "daemon/core/core.h"
#include "tenant_side.h"
#include "policies/priority/priority.h"
#include "policies/swap/swap.h"

namespace gpuos::daemon {
namespace {

using tenant_side::GiB;
using tenant_side::put;
using tenant_side::TenantSide;

struct SecurityFixture : ::testing::Test {
  std::unique_ptr<Core> core;
  std::vector<TenantSide> tenants;
  uint64_t mono = 1'000'000'000;

  void make_core(CoreOptions o) {
    o.gpus.push_back(GpuInfo{0, "Sim", "GPU-0", 132, 4 * GiB, {}, 0});
    o.mono_ns = [this] { return mono; };
    core = std::make_unique<Core>(std::move(o));
  }
  void TearDown() override {
    for (TenantSide& t : tenants) tenant_side::unmap(t);
  }
  Outcome try_register(Connection& c, pid_t pid, uint32_t cls = GPUOS_CLASS_BEST_EFFORT, uint64_t quota = 0) {
    gpuos_msg_register m = tenant_side::registration(pid, cls);
    m.requested_mem_bytes = quota;
    return core->handle_message(c, &m, sizeof(m));
  }
  // Registers a tenant and maps its control block; *registered (when given) gets the reply.
  std::size_t add(uid_t uid, uint32_t cls = GPUOS_CLASS_BEST_EFFORT, uint64_t quota = 0, bool admin = false,
                  Outcome* registered = nullptr) {
    TenantSide t;
    t.conn.id = tenants.size() + 1;
    t.conn.peer.pid = 500 + static_cast<pid_t>(tenants.size());
    t.conn.peer.uid = uid;
    t.conn.peer.admin = admin;
    Outcome o = try_register(t.conn, t.conn.peer.pid, cls, quota);
    EXPECT_NE(o.registered, 0u);
    tenant_side::adopt(t, o);
    EXPECT_NE(t.cb, nullptr);
    EXPECT_NE(t.grants, nullptr);
    tenants.push_back(t);
    if (registered != nullptr) *registered = std::move(o);
    return tenants.size() - 1;
  }
  void activity(std::size_t i, bool busy) {
    put(tenants[i].cb->busy, busy ? 1u : 0u);
    gpuos_msg_activity m{};
    init_header(&m.hdr, GPUOS_MSG_ACTIVITY, sizeof(m), 2);
    m.busy = busy;
    EXPECT_TRUE(core->handle_message(tenants[i].conn, &m, sizeof(m)).replies.empty());
  }
  gpuos_msg_tenant_info listed(uint32_t id) {
    Connection client;
    client.peer.admin = true;  // an admin's `gpuos ps`: every tenant
    client.id = 99;
    gpuos_msg_list l{};
    init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 3);
    for (const Outgoing& o : core->handle_message(client, &l, sizeof(l)).replies) {
      gpuos_msg_header h;
      std::memcpy(&h, o.bytes.data(), sizeof(h));
      if (h.type != GPUOS_MSG_TENANT_INFO) continue;
      gpuos_msg_tenant_info i;
      std::memcpy(&i, o.bytes.data(), sizeof(i));
      if (i.tenant_id == id) return i;
    }
    ADD_FAILURE() << "tenant " << id << " not listed";
    return {};
  }
};

// A best-effort tenant tries to open its own gate beside a busy guaranteed tenant (the review's
// attack wrote the word and got 2362 launches against 972), to raise its quota from 64 MiB to
// 1 TiB, its class and its in-flight bound: the words are in the grant block, whose memfd gpuosd
// sealed. Every way a process can get write access to it fails, while it can read and futex-wait.
TEST_F(SecurityFixture, TheGrantBlockCannotBeWrittenByItsTenant) {
  CoreOptions o;
  o.mem_quota_cap_bytes = 64ull << 20;
  o.time_gate = std::make_unique<policies::PriorityPolicy>(policies::PriorityParams{});
  make_core(std::move(o));
  const std::size_t hp = add(0, GPUOS_CLASS_GUARANTEED, 0, true);
  Outcome reg;
  const std::size_t be = add(65534, GPUOS_CLASS_BEST_EFFORT, 0, false, &reg);
  activity(hp, true);
  const int fd = tenant_side::grant_fd(reg);
  ASSERT_GE(fd, 0);
  const std::size_t bytes = sizeof(gpuos_grant_block);
  // 1. A writable shared mapping.
  errno = 0;
  EXPECT_EQ(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
  EXPECT_EQ(errno, EPERM);
  // 2. A read-only mapping made writable afterwards.
  void* ro = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_NE(mprotect(ro, bytes, PROT_READ | PROT_WRITE), 0);
  // 3. write(2), through this fd and through a fresh open of it (/proc/self/fd).
  const uint32_t open_gate = GPUOS_GATE_OPEN;
  EXPECT_EQ(pwrite(fd, &open_gate, sizeof(open_gate), offsetof(gpuos_grant_block, gate)), -1);
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const int reopened = open(proc.c_str(), O_RDWR | O_CLOEXEC);
  if (reopened >= 0) {
    EXPECT_EQ(pwrite(reopened, &open_gate, sizeof(open_gate), offsetof(gpuos_grant_block, gate)), -1);
    EXPECT_EQ(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, reopened, 0), MAP_FAILED);
    close(reopened);
  }
  // 4. Shrinking it under gpuosd's mapping, or taking the seals off.
  EXPECT_NE(ftruncate(fd, 0), 0);
  EXPECT_NE(fcntl(fd, F_ADD_SEALS, 0), 0);
  // What it can do: read its grants and wait on its gate (a futex wait on the read-only mapping).
  const auto* g = static_cast<const gpuos_grant_block*>(ro);
  EXPECT_EQ(g->gate, static_cast<uint32_t>(GPUOS_GATE_CLOSED));
  EXPECT_EQ(g->mem_quota_bytes, 64ull << 20);
  EXPECT_EQ(g->tenant_class, static_cast<uint32_t>(GPUOS_CLASS_BEST_EFFORT));
  EXPECT_EQ(g->max_inflight, 2u);
  timespec ms{0, 1000000};
  errno = 0;
  EXPECT_EQ(syscall(SYS_futex, &g->gate, FUTEX_WAIT, GPUOS_GATE_CLOSED, &ms, nullptr, 0), -1);
  EXPECT_EQ(errno, ETIMEDOUT);  // it waited (EFAULT would mean the wait needs write access)
  // gpuosd's own writes still reach it: each tick renews the lease.
  mono += 1'000'000;
  core->tick(mono);
  EXPECT_EQ(std::atomic_ref<uint64_t>(const_cast<uint64_t&>(g->daemon_heartbeat_ns)).load(), mono);
  EXPECT_EQ(listed(tenants[be].id).mem_quota_bytes, 64ull << 20);
  munmap(ro, bytes);
}

// Forged usage words do not poison the GPU's sums (the metric read 18446744073709547528).
TEST_F(SecurityFixture, ForgedUsageIsBoundedByTheGpu) {
  make_core(CoreOptions{});
  const std::size_t a = add(65534);
  const std::size_t b = add(1000);
  put(tenants[a].cb->mem_used_per_device[0], ~uint64_t{0} - 4087);
  put(tenants[a].cb->mem_used_bytes, ~uint64_t{0});
  put(tenants[b].cb->mem_used_per_device[0], 1 * GiB);
  EXPECT_EQ(core->gpu_used_bytes(0), 4 * GiB + 1 * GiB);  // each tenant at most the GPU: no wrap-around
  EXPECT_EQ(listed(tenants[a].id).mem_used_bytes, 4 * GiB);
}

// A tenant with a 1 GiB quota forges a request for 2 GiB of room (the review's victim was swapped
// out and held for 15 s): a request beyond the requester's own grant is refused and displaces
// nobody; one within it goes to the memory policy as before.
TEST_F(SecurityFixture, ARequestForRoomBeyondItsGrantDisplacesNobody) {
  CoreOptions o;
  o.memory_policy = std::make_unique<policies::SwapPolicy>();
  o.swap.pool_bytes = 64ull << 20;
  o.swap.prefault = false;
  make_core(std::move(o));
  const std::size_t victim = add(1000);
  put(tenants[victim].cb->swappable, 1u);
  put(tenants[victim].cb->swappable_bytes, 3 * GiB);
  put(tenants[victim].cb->mem_used_bytes, 3 * GiB);
  put(tenants[victim].cb->mem_used_per_device[0], 3 * GiB);
  const std::size_t forger = add(65534, GPUOS_CLASS_BEST_EFFORT, 1 * GiB);
  ASSERT_EQ(tenants[forger].grants->mem_quota_bytes, 1 * GiB);
  put(tenants[forger].cb->mem_used_bytes, GiB / 2);
  put(tenants[forger].cb->mem_used_per_device[0], GiB / 2);
  put(tenants[forger].cb->mem_wanted_bytes, 2 * GiB);
  put(tenants[forger].cb->mem_wanted_device, int32_t{0});
  put(tenants[forger].cb->mem_request_seq, 1u);
  activity(forger, true);
  EXPECT_EQ(tenants[forger].grants->mem_answer_seq, 1u);
  EXPECT_EQ(tenants[forger].grants->mem_answer, static_cast<uint32_t>(GPUOS_MEM_REFUSED));
  EXPECT_EQ(tenants[victim].grants->swap_command_seq, 0u);  // nobody moved
  EXPECT_EQ(tenants[victim].grants->gate, static_cast<uint32_t>(GPUOS_GATE_OPEN));
  // Within its grant (the last 512 MiB of its quota): the check lets it through, to the memory
  // policy, which makes room when a victim's quantum allows (core_slots_test); not refused here.
  put(tenants[forger].cb->mem_wanted_bytes, GiB / 2);
  put(tenants[forger].cb->mem_request_seq, 2u);
  activity(forger, true);
  EXPECT_EQ(tenants[forger].grants->mem_answer_seq, 1u);  // still pending
}

// Issue #42 (6): forged requests for room. The memory scenario: a 4 GiB GPU, a swappable victim
// holding 3 GiB (of it a KV pool, when given), and a forger of uid 65534.
struct RoomFixture : SecurityFixture {
  std::size_t victim = 0, forger = 0;
  // The GPU's free memory as NVML gives it (what the driver counts, whatever the tenants write);
  // nullopt: gpuosd cannot read it.
  std::optional<uint64_t> gpu_free;
  void start(uint64_t forger_quota, uint64_t victim_kv = 0) {
    CoreOptions o;
    o.memory_policy = std::make_unique<policies::SwapPolicy>();
    o.swap.pool_bytes = 4 * GiB;
    o.swap.quantum_ns = 0;
    o.swap.headroom_bytes = 0;
    o.swap.prefault = false;
    o.swap.gpu_free = [this](uint32_t gpu, uint64_t* free) {
      if (gpu != 0 || !gpu_free) return false;
      *free = *gpu_free;
      return true;
    };
    make_core(std::move(o));
    victim = add(1000);
    gpuos_control_block* v = tenants[victim].cb;
    put(v->swappable, 1u);
    put(v->swappable_bytes, 3 * GiB);
    put(v->mem_used_bytes, 3 * GiB);
    put(v->mem_used_per_device[0], 3 * GiB);
    put(v->kv_resident_bytes, victim_kv);
    gpuos_msg_header h{};
    init_header(&h, GPUOS_MSG_SWAP_POOL, sizeof(h), 4);
    ASSERT_EQ(core->handle_message(tenants[victim].conn, &h, sizeof(h)).replies.size(), 1u);
    forger = add(65534, GPUOS_CLASS_BEST_EFFORT, forger_quota);
  }
  // The forger sets its request words as the interposer does (the waiting allocation reserved in
  // mem_used_bytes, not yet in its device's word) and wakes gpuosd, a tick later than the last.
  void ask(uint64_t used, uint64_t wanted, uint32_t seq) {
    gpuos_control_block* f = tenants[forger].cb;
    put(f->mem_used_bytes, used);
    put(f->mem_used_per_device[0], used > wanted ? used - wanted : 0);
    put(f->mem_wanted_bytes, wanted);
    put(f->mem_wanted_device, int32_t{0});
    put(f->mem_request_seq, seq);
    mono += 200'000'000;
    activity(forger, true);
  }
  bool victim_untouched() {
    const gpuos_grant_block* g = tenants[victim].grants;
    return g->swap_command_seq == 0 && g->kv_target_on == 0 && g->gate == GPUOS_GATE_OPEN;
  }
};

// A tenant holding nothing asks ten times (no allocation of its failed): each is refused, nobody
// moves (the review's victim was swapped out 3 times in 20 s).
TEST_F(RoomFixture, ARequestWithoutItsAllocationInTheReportIsRefused) {
  start(0, 1 * GiB);
  for (uint32_t i = 1; i <= 10; ++i) {
    ask(0, 512ull << 20, i);
    EXPECT_EQ(tenants[forger].grants->mem_answer_seq, i);
    EXPECT_EQ(tenants[forger].grants->mem_answer, static_cast<uint32_t>(GPUOS_MEM_REFUSED));
  }
  EXPECT_TRUE(victim_untouched());
}

// The GPU has room as its driver counts it (3.2 GiB of 4 held): an allocation of 100 MiB did not
// fail for lack of room, so nobody is displaced; the requester is told to retry (the review's
// victim's KV pool shrank from 608 MiB to 0 with 350 MiB free on the GPU). Without NVML, gpuosd's
// own count (3.3 GiB of 4 held, the waiting 100 MiB included) says the same for a tenant with a
// quota.
TEST_F(RoomFixture, ARequestThatFitsTheGpuDisplacesNobody) {
  gpu_free = 800ull << 20;
  start(0, 1 * GiB);
  ask(300ull << 20, 100ull << 20, 1);
  EXPECT_EQ(tenants[forger].grants->mem_answer_seq, 1u);
  EXPECT_EQ(tenants[forger].grants->mem_answer, static_cast<uint32_t>(GPUOS_MEM_RETRY));
  EXPECT_TRUE(victim_untouched());
}

TEST_F(RoomFixture, WithoutNvmlARequestThatFitsGpuosdsCountDisplacesNobody) {
  start(1 * GiB, 1 * GiB);
  ask(300ull << 20, 100ull << 20, 1);
  EXPECT_EQ(tenants[forger].grants->mem_answer_seq, 1u);
  EXPECT_EQ(tenants[forger].grants->mem_answer, static_cast<uint32_t>(GPUOS_MEM_RETRY));
  EXPECT_TRUE(victim_untouched());
}

// Issue #62 item 5: with no quota (the default config), a tenant's words alone made the GPU look
// full (its per-device report) and got the victim swapped out for 900 MiB nobody needed. The GPU's
// free memory as NVML counts it decides: 1 GiB is free, so the request displaces nobody; and where
// gpuosd cannot read it, a tenant without a quota has no recorded need to back one: refused.
TEST_F(RoomFixture, NoRoomByWordsAlone) {
  gpu_free = 1 * GiB;
  start(0);
  ask(4 * GiB, 512ull << 20, 1);  // its report says it holds 3.5 GiB here: the GPU full by its words
  EXPECT_EQ(tenants[forger].grants->mem_answer_seq, 1u);
  EXPECT_EQ(tenants[forger].grants->mem_answer, static_cast<uint32_t>(GPUOS_MEM_RETRY));
  EXPECT_TRUE(victim_untouched());
  gpu_free.reset();
  ask(4 * GiB, 512ull << 20, 2);
  EXPECT_EQ(tenants[forger].grants->mem_answer_seq, 2u);
  EXPECT_EQ(tenants[forger].grants->mem_answer, static_cast<uint32_t>(GPUOS_MEM_REFUSED));
  EXPECT_TRUE(victim_untouched());
  // A failure gpuosd sees (256 MiB free: 512 MiB cannot fit) goes to the policy, which makes room.
  gpu_free = 256ull << 20;
  ask(4 * GiB, 512ull << 20, 3);
  EXPECT_EQ(tenants[victim].grants->swap_command_seq, 1u);
}

// Each request alone within its grant, not together: room made for it counts until its report
// grows. A 1 GiB quota holding 900 MiB gets room once for 512 MiB (the victim swaps out); asking
// again without allocating anything is beyond its grant.
TEST_F(RoomFixture, RoomAlreadyMadeCountsAgainstTheGrant) {
  gpu_free = 4 * GiB - 3 * GiB - (388ull << 20);
  start(1 * GiB);
  ask(900ull << 20, 512ull << 20, 1);  // 3 GiB + 900 MiB of 4 GiB: backed
  ASSERT_EQ(tenants[victim].grants->swap_command_seq, 1u);  // the victim moves out
  gpuos_control_block* v = tenants[victim].cb;
  put(v->swapped_bytes, 3 * GiB);
  put(v->mem_used_per_device[0], uint64_t{0});
  put(v->swap_state, static_cast<uint32_t>(GPUOS_SWAP_SWAPPED_OUT));
  put(v->swap_done_seq, 1u);
  mono += 200'000'000;
  core->tick(mono);
  ASSERT_EQ(tenants[forger].grants->mem_answer_seq, 1u);
  ASSERT_EQ(tenants[forger].grants->mem_answer, static_cast<uint32_t>(GPUOS_MEM_RETRY));
  // The victim is back; the forger asks again, its report as before.
  put(v->swapped_bytes, uint64_t{0});
  put(v->mem_used_per_device[0], 3 * GiB);
  put(v->swap_state, static_cast<uint32_t>(GPUOS_SWAP_RESIDENT));
  ask(900ull << 20, 512ull << 20, 2);
  EXPECT_EQ(tenants[forger].grants->mem_answer_seq, 2u);
  EXPECT_EQ(tenants[forger].grants->mem_answer, static_cast<uint32_t>(GPUOS_MEM_REFUSED));
  EXPECT_EQ(tenants[victim].grants->swap_command_seq, 1u);  // not again
}

// One request per tenant per kMinRoomIntervalNs: one made at once after an answer waits, unseen by
// the policy, and is screened a tick later.
TEST_F(RoomFixture, RequestsAreRateLimitedPerProcess) {
  gpu_free = 4 * GiB - 3 * GiB - (388ull << 20);
  start(0);
  ask(0, 512ull << 20, 1);
  ASSERT_EQ(tenants[forger].grants->mem_answer_seq, 1u);  // refused (nothing of its own waits)
  put(tenants[forger].cb->mem_used_bytes, uint64_t{900} << 20);
  put(tenants[forger].cb->mem_used_per_device[0], uint64_t{388} << 20);
  put(tenants[forger].cb->mem_request_seq, 2u);
  mono += SwapEngine::kMinRoomIntervalNs / 2;
  activity(forger, true);
  EXPECT_EQ(tenants[forger].grants->mem_answer_seq, 1u);  // waits
  EXPECT_TRUE(victim_untouched());
  mono += SwapEngine::kMinRoomIntervalNs;
  core->tick(mono);
  EXPECT_EQ(tenants[victim].grants->swap_command_seq, 1u);  // now the policy sees it (the GPU is full)
}

// One process is one tenant; one user cannot fill the table.
TEST_F(SecurityFixture, OneTenantPerPidAndACapPerUid) {
  CoreOptions o;
  o.max_tenants = 16;
  o.max_tenants_per_uid = 3;
  make_core(std::move(o));
  const std::size_t first = add(65534);
  Connection again;
  again.id = 50;
  again.peer = tenants[first].conn.peer;
  Outcome r = try_register(again, again.peer.pid);
  EXPECT_EQ(r.registered, 0u);
  gpuos_msg_register_reply rep;
  std::memcpy(&rep, r.replies.at(0).bytes.data(), sizeof(rep));
  EXPECT_EQ(rep.status, GPUOS_ERR_LIMIT);
  EXPECT_NE(std::string(rep.text).find("already tenant"), std::string::npos) << rep.text;
  add(65534);
  add(65534);
  Connection fourth;
  fourth.id = 51;
  fourth.peer.pid = 900;
  fourth.peer.uid = 65534;
  EXPECT_EQ(try_register(fourth, 900).registered, 0u);  // the uid's cap
  fourth.peer.uid = 1000;
  EXPECT_NE(try_register(fourth, 900).registered, 0u);  // another user still gets in
  Connection root;
  root.id = 52;
  root.peer.pid = 901;
  root.peer.uid = 0;
  root.peer.admin = true;
  EXPECT_NE(try_register(root, 901).registered, 0u);
}

// Issue #62 item 6: `gpuos ps` and `gpuos top` showed every local user every tenant (names, pids,
// memory). A LIST shows a user their own tenants, live and exited, and the GPUs' memory as those hold
// it; an admin (root, admin_group) sees every tenant. Who asks is the connection's uid (SO_PEERCRED).
TEST_F(SecurityFixture, AUserListsOnlyTheirOwnTenants) {
  make_core({});
  const std::size_t mine = add(65534);
  const std::size_t theirs = add(60000);
  const std::size_t gone = add(60000);
  put(tenants[mine].cb->mem_used_per_device[0], uint64_t{100} << 20);
  put(tenants[theirs].cb->mem_used_per_device[0], uint64_t{300} << 20);
  core->connection_closed(tenants[gone].conn);
  struct Seen {
    std::set<uint32_t> ids;  // of TENANT_INFO and TENANT_GPU records alike
    uint64_t gpu_used = 0;
  };
  auto list_as = [&](uid_t uid, bool admin) {
    Connection c;
    c.id = 90;
    c.peer.pid = 700;
    c.peer.uid = uid;
    c.peer.admin = admin;
    gpuos_msg_list l{};
    init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 3);
    l.flags = GPUOS_LIST_INCLUDE_EXITED | GPUOS_LIST_WITH_GPUS;
    Seen s;
    for (const Outgoing& o : core->handle_message(c, &l, sizeof(l)).replies) {
      gpuos_msg_header h;
      std::memcpy(&h, o.bytes.data(), sizeof(h));
      if (h.type == GPUOS_MSG_GPU_INFO) s.gpu_used = tenant_side::decode<gpuos_msg_gpu_info>(o).used_mem_bytes;
      if (h.type == GPUOS_MSG_TENANT_INFO) s.ids.insert(tenant_side::decode<gpuos_msg_tenant_info>(o).tenant_id);
      if (h.type == GPUOS_MSG_TENANT_GPU) s.ids.insert(tenant_side::decode<gpuos_msg_tenant_gpu>(o).tenant_id);
    }
    return s;
  };
  const uint32_t a = tenants[mine].id, b = tenants[theirs].id, c = tenants[gone].id;
  Seen s = list_as(65534, false);
  EXPECT_EQ(s.ids, (std::set<uint32_t>{a}));
  EXPECT_EQ(s.gpu_used, uint64_t{100} << 20);
  s = list_as(60000, false);
  EXPECT_EQ(s.ids, (std::set<uint32_t>{b, c}));  // its exited tenant too
  EXPECT_EQ(s.gpu_used, uint64_t{300} << 20);
  EXPECT_TRUE(list_as(1000, false).ids.empty());
  for (uid_t admin : {0u, 1000u}) {  // root, and a member of admin_group
    s = list_as(admin, true);
    EXPECT_EQ(s.ids, (std::set<uint32_t>{a, b, c}));
    EXPECT_EQ(s.gpu_used, uint64_t{400} << 20);
  }
}

// Issue #62 item 3: signal reprieves were counted per process: five processes of one best-effort
// user, woken by a signal at their closed gates in turn beside a busy guaranteed tenant, each had its
// gate opened for a second. They count per user (or claim): the first is opened, the others wait for
// the cooldown (20 s); another user's tenant beside them still has its own.
TEST_F(SecurityFixture, SignalReprievesCountPerUser) {
  CoreOptions o;
  o.time_gate = std::make_unique<policies::PriorityPolicy>(policies::PriorityParams{});
  make_core(std::move(o));
  const std::size_t hp = add(0, GPUOS_CLASS_GUARANTEED, 0, true);
  std::vector<std::size_t> mine;
  for (int i = 0; i < 5; ++i) mine.push_back(add(65534));
  const std::size_t honest = add(60000);
  activity(hp, true);
  auto gate = [&](std::size_t i) { return load(tenants[i].grants->gate); };
  auto signal = [&](std::size_t i) {
    put(tenants[i].cb->waiting, 1u);
    put(tenants[i].cb->signalled, 1u);
    activity(i, false);  // (its ACTIVITY: gpuosd decides again)
    return gate(i) == GPUOS_GATE_OPEN;
  };
  int reprieved = 0;
  for (std::size_t i : mine) {
    ASSERT_EQ(gate(i), static_cast<uint32_t>(GPUOS_GATE_CLOSED));
    reprieved += signal(i) ? 1 : 0;
    mono += 2'000'000'000;  // past the grace (1 s): the reprieve ends at the next decision
    core->tick(mono);
  }
  EXPECT_EQ(reprieved, 1);
  EXPECT_TRUE(signal(honest));
}

// A swap pool is host memory: not for a tenant that cannot swap, and gone with its tenant.
TEST_F(SecurityFixture, SwapPoolsOnlyForSwappableTenantsAndFreedWithTheirTenant) {
  CoreOptions o;
  o.memory_policy = std::make_unique<policies::SwapPolicy>();
  o.swap.pool_bytes = 64ull << 20;
  o.swap.prefault = false;
  make_core(std::move(o));
  const std::size_t a = add(65534);
  gpuos_msg_header h{};
  init_header(&h, GPUOS_MSG_SWAP_POOL, sizeof(h), 4);
  auto pool = [&](std::size_t i) {
    Outcome r = core->handle_message(tenants[i].conn, &h, sizeof(h));
    gpuos_msg_swap_pool_reply rep;
    std::memcpy(&rep, r.replies.at(0).bytes.data(), sizeof(rep));
    return std::make_pair(rep.status, r.replies.at(0).fds[0]);
  };
  EXPECT_EQ(pool(a).first, GPUOS_ERR_REFUSED);  // not swappable
  put(tenants[a].cb->swappable, 1u);
  auto [st, fd] = pool(a);
  ASSERT_EQ(st, GPUOS_OK);
  ASSERT_GE(fd, 0);
  ASSERT_NE(fcntl(fd, F_GETFD), -1);
  core->connection_closed(tenants[a].conn);
  // gpuosd's fd of the pool (the one it passes) is closed: the memory goes with the last mapping.
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);
}

// Issue #42 (3): pods all run as uid 0, and a tenant on claim B asked for "its uid's" pool and read
// and wrote a swapped-out tenant's data of claim A. Each tenant gets a pool of its own: a second
// tenant of the same uid gets another memfd, and sees nothing of the first one's pool.
TEST_F(SecurityFixture, ATenantOfTheSameUidCannotObtainAnothersSwapPool) {
  CoreOptions o;
  o.memory_policy = std::make_unique<policies::SwapPolicy>();
  o.swap.pool_bytes = 64ull << 20;
  o.swap.prefault = false;
  make_core(std::move(o));
  const std::size_t victim = add(0);
  const std::size_t other = add(0);  // the same uid (root in another pod)
  gpuos_msg_header h{};
  init_header(&h, GPUOS_MSG_SWAP_POOL, sizeof(h), 4);
  auto pool = [&](std::size_t i, uint64_t* bytes) {
    Outcome r = core->handle_message(tenants[i].conn, &h, sizeof(h));
    gpuos_msg_swap_pool_reply rep;
    std::memcpy(&rep, r.replies.at(0).bytes.data(), sizeof(rep));
    EXPECT_EQ(rep.status, GPUOS_OK);
    *bytes = rep.pool_bytes;
    return dup(r.replies.at(0).fds[0]);  // (the reply's fd is gpuosd's, borrowed)
  };
  put(tenants[victim].cb->swappable, 1u);
  put(tenants[other].cb->swappable, 1u);
  uint64_t vbytes = 0, obytes = 0;
  const int vfd = pool(victim, &vbytes);
  const int ofd = pool(other, &obytes);
  ASSERT_GE(vfd, 0);
  ASSERT_GE(ofd, 0);
  struct stat vs, os;
  ASSERT_EQ(fstat(vfd, &vs), 0);
  ASSERT_EQ(fstat(ofd, &os), 0);
  EXPECT_NE(vs.st_ino, os.st_ino);  // two memfds
  // The victim's swapped-out bytes are not in what the other maps.
  auto* vp = static_cast<char*>(mmap(nullptr, vbytes, PROT_READ | PROT_WRITE, MAP_SHARED, vfd, 0));
  auto* op = static_cast<char*>(mmap(nullptr, obytes, PROT_READ | PROT_WRITE, MAP_SHARED, ofd, 0));
  ASSERT_NE(vp, MAP_FAILED);
  ASSERT_NE(op, MAP_FAILED);
  std::memcpy(vp, "secret", 6);
  EXPECT_NE(std::memcmp(op, "secret", 6), 0);
  std::memcpy(op, "forged", 6);  // and what it writes does not reach the victim's
  EXPECT_EQ(std::memcmp(vp, "secret", 6), 0);
  munmap(vp, vbytes);
  munmap(op, obytes);
  // The other tenant's exit frees its pool only: the victim's stays for its swapped memory.
  core->connection_closed(tenants[other].conn);
  uint64_t again = 0;
  const int vfd2 = pool(victim, &again);
  struct stat vs2;
  ASSERT_EQ(fstat(vfd2, &vs2), 0);
  EXPECT_EQ(vs2.st_ino, vs.st_ino);
  close(vfd);
  close(ofd);
  close(vfd2);
}

// A pool is no larger than what its tenant can hold (quota + borrow, and slack for alignment):
// host memory it would pin for nothing otherwise.
TEST_F(SecurityFixture, ASwapPoolIsSizedToItsTenantsGrant) {
  CoreOptions o;
  o.memory_policy = std::make_unique<policies::SwapPolicy>();
  o.swap.pool_bytes = 4 * GiB;
  o.swap.prefault = false;
  make_core(std::move(o));
  const std::size_t small = add(1000, GPUOS_CLASS_BEST_EFFORT, 256ull << 20);
  const std::size_t free_of_quota = add(1001);
  gpuos_msg_header h{};
  init_header(&h, GPUOS_MSG_SWAP_POOL, sizeof(h), 4);
  auto bytes = [&](std::size_t i) {
    put(tenants[i].cb->swappable, 1u);
    Outcome r = core->handle_message(tenants[i].conn, &h, sizeof(h));
    gpuos_msg_swap_pool_reply rep;
    std::memcpy(&rep, r.replies.at(0).bytes.data(), sizeof(rep));
    return rep.pool_bytes;
  };
  EXPECT_EQ(bytes(small), (256ull + 64) << 20);
  EXPECT_EQ(bytes(free_of_quota), 4 * GiB);
}

}  // namespace
}  // namespace gpuos::daemon
