// SPDX-License-Identifier: Apache-2.0
// The one list of policies, and how a config chooses them and sets them (each policy reads its own
// section).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/config.h"
#include "policies/registry.h"
#include "slots/builtin.h"
#include "policies/swap/swap.h"

namespace gpuos::policies {
namespace {

TEST(Registry, EveryPolicyBuildsFromAnEmptySectionInItsSlot) {
  std::set<std::string> names;
  for (const PolicyEntry* e : all_policies()) {
    EXPECT_TRUE(names.insert(e->name).second) << "two policies named " << e->name;
    EXPECT_EQ(find_policy(e->name), e);
    const int factories = (e->make_time_gate != nullptr) + (e->make_space != nullptr) + (e->make_memory != nullptr);
    ASSERT_EQ(factories, 1) << e->name;
    ConfigSection empty;
    empty.name = e->name;
    std::string why;
    switch (e->slot) {
      case SlotKind::kTimeGate: {
        ASSERT_NE(e->make_time_gate, nullptr) << e->name;
        auto p = e->make_time_gate(PolicyContext{empty}, &why);
        ASSERT_NE(p, nullptr) << why;
        EXPECT_STREQ(p->name(), e->name);
        break;
      }
      case SlotKind::kSpace: {
        ASSERT_NE(e->make_space, nullptr) << e->name;
        auto p = e->make_space(PolicyContext{empty}, &why);
        ASSERT_NE(p, nullptr) << why;
        EXPECT_STREQ(p->name(), e->name);
        break;
      }
      case SlotKind::kMemory: {
        ASSERT_NE(e->make_memory, nullptr) << e->name;
        auto p = e->make_memory(PolicyContext{empty}, &why);
        ASSERT_NE(p, nullptr) << why;
        EXPECT_STREQ(p->name(), e->name);
        break;
      }
    }
  }
  EXPECT_EQ(find_policy("fifo"), nullptr);
  EXPECT_EQ(policy_names(SlotKind::kTimeGate), "open, priority, budget, exclusive");
  EXPECT_EQ(policy_names(SlotKind::kSpace), "partition, unconfined");
  EXPECT_EQ(policy_names(SlotKind::kMemory), "swap, resident");
  // The built-ins are the ones of the list.
  EXPECT_STREQ(slots::builtin_time_gate()->name(), "open");
  EXPECT_STREQ(slots::builtin_space()->name(), "unconfined");
  EXPECT_STREQ(slots::builtin_memory()->name(), "resident");
}

TEST(Registry, TheDefaultConfigChoosesOpenPartitionSwap) {
  ConfigResult r = parse_config("", "t.toml");
  ASSERT_TRUE(r);
  PolicySet set;
  std::string why;
  ASSERT_TRUE(make_policies(*r.config, &set, &why)) << why;
  EXPECT_STREQ(set.time_gate->name(), "open");
  EXPECT_STREQ(set.space->name(), "partition");
  EXPECT_STREQ(set.memory->name(), "swap");
}

struct Bad {
  const char* text;
  const char* must_contain;
  friend std::ostream& operator<<(std::ostream& os, const Bad& b) { return os << b.must_contain; }
};
class PolicyConfigBad : public ::testing::TestWithParam<Bad> {};

// The config parses, and the policies say what is wrong with it, naming file, line, table and key.
TEST_P(PolicyConfigBad, IsRefusedWithAClearReason) {
  ConfigResult r = parse_config(GetParam().text, "test.toml");
  ASSERT_TRUE(r) << r.error;
  std::string why;
  EXPECT_FALSE(check_policy_config(*r.config, &why));
  EXPECT_NE(why.find(GetParam().must_contain), std::string::npos) << why;
}

INSTANTIATE_TEST_SUITE_P(
    All, PolicyConfigBad,
    ::testing::Values(
        Bad{"[scheduler]\npolicy = \"fifo\"\n",
            "test.toml: [scheduler] policy: \"fifo\" is not a time gate policy (known: open, priority, budget, exclusive)"},
        Bad{"[scheduler]\npolicy = \"partition\"\n", "\"partition\" is not a time gate policy"},
        Bad{"[spatial]\npolicy = \"priority\"\n", "[spatial] policy: \"priority\" is not a space policy"},
        Bad{"[memory]\npolicy = \"unconfined\"\n", "[memory] policy: \"unconfined\" is not a memory policy"},
        Bad{"[policy.nosuch]\nx = 1\n", "test.toml:2: [policy.nosuch]: no such policy"},
        Bad{"[scheduler]\nbe_max_inflight = 1025\n", "test.toml:2: [scheduler] be_max_inflight: value 1025 out of range 0..1024"},
        Bad{"[policy.priority]\nbe_max_inflight = -1\n", "[policy.priority] be_max_inflight: value -1 out of range"},
        Bad{"[scheduler]\nidle_grace_us = 1000001\n", "idle_grace_us: value 1000001 out of range 0..1000000"},
        Bad{"[scheduler]\nbe_slice_ms = 0\n", "be_slice_ms: value 0 out of range 1..10000"},
        Bad{"[scheduler]\nbe_slice_ms = 10001\n", "be_slice_ms: value 10001 out of range"},
        Bad{"[scheduler]\nbe_slice_ms = 2.5\n", "be_slice_ms: expected an integer, got float"},
        Bad{"[policy.priority]\n\nslice = 5\n", "test.toml:3: [policy.priority] slice: unknown key"},
        Bad{"[spatial]\nlend_after_ms = -1\n", "lend_after_ms: value -1 out of range 0..3600000"},
        Bad{"[spatial]\nlend_max_kernel_ms = 0\n", "lend_max_kernel_ms: value 0 out of range 1..3600000"},
        Bad{"[spatial]\nbe_reserve_groups = 0\n", "be_reserve_groups: value 0 out of range 1..63"},
        Bad{"[policy.partition]\nright_size_slack_pct = 51\n", "right_size_slack_pct: value 51 out of range 0..50"},
        Bad{"[spatial]\nright_size_below_grid = 1\n",
            "test.toml:2: [spatial] right_size_below_grid: expected true or false, got integer"},
        Bad{"[policy.partition]\nbudget_whole_gpu = \"yes\"\n",
            "test.toml:2: [policy.partition] budget_whole_gpu: expected true or false, got string"},
        Bad{"[policy.exclusive]\nmax_hold_ms = 0\n", "[policy.exclusive] max_hold_ms: value 0 out of range 1..60000"},
        // A section is checked even when its policy is not chosen: a typo does not wait for the day it is.
        Bad{"[scheduler]\npolicy = \"open\"\n[policy.exclusive]\nmax_hold = 5\n",
            "test.toml:4: [policy.exclusive] max_hold: unknown key"},
        Bad{"[policy.open]\nanything = 1\n", "[policy.open] anything: unknown key"},
        Bad{"[policy.swap]\nquantum = 1\n", "[policy.swap] quantum: unknown key"},
        Bad{"[policy.swap]\nkv_rule = \"lifo\"\n",
            "test.toml:2: [policy.swap] kv_rule: \"lifo\" is not a rule (known: fair, priority, queue)"},
        Bad{"[policy.swap]\nkv_rule = 1\n", "test.toml:2: [policy.swap] kv_rule: expected a string, got integer"},
        Bad{"[policy.swap]\nkv_deadline_ms = 9\n", "[policy.swap] kv_deadline_ms: value 9 out of range 10..600000"},
        Bad{"[policy.swap]\nkv_deadline_ms = 600001\n", "kv_deadline_ms: value 600001 out of range 10..600000"},
        Bad{"[policy.swap]\nkv_hold_ms = -1\n", "[policy.swap] kv_hold_ms: value -1 out of range 0..3600000"},
        // Not chosen, still checked.
        Bad{"[memory]\npolicy = \"resident\"\n[policy.swap]\n\nkv_rule = \"Fair\"\n",
            "test.toml:5: [policy.swap] kv_rule: \"Fair\" is not a rule"}));

TEST(Registry, TheSwapPolicyReadsItsKvSettings) {
  // Defaults, as `gpuos config check` shows them.
  ConfigResult none = parse_config("", "t.toml");
  ASSERT_TRUE(none);
  EXPECT_NE(format_policy_settings(*none.config).find("[policy.swap]\nkv_rule = \"fair\"\nkv_deadline_ms = 1000\n"
                                                      "kv_hold_ms = 5000\n"),
            std::string::npos)
      << format_policy_settings(*none.config);
  ConfigResult r = parse_config("[policy.swap]\nkv_rule = \"queue\"\nkv_deadline_ms = 250\nkv_hold_ms = 0\n", "t.toml");
  ASSERT_TRUE(r) << r.error;
  EXPECT_NE(format_policy_settings(*r.config).find("[policy.swap]\nkv_rule = \"queue\"\nkv_deadline_ms = 250\n"
                                                   "kv_hold_ms = 0\n"),
            std::string::npos);
  PolicySet set;
  std::string why;
  ASSERT_TRUE(make_policies(*r.config, &set, &why)) << why;
  auto* swap = dynamic_cast<SwapPolicy*>(set.memory.get());
  ASSERT_NE(swap, nullptr);
  EXPECT_EQ(swap->kv_deadline_ms(), 250u);
  EXPECT_EQ(swap->settings().kv_rule, kv::KvRule::kQueue);
  // Its hold (0 here) is what decides, whatever the view says: a target rises at once.
  slots::MemoryView view;
  view.now_ns = 1;
  view.params.capacity = {100ull << 30};
  view.params.kv_hold_ns = 1'000'000'000'000;
  slots::SwapTenant t;
  t.id = 1;
  t.kv_bytes = t.resident_bytes = 40ull << 30;
  t.kv_target_on = true;
  t.kv_target_bytes = 40ull << 30;
  t.kv_target_since_ns = 1;
  view.tenants = {t};
  EXPECT_EQ(swap->decide(view).actions, (std::vector<slots::SwapAction>{{slots::SwapAction::Kind::kLiftKvTarget, 1}}));
}

}  // namespace
}  // namespace gpuos::policies
