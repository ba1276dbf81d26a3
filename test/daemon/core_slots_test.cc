// SPDX-License-Identifier: Apache-2.0
// The core's slots end to end without sockets: the space slot's partitions and the memory slot's
// swaps carried out in the control blocks, the contract checks on their actions, the fallback to
// the built-in policy, and the watchdog on a hook that does not return. The tenants' side is a
// second mapping of each control block, written the way libgpuos.so writes it.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "common/ipc.h"
#include "daemon/core/core.h"
#include "tenant_side.h"
#include "policies/budget/budget.h"
#include "policies/partition/partition.h"
#include "policies/swap/swap.h"

namespace gpuos::daemon {
namespace {

using tenant_side::GiB;
using tenant_side::put;
using tenant_side::TenantSide;

struct SlotsFixture : ::testing::Test {
  std::unique_ptr<Core> core;
  uint64_t mono = 1'000'000'000;
  std::vector<TenantSide> tenants;

  void make_core(CoreOptions o) {
    o.gpus.push_back(GpuInfo{0, "Sim", "GPU-0", 132, 4 * GiB, {}, 0});
    o.space_admit = [](const std::string& d, const Peer&) { return d == "serve" ? std::string() : "no"; };
    o.mono_ns = [this] { return mono; };
    core = std::make_unique<Core>(std::move(o));
  }
  void TearDown() override {
    for (TenantSide& t : tenants) tenant_side::unmap(t);
  }
  // Registers tenant i (pid 100 + i); returns its index.
  std::size_t add(uint32_t cls, const char* domain = "", uint32_t max_slowdown_permille = 0) {
    TenantSide t;
    t.conn.id = tenants.size() + 1;
    t.conn.peer.pid = 100 + static_cast<pid_t>(tenants.size());
    t.conn.peer.uid = 1000;
    gpuos_msg_register m = tenant_side::registration(t.conn.peer.pid, cls);
    copy_name(m.space_domain, sizeof(m.space_domain), domain);
    m.max_slowdown_permille = max_slowdown_permille;
    Outcome o = core->handle_message(t.conn, &m, sizeof(m));
    EXPECT_NE(o.registered, 0u);
    tenant_side::adopt(t, o);
    EXPECT_NE(t.cb, nullptr);
    EXPECT_NE(t.grants, nullptr);
    tenants.push_back(t);
    return tenants.size() - 1;
  }
  void activity(std::size_t i, bool busy) {
    put(tenants[i].cb->busy, busy ? 1u : 0u);
    gpuos_msg_activity m{};
    init_header(&m.hdr, GPUOS_MSG_ACTIVITY, sizeof(m), 2);
    m.busy = busy;
    EXPECT_TRUE(core->handle_message(tenants[i].conn, &m, sizeof(m)).replies.empty());
  }
  uint64_t mask(std::size_t i) {
    return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(tenants[i].grants->space_mask[0])).load();
  }
};

// A space policy that answers what the test says, or throws.
class ScriptedSpace final : public slots::SpacePolicy {
 public:
  const char* name() const override { return "scripted"; }
  slots::SpaceActions decide(const slots::SpaceView& v) override {
    last = v;
    if (throw_it) throw std::runtime_error("boom");
    return answer;
  }
  slots::SpaceView last;
  slots::SpaceActions answer;
  bool throw_it = false;
};

TEST_F(SlotsFixture, SpaceSlotPartitionsADomainThroughTheBlocks) {
  CoreOptions o;
  o.space_policy = std::make_unique<policies::PartitionPolicy>(policies::PartitionParams{});
  make_core(std::move(o));
  const std::size_t hp = add(GPUOS_CLASS_GUARANTEED, "serve");
  EXPECT_EQ(mask(hp), 0u);  // alone: unconfined
  EXPECT_EQ(tenants[hp].grants->space_group_sms, 8u);
  const std::size_t be = add(GPUOS_CLASS_BEST_EFFORT, "serve");
  const std::size_t other = add(GPUOS_CLASS_BEST_EFFORT);  // not in a domain: never confined
  activity(hp, true);
  activity(be, true);
  // 16 groups of 8 (the last takes the remainder): the guaranteed tenant all but the 2 reserved.
  EXPECT_EQ(mask(hp), 0x3fffu);
  EXPECT_EQ(mask(be), 0xc000u);
  EXPECT_EQ(mask(other), 0u);
  EXPECT_GE(tenants[hp].grants->space_epoch, 1u);
  EXPECT_EQ(core->space_failures(), 0u);
  // LIST shows the partition's SMs.
  Connection client;
  client.peer.admin = true;  // an admin's `gpuos ps`: every tenant
  client.id = 99;
  gpuos_msg_list l{};
  init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 3);
  Outcome out = core->handle_message(client, &l, sizeof(l));
  gpuos_msg_tenant_info info{};
  std::memcpy(&info, out.replies.at(1).bytes.data(), sizeof(info));
  EXPECT_EQ(info.space_sms, 112u);
  // The best-effort tenant leaves: the guaranteed one is alone again.
  core->connection_closed(tenants[be].conn);
  EXPECT_EQ(mask(hp), 0u);
}

