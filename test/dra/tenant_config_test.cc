// SPDX-License-Identifier: Apache-2.0
// TenantConfig and ResourceClaim parsing (src/dra/tenant_config.h): what a claim's opaque config may
// say, and how a v1 ResourceClaim from the API server becomes the tenant spec gpuosd admits.
#include "dra/tenant_config.h"

#include <gtest/gtest.h>

#include <string>

using gpuos::dra::ClaimAllocation;
using gpuos::dra::TenantSpec;
using nlohmann::json;

namespace {

json config(json fields) {
  json c = {{"apiVersion", "gpuos.io/v1"}, {"kind", "TenantConfig"}};
  if (fields.is_object()) c.update(fields);
  return c;
}

std::string refusal(const json& params) {
  TenantSpec spec;
  std::string why;
  EXPECT_FALSE(gpuos::dra::parse_tenant_config(params, &spec, &why)) << params.dump();
  EXPECT_FALSE(why.empty());
  return why;
}

uint64_t bytes_of(const std::string& text) {
  uint64_t n = 0;
  std::string why;
  EXPECT_TRUE(gpuos::dra::parse_quantity_bytes(text, &n, &why)) << text << ": " << why;
  return n;
}

std::string size_refusal(const std::string& text) {
  uint64_t n = 0;
  std::string why;
  EXPECT_FALSE(gpuos::dra::parse_quantity_bytes(text, &n, &why)) << text << " gave " << n;
  return why;
}

}  // namespace

TEST(TenantConfig, EveryFieldOfTheDesignExample) {
  const json params = json::parse(R"({"apiVersion": "gpuos.io/v1", "kind": "TenantConfig",
    "class": "guaranteed", "priority": 10, "weight": 100, "mem": "40Gi", "borrow": "8Gi",
    "space": "inference", "sms": 64, "maxSlowdown": "1.25"})");
  TenantSpec spec;
  std::string why;
  ASSERT_TRUE(gpuos::dra::parse_tenant_config(params, &spec, &why)) << why;
  EXPECT_EQ(spec.tenant_class, "guaranteed");
  EXPECT_EQ(spec.priority, 10);
  EXPECT_EQ(spec.weight, 100u);
  EXPECT_EQ(spec.mem_bytes, 40ull << 30);
  EXPECT_EQ(spec.borrow_bytes, 8ull << 30);
  EXPECT_EQ(spec.space, "inference");
  EXPECT_EQ(spec.sms, 64u);
  EXPECT_EQ(spec.max_slowdown_permille, 1250u);
}

TEST(TenantConfig, OnlyTheFieldsGivenAreSet) {
  TenantSpec spec;
  std::string why;
  ASSERT_TRUE(gpuos::dra::parse_tenant_config(config({{"weight", 7}}), &spec, &why)) << why;
  EXPECT_EQ(spec.weight, 7u);
  EXPECT_FALSE(spec.tenant_class || spec.priority || spec.mem_bytes || spec.borrow_bytes || spec.space || spec.sms ||
               spec.max_slowdown_permille);
  ASSERT_TRUE(gpuos::dra::parse_tenant_config(config({}), &spec, &why)) << why;
  EXPECT_FALSE(spec.weight);
}

TEST(TenantConfig, UnknownFieldsAreRefusedByName) {
  EXPECT_NE(refusal(config({{"gpus", 2}})).find("unknown field \"gpus\""), std::string::npos);
  // A wrong case gets a hint.
  const std::string why = refusal(config({{"maxslowdown", "2"}}));
  EXPECT_NE(why.find("\"maxslowdown\""), std::string::npos) << why;
  EXPECT_NE(why.find("did you mean \"maxSlowdown\""), std::string::npos) << why;
}

