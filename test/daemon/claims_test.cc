// SPDX-License-Identifier: Apache-2.0
// Kubernetes claims in gpuosd's core: CLAIM_PREPARE / UNPREPARE, a claim's socket binding its
// tenants to the claim's settings and pod, and what is kept across a restart. No sockets: a fake
// ClaimSockets records what the server would listen on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/ipc.h"
#include "daemon/core/claims.h"
#include "daemon/core/core.h"
#include "tenant_side.h"

namespace gpuos::daemon {
namespace {

using tenant_side::decode;

constexpr const char* kGpu = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0";
constexpr const char* kClaim = "5f0e7c6a-1b2c-4d3e-8f90-a1b2c3d4e5f6";
constexpr const char* kPod = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d";

void set(char* dst, std::size_t n, const std::string& v) {
  std::memset(dst, 0, n);
  std::memcpy(dst, v.data(), std::min(v.size(), n - 1));
}

gpuos_msg_claim_prepare prepare_msg() {
  gpuos_msg_claim_prepare m{};
  init_header(&m.hdr, GPUOS_MSG_CLAIM_PREPARE, sizeof(m), 7);
  set(m.claim_uid, sizeof(m.claim_uid), kClaim);
  set(m.claim_namespace, sizeof(m.claim_namespace), "inference");
  set(m.claim_name, sizeof(m.claim_name), "llm-0-gpu");
  set(m.pod_name, sizeof(m.pod_name), "llm-0");
  set(m.pod_uid, sizeof(m.pod_uid), kPod);
  set(m.gpu_uuid, sizeof(m.gpu_uuid), kGpu);
  m.tenant_class = GPUOS_CLASS_GUARANTEED;
  m.priority = 10;
  m.weight = 100;
  m.mem_bytes = 8ull << 30;
  m.borrow_bytes = 2ull << 30;
  m.max_slowdown_permille = 1250;
  return m;
}

class FakeSockets final : public ClaimSockets {
 public:
  std::string open_claim_socket(const std::string& uid) override {
    if (fail) return "no room";
    open.insert(uid);
    return "";
  }
  void close_claim_socket(const std::string& uid) override { open.erase(uid); }
  std::set<std::string> open;
  bool fail = false;
};

struct Claims : ::testing::Test {
  std::string dir;
  FakeSockets sockets;
  std::unique_ptr<Core> core;
  Connection admin, outsider;

