// SPDX-License-Identifier: Apache-2.0
// The ResourceSlice a node publishes (src/dra/resource_slice.h): names, the resource.k8s.io/v1
// shape field by field, the 128-device cap, and the comparison that decides whether to write.
#include "dra/resource_slice.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using gpuos::dra::GpuShareInfo;
using gpuos::dra::SliceOptions;
using nlohmann::json;

namespace {

std::vector<GpuShareInfo> h200s(std::size_t n) {
  std::vector<GpuShareInfo> gpus;
  for (std::size_t i = 0; i < n; ++i) {
    char uuid[40];
    std::snprintf(uuid, sizeof(uuid), "0d1e2f3a-4b5c-6d7e-8f90-%012zx", i);
    gpus.push_back({static_cast<uint32_t>(i), uuid, "NVIDIA H200", 132, 150754820096ull});
  }
  return gpus;
}

SliceOptions node(const char* name = "node-a") {
  SliceOptions o;
  o.node_name = name;
  return o;
}

bool is_dns_label(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return s.front() != '-' && s.back() != '-';
}

}  // namespace

TEST(DeviceNames, RoundTripAndStrictness) {
  EXPECT_EQ(gpuos::dra::device_name(0, "guaranteed", 3), "gpu-0-guaranteed-3");
  EXPECT_EQ(gpuos::dra::device_name(12, "best-effort", 0), "gpu-12-best-effort-0");
  const std::string longest = gpuos::dra::device_name(UINT32_MAX, "best-effort", UINT32_MAX);
  EXPECT_TRUE(is_dns_label(longest)) << longest;
  uint32_t gpu = 0, share = 0;
  std::string klass;
  ASSERT_TRUE(gpuos::dra::parse_device_name("gpu-12-best-effort-7", &gpu, &klass, &share));
  EXPECT_EQ(gpu, 12u);
  EXPECT_EQ(klass, "best-effort");
  EXPECT_EQ(share, 7u);
  ASSERT_TRUE(gpuos::dra::parse_device_name(longest, &gpu, &klass, &share));
  EXPECT_EQ(gpu, UINT32_MAX);
  EXPECT_TRUE(gpuos::dra::parse_device_name("gpu-0-guaranteed-0", nullptr, nullptr, nullptr));
  for (const char* bad : {"", "gpu", "gpu-0", "gpu-0-guaranteed", "gpu-0-guaranteed-", "gpu-00-guaranteed-1",
                          "gpu-0-guaranteed-01", "gpu--1-guaranteed-1", "gpu-0-premium-1", "gpu-0-best-1",
                          "gpu-4294967296-guaranteed-0", "GPU-0-guaranteed-0", "gpu-0-guaranteed-1-", "gpu-0-guaranteed-+1",
                          "gpu-0-guaranteed-1x", "xgpu-0-guaranteed-1"}) {
    EXPECT_FALSE(gpuos::dra::parse_device_name(bad, &gpu, &klass, &share)) << bad;
  }
}

TEST(SliceNames, NodeAndDriverLowercasedWithinTheSubdomainLimit) {
  EXPECT_EQ(gpuos::dra::slice_name(node("node-a")), "node-a-gpuos.io");
  EXPECT_EQ(gpuos::dra::slice_name(node("Worker-7.Example.com")), "worker-7.example.com-gpuos.io");
  EXPECT_EQ(gpuos::dra::pool_name(node("Worker-7")), "worker-7");
  // A 253-byte node name: cut, with a hash so that two long names stay apart.
  const std::string a = std::string(200, 'a') + "." + std::string(52, 'b');
  const std::string b = std::string(200, 'a') + "." + std::string(52, 'c');
  const std::string na = gpuos::dra::slice_name(node(a.c_str()));
  const std::string nb = gpuos::dra::slice_name(node(b.c_str()));
  EXPECT_LE(na.size(), 253u);
  EXPECT_NE(na, nb);
  EXPECT_TRUE(na.ends_with("-gpuos.io")) << na;
}

TEST(SliceOptions, Checked) {
  std::string why;
  EXPECT_TRUE(gpuos::dra::check_slice_options(node(), &why)) << why;
  EXPECT_TRUE(gpuos::dra::check_slice_options(node("Node-A"), &why)) << why;
  SliceOptions o = node("");
  EXPECT_FALSE(gpuos::dra::check_slice_options(o, &why));
  EXPECT_NE(why.find("node name is empty"), std::string::npos);
  o = node("node_a");
  EXPECT_FALSE(gpuos::dra::check_slice_options(o, &why));
  o = node("-a");
  EXPECT_FALSE(gpuos::dra::check_slice_options(o, &why));
  o = node();
  o.driver = "GPUOS.io";
  EXPECT_FALSE(gpuos::dra::check_slice_options(o, &why));
  EXPECT_NE(why.find("driver name"), std::string::npos);
  o = node();
  o.guaranteed_shares = o.best_effort_shares = 0;
  EXPECT_FALSE(gpuos::dra::check_slice_options(o, &why));
  EXPECT_NE(why.find("no shares"), std::string::npos);
}