TEST(TenantConfig, ApiVersionAndKindAreRequiredAndExact) {
  EXPECT_NE(refusal(json{{"kind", "TenantConfig"}}).find("apiVersion missing"), std::string::npos);
  EXPECT_NE(refusal(json{{"apiVersion", "gpuos.io/v1"}}).find("kind missing"), std::string::npos);
  EXPECT_NE(refusal(config({{"apiVersion", "gpuos.io/v2"}})).find("apiVersion \"gpuos.io/v2\""), std::string::npos);
  EXPECT_NE(refusal(config({{"kind", "Tenant"}})).find("kind \"Tenant\""), std::string::npos);
  EXPECT_NE(refusal(config({{"apiVersion", 1}})).find("apiVersion 1"), std::string::npos);
  EXPECT_NE(refusal(json::array()).find("not a JSON object"), std::string::npos);
  EXPECT_NE(refusal(json("text")).find("not a JSON object"), std::string::npos);
}

TEST(TenantConfig, WrongTypesAndRangesNameTheField) {
  struct Case {
    json fields;
    const char* field;
    const char* what;
  } cases[] = {
      {{{"class", "premium"}}, "class", "no class"},
      {{{"class", 1}}, "class", "wants a string"},
      {{{"priority", 1001}}, "priority", "out of range -1000..1000"},
      {{{"priority", -1001}}, "priority", "out of range"},
      {{{"priority", "10"}}, "priority", "wants a whole number"},
      {{{"priority", 1.5}}, "priority", "wants a whole number"},
      {{{"weight", 0}}, "weight", "out of range 1..10000"},
      {{{"weight", 10001}}, "weight", "out of range"},
      {{{"weight", 18446744073709551615ull}}, "weight", "out of range"},
      {{{"sms", 0}}, "sms", "out of range 1..4096"},
      {{{"sms", 4097}}, "sms", "out of range"},
      {{{"space", "a/b"}}, "space", "no spatial-sharing domain name"},
      {{{"space", ".."}}, "space", "no spatial-sharing domain name"},
      {{{"space", std::string(32, 'a')}}, "space", "1..31"},
      {{{"maxSlowdown", "1.0"}}, "maxSlowdown", "1.001..100"},
      {{{"maxSlowdown", "101"}}, "maxSlowdown", "1.001..100"},
      {{{"maxSlowdown", "1.0005"}}, "maxSlowdown", "at most 3 decimals"},
      {{{"maxSlowdown", true}}, "maxSlowdown", "wants a factor"},
      {{{"mem", nullptr}}, "mem", "got null"},
      {{{"mem", "-1Gi"}}, "mem", "negative"},
      {{{"mem", -5}}, "mem", "negative"},
      {{{"mem", 0}}, "mem", "zero bytes"},
      {{{"mem", 1.5}}, "mem", "fraction of a byte"},
      {{{"borrow", "lots"}}, "borrow", "neither a Kubernetes quantity"},
  };
  for (const Case& c : cases) {
    const std::string why = refusal(config(c.fields));
    EXPECT_NE(why.find(std::string("TenantConfig: ") + c.field + ": "), std::string::npos) << why;
    EXPECT_NE(why.find(c.what), std::string::npos) << c.fields.dump() << " -> " << why;
  }
}

TEST(TenantConfig, NumbersWhereYamlWouldGiveThem) {
  TenantSpec spec;
  std::string why;
  ASSERT_TRUE(gpuos::dra::parse_tenant_config(
      config({{"mem", 1073741824}, {"borrow", 1e9}, {"maxSlowdown", 2}, {"priority", -1000}}), &spec, &why))
      << why;
  EXPECT_EQ(spec.mem_bytes, 1073741824u);
  EXPECT_EQ(spec.borrow_bytes, 1000000000u);
  EXPECT_EQ(spec.max_slowdown_permille, 2000u);
  EXPECT_EQ(spec.priority, -1000);
  ASSERT_TRUE(gpuos::dra::parse_tenant_config(config({{"maxSlowdown", 1.001}}), &spec, &why)) << why;
  EXPECT_EQ(spec.max_slowdown_permille, 1001u);
  ASSERT_TRUE(gpuos::dra::parse_tenant_config(config({{"maxSlowdown", "100"}}), &spec, &why)) << why;
  EXPECT_EQ(spec.max_slowdown_permille, 100000u);
}

