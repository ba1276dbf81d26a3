// SPDX-License-Identifier: Apache-2.0
// A gate closed on some of a tenant's GPUs only (GateAction::closed_gpus): how the core writes it
// into the grant block (gate PARTIAL, gate_closed_devices by the tenant's own device ordinals), and
// when it closes the whole gate instead. The tenant's side is a second mapping of its blocks.
#include <gtest/gtest.h>

#include <atomic>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/ipc.h"
#include "daemon/core/core.h"
#include "tenant_side.h"

namespace gpuos::daemon {
namespace {

using tenant_side::GiB;
using tenant_side::put;
using tenant_side::TenantSide;

// A time gate that answers what the test says.
class ScriptedGate final : public slots::TimeGate {
 public:
  const char* name() const override { return "scripted"; }
  slots::GateActions decide(const slots::GateView& v) override {
    last = v;
    slots::GateActions a;
    for (const auto& t : v.tenants) a.gates.push_back({t.id, gate, closed_gpus, pacing});
    return a;
  }
  slots::GateView last;
  uint32_t gate = GPUOS_GATE_OPEN;
  uint64_t closed_gpus = 0;
  slots::Pacing pacing;
};

// GPU i's UUID bytes: zeros, then i + 0xa0.
void uuid_of(uint32_t gpu, uint8_t out[16]) {
  std::memset(out, 0, 16);
  out[15] = static_cast<uint8_t>(0xa0 + gpu);
}

struct GatesFixture : ::testing::Test {
  std::unique_ptr<Core> core;
  ScriptedGate* gate = nullptr;
  uint64_t mono = 1'000'000'000;
  TenantSide t;

  void SetUp() override {
    CoreOptions o;
    for (uint32_t i = 0; i < 2; ++i) {
      uint8_t b[16];
      uuid_of(i, b);
      o.gpus.push_back(GpuInfo{i, "Sim", format_gpu_uuid(b), 132, 4 * GiB, {}, 0});
    }
    auto g = std::make_unique<ScriptedGate>();
    gate = g.get();
    o.time_gate = std::move(g);
    o.mono_ns = [this] { return mono; };
    core = std::make_unique<Core>(std::move(o));
    t.conn.id = 1;
    t.conn.peer.pid = 100;
    t.conn.peer.uid = 1000;
    gpuos_msg_register m = tenant_side::registration(t.conn.peer.pid, GPUOS_CLASS_BEST_EFFORT);
    Outcome out = core->handle_message(t.conn, &m, sizeof(m));
    ASSERT_NE(out.registered, 0u);
    tenant_side::adopt(t, out);
  }
  void TearDown() override { tenant_side::unmap(t); }

  // The tenant publishes its devices as libgpuos.so does: ordinal o is gpuosd's GPU gpus[o].
  void publish(std::vector<uint32_t> gpus) {
    for (std::size_t o = 0; o < gpus.size(); ++o) uuid_of(gpus[o], t.cb->device_uuid[o]);
    put(t.cb->device_count, static_cast<uint32_t>(gpus.size()));
  }
  // The policy answers `g` / `closed` at the next decision.
  void decide(uint32_t g, uint64_t closed) {
    gate->gate = g;
    gate->closed_gpus = closed;
    mono += 1'000'000;
    core->tick(mono);
  }
  uint32_t word() const { return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(t.grants->gate)).load(); }
  uint32_t devices() const {
    return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(t.grants->gate_closed_devices)).load();
  }
  uint32_t gate_by() {
    gpuos_msg_list l{};
    init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 9);
    Connection admin;
    admin.peer.uid = 0;
    admin.peer.admin = true;
    Outcome o = core->handle_message(admin, &l, sizeof(l));
    for (const Outgoing& r : o.replies) {
      gpuos_msg_header h{};
      std::memcpy(&h, r.bytes.data(), std::min(r.bytes.size(), sizeof(h)));
      if (h.type == GPUOS_MSG_TENANT_INFO) return tenant_side::decode<gpuos_msg_tenant_info>(r).gate_by;
    }
    ADD_FAILURE() << "no tenant in LIST";
    return 0;
  }
};

