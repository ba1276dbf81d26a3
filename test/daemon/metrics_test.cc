// SPDX-License-Identifier: Apache-2.0
// gpuosd metrics: the [metrics] config, the exposition text and busy-time integration.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/ipc.h"
#include "common/config.h"
#include "daemon/core/core.h"
#include "daemon/server/metrics.h"
#include "doc_tables.h"
#include "tenant_side.h"

using namespace gpuos;
using namespace gpuos::daemon;

namespace {

TEST(MetricsConfig, DefaultsAndAddresses) {
  ConfigResult r = parse_config("", "t.toml");
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(r.config->metrics_listen, "127.0.0.1:9464");
  for (const char* ok : {"", "127.0.0.1:0", "0.0.0.0:9464", "[::1]:9464", "localhost:9100", "10.1.2.3:65535"}) {
    ConfigResult c = parse_config(std::string("[metrics]\nlisten = \"") + ok + "\"\n", "t.toml");
    EXPECT_TRUE(c) << ok << ": " << c.error;
    if (c) {
      EXPECT_EQ(c.config->metrics_listen, ok);
      ConfigResult again = parse_config(format_config(*c.config), "again");  // round trip
      ASSERT_TRUE(again) << again.error;
      EXPECT_EQ(again.config->metrics_listen, ok);
    }
  }
  for (const char* bad : {"9464", "127.0.0.1", "127.0.0.1:", ":9464", "127.0.0.1:70000", "host.example:9464",
                          "[::1:9464", "127.0.0.1:-1", "1.2.3.4:12345678"}) {
    ConfigResult c = parse_config(std::string("[metrics]\nlisten = \"") + bad + "\"\n", "t.toml");
    EXPECT_FALSE(c) << bad;
    EXPECT_NE(c.error.find("t.toml:2: [metrics] listen"), std::string::npos) << c.error;
  }
  ConfigResult c = parse_config("[metrics]\nport = 1\n", "t.toml");
  EXPECT_FALSE(c);
  EXPECT_NE(c.error.find("unknown key"), std::string::npos);
  ListenAddress a;
  std::string why;
  ASSERT_TRUE(parse_listen_address("localhost:9464", &a, &why));
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 9464);
}

// Whether s is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xc0) != 0x80) return false;
      cp = cp << 6 | (b & 0x3f);
    }
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += static_cast<std::size_t>(n);
  }
  return true;
}

// Issue #42 item 8: a label value is valid UTF-8 and printable whatever bytes the tenant chose, and
// uses only the format's escapes (\\ and \"): a name is shown as `gpuos ps` shows it.
TEST(MetricsText, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\\\\\c\\\\x0ad");
  EXPECT_EQ(escape_label_value("caf\xc3\xa9 \xe6\x97\xa5"), "caf\xc3\xa9 \xe6\x97\xa5");  // UTF-8 stays
  const std::vector<std::string> hostile_names = {
      "\xff", "a\xc3(b", "\xe2\x82", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80", "\x1b]0;owned\x07\x1b[2J",
      "\x01\x7f\r\t", "\xc2\x9b", "x\xe2\x80\xaey", "\\\"\n\\n\\", std::string("nul\0in", 6)};
  for (const std::string& hostile : hostile_names) {
    const std::string v = escape_label_value(hostile);
    EXPECT_TRUE(valid_utf8(v)) << v;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto c = static_cast<unsigned char>(v[i]);
      EXPECT_TRUE(c >= 0x20 && c != 0x7f) << "raw control byte in " << v;
      if (c == '"') ADD_FAILURE() << "unescaped quote in " << v;
      if (c == '\\') {  // only \\ and \" (no \n: a newline is shown as \x0a)
        ASSERT_LT(i + 1, v.size()) << v;
        EXPECT_TRUE(v[i + 1] == '\\' || v[i + 1] == '"') << v;
        ++i;
      }
    }
  }
}

struct Clock {
  uint64_t ns = 1'000'000'000;
};