TEST(Quantity, KubernetesQuantitiesMeanWhatKubernetesSays) {
  EXPECT_EQ(bytes_of("40Gi"), 40ull << 30);
  EXPECT_EQ(bytes_of("512Mi"), 512ull << 20);
  EXPECT_EQ(bytes_of("1G"), 1000000000u);  // decimal, as in a pod's memory limit
  EXPECT_EQ(bytes_of("500M"), 500000000u);
  EXPECT_EQ(bytes_of("1.5Gi"), 1610612736u);
  EXPECT_EQ(bytes_of("1.5k"), 1500u);
  EXPECT_EQ(bytes_of("1073741824"), 1073741824u);
  EXPECT_EQ(bytes_of("+2Ki"), 2048u);
  EXPECT_EQ(bytes_of("1e9"), 1000000000u);
  EXPECT_EQ(bytes_of("1E3"), 1000u);
  EXPECT_EQ(bytes_of("1E"), 1000000000000000000u);  // exa
  EXPECT_EQ(bytes_of("15Ei"), 15ull << 60);
  EXPECT_EQ(bytes_of(".5Ki"), 512u);
  EXPECT_EQ(bytes_of("2.Ki"), 2048u);
  EXPECT_EQ(bytes_of("0.001k"), 1u);
  EXPECT_EQ(bytes_of("1000m"), 1u);
  EXPECT_EQ(bytes_of("18446744073709551615"), UINT64_MAX);
}

TEST(Quantity, GpuosSizesWhereKubernetesHasNone) {
  EXPECT_EQ(bytes_of("8GiB"), 8ull << 30);
  EXPECT_EQ(bytes_of("8GB"), 8ull << 30);  // gpuos counts binary
  EXPECT_EQ(bytes_of("8 Gi"), 8ull << 30);
  EXPECT_EQ(bytes_of("4K"), 4096u);
}

TEST(Quantity, RefusalsSayWhy) {
  EXPECT_NE(size_refusal("-1").find("negative"), std::string::npos);
  EXPECT_NE(size_refusal("-8GiB").find("negative"), std::string::npos);
  EXPECT_NE(size_refusal("1.5").find("fraction of a byte"), std::string::npos);
  EXPECT_NE(size_refusal("0.1Ki").find("fraction of a byte"), std::string::npos);
  EXPECT_NE(size_refusal("512m").find("m is milli"), std::string::npos);
  EXPECT_NE(size_refusal("16Ei").find("more than 2^64 - 1"), std::string::npos);
  EXPECT_NE(size_refusal("18446744073709551616").find("more than 2^64 - 1"), std::string::npos);
  EXPECT_NE(size_refusal("1e20").find("more than 2^64 - 1"), std::string::npos);
  EXPECT_NE(size_refusal("1e-1").find("fraction"), std::string::npos);
  EXPECT_NE(size_refusal("1e-99999999").find("fraction"), std::string::npos);
  EXPECT_NE(size_refusal("0").find("zero bytes"), std::string::npos);
  EXPECT_NE(size_refusal("0Gi").find("zero bytes"), std::string::npos);
  EXPECT_NE(size_refusal(std::string(40, '9')).find("significant digits"), std::string::npos);
  for (const char* junk : {"", "Gi", "1Gx", "one", "1..5Gi", "1e", "0x10", " 1Gi", "1Gi "}) {
    EXPECT_NE(size_refusal(junk).find("neither a Kubernetes quantity"), std::string::npos) << '"' << junk << '"';
  }
  // Kubernetes-only parsing: zero is a value, gpuos sizes are not quantities.
  uint64_t n = 1;
  EXPECT_TRUE(gpuos::dra::parse_kubernetes_quantity("0", &n, nullptr));
  EXPECT_EQ(n, 0u);
  EXPECT_FALSE(gpuos::dra::parse_kubernetes_quantity("8GiB", &n, nullptr));
}

