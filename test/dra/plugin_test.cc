// SPDX-License-Identifier: Apache-2.0
// gpuos-dra's prepare/unprepare logic (plugin.h) over a fake API server and a fake gpuosd: what
// is asked of gpuosd, what the answer holds, and that a failure at any step leaves nothing.
#include "dra/plugin.h"
#include "dra/node_check.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

namespace gpuos::dra {
namespace {

constexpr const char* kUid = "11111111-2222-4333-8444-555555555555";

std::string claim_json(const std::string& device = "gpu-0-guaranteed-1", const std::string& params = "") {
  std::string config;
  if (!params.empty()) {
    config = R"(, "config": [{"source": "FromClaim", "requests": ["gpu"],
                 "opaque": {"driver": "gpuos.io", "parameters": )" + params + "}}]";
  }
  return R"({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
    "metadata": {"name": "c", "namespace": "ns", "uid": ")" + std::string(kUid) + R"("},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}},
    "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpuos.io", "pool": "node-a",
      "device": ")" + device + "\"}]" + config + R"(}},
      "reservedFor": [{"resource": "pods", "name": "p", "uid": "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"}]}})";
}

struct FakeClaims : ClaimSource {
  std::string json = claim_json();
  bool fetch(const std::string&, const std::string&, std::string* out, std::string* why) override {
    if (json.empty()) {
      *why = "API server answered 404";
      return false;
    }
    *out = json;
    return true;
  }
};

struct FakeDaemon : NodeDaemon {
  std::vector<gpuos_msg_claim_prepare> prepared;
  std::vector<std::string> unprepared;
  std::map<std::string, gpuos_msg_claim_prepare> held;  // as gpuosd: a claim prepared again must be the same
  std::string refuse;  // non-empty: prepare fails with this
  bool prepare(const gpuos_msg_claim_prepare& m, std::string* dir, std::string* why) override {
    if (!refuse.empty()) {
      *why = refuse;
      return false;
    }
    if (auto it = held.find(m.claim_uid); it != held.end() && std::memcmp(&it->second, &m, sizeof(m)) != 0) {
      *why = std::string("claim ") + m.claim_uid + " is prepared already, with other settings";
      return false;
    }
    held[m.claim_uid] = m;
    prepared.push_back(m);
    *dir = std::string("/run/gpuos/claims/") + m.claim_uid;
    return true;
  }
  bool unprepare(const std::string& uid, std::string*) override {
    held.erase(uid);
    unprepared.push_back(uid);
    return true;
  }
  bool gpus(std::vector<GpuShareInfo>* out, std::string*) override {
    GpuShareInfo g;
    g.index = 0;
    g.uuid = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0";
    g.product_name = "Sim";
    g.sm_count = 132;
    g.total_mem_bytes = 16ull << 30;
    *out = {g};
    return true;
  }
  bool space_domain(const std::string&, std::string*, std::string*, std::string* why) override {
    *why = "no such domain";
    return false;
  }
};

struct PluginTest : ::testing::Test {
  std::string dir;
  FakeClaims claims;
  FakeDaemon daemon;
  PluginOptions opts;
  void SetUp() override {
    char tmpl[] = "/tmp/gpuos-dra-plugin-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
    opts.node_name = "node-a";
    opts.cdi_dir = dir;
    opts.interposer = "/opt/gpuos/lib/libgpuos.so";
  }
  void TearDown() override {
    chmod(dir.c_str(), 0700);
    std::filesystem::remove_all(dir);
  }
  std::size_t files() const {
    return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(dir), {}));
  }
};

TEST_F(PluginTest, PreparesWithTheClaimsSettingsAndTheGpusOwnDevice) {
  opts.gpu_cdi_device = "nvidia.com/gpu={uuid}:{index}";
  Plugin p(opts, claims, daemon);
  claims.json = claim_json("gpu-0-guaranteed-1", R"({"apiVersion": "gpuos.io/v1", "kind": "TenantConfig",
                                                     "mem": "2Gi", "priority": 7})");
  PrepareResult r = p.prepare({"ns", kUid, "c"});
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].cdi_device_ids,
            (std::vector<std::string>{std::string("gpuos.io/claim=") + kUid,
                                      "nvidia.com/gpu=GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0:0"}));
  EXPECT_EQ(r.devices[0].device, "gpu-0-guaranteed-1");
  ASSERT_EQ(daemon.prepared.size(), 1u);
  const gpuos_msg_claim_prepare& m = daemon.prepared[0];
  EXPECT_EQ(m.tenant_class, static_cast<uint32_t>(GPUOS_CLASS_GUARANTEED));  // the share's class
  EXPECT_EQ(m.mem_bytes, 2ull << 30);
  EXPECT_EQ(m.priority, 7);
  EXPECT_EQ(m.weight, 100u);
  EXPECT_STREQ(m.pod_name, "p");
  EXPECT_STREQ(m.gpu_uuid, "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0");
  std::ifstream f(dir + "/gpuos.io-claim_" + kUid + ".json");
  nlohmann::json spec = nlohmann::json::parse(f);
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["mounts"][0]["hostPath"], "/opt/gpuos/lib/libgpuos.so");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["mounts"][1]["hostPath"], std::string("/run/gpuos/claims/") + kUid);

  EXPECT_EQ(p.unprepare({"ns", kUid, "c"}), "");
  EXPECT_EQ(files(), 0u);
  EXPECT_EQ(daemon.unprepared, std::vector<std::string>{kUid});
}