struct MetricsFixture : ::testing::Test {
  Clock clock;
  std::unique_ptr<Core> core;
  Connection conn;
  void SetUp() override {
    CoreOptions o;
    o.gpus.push_back(GpuInfo{0, "Sim \"GPU\"", "GPU-0", 132, 1ull << 34, {}, 0});
    o.unix_ms = [] { return uint64_t{1700000000000}; };
    o.mono_ns = [this] { return clock.ns; };
    core = std::make_unique<Core>(std::move(o));
    conn.id = 1;
    conn.peer.pid = 1234;
    conn.peer.uid = 1000;
  }
  gpuos_control_block* register_tenant(const char* name) { return register_tenant_on(conn, name); }
  gpuos_control_block* register_tenant_on(Connection& c, const char* name) {
    const gpuos_msg_register m = tenant_side::registration(c.peer.pid, GPUOS_CLASS_GUARANTEED, name);
    Outcome o = core->handle_message(c, &m, sizeof(m));
    EXPECT_NE(o.registered, 0u);
    return const_cast<gpuos_control_block*>(core->control_block(o.registered));
  }
};

// Parses an exposition: checks that every sample belongs to a family announced by HELP and TYPE
// before it, and returns "name{labels}" -> value.
std::map<std::string, std::string> parse_exposition(const std::string& text) {
  std::map<std::string, std::string> out;
  std::map<std::string, std::string> types;
  std::set<std::string> helped;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    EXPECT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(helped.insert(name).second) << "HELP twice: " << name;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::string rest = line.substr(7);
      std::string name = rest.substr(0, rest.find(' '));
      std::string type = rest.substr(rest.find(' ') + 1);
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << line;
      EXPECT_TRUE(helped.count(name)) << "TYPE before HELP: " << name;
      types[name] = type;
      continue;
    }
    std::size_t sp = line.rfind(' ');
    std::string key = line.substr(0, sp);
    std::string name = key.substr(0, key.find('{'));
    std::string family = name;
    for (const char* suf : {"_bucket", "_sum", "_count"}) {
      std::size_t n = std::strlen(suf);
      if (!types.count(family) && name.size() > n && name.compare(name.size() - n, n, suf) == 0) {
        family = name.substr(0, name.size() - n);
      }
    }
    EXPECT_TRUE(types.count(family)) << "sample without TYPE: " << line;
    EXPECT_EQ(name.rfind("gpuos_", 0), 0u) << line;
    EXPECT_TRUE(out.emplace(key, line.substr(sp + 1)).second) << "duplicate series: " << key;
  }
  return out;
}