TEST_F(GatesFixture, APartialGateIsWrittenByTheTenantsOwnOrdinals) {
  // CUDA_VISIBLE_DEVICES=1,0: its ordinal 0 is GPU 1.
  publish({1, 0});
  decide(GPUOS_GATE_OPEN, 0b10);
  EXPECT_EQ(word(), GPUOS_GATE_PARTIAL);
  EXPECT_EQ(devices(), 0b01u);
  EXPECT_EQ(gate_by(), 0b10u << GPUOS_GATE_BY_POLICY_ON_GPUS_SHIFT);
  decide(GPUOS_GATE_OPEN, 0b01);
  EXPECT_EQ(gate->last.tenants.at(0).closed_gpus, 0b10u);  // the next decision sees what it decided
  EXPECT_EQ(word(), GPUOS_GATE_PARTIAL);
  EXPECT_EQ(devices(), 0b10u);
  // Every GPU it has: the whole gate.
  decide(GPUOS_GATE_OPEN, 0b11);
  EXPECT_EQ(word(), GPUOS_GATE_CLOSED);
  EXPECT_EQ(devices(), ~0u);
  EXPECT_EQ(gate_by(), GPUOS_GATE_BY_POLICY);
  decide(GPUOS_GATE_OPEN, 0);
  EXPECT_EQ(word(), GPUOS_GATE_OPEN);
  EXPECT_EQ(devices(), 0u);
  EXPECT_EQ(gate_by(), 0u);
  // A closed gate has no GPUs of its own.
  decide(GPUOS_GATE_OPEN, 0b01);
  decide(GPUOS_GATE_CLOSED, 0b01);
  EXPECT_EQ(word(), GPUOS_GATE_CLOSED);
  EXPECT_EQ(gate->last.tenants.at(0).closed_gpus, 0b01u);
  decide(GPUOS_GATE_CLOSED, 0b01);
  EXPECT_EQ(gate->last.tenants.at(0).closed_gpus, 0u);
}

TEST_F(GatesFixture, PacingIsWrittenForTheTenantsOwnOrdinalsOfTheBudgetsGpus) {
  auto pace_devices = [&] { return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(t.grants->pace_devices)).load(); };
  auto pace = [&] { return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(t.grants->pace_permille)).load(); };
  gate->pacing.permille = 200;
  gate->pacing.gpus = 0b01;  // a budget on GPU 0
  decide(GPUOS_GATE_OPEN, 0);
  EXPECT_EQ(pace(), 200u);
  EXPECT_EQ(pace_devices(), 0u) << "its devices not known yet: paced on every one";
  publish({1, 0});  // CUDA_VISIBLE_DEVICES=1,0: GPU 0 is its ordinal 1
  decide(GPUOS_GATE_OPEN, 0);
  EXPECT_EQ(pace_devices(), 0b10u);
  gate->pacing.gpus = 0;  // on all GPUs
  decide(GPUOS_GATE_OPEN, 0);
  EXPECT_EQ(pace_devices(), 0u);
  gate->pacing = {};
  decide(GPUOS_GATE_OPEN, 0);
  EXPECT_EQ(pace(), 0u);
  EXPECT_EQ(pace_devices(), 0u);
}

TEST_F(GatesFixture, ATenantWhoseDevicesAreNotKnownYetIsClosedWholeUntilItPublishesThem) {
  decide(GPUOS_GATE_OPEN, 0b01);
  EXPECT_EQ(word(), GPUOS_GATE_CLOSED);
  EXPECT_EQ(devices(), ~0u);
  // It publishes them; the next decision (the same answer) maps them.
  publish({0, 1});
  decide(GPUOS_GATE_OPEN, 0b01);
  EXPECT_EQ(word(), GPUOS_GATE_PARTIAL);
  EXPECT_EQ(devices(), 0b01u);
}