TEST(TenantSpecs, MergeIsFieldByFieldLaterWins) {
  TenantSpec from_class, from_claim;
  from_class.priority = 5;
  from_class.mem_bytes = 100;
  from_class.space = "a";
  from_claim.mem_bytes = 200;
  from_claim.weight = 3;
  gpuos::dra::merge_tenant_spec(from_claim, &from_class);
  EXPECT_EQ(from_class.priority, 5);
  EXPECT_EQ(from_class.mem_bytes, 200u);
  EXPECT_EQ(from_class.weight, 3u);
  EXPECT_EQ(from_class.space, "a");
}

TEST(TenantSpecs, FinishChecksTheWholeSpecAgainstTheShare) {
  std::string why;
  TenantSpec spec;
  ASSERT_TRUE(gpuos::dra::finish_tenant_spec("best-effort", "gpu-0-best-effort-3", &spec, &why)) << why;
  EXPECT_EQ(spec.tenant_class, "best-effort");

  spec = {};
  spec.tenant_class = "guaranteed";
  EXPECT_FALSE(gpuos::dra::finish_tenant_spec("best-effort", "gpu-0-best-effort-3", &spec, &why));
  EXPECT_EQ(why, "claim asks class guaranteed but its device gpu-0-best-effort-3 is a best-effort share");

  spec = {};
  spec.borrow_bytes = 1;
  EXPECT_FALSE(gpuos::dra::finish_tenant_spec("guaranteed", "gpu-0-guaranteed-0", &spec, &why));
  EXPECT_NE(why.find("borrow needs mem"), std::string::npos);
  spec.mem_bytes = 1;
  EXPECT_TRUE(gpuos::dra::finish_tenant_spec("guaranteed", "gpu-0-guaranteed-0", &spec, &why)) << why;
  // #42: mem + borrow wrapped past 2^64 and passed gpuosd's cap.
  spec = {};
  spec.mem_bytes = 1ull << 30;
  spec.borrow_bytes = 18446744072635809792ull;
  EXPECT_FALSE(gpuos::dra::finish_tenant_spec("guaranteed", "gpu-0-guaranteed-0", &spec, &why));
  EXPECT_EQ(why, "mem 1073741824 + borrow 18446744072635809792 bytes is more than 2^64 - 1");
  spec.borrow_bytes = UINT64_MAX - (1ull << 30);  // the largest sum that fits
  EXPECT_TRUE(gpuos::dra::finish_tenant_spec("guaranteed", "gpu-0-guaranteed-0", &spec, &why)) << why;

  spec = {};
  spec.sms = 8;
  EXPECT_FALSE(gpuos::dra::finish_tenant_spec("guaranteed", "gpu-0-guaranteed-0", &spec, &why));
  EXPECT_NE(why.find("sms needs space"), std::string::npos);

  spec = {};
  spec.max_slowdown_permille = 1500;
  EXPECT_FALSE(gpuos::dra::finish_tenant_spec("best-effort", "gpu-1-best-effort-0", &spec, &why));
  EXPECT_NE(why.find("maxSlowdown is a guaranteed tenant's budget"), std::string::npos);
  EXPECT_TRUE(gpuos::dra::finish_tenant_spec("guaranteed", "gpu-1-guaranteed-0", &spec, &why)) << why;

  spec = {};
  EXPECT_FALSE(gpuos::dra::finish_tenant_spec("premium", "x", &spec, &why));
}

// --- ResourceClaims -------------------------------------------------------------------------------

namespace {

constexpr const char* kUid = "3f1c2a9e-0000-4000-8000-000000000001";

json opaque_config(const char* source, json requests, json params, const char* driver = "gpuos.io") {
  json entry = {{"source", source}, {"opaque", {{"driver", driver}, {"parameters", params}}}};
  if (!requests.is_null()) entry["requests"] = requests;
  return entry;
}

// An allocated v1 claim as the API server returns it.
json allocated_claim(json configs = json::array()) {
  return {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"name", "llm-gpu"}, {"namespace", "serving"}, {"uid", kUid}, {"resourceVersion", "42"}}},
      {"spec", {{"devices", {{"requests", {{{"name", "gpu"}, {"exactly", {{"deviceClassName", "gpuos-guaranteed.gpuos.io"}}}}}}}}}},
      {"status",
       {{"allocation",
         {{"devices",
           {{"results",
             {{{"request", "gpu"}, {"driver", "gpuos.io"}, {"pool", "node-a"}, {"device", "gpu-1-guaranteed-2"}}}},
            {"config", configs}}},
          {"nodeSelector", json::object()}}},
        {"reservedFor",
         {{{"resource", "pods"}, {"name", "llm-0"}, {"uid", "pod-uid-1"}}}}}}};
}

