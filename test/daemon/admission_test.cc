// SPDX-License-Identifier: Apache-2.0
// The admission stages without a Core (admission.h): each a function of what it is given.
#include "daemon/core/admission.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/ipc.h"
#include "engine_tenants.h"
#include "slots/builtin.h"

namespace gpuos::daemon {
namespace {

gpuos_msg_register reg(pid_t pid, uint32_t cls = GPUOS_CLASS_BEST_EFFORT) {
  gpuos_msg_register m{};
  init_header(&m.hdr, GPUOS_MSG_REGISTER, sizeof(m), 1);
  m.pid = pid;
  m.tenant_class = cls;
  m.weight = 1;
  copy_name(m.name, sizeof(m.name), "t");
  return m;
}

Connection peer(pid_t pid, uid_t uid, bool admin = false) {
  Connection c;
  c.peer.pid = pid;
  c.peer.uid = uid;
  c.peer.admin = admin;
  return c;
}

TEST(Admission, ValidateTheMessageAlone) {
  Connection c = peer(10, 1000);
  gpuos_msg_register m = reg(10);
  EXPECT_FALSE(admission::validate(c, m).refused());
  m.weight = 0;
  EXPECT_EQ(admission::validate(c, m).status, GPUOS_ERR_BAD_MESSAGE);
  m = reg(10, 7);
  EXPECT_EQ(admission::validate(c, m).why, "unknown tenant class 7");
  m = reg(10);
  std::memset(m.name, 'x', sizeof(m.name));
  EXPECT_EQ(admission::validate(c, m).why, "name is not NUL-terminated");
  m = reg(10);
  m.max_slowdown_permille = 1000;  // a latency budget out of range (tenant_numbers.h)
  EXPECT_EQ(admission::validate(c, m).status, GPUOS_ERR_BAD_MESSAGE);
  c.tenant_id = 3;
  EXPECT_EQ(admission::validate(c, reg(10)).why, "this connection already registered a tenant");
}

TEST(Admission, ThePidIsThePeersOrItsInnermost) {
  Connection c = peer(500, 1000);
  gpuos_msg_register m = reg(7);  // its pid in its own namespace
  EXPECT_FALSE(admission::check_pid(c, [](pid_t) { return pid_t{7}; }, &m).refused());
  EXPECT_EQ(m.pid, 500);  // gpuosd keeps the host's
  m = reg(8);
  EXPECT_EQ(admission::check_pid(c, [](pid_t) { return pid_t{7}; }, &m).status, GPUOS_ERR_PERMISSION);
}

TEST(Admission, LimitsPerProcessPerUidAndTable) {
  EngineTenants live;
  live.add(1).uid = 1000;
  const Connection c = peer(live.tenants.at(1).pid, 1000);
  admission::Limits l;
  EXPECT_EQ(admission::limits(l, live.tenants, c, c.peer.pid, nullptr).status, GPUOS_ERR_LIMIT);  // one per pid
  l.one_tenant_per_pid = false;
  EXPECT_FALSE(admission::limits(l, live.tenants, c, c.peer.pid, nullptr).refused());
  l.max_tenants_per_uid = 1;
  EXPECT_EQ(admission::limits(l, live.tenants, c, 42, nullptr).status, GPUOS_ERR_LIMIT);
  EXPECT_FALSE(admission::limits(l, live.tenants, peer(42, 1000, true), 42, nullptr).refused());  // admins: no cap
  l.max_tenants_per_uid = 0;
  l.max_tenants = 1;
  EXPECT_NE(admission::limits(l, live.tenants, c, 42, nullptr).why.find("tenant table full"), std::string::npos);
}

TEST(Admission, TheSameProcessGetsItsTenantBack) {
  std::map<uint32_t, Tenant> tenants;
  IdLedger ids("", [](pid_t) { return uint64_t{0}; });
  std::deque<gpuos_msg_tenant_info> history;
  Tenant d;  // its detached tenant (its connection closed, its process runs on)
  d.id = 9;
  d.pid = 50;
  d.start_time = 77;
  d.uid = 1000;
  d.detached = true;
  d.gate.pinned = true;
  d.verify.usage.violations = 3;
  tenants[9] = d;
  std::optional<Retained> back;
  const Connection c = peer(50, 1000);
  EXPECT_EQ(admission::choose_id({tenants, &tenants[9], ids, history, 4}, c, reg(50), 77, &back), 9u);
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->pinned);
  EXPECT_EQ(back->usage.violations, 3u);
  // Another process by now (another start time), or another user: a new id.
  back.reset();
  EXPECT_EQ(admission::choose_id({tenants, &tenants[9], ids, history, 4}, c, reg(50), 78, &back), 4u);
  EXPECT_FALSE(back);
  EXPECT_EQ(admission::choose_id({tenants, &tenants[9], ids, history, 4}, peer(50, 1001), reg(50), 77, &back), 4u);
  EXPECT_FALSE(back);
  // The limits do not count the tenant the registration takes over.
  admission::Limits l;
  l.max_tenants = 1;
  EXPECT_TRUE(admission::limits(l, tenants, c, 50, nullptr).refused());
  l.replaces = 9;
  EXPECT_FALSE(admission::limits(l, tenants, c, 50, nullptr).refused());
}

TEST(Admission, TheConfigCapsANonAdminsMemoryAndLowersGuaranteed) {
  Tenant t;
  t.tenant_class = GPUOS_CLASS_GUARANTEED;
  SlotRunner<slots::TimeGate> time("time gate", nullptr, [] { return slots::builtin_time_gate(); });
  std::vector<GpuInfo> info;
  GpuMap gpus{info};
  SpaceEngine space{gpus, info, 8};
  GateEngine gates{gpus, 0, space};
  admission::AdmitOptions o;
  o.guaranteed_needs_admin = true;
  o.mem_quota_cap_bytes = 1 << 20;
  gpuos_msg_register m = reg(10, GPUOS_CLASS_GUARANTEED);
  m.requested_mem_bytes = 0;  // unlimited asked: the cap
  m.requested_borrow_bytes = 1 << 30;
  slots::Admission adm;
  std::string lowered;
  ASSERT_FALSE(admission::admit(o, time, gates, peer(10, 1000), nullptr, m, t, &adm, &lowered).refused());
  EXPECT_EQ(adm.mem_quota_bytes, 1u << 20);
  EXPECT_EQ(adm.mem_borrow_bytes, 0u);  // quota + borrow within the cap
  EXPECT_EQ(t.tenant_class, GPUOS_CLASS_BEST_EFFORT);
  EXPECT_NE(lowered.find("guaranteed is for admins"), std::string::npos) << lowered;
}

TEST(Admission, GrantWritesTheGrantBlock) {
  Tenant t;
  t.id = 5;
  t.tenant_class = GPUOS_CLASS_BEST_EFFORT;
  slots::Admission adm;
  adm.mem_quota_bytes = 1 << 20;
  adm.mem_borrow_bytes = 1 << 10;
  adm.max_inflight = 3;
  ASSERT_FALSE(admission::grant(t, adm, GPUOS_GATE_OPEN, /*held=*/true, 8, 1234).refused());
  EXPECT_EQ(load(t.grants->gate), GPUOS_GATE_CLOSED);  // an admin's hold
  EXPECT_EQ(load(t.grants->max_inflight), 3u);
  EXPECT_EQ(load(t.grants->mem_borrow_bytes), 1u << 10);
  EXPECT_EQ(t.granted.limit_bytes(), (1u << 20) + (1u << 10));
  EXPECT_TRUE(t.gate.pinned);
  EXPECT_EQ(t.busy.obs_ns, 1234u);
  destroy_tenant_blocks(t);
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

TEST(ProcessStartTime, OfThisProcessAndOfNone) {
  EXPECT_GT(process_start_time(getpid()), 0u);
  EXPECT_EQ(process_start_time(-1), 0u);
}

}  // namespace
}  // namespace gpuos::daemon
