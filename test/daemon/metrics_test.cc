// gpuosd metrics: the [metrics] config, the exposition text and busy-time integration.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "common/ipc.h"
#include "common/config.h"
#include "daemon/core.h"
#include "daemon/metrics.h"
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

TEST(MetricsText, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
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
  EXPECT_EQ(m["gpuos_gpu_sm_count{gpu=\"0\"}"], "132");  // the deprecated name, one release
  EXPECT_NE(text.find("# HELP gpuos_gpu_sm_count DEPRECATED"), std::string::npos);
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
