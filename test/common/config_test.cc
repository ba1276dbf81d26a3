// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "common/config.h"

namespace gpuos {
namespace {

ConfigResult parse(const std::string& s) { return parse_config(s, "test.toml"); }

TEST(Config, EmptyGivesDefaults) {
  ConfigResult r = parse("");
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(r.config->socket, "");
  EXPECT_EQ(r.config->admin_group, "");
  EXPECT_EQ(r.config->log_level, log::Level::kInfo);
  EXPECT_EQ(r.config->history, 256u);
  EXPECT_EQ(r.config->max_tenants, 256u);
  EXPECT_EQ(r.config->on_no_daemon, "passthrough");
  EXPECT_EQ(r.config->default_class, GPUOS_CLASS_BEST_EFFORT);
  EXPECT_FALSE(r.config->guaranteed_for_anyone);  // secure default: admins only
  EXPECT_EQ(r.config->mem_quota_cap_bytes, 0u);
  EXPECT_EQ(r.config->policies.time_gate, "open");
  EXPECT_EQ(r.config->policies.space, "partition");
  EXPECT_EQ(r.config->policies.memory, "swap");
  EXPECT_TRUE(r.config->policy_sections.empty());  // every policy on its own defaults
  EXPECT_EQ(r.config->memory.swap_pool_bytes, 0u);  // no oversubscription unless asked for
  EXPECT_EQ(r.config->memory.swap_quantum_ms, 5000u);
  EXPECT_EQ(r.config->memory.swap_headroom_bytes, 2ull << 30);
  EXPECT_EQ(r.config->source, "test.toml");
}

// Issue #57: each of gpuos's own tables documents exactly the keys format_config writes for it, in
// its order, each in one comment line; the parser accepts those (and the policies' keys of before
// the slots) and no other; [[spatial.domain]]'s examples parse.
TEST(Config, EveryTableDocumentsExactlyTheKeysItHas) {
  std::map<std::string, std::vector<std::string>> written;
  std::string table;
  std::istringstream in(format_config(Config{}));
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("[", 0) == 0) table = l.substr(1, l.find(']') - 1);
    else if (!table.empty() && l.find(" = ") != std::string::npos) written[table].push_back(l.substr(0, l.find(" = ")));
  }
  std::size_t documented_tables = 0;
  for (const TableDoc& t : config_tables()) {
    EXPECT_FALSE(t.about.empty()) << t.table;
    std::vector<std::string> keys;
    for (const KeyDoc& k : t.keys) {
      keys.emplace_back(k.key);
      EXPECT_FALSE(k.doc.empty()) << t.table << " " << k.key;
      EXPECT_LE(2 + k.doc.size(), 100u) << "[" << t.table << "] " << k.key << ": \"# " << k.doc << "\" is over 100 columns";
      EXPECT_EQ(find_key_doc(t.keys, k.key), &k);
    }
    const std::string bad = "not_" + std::string(t.table.substr(t.table.find('.') + 1)) + "_key";
    if (t.table == "spatial.domain") {
      std::string domain = "[[spatial.domain]]\n";
      for (const KeyDoc& k : t.keys) domain += std::string(k.key) + " = " + std::string(k.example) + "\n";
      ConfigResult r = parse(domain);
      EXPECT_TRUE(r) << r.error;
      r = parse(domain + bad + " = 1\n");
      EXPECT_FALSE(r);
      EXPECT_NE(r.error.find("[spatial.domain] " + bad + ": unknown key"), std::string::npos) << r.error;
      continue;
    }
    ++documented_tables;
    EXPECT_EQ(keys, written[std::string(t.table)]) << "[" << t.table << "]: its KeyDoc list is not what format_config writes";
    ConfigResult r = parse("[" + std::string(t.table) + "]\n" + bad + " = 1\n");
    EXPECT_FALSE(r);
    EXPECT_NE(r.error.find("[" + std::string(t.table) + "] " + bad + ": unknown key"), std::string::npos) << r.error;
  }
  EXPECT_EQ(documented_tables, written.size()) << "a table format_config writes has no TableDoc";
}

int64_t integer(const Config& c, const char* policy, const char* key) {
  const ConfigSection* sec = c.section(policy);
  const ConfigValue* v = sec != nullptr ? sec->find(key) : nullptr;
  return v != nullptr && v->kind == ConfigValue::Kind::kInteger ? v->integer : -1;
}

