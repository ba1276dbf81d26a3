// SPDX-License-Identifier: Apache-2.0
// `gpuos ps`'s table: its optional columns and their cells.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/client.h"
#include "doc_tables.h"

namespace gpuos::client {
namespace {

gpuos_msg_tenant_info tenant(uint32_t id, const char* name) {
  gpuos_msg_tenant_info t{};
  t.tenant_id = id;
  t.pid = 1000 + static_cast<int32_t>(id);
  std::strncpy(t.name, name, sizeof(t.name) - 1);
  t.kv_target_bytes = UINT64_MAX;  // (none)
  return t;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(Listing, TheKvColumnAppearsOnlyWithPoolsAndShowsTheTarget) {
  Listing l;
  l.tenants.push_back(tenant(1, "plain"));
  std::string table = listing_table(l);
  EXPECT_EQ(table.find("KV/TARGET"), std::string::npos) << table;

  gpuos_msg_tenant_info kv = tenant(2, "engine");
  kv.kv_reserved_bytes = 24ull << 30;
  kv.kv_resident_bytes = 12ull << 30;
  kv.kv_target_bytes = 8ull << 30;
  l.tenants.push_back(kv);
  gpuos_msg_tenant_info untargeted = tenant(3, "engine2");
  untargeted.kv_reserved_bytes = 4ull << 30;
  untargeted.kv_resident_bytes = 2ull << 30;
  l.tenants.push_back(untargeted);
  table = listing_table(l);
  const std::vector<std::string> ls = lines(table);
  ASSERT_EQ(ls.size(), 5u) << table;  // no GPUs line, header, three tenants
  const std::size_t col = ls[1].find("KV/TARGET");
  ASSERT_NE(col, std::string::npos) << table;
  EXPECT_EQ(ls[2].substr(col), "-") << table;
  EXPECT_EQ(ls[3].substr(col), human_bytes(12ull << 30) + "/" + human_bytes(8ull << 30)) << table;
  EXPECT_EQ(ls[4].substr(col), human_bytes(2ull << 30) + "/-") << table;
}

TEST(Listing, TheSlotsColumnAppearsOnlyWhenAnEngineReportsItsSlots) {
  Listing l;
  l.tenants.push_back(tenant(1, "plain"));
  EXPECT_EQ(listing_table(l).find("SLOTS"), std::string::npos);
  gpuos_msg_tenant_info full = tenant(2, "server");
  full.engine_slots_active = 32;
  full.engine_slots_capacity = 32;
  full.kv_queue_depth = 5;  // requests waiting for a slot
  gpuos_msg_tenant_info room = tenant(3, "server2");
  room.engine_slots_active = 9;
  room.engine_slots_capacity = 32;
  l.tenants.push_back(full);
  l.tenants.push_back(room);
  const std::string table = listing_table(l);
  const std::vector<std::string> ls = lines(table);
  ASSERT_EQ(ls.size(), 5u) << table;
  const std::size_t col = ls[1].find("SLOTS");
  ASSERT_NE(col, std::string::npos) << table;
  EXPECT_EQ(ls[2].substr(col), "-") << table;
  EXPECT_EQ(ls[3].substr(col), "32/32 +5") << table;
  EXPECT_EQ(ls[4].substr(col), "9/32") << table;
  const nlohmann::json j = listing_json(l);
  EXPECT_FALSE(j["tenants"][0].contains("engine_slots"));
  EXPECT_EQ(j["tenants"][1]["engine_slots"], (nlohmann::json{{"active", 32}, {"capacity", 32}, {"waiting", 5}}));
}

TEST(Listing, ABudgetShowsWhichOfStepsAndAdmissionsBinds) {
  Listing l;
  gpuos_msg_tenant_info t = tenant(1, "server");
  t.max_slowdown_permille = 1250;
  t.slowdown_permille = 1200;
  t.slowdown_step_permille = 1080;
  t.slowdown_admission_permille = 1200;
  l.tenants = {t};
  EXPECT_NE(listing_table(l).find("1.20/1.25 be 0% admission"), std::string::npos) << listing_table(l);
  nlohmann::json j = listing_json(l)["tenants"][0];
  EXPECT_DOUBLE_EQ(j["slowdown_step"].get<double>(), 1.08);
  EXPECT_DOUBLE_EQ(j["slowdown_admission"].get<double>(), 1.2);
  EXPECT_EQ(j["slowdown_binds"], "admission");
  l.tenants[0].slowdown_step_permille = 1230;
  EXPECT_NE(listing_table(l).find("be 0% step"), std::string::npos) << listing_table(l);
  l.tenants[0].slowdown_admission_permille = 0;  // its engine reports no phases
  EXPECT_EQ(listing_table(l).find(" step"), std::string::npos) << listing_table(l);
  EXPECT_FALSE(listing_json(l)["tenants"][0].contains("slowdown_binds"));
  // Time-shared: no MPS to charge, none shown; in a domain, what its budget charges.
  EXPECT_FALSE(listing_json(l)["tenants"][0].contains("mps_cost"));
  EXPECT_EQ(listing_table(l).find(" mps "), std::string::npos) << listing_table(l);
  l.tenants[0].mps_cost_permille = 104;
  EXPECT_DOUBLE_EQ(listing_json(l)["tenants"][0]["mps_cost"].get<double>(), 0.104);
  EXPECT_NE(listing_table(l).find("be 0% mps 10%"), std::string::npos) << listing_table(l);
}

TEST(Listing, TheBudgetColumnShowsABudgetAndAPacedTenantsPacing) {
  gpuos_msg_tenant_info t = tenant(1, "t");
  EXPECT_EQ(budget_text(t), "-");
  t.max_slowdown_permille = 1250;
  EXPECT_EQ(budget_text(t), "?/1.25 be 0%");
  t.slowdown_permille = 1080;
  t.be_share_permille = 204;
  EXPECT_EQ(budget_text(t), "1.08/1.25 be 20%");
  gpuos_msg_tenant_info be = tenant(2, "be");
  be.pace_permille = 204;
  EXPECT_EQ(budget_text(be), "paced 20%");
  be.pace_max_kernel_us = 157;
  EXPECT_EQ(budget_text(be), "paced 20% <=157us");
  be.pace_permille = 1000;  // held in a guaranteed tenant's pause
  be.pace_max_kernel_us = 1000;
  EXPECT_EQ(budget_text(be), "paced 100% <=1.0ms");
  be.pace_max_kernel_us = 10'000'000;
  EXPECT_EQ(budget_text(be), "paced 100% <=10000.0ms");
}

TEST(Listing, OptionalColumnsLineUpAndNoLineEndsInBlanks) {
  Listing l;
  gpuos_msg_tenant_info kv = tenant(1, "engine");
  kv.kv_resident_bytes = 1ull << 30;
  l.tenants.push_back(kv);
  gpuos_msg_tenant_info pod = tenant(2, "in-pod");
  std::strncpy(pod.pod_namespace, "inference", sizeof(pod.pod_namespace) - 1);
  std::strncpy(pod.pod_name, "server-0", sizeof(pod.pod_name) - 1);
  std::strncpy(pod.pod_uid, "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d", sizeof(pod.pod_uid) - 1);
  l.tenants.push_back(pod);
  const std::vector<std::string> ls = lines(listing_table(l));
  ASSERT_EQ(ls.size(), 4u);
  const std::size_t kv_col = ls[1].find("KV/TARGET"), pod_col = ls[1].find("POD");
  ASSERT_NE(kv_col, std::string::npos);
  ASSERT_NE(pod_col, std::string::npos);
  EXPECT_LT(kv_col, pod_col);
  EXPECT_EQ(ls[3].substr(pod_col), "inference/server-0");
  EXPECT_EQ(ls[2].substr(pod_col), "-");
  for (const std::string& line : ls) EXPECT_NE(line.back(), ' ') << "[" << line << "]";
}

gpuos_msg_tenant_gpu on_gpu(uint32_t tenant, uint32_t gpu, uint64_t bytes, bool gated) {
  gpuos_msg_tenant_gpu g{};
  g.tenant_id = tenant;
  g.gpu = gpu;
  g.mem_used_bytes = bytes;
  g.gated = gated ? 1 : 0;
  return g;
}

TEST(Listing, OnSeveralGpusEachTenantShowsItsGpusAndItsPartialGate) {
  Listing l;
  l.gpus.resize(2);
  l.gpus[1].index = 1;
  gpuos_msg_tenant_info both = tenant(1, "both");
  both.state = GPUOS_TENANT_RUNNING;
  both.gate_by = 1u << GPUOS_GATE_BY_POLICY_ON_GPUS_SHIFT;  // held on GPU 0 only
  gpuos_msg_tenant_info none = tenant(2, "idle");
  none.state = GPUOS_TENANT_RUNNING;
  l.tenants = {both, none};
  l.tenant_gpus = {on_gpu(1, 0, 16u << 20, true), on_gpu(1, 1, 32u << 20, false)};
  const std::vector<std::string> ls = lines(listing_table(l));
  ASSERT_EQ(ls.size(), 5u);  // two GPU lines, header, two tenants
  const std::size_t gpus_col = ls[2].find("GPUS"), budget_col = ls[2].find("BUDGET");
  ASSERT_NE(gpus_col, std::string::npos);
  EXPECT_LT(gpus_col, budget_col);
  EXPECT_EQ(ls[3].substr(gpus_col, 3), "0,1");
  EXPECT_EQ(ls[4].substr(gpus_col, 1), "-");
  EXPECT_NE(ls[3].find("gated:0 "), std::string::npos) << ls[3];
  const nlohmann::json j = listing_json(l);
  EXPECT_EQ(j["tenants"][0]["gated_gpus"], nlohmann::json::array({0}));
  EXPECT_EQ(j["tenants"][0]["gated_by"], "policy");
  ASSERT_EQ(j["tenants"][0]["on_gpus"].size(), 2u);
  EXPECT_EQ(j["tenants"][0]["on_gpus"][1]["gpu"], 1);
  EXPECT_EQ(j["tenants"][0]["on_gpus"][1]["mem_used_bytes"], 32u << 20);
  EXPECT_EQ(j["tenants"][0]["on_gpus"][0]["gated"], true);
  EXPECT_TRUE(j["tenants"][1]["on_gpus"].empty());
  // One GPU: no GPUS column.
  l.gpus.resize(1);
  EXPECT_EQ(listing_table(l).find("GPUS"), std::string::npos);
}

// The names of a `ps --json` document's fields as docs/CONTRACTS.md's table writes them
// (`tenants[].on_gpus[].gpu`); an array of objects is named by its objects' fields.
void field_names(const nlohmann::json& j, const std::string& prefix, std::set<std::string>* out) {
  for (const auto& [k, v] : j.items()) {
    if (v.is_array() && !v.empty() && v[0].is_object()) {
      for (const auto& e : v) field_names(e, prefix + k + "[].", out);
    } else {
      out->insert(prefix + k);
    }
  }
}

// Issue #43: docs/CONTRACTS.md's table names every field of `gpuos ps --json` (each optional one
// present here) and none that it does not write; the document says its schema version.
TEST(Listing, JsonFieldsAreTheDocumentedOnes) {
  Listing l;
  l.gpus.resize(1);
  gpuos_msg_tenant_info t = tenant(1, "every-field");
  t.state = GPUOS_TENANT_RUNNING;
  t.kv_reserved_bytes = 64u << 20;  // KV pools
  t.kv_target_bytes = UINT64_MAX;
  t.max_slowdown_permille = 1250;  // a latency budget
  t.pace_permille = 500;           // paced
  t.space_kernel_ns = 7000;        // spatial: timed, right-sized, measured
  t.space_default_sms = 64;
  t.space_sms = 32;
  t.space_sized_permille = 1010;
  t.engine_slots_capacity = 32;  // its engine reports its batch slots
  t.slowdown_admission_permille = 1100;  // ... and its phases
  t.mps_cost_permille = 104;             // ... in a spatial domain
  l.tenants = {t};
  l.tenant_gpus = {on_gpu(1, 0, 1u << 20, false)};
  const nlohmann::json j = listing_json(l);
  EXPECT_EQ(j["schema_version"], kPsJsonSchemaVersion);
  std::set<std::string> written;
  field_names(j, "", &written);
  ASSERT_TRUE(written.count("tenants[].on_gpus[].gated")) << j.dump();
  const std::string doc = GPUOS_SOURCE_DIR "/docs/CONTRACTS.md";
  EXPECT_EQ(gpuos::test::compare_names(written, gpuos::test::documented_names(doc, "## `gpuos ps --json` schema")), "")
      << "fix the table under \"## `gpuos ps --json` schema\" in " << doc;
}

}  // namespace
}  // namespace gpuos::client