// Every field as resource.k8s.io/v1 names it (k8s.io/api resource/v1 types.go): attributes and
// capacity directly on Device (no "basic" as in v1beta1), each attribute one typed value.
TEST(ResourceSlice, V1Shape) {
  const json slice = gpuos::dra::resource_slice(node(), h200s(1), 3, "");
  EXPECT_EQ(slice["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(slice["kind"], "ResourceSlice");
  EXPECT_EQ(slice["metadata"], json({{"name", "node-a-gpuos.io"}}));  // no resourceVersion when new
  const json& spec = slice["spec"];
  EXPECT_EQ(spec["driver"], "gpuos.io");
  EXPECT_EQ(spec["nodeName"], "node-a");
  EXPECT_EQ(spec["pool"], json({{"name", "node-a"}, {"generation", 3}, {"resourceSliceCount", 1}}));
  EXPECT_EQ(spec.size(), 4u) << spec.dump();  // nothing else: no nodeSelector/allNodes
  const json& devices = spec["devices"];
  ASSERT_EQ(devices.size(), 12u);
  const json expected_first = json::parse(R"({
    "name": "gpu-0-guaranteed-0",
    "attributes": {
      "class": {"string": "guaranteed"}, "index": {"int": 0}, "uuid": {"string": "GPU-0d1e2f3a-4b5c-6d7e-8f90-000000000000"},
      "productName": {"string": "NVIDIA H200"}, "sms": {"int": 132}, "share": {"int": 0}},
    "capacity": {"memory": {"value": "150754820096"}}})");
  EXPECT_EQ(devices[0], expected_first) << devices[0].dump();
  EXPECT_EQ(devices[3]["name"], "gpu-0-guaranteed-3");
  EXPECT_EQ(devices[4]["name"], "gpu-0-best-effort-0");
  EXPECT_EQ(devices[4]["attributes"]["class"], json({{"string", "best-effort"}}));
  EXPECT_EQ(devices[11]["attributes"]["share"], json({{"int", 7}}));
  std::set<std::string> names;
  for (const json& d : devices) {
    EXPECT_TRUE(is_dns_label(d["name"])) << d["name"];
    names.insert(d["name"]);
    for (const auto& [key, value] : d["attributes"].items()) EXPECT_EQ(value.size(), 1u) << key;
  }
  EXPECT_EQ(names.size(), devices.size());

  const json update = gpuos::dra::resource_slice(node(), h200s(1), 4, "1234");
  EXPECT_EQ(update["metadata"]["resourceVersion"], "1234");
}

TEST(ResourceSlice, OwnedByItsNodeWhenItsUidIsKnown) {
  gpuos::dra::SliceOptions o = node();
  o.node_name = "Node-A";
  o.node_uid = "6f1e2d3c-4b5a-4978-8c6d-5e4f3a2b1c0d";
  const json slice = gpuos::dra::resource_slice(o, h200s(1), 1, "7");
  EXPECT_EQ(slice["metadata"], json::parse(R"({"name": "node-a-gpuos.io", "resourceVersion": "7",
      "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node-a",
                           "uid": "6f1e2d3c-4b5a-4978-8c6d-5e4f3a2b1c0d", "controller": true}]})"));
}

TEST(ResourceSlice, NoGpusIsAnEmptyDeviceList) {
  const json spec = gpuos::dra::resource_slice_spec(node(), {}, 2);
  ASSERT_TRUE(spec["devices"].is_array());
  EXPECT_TRUE(spec["devices"].empty());
}

TEST(ResourceSlice, AttributesWithinApiLimits) {
  std::vector<GpuShareInfo> gpus = h200s(2);
  gpus[0].product_name = std::string(70, 'x');
  gpus[0].uuid = "GPU-" + gpus[0].uuid;      // already prefixed: not doubled
  gpus[1].product_name = std::string(63, 'y') + "\xc3\xa9";  // é across the 64-byte line
  gpus[1].uuid.clear();
  gpus.push_back(gpus[0]);                   // index 0 again: offered once
  gpus.push_back(h200s(3)[2]);
  gpus[3].product_name = "H\xff\xc3(200\n";      // not UTF-8, a control character
  const json devices = gpuos::dra::resource_slice_spec(node(), gpus, 1)["devices"];
  ASSERT_EQ(devices.size(), 36u);
  EXPECT_EQ(devices[24]["attributes"]["productName"]["string"], "H?" "?(200?");
  EXPECT_NO_THROW(gpuos::dra::resource_slice_spec(node(), gpus, 1).dump());
  EXPECT_EQ(devices[0]["attributes"]["productName"]["string"], std::string(64, 'x'));
  EXPECT_EQ(devices[0]["attributes"]["uuid"]["string"], "GPU-0d1e2f3a-4b5c-6d7e-8f90-000000000000");
  EXPECT_EQ(devices[12]["attributes"]["productName"]["string"], std::string(63, 'y'));
  EXPECT_FALSE(devices[12]["attributes"].contains("uuid"));
}