TEST_F(PluginTest, AFailureAtAnyStepLeavesNothing) {
  Plugin p(opts, claims, daemon);
  // gpuosd refuses: no spec.
  daemon.refuse = "memory quota is more than the GPU has";
  PrepareResult r = p.prepare({"ns", kUid, "c"});
  EXPECT_NE(r.error.find("more than the GPU has"), std::string::npos) << r.error;
  EXPECT_TRUE(r.devices.empty());
  EXPECT_EQ(files(), 0u);
  // The spec cannot be written: gpuosd's part is undone.
  daemon.refuse.clear();
  if (geteuid() != 0) {  // (root writes anywhere: a missing directory instead)
    chmod(dir.c_str(), 0500);
  } else {
    std::filesystem::remove_all(dir);
  }
  r = p.prepare({"ns", kUid, "c"});
  EXPECT_NE(r.error.find("cannot write"), std::string::npos) << r.error;
  EXPECT_EQ(daemon.prepared.size(), 1u);
  EXPECT_EQ(daemon.unprepared, std::vector<std::string>{kUid});
  std::filesystem::create_directories(dir);
  // A uid that could name another path, a claim of another node's pool, a GPU gpuosd does not have,
  // a domain it does not know, a claim the API server does not have: refused before gpuosd is asked.
  daemon.prepared.clear();
  EXPECT_NE(p.prepare({"ns", "../../etc", "c"}).error.find("uid"), std::string::npos);
  claims.json = claim_json("gpu-0-best-effort-0");
  claims.json.replace(claims.json.find("\"node-a\""), 8, "\"node-b\"");
  EXPECT_NE(p.prepare({"ns", kUid, "c"}).error.find("pool"), std::string::npos);
  claims.json = claim_json("gpu-3-guaranteed-0");
  EXPECT_NE(p.prepare({"ns", kUid, "c"}).error.find("GPU 3"), std::string::npos);
  claims.json = claim_json("gpu-0-guaranteed-0", R"({"apiVersion": "gpuos.io/v1", "kind": "TenantConfig", "space": "x"})");
  EXPECT_NE(p.prepare({"ns", kUid, "c"}).error.find("no such domain"), std::string::npos);
  claims.json.clear();
  EXPECT_NE(p.prepare({"ns", kUid, "c"}).error.find("404"), std::string::npos);
  EXPECT_TRUE(daemon.prepared.empty());
  EXPECT_EQ(files(), 0u);
  EXPECT_NE(p.unprepare({"ns", "a/b", "c"}), "");
}

TEST_F(PluginTest, AFirstAvailableSubrequestIsAnsweredUnderItsParentRequest) {
  // A claim whose request "gpu" takes the first available of "large" and "small": the scheduler
  // allocates "gpu/large", and the container names "gpu" (the kubelet matches request_names exactly).
  claims.json = claim_json("gpu-0-guaranteed-1", R"({"apiVersion": "gpuos.io/v1", "kind": "TenantConfig", "mem": "1Gi"})");
  claims.json.replace(claims.json.find(R"("request": "gpu")"), 16, R"("request": "gpu/large")");
  Plugin p(opts, claims, daemon);
  PrepareResult r = p.prepare({"ns", kUid, "c"});
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].request_names, std::vector<std::string>{"gpu"});
  ASSERT_EQ(daemon.prepared.size(), 1u);
  EXPECT_EQ(daemon.prepared[0].mem_bytes, 1ull << 30);  // the config for "gpu" applies to "gpu/large"
  EXPECT_EQ(parent_request("gpu"), "gpu");
  EXPECT_EQ(parent_request("gpu/small"), "gpu");
}