TEST_F(MetricsFixture, ExpositionOfADaemonWithATenant) {
  gpuos_control_block* cb = register_tenant("a\"b");
  ASSERT_NE(cb, nullptr);
  cb->launches = 7;
  cb->graph_launches = 2;
  cb->captured_launches = 3;
  cb->gate_waits = 4;
  cb->gate_wait_ns = 1'500'000'000;
  cb->gate_wait_hist[0] = 1;  // <= 100 us
  cb->gate_wait_hist[3] = 2;  // <= 100 ms
  cb->gate_wait_hist[5] = 1;  // > 1 s
  cb->mem_used_bytes = 4096;
  cb->mem_peak_bytes = 8192;
  cb->mem_used_per_device[0] = 4096;
  cb->space_timed_kernels = 4;  // 4 kernels timed in 28.4 us: 7.1 us each
  cb->space_timed_ns = 28'400;
  // A malformed message and a LIST count in the daemon's families.
  uint8_t junk[20] = {1, 2, 3};
  Connection other = conn;
  other.id = 2;
  core->handle_message(other, junk, sizeof(junk));
  gpuos_msg_list l{};
  init_header(&l.hdr, GPUOS_MSG_LIST, sizeof(l), 3);
  core->handle_message(other, &l, sizeof(l));

  MetricsContext ctx;
  ctx.start_time_seconds = 1700000000.25;
  ctx.version = "9.9.9";
  ctx.scrapes = 5;
  std::string text = render_metrics(*core, ctx, clock.ns);
  auto m = parse_exposition(text);
  const std::string L = "{tenant_id=\"1\",tenant=\"a\\\"b\",class=\"guaranteed\",pid=\"1234\"}";
  EXPECT_EQ(m["gpuos_daemon_up"], "1");
  EXPECT_EQ(m["gpuos_daemon_tenants"], "1");
  EXPECT_EQ(m["gpuos_daemon_start_time_seconds"], "1700000000.250");
  EXPECT_EQ(m["gpuos_daemon_messages_total{type=\"register\"}"], "1");
  EXPECT_EQ(m["gpuos_daemon_messages_total{type=\"list\"}"], "1");
  EXPECT_EQ(m["gpuos_daemon_bad_messages_total"], "1");
  EXPECT_EQ(m["gpuos_daemon_tenants_exited_total"], "0");
  EXPECT_EQ(m["gpuos_daemon_policy_failures_total{slot=\"time_gate\"}"], "0");
  EXPECT_EQ(m["gpuos_daemon_policy_failures_total{slot=\"space\"}"], "0");
  EXPECT_EQ(m["gpuos_daemon_policy_failures_total{slot=\"memory\"}"], "0");
  EXPECT_EQ(m["gpuos_daemon_policy_stalls_total"], "0");
  EXPECT_EQ(m["gpuos_daemon_info{version=\"9.9.9\",policy=\"open\",space_policy=\"unconfined\",memory_policy=\"resident\"}"], "1");
  EXPECT_EQ(m["gpuos_gpu_streaming_multiprocessors{gpu=\"0\"}"], "132");
  EXPECT_EQ(m.count("gpuos_gpu_sm_count{gpu=\"0\"}"), 0u);  // its name through 0.1.x, removed in 0.2.0
  EXPECT_EQ(m["gpuos_gpu_memory_total_bytes{gpu=\"0\"}"], std::to_string(1ull << 34));
  EXPECT_EQ(m["gpuos_gpu_memory_used_bytes{gpu=\"0\"}"], "4096");
  EXPECT_EQ(m["gpuos_gpu_info{gpu=\"0\",name=\"Sim \\\"GPU\\\"\",uuid=\"GPU-0\"}"], "1");
  EXPECT_EQ(m["gpuos_tenant_launches_total" + L], "7");
  EXPECT_EQ(m["gpuos_tenant_graph_launches_total" + L], "2");
  EXPECT_EQ(m["gpuos_tenant_captured_launches_total" + L], "3");
  EXPECT_EQ(m["gpuos_tenant_gate_waits_total" + L], "4");
  EXPECT_EQ(m["gpuos_tenant_gate_wait_seconds_total" + L], "1.5");
  EXPECT_EQ(m["gpuos_tenant_memory_used_bytes" + L], "4096");
  EXPECT_EQ(m["gpuos_tenant_memory_peak_bytes" + L], "8192");
  EXPECT_EQ(m["gpuos_tenant_memory_quota_bytes" + L], "0");
  EXPECT_EQ(m["gpuos_tenant_busy" + L], "0");
  EXPECT_EQ(m["gpuos_tenant_gated" + L], "0");
  EXPECT_EQ(m["gpuos_tenant_held" + L], "0");
  EXPECT_EQ(m["gpuos_tenant_busy_seconds_total" + L], "0");
  EXPECT_EQ(m["gpuos_tenant_space_sms" + L], "0");  // not in a spatial domain
  EXPECT_EQ(m["gpuos_tenant_space_sms_saved" + L], "0");
  EXPECT_EQ(m["gpuos_tenant_space_sized_latency_ratio" + L], "0.000");
  EXPECT_EQ(m["gpuos_tenant_max_slowdown_ratio" + L], "0.000");  // no latency budget
  EXPECT_EQ(m["gpuos_tenant_slowdown_ratio" + L], "0.000");
  EXPECT_EQ(m["gpuos_tenant_best_effort_share_ratio" + L], "0.000");
  EXPECT_EQ(m["gpuos_tenant_pace_share_ratio" + L], "0.000");  // not paced
  EXPECT_EQ(m["gpuos_tenant_pace_max_kernel_seconds" + L], "0");
  EXPECT_EQ(m["gpuos_tenant_space_kernel_seconds" + L], "7.1e-06");
  EXPECT_EQ(m["gpuos_tenant_space_launches_total" + L], "0");
  EXPECT_EQ(m["gpuos_tenant_space_failures_total" + L], "0");
  std::string Lb = L.substr(0, L.size() - 1) + ",le=";
  EXPECT_EQ(m["gpuos_tenant_gate_wait_duration_seconds_bucket" + Lb + "\"0.0001\"}"], "1");
  EXPECT_EQ(m["gpuos_tenant_gate_wait_duration_seconds_bucket" + Lb + "\"0.01\"}"], "1");
  EXPECT_EQ(m["gpuos_tenant_gate_wait_duration_seconds_bucket" + Lb + "\"0.1\"}"], "3");
  EXPECT_EQ(m["gpuos_tenant_gate_wait_duration_seconds_bucket" + Lb + "\"1\"}"], "3");
  EXPECT_EQ(m["gpuos_tenant_gate_wait_duration_seconds_bucket" + Lb + "\"+Inf\"}"], "4");
  EXPECT_EQ(m["gpuos_tenant_gate_wait_duration_seconds_count" + L], "4");
  EXPECT_EQ(m["gpuos_tenant_gate_wait_duration_seconds_sum" + L], "1.5");
  EXPECT_EQ(m["gpuos_tenant_info{tenant_id=\"1\",tenant=\"a\\\"b\",class=\"guaranteed\",pid=\"1234\",uid=\"1000\","
              "priority=\"0\",weight=\"100\",pod_namespace=\"\",pod=\"\",pod_uid=\"\"}"],
            "1");

  // Exit: the tenant's series go, the exit counter moves.
  core->connection_closed(conn);
  m = parse_exposition(render_metrics(*core, ctx, clock.ns));
  EXPECT_EQ(m["gpuos_daemon_tenants"], "0");
  EXPECT_EQ(m["gpuos_daemon_tenants_exited_total"], "1");
  EXPECT_EQ(m.count("gpuos_tenant_launches_total" + L), 0u);
}