TEST(Config, FullGoodFile) {
  ConfigResult r = parse(R"(# comment
[daemon]
socket = "/tmp/x/gpuosd.sock"
admin_group = "gpuadmin"
log_level = "debug"
history = 0
max_tenants = 4096
[tenants]
on_no_daemon = "refuse"
default_class = "guaranteed"
guaranteed = "anyone"
mem_quota_cap = "40GiB"
[scheduler]
policy = "priority"
be_max_inflight = 0
idle_grace_us = 1000000
be_slice_ms = 10000
[memory]
swap_pool = "84GiB"
swap_quantum_ms = 0
swap_headroom = "512MiB"
policy = "resident"
[spatial]
policy = "unconfined"
lend_after_ms = 5
[policy.exclusive]
note = "x"
ratio = 0.5
on = true
)");
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(r.config->memory.swap_pool_bytes, 84ull << 30);
  EXPECT_EQ(r.config->memory.swap_quantum_ms, 0u);
  EXPECT_EQ(r.config->memory.swap_headroom_bytes, 512ull << 20);
  EXPECT_EQ(r.config->policies.time_gate, "priority");
  EXPECT_EQ(integer(*r.config, "priority", "be_max_inflight"), 0);  // a key of before the slots
  EXPECT_EQ(integer(*r.config, "priority", "idle_grace_us"), 1000000);
  EXPECT_EQ(integer(*r.config, "priority", "be_slice_ms"), 10000);
  EXPECT_EQ(r.config->section("priority")->find("be_slice_ms")->table, "scheduler");
  EXPECT_EQ(integer(*r.config, "partition", "lend_after_ms"), 5);
  EXPECT_EQ(r.config->policies.space, "unconfined");
  EXPECT_EQ(r.config->policies.memory, "resident");
  EXPECT_EQ(r.config->section("exclusive")->find("note")->text, "x");
  EXPECT_EQ(r.config->section("exclusive")->find("ratio")->number, 0.5);
  EXPECT_TRUE(r.config->section("exclusive")->find("on")->boolean);
  EXPECT_EQ(r.config->socket, "/tmp/x/gpuosd.sock");
  EXPECT_EQ(r.config->admin_group, "gpuadmin");
  EXPECT_EQ(r.config->log_level, log::Level::kDebug);
  EXPECT_EQ(r.config->history, 0u);
  EXPECT_EQ(r.config->max_tenants, 4096u);
  EXPECT_EQ(r.config->on_no_daemon, "refuse");
  EXPECT_EQ(r.config->default_class, GPUOS_CLASS_GUARANTEED);
  EXPECT_TRUE(r.config->guaranteed_for_anyone);
  EXPECT_EQ(r.config->mem_quota_cap_bytes, 40ull << 30);
  // The effective config round-trips.
  ConfigResult again = parse(format_config(*r.config));
  ASSERT_TRUE(again) << again.error;
  EXPECT_EQ(again.config->socket, r.config->socket);
  EXPECT_EQ(again.config->max_tenants, 4096u);
  EXPECT_EQ(again.config->default_class, GPUOS_CLASS_GUARANTEED);
  EXPECT_TRUE(again.config->guaranteed_for_anyone);
  EXPECT_EQ(again.config->mem_quota_cap_bytes, 40ull << 30);
  EXPECT_EQ(again.config->policies.time_gate, "priority");
  EXPECT_EQ(again.config->policies.space, "unconfined");
  EXPECT_EQ(again.config->policies.memory, "resident");
  EXPECT_EQ(integer(*again.config, "priority", "be_max_inflight"), 0);
  EXPECT_EQ(integer(*again.config, "priority", "idle_grace_us"), 1000000);
  EXPECT_EQ(integer(*again.config, "partition", "lend_after_ms"), 5);
  EXPECT_EQ(again.config->section("exclusive")->find("ratio")->number, 0.5);
  EXPECT_EQ(again.config->section("exclusive")->find("note")->text, "x");
  EXPECT_EQ(again.config->memory.swap_pool_bytes, 84ull << 30);
  EXPECT_EQ(again.config->memory.swap_quantum_ms, 0u);
  EXPECT_EQ(again.config->memory.swap_headroom_bytes, 512ull << 20);
}