TEST_F(PluginTest, ASharedClaimIsPreparedAgainWhateverTheOrderOfItsPods) {
  const std::string state = dir + "-state";
  std::filesystem::create_directories(state);
  opts.state_dir = state;
  const std::string p1 = R"({"resource": "pods", "name": "p", "uid": "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"})";
  const std::string p2 = R"({"resource": "pods", "name": "q", "uid": "0a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"})";
  auto reserved_for = [&](const std::string& pods) {
    std::string j = claim_json();
    const auto at = j.find("\"reservedFor\"");
    return j.substr(0, at) + "\"reservedFor\": [" + pods + "]}}";
  };
  {
    Plugin p(opts, claims, daemon);
    ASSERT_EQ(p.prepare({"ns", kUid, "c"}).error, "");  // for pod p
    ASSERT_EQ(daemon.prepared.size(), 1u);
    EXPECT_STREQ(daemon.prepared[0].pod_name, "p");
    // Pod q joined first in the list, then p went: the claim allocated the same share, so the
    // answer is the same (gpuosd is asked as before).
    for (const std::string& pods : {p2 + ", " + p1, p2}) {
      claims.json = reserved_for(pods);
      PrepareResult r = p.prepare({"ns", kUid, "c"});
      EXPECT_EQ(r.error, "") << pods;
      ASSERT_EQ(r.devices.size(), 1u);
      EXPECT_EQ(r.devices[0].device, "gpu-0-guaranteed-1");
    }
  }
  {
    Plugin restarted(opts, claims, daemon);  // a new plugin (after a restart) reads what it kept
    EXPECT_EQ(restarted.prepare({"ns", kUid, "c"}).error, "");
    EXPECT_EQ(restarted.unprepare({"ns", kUid, "c"}), "");
    EXPECT_TRUE(std::filesystem::is_empty(state));  // unprepared: nothing kept
    // Prepared afresh (allocated again): for the pod it is reserved for now.
    EXPECT_EQ(restarted.prepare({"ns", kUid, "c"}).error, "");
    EXPECT_STREQ(daemon.prepared.back().pod_name, "q");
    // Allocated another share under the same uid without an unprepare: not the claim prepared before.
    claims.json = claim_json("gpu-0-guaranteed-2");
    EXPECT_NE(restarted.prepare({"ns", kUid, "c"}).error.find("other settings"), std::string::npos);
    claims.json = reserved_for(p2);
    EXPECT_EQ(restarted.unprepare({"ns", kUid, "c"}), "");
  }
  for (const auto& m : daemon.prepared) EXPECT_STREQ(m.claim_uid, kUid);
  std::filesystem::remove_all(state);
}

// The NVIDIA container runtime's config: whether any pod can get GPUs by NVIDIA_VISIBLE_DEVICES.
TEST_F(PluginTest, TheNvidiaRuntimeConfigSaysWhetherPodsReachGpusWithoutAClaim) {
  using V = GpuAccessCheck::Verdict;
  auto check = [&](const char* text) {
    const std::string path = dir + "/config.toml";
    std::ofstream(path) << text;
    return check_nvidia_runtime_config({dir + "/absent.toml", path});  // the first that exists
  };
  const std::string key = "accept-nvidia-visible-devices-envvar-when-unprivileged";
  GpuAccessCheck c = check_nvidia_runtime_config({dir + "/absent.toml"});
  EXPECT_EQ(c.verdict, V::kUnknown);
  EXPECT_NE(c.detail.find("no NVIDIA container runtime config at " + dir + "/absent.toml"), std::string::npos) << c.detail;
  c = check((key + " = true\n[nvidia-container-cli]\nldconfig = \"@/sbin/ldconfig\"\n").c_str());
  EXPECT_EQ(c.verdict, V::kOpen);
  EXPECT_NE(c.detail.find(key + " = true"), std::string::npos) << c.detail;
  c = check("disable-require = false\n#" "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n");
  EXPECT_EQ(c.verdict, V::kOpen);  // absent: the toolkit's default, true
  EXPECT_NE(c.detail.find("not set"), std::string::npos) << c.detail;
  c = check((key + " = false\n").c_str());
  EXPECT_EQ(c.verdict, V::kClaimsOnly);
  // Only the top-level key counts (the same name in a table is another setting).
  c = check(("[nvidia-container-runtime]\n" + key + " = false\n").c_str());
  EXPECT_EQ(c.verdict, V::kOpen);
  c = check((key + " = \"false\"\n").c_str());
  EXPECT_EQ(c.verdict, V::kUnknown);
  EXPECT_NE(c.detail.find("not true or false"), std::string::npos) << c.detail;
  c = check("this is = = not toml\n");
  EXPECT_EQ(c.verdict, V::kUnknown);
  EXPECT_NE(c.detail.find("not TOML"), std::string::npos) << c.detail;
  EXPECT_EQ(check_nvidia_runtime_config({}).verdict, V::kUnknown);
}

}  // namespace
}  // namespace gpuos::dra