TEST_F(SlotsFixture, ABudgetedTenantPlannedWholeGpuRunsUnconfinedBesideBestEffortOnTheReserve) {
  CoreOptions o;
  policies::PartitionParams params;
  params.budget_whole_gpu = true;
  o.space_policy = std::make_unique<policies::PartitionPolicy>(params);
  make_core(std::move(o));
  const std::size_t hp = add(GPUOS_CLASS_GUARANTEED, "serve", 1250);
  const std::size_t strict = add(GPUOS_CLASS_GUARANTEED, "serve");  // no budget: partitioned as before
  const std::size_t be = add(GPUOS_CLASS_BEST_EFFORT, "serve");
  activity(hp, true);
  activity(strict, true);
  activity(be, true);
  EXPECT_EQ(mask(hp), 0u);          // every SM
  EXPECT_EQ(mask(strict), 0x3ffeu); // the rest of the guaranteed groups after the one the budgeted one holds
  EXPECT_EQ(mask(be), 0xc000u);     // the reserve, as beside any guaranteed tenant
  EXPECT_EQ(core->space_failures(), 0u);
}

// A time gate that paces every open best-effort tenant to `groups` SM groups.
class GroupPacer final : public slots::TimeGate {
 public:
  const char* name() const override { return "group-pacer"; }
  slots::GateActions decide(const slots::GateView& v) override {
    slots::GateActions a;
    for (const slots::GateTenant& t : v.tenants) {
      slots::GateAction g;
      g.id = t.id;
      if (t.tenant_class == GPUOS_CLASS_BEST_EFFORT && groups != 0) {
        g.pacing.permille = 1000;
        g.pacing.groups = groups;
      }
      planned_groups = t.tenant_class == GPUOS_CLASS_BEST_EFFORT ? t.space_groups : planned_groups;
      a.gates.push_back(g);
    }
    return a;
  }
  uint32_t groups = 0;
  uint32_t planned_groups = 0;
};