// [verify]: the usage check through NVML (daemon/usage_verifier.h).
TEST(Config, VerifyDefaultsAndValues) {
  ConfigResult d = parse("");
  ASSERT_TRUE(d) << d.error;
  EXPECT_TRUE(d.config->verify.enabled);  // on wherever NVML loads
  EXPECT_EQ(d.config->verify.interval_ms, 1000u);
  EXPECT_EQ(d.config->verify.enforce, "report");
  EXPECT_EQ(d.config->verify.memory_slack_bytes, 1ull << 30);
  EXPECT_EQ(d.config->verify.gated_sm_util_percent, 20u);
  EXPECT_EQ(d.config->verify.grace_rounds, 2u);
  ConfigResult r = parse(
      "[verify]\nenabled = false\ninterval_ms = 100\nenforce = \"freeze\"\nmemory_slack = \"768MiB\"\n"
      "gated_sm_util_percent = 50\ngrace_rounds = 1\n");
  ASSERT_TRUE(r) << r.error;
  auto expect_set = [](const Config& c) {
    EXPECT_FALSE(c.verify.enabled);
    EXPECT_EQ(c.verify.interval_ms, 100u);
    EXPECT_EQ(c.verify.enforce, "freeze");
    EXPECT_EQ(c.verify.memory_slack_bytes, 768ull << 20);
    EXPECT_EQ(c.verify.gated_sm_util_percent, 50u);
    EXPECT_EQ(c.verify.grace_rounds, 1u);
  };
  expect_set(*r.config);
  // The effective config round-trips.
  ConfigResult again = parse(format_config(*r.config));
  ASSERT_TRUE(again) << again.error;
  expect_set(*again.config);
  EXPECT_TRUE(parse("[verify]\nenforce = \"kill\"\ninterval_ms = 60000\n"));
}

TEST(Config, SpatialDefaultsOff) {
  ConfigResult r = parse("");
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(r.config->spatial.mps_control, "nvidia-cuda-mps-control");
  EXPECT_EQ(r.config->spatial.mps_dir, "");
  EXPECT_TRUE(r.config->spatial.domains.empty());
  // The effective directory: <socket dir>/mps unless set.
  EXPECT_EQ(effective_mps_dir(*r.config, "/run/gpuos/gpuosd.sock"), "/run/gpuos/mps");
  EXPECT_EQ(effective_mps_dir(*r.config, "/run/user/1000/gpuos/gpuosd.sock"), "/run/user/1000/gpuos/mps");
  EXPECT_NE(format_config(*r.config).find("[spatial]\nmps_control = \"nvidia-cuda-mps-control\"\nmps_dir = \"\"\n"),
            std::string::npos)
      << format_config(*r.config);
}