  void SetUp() override {
    char tmpl[] = "/tmp/gpuos-claims-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
    make_core();
    admin.id = 1;
    admin.peer = Peer{getpid(), 0, 0, true};
    outsider.id = 2;
    outsider.peer = Peer{4321, 1000, 1000, false};
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  void make_core(uint64_t cap = 0) {
    core.reset();
    CoreOptions o;
    o.gpus.push_back(GpuInfo{0, "Sim", std::string("GPU-") + kGpu, 132, 16ull << 30, {}, 0});
    o.claims_path = dir + "/claims.txt";
    o.claim_socket_root = dir + "/gpuosd.sock";
    o.mem_quota_cap_bytes = cap;
    o.guaranteed_needs_admin = true;
    o.one_tenant_per_pid = false;
    // A container's tenant: its pid in its namespace is 7, whatever its host pid.
    o.innermost_pid = [](pid_t) { return pid_t{7}; };
    o.pod_uid_of = [](pid_t pid) { return pid == 5555 ? std::string(kPod) : std::string(); };
    core = std::make_unique<Core>(std::move(o));
    core->set_claim_sockets(&sockets);
  }
  template <typename M>
  Outcome send(Connection& c, const M& m) {
    return core->handle_message(c, &m, sizeof(m));
  }
  static gpuos_msg_reply reply(const Outcome& o) {
    EXPECT_EQ(o.replies.size(), 1u);
    return o.replies.empty() ? gpuos_msg_reply{} : decode<gpuos_msg_reply>(o.replies[0]);
  }
  std::vector<gpuos_msg_tenant_info> list() {
    gpuos_msg_list l{};
    init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 1);
    Outcome o = send(admin, l);
    std::vector<gpuos_msg_tenant_info> out;
    for (const Outgoing& r : o.replies) {
      gpuos_msg_header h;
      std::memcpy(&h, r.bytes.data(), sizeof(h));
      if (h.type == GPUOS_MSG_TENANT_INFO) out.push_back(decode<gpuos_msg_tenant_info>(r));
    }
    return out;
  }
};

TEST_F(Claims, PrepareIsForAdminsAndIdempotent) {
  auto m = prepare_msg();
  gpuos_msg_reply r = reply(send(outsider, m));
  EXPECT_EQ(r.status, GPUOS_ERR_PERMISSION);
  EXPECT_TRUE(sockets.open.empty());

  r = reply(send(admin, m));
  ASSERT_EQ(r.status, GPUOS_OK) << r.text;
  EXPECT_EQ(std::string(r.text), dir + "/claims/" + kClaim);
  EXPECT_EQ(sockets.open, std::set<std::string>{kClaim});
  ASSERT_NE(core->claims().find(kClaim), nullptr);

  // The same claim again (a kubelet retry): OK, nothing new. Other settings: refused, kept as was.
  r = reply(send(admin, m));
  EXPECT_EQ(r.status, GPUOS_OK) << r.text;
  auto other = m;
  other.mem_bytes = 4ull << 30;
  r = reply(send(admin, other));
  EXPECT_EQ(r.status, GPUOS_ERR_BAD_MESSAGE);
  EXPECT_NE(std::string(r.text).find("other settings"), std::string::npos) << r.text;
  EXPECT_EQ(core->claims().find(kClaim)->mem_bytes, 8ull << 30);
}

TEST_F(Claims, BadClaimsAreRefusedAndLeaveNothing) {
  struct Case {
    const char* what;
    void (*edit)(gpuos_msg_claim_prepare&);
    gpuos_status status;
  };
  const Case cases[] = {
      {"is not 1..36", [](gpuos_msg_claim_prepare& m) { set(m.claim_uid, sizeof(m.claim_uid), "../etc"); },
       GPUOS_ERR_BAD_MESSAGE},
      {"not NUL-terminated", [](gpuos_msg_claim_prepare& m) { std::memset(m.claim_name, 'a', sizeof(m.claim_name)); },
       GPUOS_ERR_BAD_MESSAGE},
      {"not a DNS label", [](gpuos_msg_claim_prepare& m) { set(m.claim_namespace, sizeof(m.claim_namespace), "Big_NS"); },
       GPUOS_ERR_BAD_MESSAGE},
      {"unknown tenant class", [](gpuos_msg_claim_prepare& m) { m.tenant_class = 9; }, GPUOS_ERR_BAD_MESSAGE},
      {"weight", [](gpuos_msg_claim_prepare& m) { m.weight = 0; }, GPUOS_ERR_BAD_MESSAGE},
      {"borrow needs", [](gpuos_msg_claim_prepare& m) { m.mem_bytes = 0; }, GPUOS_ERR_BAD_MESSAGE},
      {"guaranteed tenants only",
       [](gpuos_msg_claim_prepare& m) { m.tenant_class = GPUOS_CLASS_BEST_EFFORT; }, GPUOS_ERR_BAD_MESSAGE},
      {"SMs need", [](gpuos_msg_claim_prepare& m) { m.space_sms = 16; }, GPUOS_ERR_BAD_MESSAGE},
      {"more than the GPU has", [](gpuos_msg_claim_prepare& m) { m.mem_bytes = 17ull << 30; }, GPUOS_ERR_REFUSED},
      {"no GPU", [](gpuos_msg_claim_prepare& m) { set(m.gpu_uuid, sizeof(m.gpu_uuid), "00000000-0000-0000-0000-000000000000"); },
       GPUOS_ERR_REFUSED},
      {"no spatial domains", [](gpuos_msg_claim_prepare& m) { set(m.space_domain, sizeof(m.space_domain), "inference"); },
       GPUOS_ERR_REFUSED},
  };
  for (const Case& c : cases) {
    auto m = prepare_msg();
    c.edit(m);
    gpuos_msg_reply r = reply(send(admin, m));
    EXPECT_EQ(r.status, c.status) << c.what << ": " << r.text;
    EXPECT_NE(std::string(r.text).find(c.what), std::string::npos) << r.text;
  }
  // The node's cap ([tenants] mem_quota_cap) binds a claim too.
  make_core(4ull << 30);
  gpuos_msg_reply r = reply(send(admin, prepare_msg()));
  EXPECT_EQ(r.status, GPUOS_ERR_REFUSED);
  EXPECT_NE(std::string(r.text).find("cap"), std::string::npos) << r.text;
  // #42: a borrow that wraps quota + borrow past 2^64 passed the cap (1Gi + 18446744072635809792
  // read as 64 MiB); without a cap it is refused too.
  for (uint64_t cap : {64ull << 20, 0ull}) {
    make_core(cap);
    auto wrap = prepare_msg();
    wrap.mem_bytes = 1ull << 30;
    wrap.borrow_bytes = 18446744072635809792ull;
    r = reply(send(admin, wrap));
    EXPECT_EQ(r.status, GPUOS_ERR_BAD_MESSAGE) << cap;
    EXPECT_NE(std::string(r.text).find("memory quota 1073741824 + borrow 18446744072635809792 bytes is more than "
                                       "2^64 - 1"),
              std::string::npos)
        << r.text;
    EXPECT_TRUE(core->claims().all().empty());
  }
  // A socket that cannot be made: refused, not kept.
  make_core();
  sockets.fail = true;
  r = reply(send(admin, prepare_msg()));
  EXPECT_EQ(r.status, GPUOS_ERR_INTERNAL);
  EXPECT_NE(std::string(r.text).find("no room"), std::string::npos) << r.text;
  EXPECT_TRUE(core->claims().all().empty());
  EXPECT_TRUE(sockets.open.empty());
  std::ifstream f(dir + "/claims.txt");
  std::string content((std::istreambuf_iterator<char>(f)), {});
  EXPECT_EQ(content, "");
}

TEST_F(Claims, AClaimsTenantGetsTheClaimsSettingsAndPod) {
  ASSERT_EQ(reply(send(admin, prepare_msg())).status, GPUOS_OK);
  Connection tenant;
  tenant.id = 9;
  tenant.peer = Peer{31337, 0, 0, false};  // a container's root: no admin here
  tenant.claim_uid = kClaim;
  // It asks for best-effort without a quota, from pid 7 (its own namespace's).
  gpuos_msg_register m = tenant_side::registration(7, GPUOS_CLASS_BEST_EFFORT, "server");
  Outcome o = send(tenant, m);
  ASSERT_EQ(o.registered, 1u);
  auto rr = decode<gpuos_msg_register_reply>(o.replies[0]);
  EXPECT_EQ(rr.tenant_class, static_cast<uint32_t>(GPUOS_CLASS_GUARANTEED));
  auto tenants = list();
  ASSERT_EQ(tenants.size(), 1u);
  const auto& t = tenants[0];
  EXPECT_EQ(t.pid, 31337);  // the host's pid
  EXPECT_EQ(t.mem_quota_bytes, 8ull << 30);
  EXPECT_EQ(t.mem_borrow_bytes, 2ull << 30);
  EXPECT_EQ(t.priority, 10);
  EXPECT_EQ(t.max_slowdown_permille, 1250u);
  EXPECT_STREQ(t.pod_namespace, "inference");
  EXPECT_STREQ(t.pod_name, "llm-0");
  EXPECT_STREQ(t.pod_uid, kPod);
  EXPECT_STREQ(t.claim_uid, kClaim);

  // Only a tenant's messages are served on a claim's socket.
  gpuos_msg_list l{};
  init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 2);
  EXPECT_EQ(reply(send(tenant, l)).status, GPUOS_ERR_PERMISSION);
  gpuos_msg_set_gate g{};
  init_header(&g.hdr, GPUOS_MSG_SET_GATE, sizeof(g), 3);
  g.tenant_id = 1;
  EXPECT_EQ(reply(send(tenant, g)).status, GPUOS_ERR_PERMISSION);
  auto again = prepare_msg();
  EXPECT_EQ(reply(send(tenant, again)).status, GPUOS_ERR_PERMISSION);