bool parse(const json& claim, ClaimAllocation* out, std::string* why, const char* uid = kUid) {
  return gpuos::dra::parse_claim(claim.dump(), "gpuos.io", uid, out, why);
}

}  // namespace

TEST(Claim, AllocatedClaimWithoutConfigTakesTheShareClass) {
  ClaimAllocation a;
  std::string why;
  ASSERT_TRUE(parse(allocated_claim(), &a, &why)) << why;
  EXPECT_EQ(a.claim_namespace, "serving");
  EXPECT_EQ(a.claim_name, "llm-gpu");
  EXPECT_EQ(a.claim_uid, kUid);
  EXPECT_EQ(a.share.request, "gpu");
  EXPECT_EQ(a.share.pool, "node-a");
  EXPECT_EQ(a.share.device, "gpu-1-guaranteed-2");
  ASSERT_TRUE(a.pod.has_value());
  EXPECT_EQ(a.pod->name, "llm-0");
  EXPECT_EQ(a.pod->uid, "pod-uid-1");
  EXPECT_EQ(a.spec.tenant_class, "guaranteed");
  EXPECT_FALSE(a.spec.mem_bytes);
}

TEST(Claim, ConfigsMergeClassFirstThenClaimAndOnlyOurs) {
  const json configs = {
      // Listed first, but from the claim: it must still override the class's.
      opaque_config("FromClaim", nullptr, config({{"mem", "8Gi"}, {"priority", 7}})),
      opaque_config("FromClass", nullptr, config({{"mem", "4Gi"}, {"weight", 50}, {"priority", 1}})),
      // Another driver's config and one for another request are not ours.
      opaque_config("FromClaim", nullptr, json{{"anything", true}}, "other.example.com"),
      opaque_config("FromClaim", json::array({"other"}), config({{"mem", "1Gi"}})),
      // For our request by name: applies, after the earlier claim entry.
      opaque_config("FromClaim", json::array({"x", "gpu"}), config({{"borrow", "2Gi"}, {"maxSlowdown", "1.5"}})),
      // A config of another kind (not opaque) is skipped.
      json{{"source", "FromClaim"}},
  };
  ClaimAllocation a;
  std::string why;
  ASSERT_TRUE(parse(allocated_claim(configs), &a, &why)) << why;
  EXPECT_EQ(a.spec.mem_bytes, 8ull << 30);
  EXPECT_EQ(a.spec.priority, 7);
  EXPECT_EQ(a.spec.weight, 50u);
  EXPECT_EQ(a.spec.borrow_bytes, 2ull << 30);
  EXPECT_EQ(a.spec.max_slowdown_permille, 1500u);
}

TEST(Claim, SubrequestsAreCoveredByTheirMainRequest) {
  json claim = allocated_claim(json::array({opaque_config("FromClaim", json::array({"gpu"}), config({{"weight", 9}})),
                                            opaque_config("FromClaim", json::array({"gp"}), config({{"weight", 3}}))}));
  claim["status"]["allocation"]["devices"]["results"][0]["request"] = "gpu/small";
  ClaimAllocation a;
  std::string why;
  ASSERT_TRUE(parse(claim, &a, &why)) << why;
  EXPECT_EQ(a.spec.weight, 9u);  // "gp" is no prefix request of "gpu/small"
  EXPECT_EQ(a.share.request, "gpu/small");
}

