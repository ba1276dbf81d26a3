// SPDX-License-Identifier: Apache-2.0
// gpuos demo's verdict against its numbers: "as fast as alone" only within 1.1x at the median and
// p99 (issue #40: 1.5x had been called near alone).
#include <gtest/gtest.h>

#include "cli/demo_verdict.h"

namespace gpuos::cli {
namespace {

DemoNumbers numbers(double p50, double p99) {
  DemoNumbers n;
  n.sharing = "space";
  n.policy = "priority";
  n.p50_ratio = p50;
  n.p99_ratio = p99;
  n.be_vs_alone = 0.94;
  n.hp_idle_share = 0.8;
  return n;
}

TEST(DemoVerdict, AsFastAsAloneOnlyWithinTenPercent) {
  EXPECT_NE(demo_verdict(numbers(1.01, 1.04)).find("within 10% of its latency alone, median and tail"),
            std::string::npos);
  EXPECT_NE(demo_verdict(numbers(1.05, 1.5)).find("median within 10% of alone, not its tail"), std::string::npos);
  const std::string slow = demo_verdict(numbers(1.44, 5.1));
  EXPECT_NE(slow.find("did not keep hp's median near its latency alone here, more than 10% slower"), std::string::npos) << slow;
  EXPECT_EQ(slow.find("within 10%"), std::string::npos) << slow;
  EXPECT_NE(slow.find("be ran at 94% of its speed alone (hp alone leaves 80%"), std::string::npos) << slow;
  EXPECT_EQ(demo_verdict(numbers(0, 0)).rfind("no verdict", 0), 0u);
}

}  // namespace
}  // namespace gpuos::cli