  // A pid that is neither the peer's nor its namespace's is refused.
  Connection liar = tenant;
  liar.id = 10;
  Outcome bad = send(liar, tenant_side::registration(8, GPUOS_CLASS_BEST_EFFORT, "x"));
  EXPECT_EQ(bad.registered, 0u);
}

TEST_F(Claims, AProcessOfAPodFoundByItsCgroup) {
  ASSERT_EQ(reply(send(admin, prepare_msg())).status, GPUOS_OK);
  Connection c;
  c.id = 11;
  c.peer = Peer{5555, 1000, 1000, false};
  ASSERT_EQ(send(c, tenant_side::registration(5555, GPUOS_CLASS_BEST_EFFORT, "by-hand")).registered, 1u);
  auto t = list();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_STREQ(t[0].pod_uid, kPod);
  EXPECT_STREQ(t[0].pod_name, "llm-0");  // (from the claim of the same pod)
  EXPECT_STREQ(t[0].claim_uid, "");
  EXPECT_EQ(t[0].tenant_class, static_cast<uint32_t>(GPUOS_CLASS_BEST_EFFORT));
}

TEST_F(Claims, KeptAcrossARestartAndForgottenWhenUnprepared) {
  ASSERT_EQ(reply(send(admin, prepare_msg())).status, GPUOS_OK);
  sockets.open.clear();
  make_core();  // a new gpuosd over the same directory (whose server could not listen for it yet)
  const Claim* c = core->claims().find(kClaim);
  ASSERT_NE(c, nullptr);
  Claim want;
  ASSERT_EQ(claim_from_message(prepare_msg(), &want), "");
  EXPECT_EQ(*c, want);
  // Prepared again (the kubelet retries): OK, and its socket is made if it was missing.
  ASSERT_EQ(reply(send(admin, prepare_msg())).status, GPUOS_OK);
  EXPECT_EQ(sockets.open, std::set<std::string>{kClaim});

  gpuos_msg_claim_unprepare u{};
  init_header(&u.hdr, GPUOS_MSG_CLAIM_UNPREPARE, sizeof(u), 8);
  set(u.claim_uid, sizeof(u.claim_uid), kClaim);
  EXPECT_EQ(reply(send(outsider, u)).status, GPUOS_ERR_PERMISSION);
  EXPECT_EQ(reply(send(admin, u)).status, GPUOS_OK);
  EXPECT_TRUE(sockets.open.empty());
  EXPECT_EQ(core->claims().find(kClaim), nullptr);
  EXPECT_EQ(reply(send(admin, u)).status, GPUOS_OK);  // unknown: fine (idempotent)
  make_core();
  EXPECT_TRUE(core->claims().all().empty());
}

TEST(ClaimFacts, PodUidFromCgroupPaths) {
  // cgroupfs driver, systemd driver (underscores), cgroup v1 lines, and none.
  EXPECT_EQ(pod_uid_from_cgroup_text("0::/kubepods/burstable/pod9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d/abc123\n"), kPod);
  EXPECT_EQ(pod_uid_from_cgroup_text("0::/kubepods.slice/kubepods-besteffort.slice/"
                                     "kubepods-besteffort-pod9a8b7c6d_5e4f_4a3b_9c2d_1e0f9a8b7c6d.slice/"
                                     "cri-containerd-0123.scope\n"),
            kPod);
  EXPECT_EQ(pod_uid_from_cgroup_text("4:memory:/kubepods/pod9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d/x\n"), kPod);
  EXPECT_EQ(pod_uid_from_cgroup_text("0::/user.slice/user-1000.slice/session-2.scope\n"), "");
  EXPECT_EQ(pod_uid_from_cgroup_text("0::/podcast/9a8b7c6d\n"), "");
}

TEST(ClaimFacts, InnermostPidOfThisProcessIsItsOwn) {
  EXPECT_EQ(innermost_pid(getpid()), getpid());
  EXPECT_EQ(innermost_pid(-5), 0);
}

// Issue #42 (4): any host user could connect to a claim's socket and be governed with the claim's
// settings. Who may use it, decided on the peer's facts (synthetic here): the claim's pod only.
TEST(ClaimFacts, OnlyTheClaimsContainersMayUseItsSocket) {
  Claim c;
  c.uid = kClaim;
  c.pod_uid = kPod;
  ClaimPeer in_pod;
  in_pod.pid = 4242;
  in_pod.uid = 0;
  in_pod.pod_uid = kPod;
  in_pod.ns_known = true;
  EXPECT_EQ(claim_peer_refusal(c, in_pod), "");
  ClaimPeer other_pod = in_pod;  // root in another pod
  other_pod.pod_uid = "11111111-2222-4333-8444-555555555555";
  EXPECT_NE(claim_peer_refusal(c, other_pod).find("not the claim's"), std::string::npos)
      << claim_peer_refusal(c, other_pod);
  ClaimPeer host = in_pod;  // a host user's process (root's too): no pod, gpuosd's namespaces
  host.pod_uid = "";
  host.uid = 1000;
  host.host_pid_ns = true;
  host.host_user_ns = true;
  const std::string why = claim_peer_refusal(c, host);
  EXPECT_NE(why.find("is a host process in no pod"), std::string::npos) << why;
  EXPECT_NE(why.find("serves its claim's containers only"), std::string::npos) << why;
  host.uid = 0;
  EXPECT_NE(claim_peer_refusal(c, host), "");
  ClaimPeer userns = host;  // `unshare -Urpf`: any user can make a pid namespace inside a user one
  userns.host_pid_ns = false;
  userns.host_user_ns = false;
  EXPECT_NE(claim_peer_refusal(c, userns).find("user namespace of its own"), std::string::npos);
  ClaimPeer runtime = userns;  // a container a privileged runtime made, with no pod cgroup
  runtime.host_user_ns = true;
  EXPECT_EQ(claim_peer_refusal(c, runtime), "");
  ClaimPeer unknown = host;  // namespaces unreadable, or no pid (another pid namespace without hostPID)
  unknown.ns_known = false;
  EXPECT_NE(claim_peer_refusal(c, unknown).find("cannot read"), std::string::npos);
  ClaimPeer no_pid = in_pod;
  no_pid.pid = 0;
  EXPECT_NE(claim_peer_refusal(c, no_pid).find("not visible"), std::string::npos);
  // A claim with no pod yet: any pod's process (its pod is not known to compare), never a host's.
  c.pod_uid = "";
  EXPECT_EQ(claim_peer_refusal(c, other_pod), "");
  EXPECT_NE(claim_peer_refusal(c, host), "");
}

// Issue #62 item 2: a user makes `pod<the claim's pod uid>.scope` in the cgroup subtree systemd
// delegated to it; the name was taken as the pod, and the process was served on the claim's socket
// (its class, quota, labels). Only the kubelet's cgroup of the pod proves it now.
TEST(ClaimFacts, APodNamedInAUsersOwnCgroupIsNoPod) {
  const std::filesystem::path proc =
      std::filesystem::temp_directory_path() / ("gpuos-forged-pod-" + std::to_string(getpid()));
  std::filesystem::create_directories(proc / "4242");
  std::ofstream(proc / "4242" / "cgroup")
      << "0::/user.slice/user-65534.slice/user@65534.service/app.slice/pod" << kPod << ".scope\n";
  Claim c;
  c.uid = kClaim;
  c.pod_uid = kPod;
  const ClaimPeer p = claim_peer_of(4242, 65534, proc.string());
  EXPECT_EQ(p.pod_uid, "");
  const std::string why = claim_peer_refusal(c, p);
  EXPECT_NE(why.find("not under the kubelet's cgroup roots"), std::string::npos) << why;
  EXPECT_EQ(pod_uid_of_process(4242, proc.string()), "");  // no pod label on gpuosd's own socket
  std::filesystem::remove_all(proc);
}

// This test process, as gpuosd reads it: a host process in gpuosd's own namespaces.
TEST(ClaimFacts, ThisProcessIsAHostProcess) {
  const ClaimPeer p = claim_peer_of(getpid(), getuid());
  EXPECT_TRUE(p.ns_known);
  EXPECT_TRUE(p.host_pid_ns);
  EXPECT_TRUE(p.host_user_ns);
  Claim c;
  c.uid = kClaim;
  c.pod_uid = kPod;
  if (p.pod_uid.empty()) {
    EXPECT_NE(claim_peer_refusal(c, p), "");
  }
}

TEST(ClaimFacts, AMalformedLineOfTheFileIsSkipped) {
  char tmpl[] = "/tmp/gpuos-claims-file-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/claims.txt";
  {
    ClaimStore s(path);
    Claim c;
    ASSERT_EQ(claim_from_message(prepare_msg(), &c), "");
    std::string why;
    ASSERT_TRUE(s.put(c, &why)) << why;
  }
  {
    std::ofstream f(path, std::ios::app);
    f << "uid=../../x\tnamespace=a\n" << "garbage\n" << "uid=abc\tclass=99999999999999999999999\n"
      << "uid=abd\tclass=+1\n" << "uid=abe\tmem=12x\n" << "uid=abf\tmem=-1\n";
  }
  ClaimStore s(path);
  s.load();
  EXPECT_EQ(s.all().size(), 1u);
  EXPECT_NE(s.find(kClaim), nullptr);
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace gpuos::daemon