// Issue #43: docs/OPERATIONS.md's metric table names every family gpuosd exposes, and none that it
// does not (a family is its `# TYPE` line: a histogram's _bucket/_sum/_count series are one row).
TEST_F(MetricsFixture, TheOperationsTableNamesEveryFamilyAndNoOther) {
  register_tenant("docs");
  std::istringstream text(render_metrics(*core, MetricsContext{}, clock.ns));
  std::set<std::string> exposed;
  for (std::string line; std::getline(text, line);) {
    if (line.rfind("# TYPE ", 0) == 0) exposed.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  ASSERT_GT(exposed.size(), 40u);
  const std::string doc = GPUOS_SOURCE_DIR "/docs/OPERATIONS.md";
  EXPECT_EQ(gpuos::test::compare_names(exposed, gpuos::test::documented_names(doc, "## Metrics")), "")
      << "fix the table under \"## Metrics\" in " << doc;
}

// Issue #57: every metric a doc names is one gpuosd exposes (a histogram's _bucket/_sum/_count
// series count as its family): README.md, docs/*.md, gpu/README.md, bench/colocation/README.md.
// A name is gpuos_tenant_*, gpuos_gpu_* or gpuos_daemon_*, not ending in "_" (a prefix: "the
// gpuos_tenant_* series").
TEST_F(MetricsFixture, EveryMetricTheDocsNameIsExposed) {
  register_tenant("docs");
  std::istringstream text(render_metrics(*core, MetricsContext{}, clock.ns));
  std::set<std::string> exposed;
  for (std::string line; std::getline(text, line);) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    const std::string family = line.substr(7, line.find(' ', 7) - 7);
    exposed.insert(family);
    if (line.ends_with(" histogram")) {
      for (const char* s : {"_bucket", "_sum", "_count"}) exposed.insert(family + s);
    }
  }
  ASSERT_GT(exposed.size(), 40u);
  std::vector<std::string> docs = {"README.md", "gpu/README.md", "bench/colocation/README.md"};
  for (const auto& e : std::filesystem::directory_iterator(GPUOS_SOURCE_DIR "/docs")) {
    if (e.path().extension() == ".md") docs.push_back("docs/" + e.path().filename().string());
  }
  const std::regex name(R"((?:^|[^A-Za-z0-9_])(gpuos_(?:tenant|gpu|daemon)_[a-z0-9_]*[a-z0-9])(?![a-z0-9_]))");
  // Several names in one: gpuos_tenant_{step,admission}_slowdown_ratio (not a label set: the
  // part before the brace ends in "_").
  const std::regex names(R"((gpuos_(?:tenant|gpu|daemon)_(?:[a-z0-9_]*_)?)\{([a-z0-9_,]+)\}([a-z0-9_]*))");
  std::size_t named = 0;
  for (const std::string& doc : docs) {
    std::ifstream in(std::string(GPUOS_SOURCE_DIR) + "/" + doc);
    ASSERT_TRUE(in) << doc;
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      std::vector<std::string> found;
      for (std::sregex_iterator it(line.begin(), line.end(), name), end; it != end; ++it) found.push_back((*it)[1]);
      for (std::sregex_iterator it(line.begin(), line.end(), names), end; it != end; ++it) {
        std::istringstream alternatives((*it)[2]);
        for (std::string a; std::getline(alternatives, a, ',');) found.push_back((*it)[1].str() + a + (*it)[3].str());
      }
      for (const std::string& f : found) {
        ++named;
        EXPECT_TRUE(exposed.count(f)) << doc << ":" << n << ": names " << f << ", which gpuosd does not expose";
      }
    }
  }
  EXPECT_GT(named, 50u) << "the docs name few metrics: is the pattern right?";
}