TEST(Claim, RefusalsNameTheClaimAndTheProblem) {
  ClaimAllocation a;
  std::string why;
  EXPECT_FALSE(parse(allocated_claim(), &a, &why, "another-uid"));
  EXPECT_NE(why.find("claim serving/llm-gpu has uid"), std::string::npos) << why;

  json unallocated = allocated_claim();
  unallocated["status"].erase("allocation");
  EXPECT_FALSE(parse(unallocated, &a, &why));
  EXPECT_NE(why.find("is not allocated"), std::string::npos) << why;

  json others = allocated_claim();
  others["status"]["allocation"]["devices"]["results"][0]["driver"] = "gpu.nvidia.com";
  EXPECT_FALSE(parse(others, &a, &why));
  EXPECT_NE(why.find("not allocated a gpuos.io share"), std::string::npos) << why;

  json two = allocated_claim();
  auto& results = two["status"]["allocation"]["devices"]["results"];
  results.push_back(results[0]);
  results[1]["device"] = "gpu-1-guaranteed-3";
  EXPECT_FALSE(parse(two, &a, &why));
  EXPECT_NE(why.find("one gpuos share per claim"), std::string::npos) << why;

  json foreign_device = allocated_claim();
  foreign_device["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-1";
  EXPECT_FALSE(parse(foreign_device, &a, &why));
  EXPECT_NE(why.find("is no gpuos.io share"), std::string::npos) << why;

  json admin = allocated_claim();
  admin["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = true;
  EXPECT_FALSE(parse(admin, &a, &why));
  EXPECT_NE(why.find("admin access"), std::string::npos) << why;

  // A bad config says where it came from.
  EXPECT_FALSE(parse(allocated_claim({opaque_config("FromClaim", nullptr, config({{"colour", "red"}}))}), &a, &why));
  EXPECT_NE(why.find("claim serving/llm-gpu: config 0 (from the claim): TenantConfig: unknown field \"colour\""),
            std::string::npos)
      << why;
  EXPECT_FALSE(parse(allocated_claim({opaque_config("FromClass", nullptr, config({{"class", "best-effort"}}))}), &a,
                     &why));
  EXPECT_NE(why.find("claim asks class best-effort but its device gpu-1-guaranteed-2 is a guaranteed share"),
            std::string::npos)
      << why;
  EXPECT_FALSE(parse(allocated_claim({opaque_config("Elsewhere", nullptr, config({}))}), &a, &why));
  EXPECT_NE(why.find("source \"Elsewhere\""), std::string::npos) << why;
  json no_params = allocated_claim({opaque_config("FromClaim", nullptr, config({}))});
  no_params["status"]["allocation"]["devices"]["config"][0]["opaque"].erase("parameters");
  EXPECT_FALSE(parse(no_params, &a, &why));
  EXPECT_NE(why.find("without parameters"), std::string::npos) << why;
}

TEST(Claim, MalformedInputIsAnErrorNotACrash) {
  ClaimAllocation a;
  std::string why;
  for (const char* text : {"", "{", "[]", "null", "{\"metadata\": 5}", "{\"kind\": \"Pod\"}",
                           "{\"metadata\": {\"name\": \"x\", \"uid\": \"u\"}, \"status\": {\"allocation\": {\"devices\": 3}}}",
                           "{\"metadata\": {\"name\": \"x\", \"uid\": \"u\"}, \"status\": {\"allocation\": {\"devices\": "
                           "{\"results\": [{\"driver\": \"gpuos.io\", \"request\": 1}]}}}}"}) {
    EXPECT_FALSE(gpuos::dra::parse_claim(text, "gpuos.io", "u", &a, &why)) << text;
    EXPECT_FALSE(why.empty()) << text;
  }
  // Deep nesting is refused or parsed, never a stack overflow.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_FALSE(gpuos::dra::parse_claim(deep, "gpuos.io", "u", &a, &why));
}

TEST(Claim, WithoutReservationThereIsNoPod) {
  json claim = allocated_claim();
  claim["status"]["reservedFor"] = {{{"apiGroup", "example.com"}, {"resource", "pods"}, {"name", "x"}, {"uid", "y"}}};
  ClaimAllocation a;
  std::string why;
  ASSERT_TRUE(parse(claim, &a, &why)) << why;
  EXPECT_FALSE(a.pod.has_value());
}