TEST_F(SlotsFixture, TheTimeGateSizesABestEffortPartitionBesideAWholeGpuTenant) {
  CoreOptions o;
  policies::PartitionParams params;
  params.budget_whole_gpu = true;
  o.space_policy = std::make_unique<policies::PartitionPolicy>(params);
  auto gate = std::make_unique<GroupPacer>();
  GroupPacer* pacer = gate.get();
  o.time_gate = std::move(gate);
  make_core(std::move(o));
  const std::size_t hp = add(GPUOS_CLASS_GUARANTEED, "serve", 1250);
  const std::size_t be = add(GPUOS_CLASS_BEST_EFFORT, "serve");
  activity(hp, true);
  activity(be, true);
  EXPECT_EQ(mask(hp), 0u);
  EXPECT_EQ(mask(be), 0xfffeu);  // every group but the one it holds
  EXPECT_EQ(pacer->planned_groups, 15u);
  const uint32_t epoch = tenants[be].grants->space_epoch;
  pacer->groups = 3;
  activity(be, true);
  EXPECT_EQ(mask(be), 0xe000u);  // its 3 highest groups
  EXPECT_GT(tenants[be].grants->space_epoch, epoch);
  EXPECT_EQ(pacer->planned_groups, 15u) << "the plan, not the trimmed mask";
  // ps shows its share as the part of its planned groups it may use: 3 of 15.
  Connection client;
  client.peer.admin = true;  // an admin's `gpuos ps`: every tenant
  client.id = 99;
  gpuos_msg_list l{};
  init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 3);
  Outcome out = core->handle_message(client, &l, sizeof(l));
  bool listed = false;
  for (std::size_t r = 1; r < out.replies.size(); ++r) {
    gpuos_msg_tenant_info info{};
    std::memcpy(&info, out.replies.at(r).bytes.data(), sizeof(info));
    if (info.tenant_id != tenants[be].id) continue;
    listed = true;
    EXPECT_EQ(info.pace_permille, 200u);
  }
  EXPECT_TRUE(listed);
  // The space slot planning again keeps the cap.
  activity(hp, true);
  EXPECT_EQ(mask(be), 0xe000u);
  pacer->groups = 0;  // no cap: the whole plan again
  activity(be, true);
  EXPECT_EQ(mask(be), 0xfffeu);
  EXPECT_EQ(core->time_gate_failures(), 0u);
  EXPECT_EQ(core->space_failures(), 0u);
}

TEST_F(SlotsFixture, ABudgetKeepsBestEffortsGroupsThroughTheServersPausesBetweenSteps) {
  // The budget sizes a best-effort partition beside a server on the whole GPU. The server goes
  // idle for a moment between two steps (its busy word, ACTIVITY): the partition stays as lent,
  // so what best-effort queues then does not spread over the SMs of the server's next step. Only
  // once the server has been idle pace_idle_hold_ms (20) does best-effort get its whole plan.
  CoreOptions o;
  policies::PartitionParams params;
  params.budget_whole_gpu = true;
  o.space_policy = std::make_unique<policies::PartitionPolicy>(params);
  o.time_gate = std::make_unique<policies::budget::BudgetPolicy>(policies::budget::BudgetParams{});
  make_core(std::move(o));
  const std::size_t hp = add(GPUOS_CLASS_GUARANTEED, "serve", 1250);
  const std::size_t be = add(GPUOS_CLASS_BEST_EFFORT, "serve");
  activity(hp, true);
  activity(be, true);
  constexpr uint64_t kMs = 1'000'000;
  auto lent = [&] {
    return tenants[be].grants->gate == GPUOS_GATE_OPEN && tenants[be].grants->pace_permille != 0 &&
           mask(be) != 0 && mask(be) != 0xfffeu;
  };
  for (int step = 0; step < 1000 && !lent(); ++step) {  // solo times first, then a share
    mono += 10 * kMs;
    for (int k = 0; k < 4; ++k) tenant_side::timed_launch(tenants[hp].cb, 42, 1'000'000);
    put(tenants[be].cb->busy, tenants[be].grants->gate == GPUOS_GATE_OPEN ? 1u : 0u);
    core->tick(mono);
  }
  ASSERT_TRUE(lent()) << "mask 0x" << std::hex << mask(be);
  const uint64_t groups = mask(be);
  const uint32_t epoch = tenants[be].grants->space_epoch;
  for (int pause = 0; pause < 5; ++pause) {
    mono += 1 * kMs;
    activity(hp, false);
    EXPECT_EQ(mask(be), groups) << "pause " << pause;
    mono += kMs / 10;
    activity(hp, true);
    EXPECT_EQ(mask(be), groups) << "pause " << pause;
  }
  EXPECT_EQ(tenants[be].grants->space_epoch, epoch) << "no partition change in the pauses";
  activity(hp, false);
  mono += 25 * kMs;
  core->tick(mono);
  EXPECT_EQ(mask(be), 0xfffeu) << "idle 25 ms: its whole plan";
  EXPECT_EQ(core->time_gate_failures(), 0u);
  EXPECT_EQ(core->space_failures(), 0u);
}