TEST(Config, SpatialDomains) {
  ConfigResult r = parse(R"([spatial]
mps_control = "/opt/nvidia/bin/nvidia-cuda-mps-control"
mps_dir = "/run/gpuos-mps"
lend_after_ms = 5
lend_max_kernel_ms = 3
be_reserve_groups = 3
right_size_slack_pct = 0
right_size_below_grid = true

[[spatial.domain]]
name = "team-a"
users = ["alice", 1001, "0042"]
gpus = [0, 2]

[[spatial.domain]]
name = "B_2.x"
)");
  ASSERT_TRUE(r) << r.error;
  const SpatialConfig& s = r.config->spatial;
  EXPECT_EQ(s.mps_control, "/opt/nvidia/bin/nvidia-cuda-mps-control");
  EXPECT_EQ(s.mps_dir, "/run/gpuos-mps");
  // The partition policy's keys of before the slots, kept for it (policies/partition reads them).
  EXPECT_EQ(integer(*r.config, "partition", "lend_after_ms"), 5);
  EXPECT_EQ(integer(*r.config, "partition", "lend_max_kernel_ms"), 3);
  EXPECT_EQ(integer(*r.config, "partition", "be_reserve_groups"), 3);
  EXPECT_EQ(integer(*r.config, "partition", "right_size_slack_pct"), 0);
  EXPECT_TRUE(r.config->section("partition")->find("right_size_below_grid")->boolean);
  EXPECT_EQ(effective_mps_dir(*r.config, "/run/gpuos/gpuosd.sock"), "/run/gpuos-mps");
  ASSERT_EQ(s.domains.size(), 2u);
  EXPECT_EQ(s.domains[0].name, "team-a");
  EXPECT_EQ(s.domains[0].users, (std::vector<std::string>{"alice", "1001", "42"}));
  EXPECT_EQ(s.domains[0].gpus, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(s.domains[1].name, "B_2.x");
  EXPECT_TRUE(s.domains[1].users.empty());  // admins only
  EXPECT_TRUE(s.domains[1].gpus.empty());   // every GPU
  ASSERT_NE(s.find("B_2.x"), nullptr);
  EXPECT_EQ(s.find("b_2.x"), nullptr);
  // Round trip through the effective config.
  std::string printed = format_config(*r.config);
  ConfigResult again = parse(printed);
  ASSERT_TRUE(again) << again.error << "\n" << printed;
  ASSERT_EQ(again.config->spatial.domains.size(), 2u);
  EXPECT_EQ(again.config->spatial.domains[0].users, s.domains[0].users);
  EXPECT_EQ(again.config->spatial.domains[0].gpus, s.domains[0].gpus);
  EXPECT_TRUE(again.config->spatial.domains[1].gpus.empty());
  EXPECT_EQ(again.config->spatial.mps_dir, "/run/gpuos-mps");
  EXPECT_EQ(format_config(*again.config), printed);
  // Inline form, and [spatial] after its domains.
  ConfigResult inl = parse("spatial.domain = [{ name = \"x\" }, { name = \"y\", gpus = [1] }]\n");
  ASSERT_TRUE(inl) << inl.error;
  EXPECT_EQ(inl.config->spatial.domains.size(), 2u);
  ConfigResult later = parse("[[spatial.domain]]\nname = \"x\"\n[spatial]\nmps_control = \"mps\"\n");
  ASSERT_TRUE(later) << later.error;
  EXPECT_EQ(later.config->spatial.mps_control, "mps");
}

TEST(Config, DomainNames) {
  EXPECT_TRUE(is_valid_domain_name("a"));
  EXPECT_TRUE(is_valid_domain_name("A-z_0.9"));
  EXPECT_TRUE(is_valid_domain_name(std::string(32, 'x')));
  EXPECT_TRUE(is_valid_domain_name("..."));
  EXPECT_FALSE(is_valid_domain_name(""));
  EXPECT_FALSE(is_valid_domain_name(std::string(33, 'x')));
  EXPECT_FALSE(is_valid_domain_name("."));
  EXPECT_FALSE(is_valid_domain_name(".."));
  EXPECT_FALSE(is_valid_domain_name("a/b"));
  EXPECT_FALSE(is_valid_domain_name("a b"));
  EXPECT_FALSE(is_valid_domain_name("\xc3\xa9"));
}

TEST(Config, PolicySectionsKeepWhatTheFileSaid) {
  ConfigResult r = parse("[scheduler]\nbe_max_inflight = 1024\n[policy.priority]\nbe_slice_ms = 1\n");
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(r.config->policies.time_gate, "open");  // untouched keys keep their defaults
  ASSERT_EQ(r.config->policy_sections.size(), 1u);
  EXPECT_EQ(integer(*r.config, "priority", "be_max_inflight"), 1024);
  EXPECT_EQ(integer(*r.config, "priority", "be_slice_ms"), 1);
  EXPECT_EQ(r.config->section("priority")->find("be_slice_ms")->where, "test.toml:4");
  EXPECT_EQ(r.config->section("priority")->find("idle_grace_us"), nullptr);
  // The getters a policy reads its section with: absent keys leave the default; every key must be read.
  const ConfigSection& sec = *r.config->section("priority");
  std::string why;
  uint32_t v = 7;
  EXPECT_TRUE(sec.get_uint("idle_grace_us", 0, 10, &v, &why));
  EXPECT_EQ(v, 7u);
  EXPECT_FALSE(sec.get_uint("be_max_inflight", 0, 10, &v, &why));
  EXPECT_EQ(why, "test.toml:2: [scheduler] be_max_inflight: value 1024 out of range 0..10");
  EXPECT_FALSE(sec.all_read(&why));
  EXPECT_EQ(why, "test.toml:4: [policy.priority] be_slice_ms: unknown key");
  bool b;
  EXPECT_FALSE(sec.get_bool("be_slice_ms", &b, &why));
  EXPECT_EQ(why, "test.toml:4: [policy.priority] be_slice_ms: expected true or false, got integer");
  EXPECT_TRUE(sec.all_read(&why));
}

struct Bad {
  const char* text;
  const char* must_contain;
  friend std::ostream& operator<<(std::ostream& os, const Bad& b) { return os << b.must_contain; }
};

class ConfigBad : public ::testing::TestWithParam<Bad> {};

TEST_P(ConfigBad, NamesKeyAndLine) {
  ConfigResult r = parse(GetParam().text);
  EXPECT_FALSE(r);
  EXPECT_NE(r.error.find(GetParam().must_contain), std::string::npos) << r.error;
}

INSTANTIATE_TEST_SUITE_P(
    All, ConfigBad,
    ::testing::Values(Bad{"[daemon]\nfoo = 1\n", "test.toml:2: [daemon] foo: unknown key"},
                      Bad{"[tenants]\n\nbar = \"x\"\n", "test.toml:3: [tenants] bar: unknown key"},
                      Bad{"[deamon]\nhistory = 1\n", "unknown table [deamon]"},
                      Bad{"top = 1\n", "test.toml:1: unknown key \"top\""},
                      Bad{"daemon = 1\n", "test.toml:1: daemon: expected a table, got integer"},
                      Bad{"[daemon]\nhistory = \"many\"\n", "test.toml:2: [daemon] history: expected an integer, got string"},
                      Bad{"[daemon]\nhistory = 1.5\n", "history: expected an integer, got float"},
                      Bad{"[daemon]\nhistory = -1\n", "history: value -1 out of range 0..65536"},
                      Bad{"[daemon]\nhistory = 70000\n", "history: value 70000 out of range"},
                      Bad{"[daemon]\nmax_tenants = 0\n", "max_tenants: value 0 out of range 1..4096"},
                      Bad{"[daemon]\nmax_tenants = 99999999999999\n", "max_tenants: value"},
                      Bad{"[daemon]\nlog_level = \"loud\"\n", "log_level: \"loud\" is not one of"},
                      Bad{"[daemon]\nlog_level = 3\n", "log_level: expected a string, got integer"},
                      Bad{"[daemon]\nsocket = \"relative.sock\"\n", "socket: must be an absolute path"},
                      Bad{"[daemon]\nadmin_group = true\n", "admin_group: expected a string, got boolean"},
                      Bad{"[tenants]\non_no_daemon = \"maybe\"\n", "on_no_daemon: \"maybe\" is not one of"},
                      Bad{"[tenants]\ndefault_class = \"vip\"\n", "default_class: \"vip\" is not one of"},
                      Bad{"[tenants]\nguaranteed = \"everyone\"\n", "guaranteed: \"everyone\" is not one of"},
                      Bad{"[tenants]\nmem_quota_cap = \"lots\"\n", "mem_quota_cap: \"lots\" is not a size"},
                      Bad{"[tenants]\nmem_quota_cap = 40\n", "mem_quota_cap"},
                      Bad{"[scheduler]\npolicy = \"Fifo\"\n",
                          "test.toml:2: [scheduler] policy: \"Fifo\" is not a policy name"},
                      Bad{"[memory]\npolicy = \"\"\n", "test.toml:2: [memory] policy: \"\" is not a policy name"},
                      Bad{"[policy]\nx = 1\n", "[policy.x] : expected a table, got integer"},
                      Bad{"[policy.Big]\nx = 1\n", "\"Big\" is not a policy name"},
                      Bad{"[policy.priority]\nx = [1]\n", "[policy.priority] x: expected a string, number or boolean, got array"},
                      Bad{"[scheduler]\nbe_slice_ms = 1\n[policy.priority]\nbe_slice_ms = 2\n",
                          "test.toml:2: [scheduler] be_slice_ms: given twice (here and in [policy.priority])"},
                      Bad{"[policy.partition]\nlend_after_ms = 1\n[spatial]\nlend_after_ms = 2\n",
                          "test.toml:4: [spatial] lend_after_ms: given twice"},
                      Bad{"[scheduler]\npolicy = 1\n", "[scheduler] policy: expected a string, got integer"},
                      Bad{"[scheduler]\nslice = 5\n", "test.toml:2: [scheduler] slice: unknown key"},
                      Bad{"scheduler = \"priority\"\n", "scheduler: expected a table, got string"},
                      Bad{"[memory]\nswap_pool = \"huge\"\n", "test.toml:2: [memory] swap_pool: \"huge\" is not a size"},
                      Bad{"[memory]\nswap_pool = 84\n", "[memory] swap_pool: expected a string, got integer"},
                      Bad{"[memory]\nswap_headroom = \"\"\n", "[memory] swap_headroom: \"\" is not a size"},
                      Bad{"[memory]\nswap_quantum_ms = 3600001\n", "swap_quantum_ms: value 3600001 out of range 0..3600000"},
                      Bad{"[memory]\nswap = 1\n", "test.toml:2: [memory] swap: unknown key"},
                      Bad{"[verify]\nslack = 1\n", "test.toml:2: [verify] slack: unknown key"},
                      Bad{"[verify]\nenforce = \"nuke\"\n", "test.toml:2: [verify] enforce: \"nuke\": expected"},
                      Bad{"[verify]\nenforce = 1\n", "[verify] enforce: expected a string, got integer"},
                      Bad{"[verify]\nenabled = \"yes\"\n", "[verify] enabled: expected true or false, got string"},
                      Bad{"[verify]\ninterval_ms = 99\n", "[verify] interval_ms: value 99 out of range 100..60000"},
                      Bad{"[verify]\ninterval_ms = 60001\n", "interval_ms: value 60001 out of range"},
                      Bad{"[verify]\nmemory_slack = \"lots\"\n", "test.toml:2: [verify] memory_slack: \"lots\" is not a size"},
                      Bad{"[verify]\nmemory_slack = 1073741824\n", "[verify] memory_slack: expected a string, got integer"},
                      Bad{"[verify]\ngated_sm_util_percent = 0\n", "gated_sm_util_percent: value 0 out of range 1..100"},
                      Bad{"[verify]\ngated_sm_util_percent = 101\n", "gated_sm_util_percent: value 101 out of range"},
                      Bad{"[verify]\ngrace_rounds = 0\n", "[verify] grace_rounds: value 0 out of range 1..100"},
                      Bad{"verify = true\n", "test.toml:1: verify: expected a table, got boolean"},
                      Bad{"[spatial]\nmps = 1\n", "test.toml:2: [spatial] mps: unknown key"},
                      Bad{"[spatial]\nmps_control = 1\n", "test.toml:2: [spatial] mps_control: expected a string, got integer"},
                      Bad{"[spatial]\nmps_control = \"\"\n", "[spatial] mps_control: empty"},
                      Bad{"[spatial]\nmps_control = \"bin/mps\"\n",
                          "[spatial] mps_control: must be a command name (looked up in PATH) or an absolute path"},
                      Bad{"[spatial]\nmps_dir = \"run/mps\"\n", "test.toml:2: [spatial] mps_dir: must be an absolute path"},
                      Bad{"[spatial]\nmps_dir = \"/0123456789/0123456789/0123456789/0123456789/0123456789\"\n",
                          "[spatial] mps_dir: longer than 48 bytes"},
                      Bad{"spatial = 3\n", "test.toml:1: spatial: expected a table, got integer"},
                      Bad{"[spatial.domain]\nname = \"a\"\n",
                          "[spatial] domain: expected an array of tables ([[spatial.domain]]), got table"},
                      Bad{"[spatial]\ndomain = [1]\n", "test.toml:2: [spatial] domain: element 1: expected a table, got integer"},
                      Bad{"[[spatial.domain]]\nusers = [\"a\"]\n",
                          "test.toml:1: [spatial.domain] name: missing (every domain needs a name)"},
                      Bad{"[[spatial.domain]]\nname = \"a\"\n\n[[spatial.domain]]\nname = \"a\"\n",
                          "test.toml:5: [spatial.domain] name: \"a\" names two domains"},
                      Bad{"[[spatial.domain]]\nname = \"a b\"\n", "test.toml:2: [spatial.domain] name: \"a b\" is not a domain name"},
                      Bad{"[[spatial.domain]]\nname = \"..\"\n", "[spatial.domain] name: \"..\" is not a domain name"},
                      Bad{"[[spatial.domain]]\nname = \"\"\n", "[spatial.domain] name: \"\" is not a domain name"},
                      Bad{"[[spatial.domain]]\nname = \"abcdefghijabcdefghijabcdefghijabc\"\n", "is not a domain name: 1..32"},
                      Bad{"[[spatial.domain]]\nname = 7\n", "[spatial.domain] name: expected a string, got integer"},
                      Bad{"[[spatial.domain]]\nname = \"a\"\ncolor = \"red\"\n", "test.toml:3: [spatial.domain] color: unknown key"},
                      Bad{"[[spatial.domain]]\nname = \"a\"\nusers = \"alice\"\n",
                          "test.toml:3: [spatial.domain] users: expected an array, got string"},
                      Bad{"[[spatial.domain]]\nname = \"a\"\nusers = [1.5]\n", "[spatial.domain] users: expected user names or uids, got float"},
                      Bad{"[[spatial.domain]]\nname = \"a\"\nusers = [-1]\n", "[spatial.domain] users: uid -1 out of range"},
                      Bad{"[[spatial.domain]]\nname = \"a\"\nusers = [\"99999999999\"]\n", "users: uid 99999999999 out of range"},
                      Bad{"[[spatial.domain]]\nname = \"a\"\nusers = [\"al ice\"]\n", "users: \"al ice\" is not a user name or uid"},
                      Bad{"[[spatial.domain]]\nname = \"a\"\ngpus = []\n", "[spatial.domain] gpus: empty (leave the key out for every GPU)"},
                      Bad{"[[spatial.domain]]\nname = \"a\"\ngpus = [0, 0]\n", "[spatial.domain] gpus: GPU 0 listed twice"},
                      Bad{"[[spatial.domain]]\nname = \"a\"\ngpus = [\"0\"]\n", "[spatial.domain] gpus: expected an integer, got string"},
                      Bad{"[[spatial.domain]]\nname = \"a\"\ngpus = [1024]\n", "gpus: value 1024 out of range 0..1023"},
                      Bad{"[[spatial.domain]]\nname = \"a\"\ngpus = 0\n", "[spatial.domain] gpus: expected an array, got integer"},
                      Bad{"[daemon\n", "test.toml:1: TOML syntax error"},
                      Bad{"[daemon]\nhistory = 1\nhistory = 2\n", "test.toml:3: TOML syntax error"},
                      Bad{"\xff\xfe garbage", "TOML syntax error"}));

TEST(Config, FileAndLocationRules) {
  char dir[] = "/tmp/gpuos-cfg-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string good = std::string(dir) + "/good.toml";
  std::ofstream(good) << "[daemon]\nhistory = 7\n";
  ConfigResult r = load_config_file(good);
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(r.config->history, 7u);
  EXPECT_EQ(r.config->source, good);

  ConfigResult missing = load_config_file(std::string(dir) + "/nope.toml");
  EXPECT_FALSE(missing);
  EXPECT_NE(missing.error.find("nope.toml: cannot open"), std::string::npos) << missing.error;

  // $GPUOS_CONFIG is used when no explicit path is given; an explicit path wins.
  setenv("GPUOS_CONFIG", good.c_str(), 1);
  ConfigResult env = load_config("");
  ASSERT_TRUE(env) << env.error;
  EXPECT_EQ(env.config->history, 7u);
  ConfigResult explicit_missing = load_config(std::string(dir) + "/nope.toml");
  EXPECT_FALSE(explicit_missing);
  // A directory reads as empty: it must not pass for a file of defaults (issue #25), named or by
  // $GPUOS_CONFIG.
  ConfigResult directory = load_config(dir);
  EXPECT_FALSE(directory);
  EXPECT_EQ(directory.error, std::string(dir) + ": is a directory, not a config file");
  setenv("GPUOS_CONFIG", dir, 1);
  EXPECT_FALSE(load_config(""));
  unsetenv("GPUOS_CONFIG");
  unlink(good.c_str());
  rmdir(dir);
}

// The one size parser (config sizes, gpuos run --mem/--borrow): binary units in every spelling.
TEST(Config, SizesAreBinaryInEverySpelling) {
  const std::pair<const char*, uint64_t> good[] = {
      {"123", 123},          {"123B", 123},         {"1k", 1024},          {"1KB", 1024},
      {"1KiB", 1024},        {"512M", 512ull << 20}, {"512MiB", 512ull << 20}, {"8G", 8ull << 30},
      {"8Gi", 8ull << 30},   {"8GB", 8ull << 30},    {"8gib", 8ull << 30},   {"8 GiB", 8ull << 30},
      {"1.5GiB", 1610612736}, {"0.5K", 512},         {"1T", 1ull << 40},     {"0.25K", 256},
      {"1.5K", 1536}};
  for (const auto& [text, bytes] : good) {
    uint64_t got = 0;
    std::string why;
    EXPECT_TRUE(parse_size(text, &got, &why)) << text << ": " << why;
    EXPECT_EQ(got, bytes) << text;
  }
  const std::pair<const char*, const char*> bad[] = {
      {"", "\"\" is not a size"},
      {"lots", "\"lots\" is not a size (want a size such as 8GiB"},
      {"-1", "\"-1\" is not a size"},
      {"0", "\"0\" is zero bytes"},
      {"0GiB", "\"0GiB\" is zero bytes"},
      {"8Q", "\"8Q\": unknown unit \"q\""},
      {"8GiBs", "unknown unit \"gibs\""},
      {"1.5", "\"1.5\": a byte count is a whole number"},
      // #42: a fraction of a byte was rounded down (0.3K became 307 bytes).
      {"0.3K", "\"0.3K\": not a whole number of bytes"},
      {"0.001K", "\"0.001K\": not a whole number of bytes"},
      {"1.1M", "\"1.1M\": not a whole number of bytes"},
      {"1.", "\"1.\" is not a size"},
      {"1.2345678G", "at most 6 digits after the point"},
      {"16777216T", "\"16777216T\" is too large"},
      {"18446744073709551616", "is too large"}};
  for (const auto& [text, want] : bad) {
    uint64_t got = 7;
    std::string why;
    EXPECT_FALSE(parse_size(text, &got, &why)) << text;
    EXPECT_NE(why.find(want), std::string::npos) << text << ": " << why;
    EXPECT_EQ(got, 7u) << text;
  }
  ConfigResult r = parse("[memory]\nswap_pool = \"1.5GB\"\n");
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(r.config->memory.swap_pool_bytes, 1610612736u);
}

// What start-up resolves on the host: admin_group must name a group (gpuosd would not start).
TEST(Config, HostChecksResolveTheAdminGroup) {
  HostConfig host;
  std::string why;
  ConfigResult none = parse("");
  ASSERT_TRUE(none);
  EXPECT_TRUE(resolve_host_config(*none.config, &host, &why)) << why;
  EXPECT_FALSE(host.has_admin_gid);
  ConfigResult root = parse("[daemon]\nadmin_group = \"root\"\n");
  ASSERT_TRUE(root);
  EXPECT_TRUE(resolve_host_config(*root.config, &host, &why)) << why;
  EXPECT_TRUE(host.has_admin_gid);
  EXPECT_EQ(host.admin_gid, 0u);
  ConfigResult missing = parse("[daemon]\nadmin_group = \"gpuos-no-such-group\"\n");
  ASSERT_TRUE(missing);
  EXPECT_FALSE(resolve_host_config(*missing.config, &host, &why));
  EXPECT_EQ(why, "test.toml: [daemon] admin_group: \"gpuos-no-such-group\": no such group on this host");
}

// Regression (found by fuzz/fuzz_config.cc): toml++ 3.3.0 reached __builtin_unreachable when it
// asked whether some non-ASCII code points are whitespace. gpuos builds against its headers with the
// upstream fix (src/daemon/CMakeLists.txt): such text is an ordinary syntax error, or ordinary
// string content. (The sanitized fuzz build replays the crashing inputs: fuzz/corpus/config/regress_*.)
TEST(Config, NonAsciiWhereTomlPlusPlusAsksForWhitespace) {
  const char* bad[] = {
      "[_mon]\nadmin_ggro\xef\xb4\xbf]\nhistory = 0.5\n",  // U+FD3F after a key
      "[daemon]\nadmin_group = \"x\"\n \xc3\xa9\n",        // U+00E9 where a key starts
      "[daemon]\nadmin_group = \"x\"\xc3\xa9\n",            // U+00E9 after a value
  };
  for (const char* text : bad) {
    ConfigResult r = parse_config(text, "t.toml");
    EXPECT_FALSE(r) << text;
    EXPECT_NE(r.error.find("t.toml:"), std::string::npos) << r.error;
  }
  // U+00A7 after a line-ending backslash in a multi-line string is plain content.
  ConfigResult ok = parse_config(
      "# caf\xc3\xa9 \xef\xb4\xbf\n[daemon]\nadmin_group = \"\"\"a\\\n\xc2\xa7\"\"\"\n"
      "socket = '/tmp/\xc3\xa9.sock' # \xc3\xa9\n",
      "t.toml");
  ASSERT_TRUE(ok) << ok.error;
  EXPECT_EQ(ok.config->admin_group, "a\xc2\xa7");
  EXPECT_EQ(ok.config->socket, "/tmp/\xc3\xa9.sock");
}

}  // namespace
}  // namespace gpuos
