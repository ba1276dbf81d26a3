// SPDX-License-Identifier: Apache-2.0
// The one list of policies, and how a config chooses them and sets them (each policy reads its own
// section).
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

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

// Builds e from `section` with its slot's factory (and drops it).
bool builds(const PolicyEntry* e, const ConfigSection& section, std::string* why) {
  PolicyContext ctx{section};
  return e->make_time_gate ? e->make_time_gate(ctx, why) != nullptr
         : e->make_space   ? e->make_space(ctx, why) != nullptr
                           : e->make_memory(ctx, why) != nullptr;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Issue #57: a policy's KeyDoc list (what `gpuos config defaults` writes above each key) names
// exactly the keys its factory asks its section for, in the order its settings are written, each
// in one comment line: a key added, renamed or dropped in the code fails here until its line is.
TEST(Registry, EveryPolicyDocumentsExactlyTheKeysItReads) {
  for (const PolicyEntry* e : all_policies()) {
    ConfigSection empty;
    empty.name = e->name;
    std::string why;
    ASSERT_TRUE(builds(e, empty, &why)) << why;
    std::vector<std::string> documented;
    for (const KeyDoc& k : e->keys) {
      documented.emplace_back(k.key);
      EXPECT_FALSE(k.doc.empty()) << e->name << " " << k.key;
      EXPECT_LE(2 + k.doc.size(), 100u) << e->name << " " << k.key << ": \"# " << k.doc << "\" is over 100 columns";
    }
    EXPECT_EQ(empty.keys_read(), documented) << e->name << ": its KeyDoc list is not what it reads";
    std::vector<std::string> written;
    if (e->settings != nullptr) {
      for (const std::string& l : lines_of(e->settings(empty))) {
        // "key = value", or "# key: why it has no value"
        written.push_back(l.rfind("# ", 0) == 0 ? l.substr(2, l.find(':') - 2) : l.substr(0, l.find(" = ")));
      }
    }
    EXPECT_EQ(written, documented) << e->name << ": its settings do not write the keys it documents";
  }
}

// The effective config of a text that parses, as `gpuos config check` prints it (less its source).
std::string effective(const std::string& text) {
  ConfigResult r = parse_config(text, "t.toml");
  if (!r) return "parse error: " + r.error;
  std::string why;
  if (!check_policy_config(*r.config, &why)) return "policy error: " + why;
  Config shown = *r.config;
  shown.policy_sections.clear();
  std::string out = format_config(shown) + format_policy_settings(*r.config);
  return out.substr(out.find('\n') + 1);
}

// `gpuos config defaults` (packaging/gpuos.toml): every key of every table, documented, within 100
// columns, commented out at a value that is its default: uncommented, the file means what no file
// means. (The [[spatial.domain]] example has no default and stays commented.)
TEST(Registry, TheDefaultConfigHasEveryKeyCommentedOutAtItsDefault) {
  const std::string text = format_default_config();
  EXPECT_EQ(text.find("UNDOCUMENTED"), std::string::npos) << text;
  EXPECT_EQ(effective(text), effective(""));
  std::size_t expected_keys = 0;
  for (const TableDoc& t : config_tables()) expected_keys += t.table == "spatial.domain" ? 0 : t.keys.size();
  for (const PolicyEntry* e : all_policies()) expected_keys += e->keys.size();
  const std::regex key_line("#([a-z_]+) = .*");
  std::string active;
  std::set<std::string> tables;
  std::size_t uncommented = 0, notes = 0;
  bool example = false;
  for (const std::string& l : lines_of(text)) {
    EXPECT_LE(l.size(), 100u) << l;
    EXPECT_TRUE(l.empty() || l[0] == '#' || l[0] == '[') << l;
    if (l == "#[[spatial.domain]]") example = true;
    if (l.rfind("[", 0) == 0) {
      example = false;
      EXPECT_TRUE(tables.insert(l).second) << "twice: " << l;
    }
    std::smatch m;
    if (!example && std::regex_match(l, m, key_line)) {
      active += l.substr(1) + "\n";
      ++uncommented;
    } else {
      notes += l.rfind("# mps_cost_pct: ", 0) == 0;  // a key whose default is measured, not a value
      active += l + "\n";
    }
  }
  EXPECT_EQ(uncommented + notes, expected_keys) << text;
  EXPECT_EQ(effective(active), effective("")) << active;
  for (const PolicyEntry* e : all_policies()) {
    if (e->settings != nullptr) {
      EXPECT_TRUE(tables.count("[policy." + std::string(e->name) + "]")) << e->name;
    }
  }
}

}  // namespace
}  // namespace gpuos::policies