TEST_F(SlotsFixture, ASpacePolicyBreakingItsContractFallsBackToUnconfined) {
  auto p = std::make_unique<ScriptedSpace>();
  ScriptedSpace* pol = p.get();
  CoreOptions o;
  o.space_policy = std::move(p);
  make_core(std::move(o));
  const std::size_t a = add(GPUOS_CLASS_GUARANTEED, "serve");
  const std::size_t b = add(GPUOS_CLASS_BEST_EFFORT, "serve");
  const std::size_t c = add(GPUOS_CLASS_BEST_EFFORT);
  ASSERT_EQ(pol->last.tenants.size(), 3u);
  EXPECT_EQ(pol->last.group_sms, 8u);
  EXPECT_EQ(pol->last.tenants[0].domain, "serve");
  // A good answer is carried out.
  slots::SpaceGrant g;
  g.id = 1;
  g.masks[0] = 0x00ff;
  pol->answer.grants = {g};
  activity(a, true);
  EXPECT_EQ(mask(a), 0x00ffu);
  EXPECT_EQ(mask(b), 0u);  // not granted: unconfined
  // Groups the GPU does not have (16 of them): rejected, nothing of the answer applied.
  g.masks[0] = 0x1ff00;
  pol->answer.grants = {g};
  activity(b, true);
  EXPECT_EQ(core->space_failures(), 1u);
  EXPECT_STREQ(core->space_policy().name(), "unconfined");
  EXPECT_EQ(mask(a), 0u);
  (void)c;
}

TEST_F(SlotsFixture, ASpacePolicyThatThrowsOrNamesAStrangerFallsBack) {
  for (int variant = 0; variant < 2; ++variant) {
    auto p = std::make_unique<ScriptedSpace>();
    ScriptedSpace* pol = p.get();
    CoreOptions o;
    o.space_policy = std::move(p);
    tenants.clear();
    make_core(std::move(o));
    const std::size_t a = add(GPUOS_CLASS_GUARANTEED, "serve");
    add(GPUOS_CLASS_BEST_EFFORT);  // tenant 2: not in a domain
    if (variant == 0) {
      pol->throw_it = true;
    } else {
      slots::SpaceGrant g;
      g.id = 2;
      g.masks[0] = 1;
      pol->answer.grants = {g};
    }
    activity(a, true);
    EXPECT_EQ(core->space_failures(), 1u) << variant;
    EXPECT_STREQ(core->space_policy().name(), "unconfined");
    for (TenantSide& t : tenants) munmap(t.cb, sizeof(gpuos_control_block));
    tenants.clear();
  }
}

// The tenants of the memory scenario: A holds 3 GiB it can move and is idle; B asks for room for
// 2 GiB on a 4 GiB GPU.
struct MemoryFixture : SlotsFixture {
  std::size_t a = 0, b = 0;
  void start(std::unique_ptr<slots::MemoryPolicy> policy) {
    CoreOptions o;
    o.memory_policy = std::move(policy);
    o.swap.pool_bytes = 4 * GiB;
    o.swap.quantum_ns = 0;
    o.swap.headroom_bytes = 0;
    o.swap.prefault = false;
    // NVML: A's 3 GiB of the 4 are in use, so B's 2 GiB cannot fit (a failure gpuosd sees).
    o.swap.gpu_free = [](uint32_t, uint64_t* free) {
      *free = 1 * GiB;
      return true;
    };
    make_core(std::move(o));
    a = add(GPUOS_CLASS_BEST_EFFORT);
    b = add(GPUOS_CLASS_BEST_EFFORT);
    gpuos_control_block* ca = tenants[a].cb;
    put(ca->swappable, 1u);
    put(ca->swappable_bytes, 3 * GiB);
    put(ca->mem_used_bytes, 3 * GiB);
    put(ca->mem_used_per_device[0], 3 * GiB);
    gpuos_msg_header h{};
    init_header(&h, GPUOS_MSG_SWAP_POOL, sizeof(h), 4);
    Outcome pool = core->handle_message(tenants[a].conn, &h, sizeof(h));
    ASSERT_EQ(pool.replies.size(), 1u);
    EXPECT_GE(pool.replies[0].fds[0], 0);
    gpuos_control_block* cbb = tenants[b].cb;
    put(cbb->mem_used_bytes, 2 * GiB);
    put(cbb->mem_used_per_device[0], 2 * GiB);
    put(cbb->mem_wanted_bytes, 2 * GiB);
    put(cbb->mem_wanted_device, int32_t{0});
    put(cbb->mem_request_seq, 1u);
  }
};