TEST_F(MetricsFixture, BusyTimeIsIntegratedBetweenObservations) {
  gpuos_control_block* cb = register_tenant("busy");
  auto busy_ns = [&] { return core->tenant_stats(clock.ns).at(0).busy_ns; };
  clock.ns += 50'000'000;
  EXPECT_EQ(busy_ns(), 0u);  // idle so far
  std::atomic_ref<uint32_t>(cb->busy).store(1);
  // The ACTIVITY message makes the daemon look at the word at once.
  gpuos_msg_activity a{};
  init_header(&a.hdr, GPUOS_MSG_ACTIVITY, sizeof(a), 2);
  a.busy = 1;
  core->handle_message(conn, &a, sizeof(a));
  clock.ns += 100'000'000;
  core->tick(clock.ns);
  clock.ns += 200'000'000;
  EXPECT_EQ(busy_ns(), 300'000'000u);
  std::atomic_ref<uint32_t>(cb->busy).store(0);
  a.busy = 0;
  clock.ns += 10'000'000;  // seen at the activity message, 10 ms later
  core->handle_message(conn, &a, sizeof(a));
  clock.ns += 500'000'000;
  EXPECT_EQ(busy_ns(), 310'000'000u);
  EXPECT_FALSE(core->tenant_stats(clock.ns).at(0).busy);
}

// Issue #25: a wait at the closed gate shows while it lasts (gate_wait_seconds_total only when it ends).
TEST_F(MetricsFixture, TheGateWaitInProgressIsAGauge) {
  gpuos_control_block* cb = register_tenant("blocked");
  ASSERT_EQ(core->admin_set_gate(1, GPUOS_GATE_CLOSED), GPUOS_OK);
  std::atomic_ref<uint32_t>(cb->waiting).store(1);
  gpuos_msg_activity a{};
  init_header(&a.hdr, GPUOS_MSG_ACTIVITY, sizeof(a), 2);
  a.waiting = 1;
  core->handle_message(conn, &a, sizeof(a));
  clock.ns += 2'500'000'000;
  const std::string L = "{tenant_id=\"1\",tenant=\"blocked\",class=\"guaranteed\",pid=\"1234\"}";
  auto m = parse_exposition(render_metrics(*core, MetricsContext{}, clock.ns));
  EXPECT_EQ(m["gpuos_tenant_gate_waiting_seconds" + L], "2.5");
  EXPECT_EQ(m["gpuos_tenant_gate_wait_seconds_total" + L], "0");
  EXPECT_EQ(m["gpuos_tenant_waiting" + L], "1");
  ASSERT_EQ(core->admin_set_gate(1, GPUOS_GATE_OPEN), GPUOS_OK);
  m = parse_exposition(render_metrics(*core, MetricsContext{}, clock.ns));
  EXPECT_EQ(m["gpuos_tenant_gate_waiting_seconds" + L], "0");
}