TEST(SharePlan, FitsUnchangedUpTo128Devices) {
  SliceOptions o = node();
  auto plan = gpuos::dra::plan_shares(o, 8);  // 8 x 12 = 96
  EXPECT_EQ(plan.guaranteed, 4u);
  EXPECT_EQ(plan.best_effort, 8u);
  EXPECT_EQ(plan.gpus, 8u);
  EXPECT_TRUE(plan.note.empty());
  o.guaranteed_shares = 8;
  o.best_effort_shares = 8;
  plan = gpuos::dra::plan_shares(o, 8);  // exactly 128
  EXPECT_EQ(plan.guaranteed, 8u);
  EXPECT_TRUE(plan.note.empty());
}

TEST(SharePlan, MoreThan128DevicesScalesSharesDownEveryGpuStays) {
  SliceOptions o = node();
  auto plan = gpuos::dra::plan_shares(o, 16);  // 192 wanted, 8 per GPU possible
  EXPECT_EQ(plan.gpus, 16u);
  EXPECT_EQ(plan.guaranteed, 2u);
  EXPECT_EQ(plan.best_effort, 6u);
  EXPECT_NE(plan.note.find("more than the 128 a ResourceSlice holds"), std::string::npos) << plan.note;
  EXPECT_EQ(gpuos::dra::resource_slice_spec(o, h200s(16), 1)["devices"].size(), 128u);

  plan = gpuos::dra::plan_shares(o, 100);  // one per GPU
  EXPECT_EQ(plan.guaranteed + plan.best_effort, 1u);
  EXPECT_EQ(plan.guaranteed, 1u);
  plan = gpuos::dra::plan_shares(o, 200);
  EXPECT_EQ(plan.gpus, 128u);
  EXPECT_NE(plan.note.find("only the first 128 GPUs"), std::string::npos) << plan.note;
  EXPECT_EQ(gpuos::dra::resource_slice_spec(o, h200s(200), 1)["devices"].size(), 128u);

  o.guaranteed_shares = 0;
  o.best_effort_shares = 40;
  plan = gpuos::dra::plan_shares(o, 5);
  EXPECT_EQ(plan.guaranteed, 0u);
  EXPECT_EQ(plan.best_effort, 25u);
  o.guaranteed_shares = 40;
  o.best_effort_shares = 1;
  plan = gpuos::dra::plan_shares(o, 4);  // 32 per GPU
  EXPECT_EQ(plan.best_effort, 1u);
  EXPECT_EQ(plan.guaranteed, 31u);
  for (std::size_t n = 1; n <= 300; ++n) {
    for (uint32_t g : {0u, 1u, 4u, 100u}) {
      for (uint32_t b : {0u, 1u, 8u, 1000u}) {
        if (g + b == 0) continue;
        o.guaranteed_shares = g;
        o.best_effort_shares = b;
        plan = gpuos::dra::plan_shares(o, n);
        EXPECT_LE(plan.gpus * (plan.guaranteed + plan.best_effort), 128u) << n << " " << g << " " << b;
        EXPECT_GE(plan.guaranteed + plan.best_effort, 1u);
        EXPECT_LE(plan.guaranteed, g);
        EXPECT_LE(plan.best_effort, b);
        EXPECT_EQ(plan.gpus, std::min<std::size_t>(n, 128));
      }
    }
  }
}

TEST(SameOffer, QuantitiesByValueGenerationIgnored) {
  const json ours = gpuos::dra::resource_slice_spec(node(), h200s(2), 1);
  json theirs = gpuos::dra::resource_slice_spec(node(), h200s(2), 7);
  EXPECT_TRUE(gpuos::dra::same_offer(ours, theirs));
  // The API server writes quantities in canonical form.
  json a = gpuos::dra::resource_slice_spec(node(), {{0, "u", "p", 1, 80000000000ull}}, 1);
  json b = a;
  b["devices"][0]["capacity"]["memory"]["value"] = "80G";
  EXPECT_TRUE(gpuos::dra::same_offer(a, b));
  b["devices"][0]["capacity"]["memory"]["value"] = "80Gi";
  EXPECT_FALSE(gpuos::dra::same_offer(a, b));
  // Empty and absent device lists are the same offer.
  json empty = gpuos::dra::resource_slice_spec(node(), {}, 1);
  json absent = empty;
  absent.erase("devices");
  EXPECT_TRUE(gpuos::dra::same_offer(empty, absent));
  EXPECT_FALSE(gpuos::dra::same_offer(empty, ours));
  // A changed attribute, another GPU or another node differ.
  theirs["devices"][5]["attributes"]["sms"]["int"] = 66;
  EXPECT_FALSE(gpuos::dra::same_offer(ours, theirs));
  EXPECT_FALSE(gpuos::dra::same_offer(ours, gpuos::dra::resource_slice_spec(node("node-b"), h200s(2), 1)));
  EXPECT_FALSE(gpuos::dra::same_offer(ours, gpuos::dra::resource_slice_spec(node(), h200s(3), 1)));
  EXPECT_FALSE(gpuos::dra::same_offer(ours, json("x")));
  EXPECT_FALSE(gpuos::dra::same_offer(ours, json::object()));
}