TEST_F(MemoryFixture, TheSwapPolicyMovesAVictimOutAndTheRequesterRetries) {
  start(std::make_unique<policies::SwapPolicy>());
  activity(b, true);
  gpuos_control_block* ca = tenants[a].cb;
  ASSERT_EQ(tenants[a].grants->swap_command_seq, 1u);
  EXPECT_EQ(tenants[a].grants->swap_command, static_cast<uint32_t>(GPUOS_SWAP_OUT));
  EXPECT_EQ(tenants[a].grants->gate, static_cast<uint32_t>(GPUOS_GATE_CLOSED));  // held while its memory moves
  EXPECT_GT(tenants[a].grants->swap_slice_bytes, 0u);
  EXPECT_EQ(tenants[b].grants->mem_answer_seq, 0u);  // not yet: no room made
  // A carries it out.
  put(ca->swapped_bytes, 3 * GiB);
  put(ca->mem_used_per_device[0], uint64_t{0});
  put(ca->swap_state, static_cast<uint32_t>(GPUOS_SWAP_SWAPPED_OUT));
  put(ca->swap_done_seq, 1u);
  core->tick(mono);
  EXPECT_EQ(tenants[b].grants->mem_answer_seq, 1u);
  EXPECT_EQ(tenants[b].grants->mem_answer, static_cast<uint32_t>(GPUOS_MEM_RETRY));
  EXPECT_EQ(tenants[a].grants->gate, static_cast<uint32_t>(GPUOS_GATE_CLOSED));  // still out: held
  EXPECT_EQ(core->memory_failures(), 0u);
}

// A's 3 GiB are a KV pool that borrows (quota 1 GiB): B's request for room first gets A a target,
// and the deadline (1000 ms, the swap policy's default) decides when the rest is swapped out.
struct KvDeadlineFixture : MemoryFixture {
  static constexpr uint64_t kMs = 1'000'000;
  void start_kv() {
    start(std::make_unique<policies::SwapPolicy>());
    put(tenants[a].cb->kv_resident_bytes, 3 * GiB);
    activity(b, true);
    ASSERT_EQ(tenants[a].grants->kv_target_on, 1u) << "a target comes before any swap";
    ASSERT_EQ(tenants[a].grants->swap_command_seq, 0u);
  }
  // A's pool at `bytes`, seen by the core `ms` after the target was set.
  void at(uint64_t ms, uint64_t bytes) {
    mono = set_at + ms * kMs;
    gpuos_control_block* ca = tenants[a].cb;
    put(ca->kv_resident_bytes, bytes);
    put(ca->mem_used_bytes, bytes);
    put(ca->mem_used_per_device[0], bytes);
    put(ca->swappable_bytes, bytes);
    core->tick(mono);
  }
  bool swapped_out() const { return tenants[a].grants->swap_command_seq != 0; }
  uint64_t set_at = 1'000'000'000;  // (the fixture's clock when the target was set)
};

TEST_F(KvDeadlineFixture, APoolThatIgnoresItsTargetIsSwappedOutAtTheDeadline) {
  start_kv();
  at(500, 3 * GiB);
  at(999, 3 * GiB);
  EXPECT_FALSE(swapped_out());
  at(1000, 3 * GiB);
  EXPECT_TRUE(swapped_out());
  EXPECT_EQ(tenants[a].grants->swap_command, static_cast<uint32_t>(GPUOS_SWAP_OUT));
}