TEST_F(MetricsFixture, GpuBusyTimeIsTheUnionOfItsTenantsBusyTime) {
  gpuos_control_block* a = register_tenant("a");
  Connection second = conn;
  second.id = 2;
  second.peer.pid = 1235;
  second.tenant_id = 0;
  gpuos_control_block* b = register_tenant_on(second, "b");
  auto gpu_busy = [&] {
    core->tenant_stats(clock.ns);  // observe up to now
    return core->gpu_busy_ns(0);
  };
  clock.ns += 10'000'000;
  EXPECT_EQ(gpu_busy(), 0u);
  std::atomic_ref<uint32_t>(a->busy).store(1);  // a busy from t=10 ms
  core->tick(clock.ns);
  clock.ns += 100'000'000;
  std::atomic_ref<uint32_t>(b->busy).store(1);  // both busy from t=110 ms: counted once
  core->tick(clock.ns);
  clock.ns += 100'000'000;
  std::atomic_ref<uint32_t>(a->busy).store(0);
  std::atomic_ref<uint32_t>(b->busy).store(0);  // idle from t=210 ms
  core->tick(clock.ns);
  clock.ns += 300'000'000;
  EXPECT_EQ(gpu_busy(), 200'000'000u);
  MetricsContext ctx;
  auto m = parse_exposition(render_metrics(*core, ctx, clock.ns));
  EXPECT_EQ(m["gpuos_gpu_busy_seconds_total{gpu=\"0\"}"], "0.2");
}

// The whole scrape with hostile tenant names stays valid: UTF-8 throughout, and promtool (where
// installed, as in CI) accepts it.
TEST_F(MetricsFixture, HostileNamesKeepTheScrapeValid) {
  const std::vector<std::string> names = {"\xff\xfe", "bad\xc3(utf8", "esc\x1b[2J\x07", "quote\"back\\slash",
                                          "new\nline", "bidi\xe2\x80\xae", "c1\xc2\x9b"};
  std::vector<Connection> conns(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    conns[i].id = 10 + i;
    conns[i].peer.pid = static_cast<pid_t>(2000 + i);
    conns[i].peer.uid = 1000;
    ASSERT_NE(register_tenant_on(conns[i], names[i].c_str()), nullptr);
  }
  const std::string text = render_metrics(*core, MetricsContext{}, clock.ns);
  EXPECT_TRUE(valid_utf8(text));
  parse_exposition(text);
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "promtool not installed";
  char path[] = "/tmp/gpuos-metrics-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  FILE* p = popen(("promtool check metrics < " + std::string(path) + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  pclose(p);
  unlink(path);
  // Nothing may be linted.
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);) {
    if (!l.empty()) ADD_FAILURE() << out;
  }
}

}  // namespace

TEST(GateWaitHistogram, BucketBounds) {
  EXPECT_EQ(gpuos_gate_wait_bucket(0), 0u);
  EXPECT_EQ(gpuos_gate_wait_bucket(100'000), 0u);
  EXPECT_EQ(gpuos_gate_wait_bucket(100'001), 1u);
  EXPECT_EQ(gpuos_gate_wait_bucket(1'000'000), 1u);
  EXPECT_EQ(gpuos_gate_wait_bucket(10'000'000), 2u);
  EXPECT_EQ(gpuos_gate_wait_bucket(100'000'000), 3u);
  EXPECT_EQ(gpuos_gate_wait_bucket(1'000'000'000), 4u);
  EXPECT_EQ(gpuos_gate_wait_bucket(1'000'000'001), 5u);
  EXPECT_EQ(gpuos_gate_wait_bucket(UINT64_MAX), 5u);
}