TEST_F(GatesFixture, AGpuTheTenantDoesNotSeeIsIgnoredAndItsOnlyGpuClosesTheWholeGate) {
  publish({1});  // CUDA_VISIBLE_DEVICES=1
  decide(GPUOS_GATE_OPEN, 0b01);
  EXPECT_EQ(word(), GPUOS_GATE_OPEN);
  EXPECT_EQ(devices(), 0u);
  decide(GPUOS_GATE_OPEN, 0b10);
  EXPECT_EQ(word(), GPUOS_GATE_CLOSED);
}

TEST_F(GatesFixture, AnAdminHoldClosesEveryDeviceAndItsReleaseLetsThePolicyDecideAgain) {
  publish({0, 1});
  decide(GPUOS_GATE_OPEN, 0b01);
  ASSERT_EQ(word(), GPUOS_GATE_PARTIAL);
  const uint32_t epoch = t.grants->grant_epoch;
  ASSERT_EQ(core->admin_set_gate(t.id, GPUOS_GATE_CLOSED), GPUOS_OK);
  EXPECT_EQ(word(), GPUOS_GATE_CLOSED);
  EXPECT_EQ(devices(), ~0u);
  EXPECT_NE(t.grants->grant_epoch, epoch);
  EXPECT_EQ(gate_by(), GPUOS_GATE_BY_ADMIN);
  ASSERT_EQ(core->admin_set_gate(t.id, GPUOS_GATE_OPEN), GPUOS_OK);
  EXPECT_EQ(word(), GPUOS_GATE_PARTIAL);  // the policy's answer, at once
  EXPECT_EQ(devices(), 0b01u);
}

TEST_F(GatesFixture, AListingWithGpusNamesEachGpuOfATenantWithItsMemoryAndGate) {
  publish({1, 0});  // its ordinal 0 is GPU 1
  put(t.cb->mem_used_per_device[0], uint64_t{16} << 20);
  put(t.cb->mem_used_per_device[1], uint64_t{32} << 20);
  decide(GPUOS_GATE_OPEN, 0b10);
  auto list = [&](uint32_t flags) {
    gpuos_msg_list l{};
    init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 9);
    l.flags = flags;
    Connection c;
    c.peer.uid = 1000;
    return core->handle_message(c, &l, sizeof(l));
  };
  std::vector<gpuos_msg_tenant_gpu> gpus;
  for (const Outgoing& r : list(GPUOS_LIST_WITH_GPUS).replies) {
    gpuos_msg_header h{};
    std::memcpy(&h, r.bytes.data(), std::min(r.bytes.size(), sizeof(h)));
    if (h.type == GPUOS_MSG_TENANT_GPU) gpus.push_back(tenant_side::decode<gpuos_msg_tenant_gpu>(r));
  }
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].tenant_id, t.id);
  EXPECT_EQ(gpus[0].gpu, 0u);
  EXPECT_EQ(gpus[0].mem_used_bytes, uint64_t{32} << 20);
  EXPECT_EQ(gpus[0].gated, 0u);
  EXPECT_EQ(gpus[1].gpu, 1u);
  EXPECT_EQ(gpus[1].mem_used_bytes, uint64_t{16} << 20);
  EXPECT_EQ(gpus[1].gated, 1u);
  // Not asked for: none (a client that predates them gets the listing it knows).
  for (const Outgoing& r : list(0).replies) {
    gpuos_msg_header h{};
    std::memcpy(&h, r.bytes.data(), std::min(r.bytes.size(), sizeof(h)));
    EXPECT_NE(h.type, GPUOS_MSG_TENANT_GPU);
  }
  // A flag it does not know is refused, naming the flags.
  const Outcome bad = list(4);
  ASSERT_EQ(bad.replies.size(), 1u);
  const auto reply = tenant_side::decode<gpuos_msg_reply>(bad.replies[0]);
  EXPECT_EQ(reply.status, GPUOS_ERR_BAD_MESSAGE);
  EXPECT_NE(std::string(reply.text).find("LIST flags"), std::string::npos);
}

}  // namespace
}  // namespace gpuos::daemon