TEST_F(KvDeadlineFixture, APoolStillGivingBackGetsTimeUntilItStops) {
  start_kv();
  const uint64_t target = tenants[a].grants->kv_target_bytes;
  ASSERT_LT(target, 3 * GiB);
  uint64_t bytes = 3 * GiB;
  for (uint64_t ms = 100; ms <= 1200; ms += 100) {  // 64 MiB every 100 ms: slower than asked
    bytes -= 64ull << 20;
    at(ms, bytes);
  }
  EXPECT_FALSE(swapped_out()) << "swapped while it was still unmapping";
  at(1400, bytes);  // stopped giving back 200 ms ago: not yet
  EXPECT_FALSE(swapped_out());
  at(1500, bytes);  // 300 ms without progress past the deadline: overdue
  EXPECT_TRUE(swapped_out());
}

TEST_F(KvDeadlineFixture, TheGraceEndsAtFourDeadlinesHoweverItTrickles) {
  start_kv();
  uint64_t bytes = 3 * GiB;
  for (uint64_t ms = 100; ms < 4000; ms += 100) {
    bytes -= 2ull << 20;  // a page every 100 ms: progress, barely
    at(ms, bytes);
    ASSERT_FALSE(swapped_out()) << ms;
  }
  at(4000, bytes - (2ull << 20));
  EXPECT_TRUE(swapped_out());
}

// Swaps a tenant whose memory cannot move: the core rejects it.
class BadMemory final : public slots::MemoryPolicy {
 public:
  const char* name() const override { return "bad"; }
  slots::MemoryActions decide(const slots::MemoryView& v) override {
    return {{{slots::SwapAction::Kind::kSwapOut, 2, 1 * GiB}}};
  }
};

TEST_F(MemoryFixture, AMemoryPolicyBreakingItsContractFallsBackToResident) {
  start(std::make_unique<BadMemory>());
  activity(b, true);
  EXPECT_EQ(core->memory_failures(), 1u);
  EXPECT_STREQ(core->memory_policy().name(), "resident");
  EXPECT_EQ(tenants[b].grants->swap_command_seq, 0u);  // nothing of the bad answer was carried out
  EXPECT_EQ(tenants[a].grants->swap_command_seq, 0u);
  // The built-in answered in its place: no swapping out, so the request for room is refused.
  EXPECT_EQ(tenants[b].grants->mem_answer_seq, 1u);
  EXPECT_EQ(tenants[b].grants->mem_answer, static_cast<uint32_t>(GPUOS_MEM_REFUSED));
}

// A time gate whose decide does not return until the watchdog has reported it.
class StuckGate final : public slots::TimeGate {
 public:
  explicit StuckGate(const Core** core) : core_(core) {}
  const char* name() const override { return "stuck"; }
  slots::GateActions decide(const slots::GateView& v) override {
    if (v.event != slots::Event::kActivity) return {};
    // Bounded so that a broken watchdog fails the test instead of hanging it.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((*core_)->watchdog_stalls() == 0 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    slots::GateActions a;
    for (const auto& t : v.tenants) a.gates.push_back({t.id, GPUOS_GATE_CLOSED, 0, {}});
    return a;
  }

 private:
  const Core** core_;
};

TEST_F(SlotsFixture, AStalledHookIsReportedAndItsSlotFallsBack) {
  const Core* self = nullptr;
  CoreOptions o;
  o.time_gate = std::make_unique<StuckGate>(&self);
  o.watchdog.stall_ns = 1'000'000;  // 1 ms
  o.watchdog.check_ns = 1'000'000;
  make_core(std::move(o));
  self = core.get();
  const std::size_t t = add(GPUOS_CLASS_BEST_EFFORT);
  activity(t, true);
  EXPECT_EQ(core->watchdog_stalls(), 1u);
  EXPECT_EQ(core->time_gate_failures(), 1u);
  EXPECT_STREQ(core->time_gate().name(), "open");
  EXPECT_EQ(tenants[t].grants->gate, static_cast<uint32_t>(GPUOS_GATE_OPEN));  // the stalled answer was dropped
}

}  // namespace
}  // namespace gpuos::daemon
