// SPDX-License-Identifier: Apache-2.0
// `gpuos top`'s frame (render_top): 100 columns whatever the tenants' cells, GPU% and MEM per tenant.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cli/top.h"

namespace gpuos::cli {
namespace {

using client::Listing;

gpuos_msg_tenant_info tenant(uint32_t id, const char* name) {
  gpuos_msg_tenant_info t{};
  t.tenant_id = id;
  t.pid = 4194304 - static_cast<int32_t>(id);  // 7 digits: pid_max is at most 2^22
  t.state = GPUOS_TENANT_RUNNING;
  t.tenant_class = GPUOS_CLASS_BEST_EFFORT;
  t.swap_state = GPUOS_SWAP_RESIDENT;
  std::memcpy(t.name, name, std::min(std::strlen(name), sizeof(t.name) - 1));
  t.kv_target_bytes = UINT64_MAX;
  return t;
}

// The cell of a right-aligned `column` (a header word) in a row: between the end of the title
// before it and the end of its own, trimmed.
std::string cell(const std::vector<std::string>& lines, const std::string& column, std::size_t row) {
  std::size_t header = 0;
  while (header < lines.size() && lines[header].find(" NAME ") == std::string::npos) ++header;
  const std::string& h = lines.at(header);
  const std::size_t at = h.find(column), end = at + column.size();
  const std::size_t begin = h.find_last_not_of(' ', at - 1) + 1;
  std::string c = lines.at(header + 1 + row).substr(begin, end - begin);
  // A longer left-aligned cell before it may reach in ("running"): the value is after the last
  // run of blanks (a value such as "64.0 MiB" has one blank, never two).
  if (const std::size_t gap = c.rfind("  "); gap != std::string::npos) c.erase(0, gap + 2);
  c.erase(0, c.find_first_not_of(' '));
  return c;
}

TEST(Top, EveryLineFitsIn100ColumnsWhateverTheCells) {
  Listing cur;
  gpuos_msg_gpu_info g{};
  g.index = 15;
  g.sm_count = 132;
  g.total_mem_bytes = 141ull << 30;
  g.used_mem_bytes = 140ull << 30;
  std::memset(g.name, 'N', sizeof(g.name) - 1);  // a name as long as the field holds
  cur.gpus.push_back(g);
  gpuos_msg_tenant_info a = tenant(9999, "a-tenant-name-of-sixty-three-characters-is-what-the-field-holds");
  a.tenant_class = GPUOS_CLASS_GUARANTEED;
  a.max_slowdown_permille = 1500;
  a.slowdown_permille = 1234;  // "1.23/1.50 100%"
  a.be_share_permille = 1000;
  a.space_sms = 104;
  a.space_default_sms = 132;
  a.mem_used_bytes = 1023ull << 30;
  gpuos_msg_tenant_info b = tenant(2, "swapper");
  b.swap_state = GPUOS_SWAP_SWAPPING_OUT;  // the longest state
  b.pace_permille = 355;
  b.pace_max_kernel_us = 1500;
  cur.tenants = {a, b};
  const std::string socket = "/" + std::string(106, 's');  // the longest a socket path can be
  const std::vector<std::string> lines = render_top(TopRates{}, cur, socket, 3600, 0, 0);
  ASSERT_EQ(lines.size(), 6u);
  for (const std::string& l : lines) EXPECT_LE(l.size(), kTopWidth) << l;
  EXPECT_NE(lines[0].find("socket ..."), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].substr(lines[0].size() - 3), "sss") << "the path's end is kept";
  EXPECT_EQ(lines[3].substr(lines[3].size() - 6), "BUDGET");  // the header whole
  for (const char* column : {"GPU%", "MEM", "LAUNCH/s", "WAIT%", "SMS"}) {
    EXPECT_NE(lines[3].find(column), std::string::npos) << column;
  }
  EXPECT_EQ(cell(lines, "SMS", 0), "104/132");
  EXPECT_EQ(cell(lines, "MEM", 0), "1023 GiB");
  EXPECT_EQ(lines[4].substr(lines[4].size() - 14), "1.23/1.50 100%") << lines[4];
  EXPECT_NE(lines[5].find("paced 36%"), std::string::npos) << lines[5];
}

TEST(Top, GpuPercentIsTheUsageChecksGpuTimeOverTheWindow) {
  Listing base, cur;
  gpuos_msg_tenant_info busy = tenant(1, "busy"), idle = tenant(2, "idle"), unmeasured = tenant(3, "nvml-off");
  busy.gpu_time_ns = 1'000'000'000;
  busy.verified_mem_bytes = 512ull << 20;
  idle.verified_mem_bytes = 512ull << 20;  // NVML sees its context, and no GPU time
  base.tenants = {busy, idle, unmeasured};
  busy.gpu_time_ns += 2'500'000'000;  // 2.5 s of GPU time in 5 s
  busy.mem_used_bytes = 64ull << 20;
  cur.tenants = {busy, idle, unmeasured};
  TopRates rates;
  rates.prev = &base;
  rates.dt_s = 5;
  rates.gpu_base = &base;
  rates.gpu_dt_s = 5;
  std::vector<std::string> lines = render_top(rates, cur, "/s", 1, 0, 0);
  EXPECT_EQ(cell(lines, "GPU%", 0), "50");
  EXPECT_EQ(cell(lines, "GPU%", 1), "0");
  EXPECT_EQ(cell(lines, "GPU%", 2), "-");
  EXPECT_EQ(cell(lines, "MEM", 0), "64.0 MiB");
  // No snapshot before: no rate yet.
  lines = render_top(TopRates{}, cur, "/s", 1, 0, 0);
  EXPECT_EQ(cell(lines, "GPU%", 0), "-");
  EXPECT_EQ(cell(lines, "LAUNCH/s", 0), "-");
}

TEST(Top, ANarrowTerminalClipsAndAShortOneKeepsALineForTheRest) {
  Listing cur;
  for (uint32_t i = 1; i <= 10; ++i) cur.tenants.push_back(tenant(i, "t"));
  const std::vector<std::string> lines = render_top(TopRates{}, cur, "/s", 1, 40, 8);
  ASSERT_EQ(lines.size(), 8u);
  for (const std::string& l : lines) EXPECT_LE(l.size(), 40u) << l;
  EXPECT_EQ(lines.back().rfind("... 7 more tenant(s)", 0), 0u) << lines.back();
}

}  // namespace
}  // namespace gpuos::cli
