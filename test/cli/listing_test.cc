// `gpuos ps`'s table: its optional columns and their cells.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "cli/client.h"

namespace gpuos::cli {
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

}  // namespace
}  // namespace gpuos::cli
