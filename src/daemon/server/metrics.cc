// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/config.h"
#include "common/log.h"
#include "common/text.h"

namespace gpuos::daemon {
namespace {

// Seconds from nanoseconds, printed exactly enough (no exponent, trailing zeros trimmed).
std::string seconds(uint64_t ns) {
  char b[48];
  std::snprintf(b, sizeof(b), "%llu.%09llu", static_cast<unsigned long long>(ns / 1000000000ull),
                static_cast<unsigned long long>(ns % 1000000000ull));
  std::string s = b;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

std::string u64(uint64_t v) { return std::to_string(v); }
// A per-mille figure as a ratio: 1250 -> "1.250".
std::string permille(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof(b), "%u.%03u", v / 1000, v % 1000);
  return b;
}

const char* msg_type_name(uint32_t t) {
  switch (t) {
    case GPUOS_MSG_REGISTER: return "register";
    case GPUOS_MSG_LIST: return "list";
    case GPUOS_MSG_SET_GATE: return "set_gate";
    case GPUOS_MSG_SHUTDOWN: return "shutdown";
    case GPUOS_MSG_ACTIVITY: return "activity";
    case GPUOS_MSG_SPACE_QUERY: return "space_query";
    default: return nullptr;  // types only the daemon sends: counted as bad messages
  }
}

class Writer {
 public:
  // One family: HELP and TYPE, then its samples through sample().
  void family(const char* name, const char* type, const char* help) {
    s_ += "# HELP ";
    s_ += name;
    s_ += ' ';
    s_ += help;  // constant texts without backslashes or newlines
    s_ += "\n# TYPE ";
    s_ += name;
    s_ += ' ';
    s_ += type;
    s_ += '\n';
  }
  void sample(const std::string& name, const std::string& labels, const std::string& value) {
    s_ += name;
    if (!labels.empty()) {
      s_ += '{';
      s_ += labels;
      s_ += '}';
    }
    s_ += ' ';
    s_ += value;
    s_ += '\n';
  }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

std::string label(const char* k, const std::string& v) {
  return std::string(k) + "=\"" + escape_label_value(v) + "\"";
}

std::string cstr(const char* a, std::size_t n) { return std::string(a, strnlen(a, n)); }

constexpr const char* kLe[GPUOS_GATE_WAIT_BUCKETS] = {"0.0001", "0.001", "0.01", "0.1", "1", "+Inf"};

}  // namespace

std::string escape_label_value(const std::string& v) {
  // Raw bytes would make a scrape invalid (promtool: "invalid label value") and reach dashboards
  // as terminal escapes: printable() leaves only printable UTF-8 (no newline either).
  const std::string shown = printable(v);
  std::string o;
  o.reserve(shown.size());
  for (char c : shown) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else o += c;
  }
  return o;
}

std::string render_metrics(Core& core, const MetricsContext& ctx, uint64_t now_mono_ns) {
  Writer w;
  std::vector<TenantStat> ts = core.tenant_stats(now_mono_ns);
  std::vector<std::string> tl;  // per-tenant label sets
  tl.reserve(ts.size());
  for (const TenantStat& t : ts) {
    tl.push_back(label("tenant_id", u64(t.info.tenant_id)) + "," +
                 label("tenant", cstr(t.info.name, sizeof(t.info.name))) + "," +
                 label("class", class_name(t.info.tenant_class)) + "," + label("pid", std::to_string(t.info.pid)));
  }
  auto per_tenant = [&](const char* name, const char* type, const char* help, auto value) {
    w.family(name, type, help);
    for (std::size_t i = 0; i < ts.size(); ++i) w.sample(name, tl[i], value(ts[i]));
  };

  // Daemon
  const CoreStats& st = core.stats();
  w.family("gpuos_daemon_up", "gauge", "1 while gpuosd serves metrics.");
  w.sample("gpuos_daemon_up", "", "1");
  w.family("gpuos_daemon_info", "gauge",
           "gpuosd version and the policy of each slot: policy (time gate), space_policy, memory_policy (value 1).");
  w.sample("gpuos_daemon_info",
           label("version", ctx.version) + "," + label("policy", core.time_gate().name()) + "," +
               label("space_policy", core.space_policy().name()) + "," +
               label("memory_policy", core.memory_policy().name()),
           "1");
  w.family("gpuos_daemon_start_time_seconds", "gauge", "When gpuosd started, seconds since the Unix epoch.");
  {
    char b[32];
    std::snprintf(b, sizeof(b), "%.3f", ctx.start_time_seconds);
    w.sample("gpuos_daemon_start_time_seconds", "", b);
  }
  w.family("gpuos_daemon_tenants", "gauge", "Live (registered, not exited) tenants.");
  w.sample("gpuos_daemon_tenants", "", u64(core.live_tenants()));
  w.family("gpuos_daemon_tenants_registered_total", "counter", "Tenants registered since gpuosd started.");
  w.sample("gpuos_daemon_tenants_registered_total", "", u64(st.tenants_registered));
  w.family("gpuos_daemon_tenants_exited_total", "counter", "Tenants that exited since gpuosd started.");
  w.sample("gpuos_daemon_tenants_exited_total", "", u64(st.tenants_exited));
  w.family("gpuos_daemon_policy_failures_total", "counter",
           "Policy failures (a hook threw or stalled, or an action was rejected), by slot; the slot then runs its "
           "built-in policy.");
  w.sample("gpuos_daemon_policy_failures_total", label("slot", "time_gate"), u64(core.time_gate_failures()));
  w.sample("gpuos_daemon_policy_failures_total", label("slot", "space"), u64(core.space_failures()));
  w.sample("gpuos_daemon_policy_failures_total", label("slot", "memory"), u64(core.memory_failures()));
  w.family("gpuos_daemon_policy_stalls_total", "counter",
           "Policy hooks the watchdog found running longer than its bound.");
  w.sample("gpuos_daemon_policy_stalls_total", "", u64(core.watchdog_stalls()));
  w.family("gpuos_daemon_violations_total", "counter",
           "Findings of the usage check (NVML): tenants over their quota or launching while gated, and "
           "processes using a GPU without being tenants.");
  w.sample("gpuos_daemon_violations_total", "", u64(st.violations));
  w.family("gpuos_daemon_usage_checks_total", "counter", "Rounds of the usage check (NVML).");
  w.sample("gpuos_daemon_usage_checks_total", "", u64(st.usage_rounds));
  w.family("gpuos_daemon_usage_check_seconds_total", "counter", "Time spent in NVML by the usage check.");
  w.sample("gpuos_daemon_usage_check_seconds_total", "", seconds(st.usage_check_ns));
  w.family("gpuos_daemon_unregistered_gpu_processes", "gauge",
           "Processes the last usage check found on a GPU without being gpuos tenants.");
  w.sample("gpuos_daemon_unregistered_gpu_processes", "", u64(st.unregistered_processes));
  w.family("gpuos_daemon_enforcements_total", "counter",
           "Processes frozen or killed by the usage check: tenants, escaped tenants and processes using a GPU "
           "without being tenants.");
  w.sample("gpuos_daemon_enforcements_total", "", u64(st.enforcements));
  w.family("gpuos_daemon_escapes_total", "counter",
           "Tenants that closed their connection while held (an admin's hold, or memory held out) and ran on.");
  w.sample("gpuos_daemon_escapes_total", "", u64(st.escapes));
  w.family("gpuos_daemon_messages_total", "counter", "Valid control-socket messages received, by type.");
  for (uint32_t t = 1; t <= GPUOS_MSG_TYPE_MAX; ++t) {
    if (const char* n = msg_type_name(t)) w.sample("gpuos_daemon_messages_total", label("type", n), u64(st.messages[t]));
  }
  w.family("gpuos_daemon_bad_messages_total", "counter",
           "Control-socket messages refused as malformed, unreadable or of a daemon-to-client type.");
  w.sample("gpuos_daemon_bad_messages_total", "", u64(st.bad_messages));
  w.family("gpuos_daemon_metrics_scrapes_total", "counter", "GET /metrics requests answered (this one included).");
  w.sample("gpuos_daemon_metrics_scrapes_total", "", u64(ctx.scrapes));

  // GPUs
  const auto& gpus = core.gpus();
  auto gl = [](const GpuInfo& g) { return label("gpu", std::to_string(g.index)); };
  w.family("gpuos_gpu_info", "gauge", "A GPU gpuosd manages (value 1).");
  for (const GpuInfo& g : gpus) w.sample("gpuos_gpu_info", gl(g) + "," + label("name", g.name) + "," + label("uuid", g.uuid), "1");
  w.family("gpuos_gpu_streaming_multiprocessors", "gauge", "Streaming multiprocessors (SMs) of the GPU.");
  for (const GpuInfo& g : gpus) w.sample("gpuos_gpu_streaming_multiprocessors", gl(g), u64(g.sm_count));
  w.family("gpuos_gpu_memory_total_bytes", "gauge", "Device memory of the GPU.");
  for (const GpuInfo& g : gpus) w.sample("gpuos_gpu_memory_total_bytes", gl(g), u64(g.total_mem_bytes));
  w.family("gpuos_gpu_memory_used_bytes", "gauge", "Device memory held on the GPU by live gpuos tenants.");
  for (const GpuInfo& g : gpus) w.sample("gpuos_gpu_memory_used_bytes", gl(g), u64(core.gpu_used_bytes(g.index)));
  w.family("gpuos_gpu_busy_seconds_total", "counter",
           "Time the GPU had work of at least one gpuos tenant in flight (its utilization is the rate).");
  for (const GpuInfo& g : gpus) {
    w.sample("gpuos_gpu_busy_seconds_total", gl(g), seconds(core.gpu_busy_ns(g.index)));
  }
  auto joules = [](uint64_t mj) { return u64(mj / 1000) + "." + std::to_string(1000 + mj % 1000).substr(1); };
  w.family("gpuos_gpu_energy_joules_total", "counter",
           "The GPU's energy as its NVML counter grew over the usage check's rounds since gpuosd started "
           "(0 when NVML gives none).");
  for (const GpuInfo& g : gpus) w.sample("gpuos_gpu_energy_joules_total", gl(g), joules(core.gpu_energy_mj(g.index)));
  w.family("gpuos_gpu_energy_attributed_joules_total", "counter",
           "The part of gpuos_gpu_energy_joules_total split among tenants by their GPU time (the rest: rounds in "
           "which nothing ran, processes that are no tenant).");
  for (const GpuInfo& g : gpus) {
    w.sample("gpuos_gpu_energy_attributed_joules_total", gl(g), joules(core.gpu_energy_attributed_mj(g.index)));
  }

  // Tenants
  w.family("gpuos_tenant_info", "gauge",
           "A live tenant (value 1), with its uid, priority and weight, and its Kubernetes pod (\"\" when none; "
           "join on tenant_id).");
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const gpuos_msg_tenant_info& t = ts[i].info;
    w.sample("gpuos_tenant_info",
             tl[i] + "," + label("uid", u64(t.uid)) + "," + label("priority", std::to_string(t.priority)) +
                 "," + label("weight", u64(t.weight)) + "," +
                 label("pod_namespace", cstr(t.pod_namespace, sizeof(t.pod_namespace))) + "," +
                 label("pod", cstr(t.pod_name, sizeof(t.pod_name))) + "," +
                 label("pod_uid", cstr(t.pod_uid, sizeof(t.pod_uid))),
             "1");
  }
  per_tenant("gpuos_tenant_start_time_seconds", "gauge", "When the tenant registered, seconds since the Unix epoch.",
        [](const TenantStat& t) { return seconds(t.info.registered_unix_ms * 1000000ull); });
  per_tenant("gpuos_tenant_launches_total", "counter", "Kernel launches the tenant submitted to the GPU (not captured ones).",
        [](const TenantStat& t) { return u64(t.info.launches); });
  per_tenant("gpuos_tenant_graph_launches_total", "counter", "CUDA graph launches (one each, whatever the graph holds).",
        [](const TenantStat& t) { return u64(t.info.graph_launches); });
  per_tenant("gpuos_tenant_captured_launches_total", "counter", "Kernel launches recorded into a graph under stream capture.",
        [](const TenantStat& t) { return u64(t.info.captured_launches); });
  per_tenant("gpuos_tenant_gate_waits_total", "counter", "Launches that found the tenant's gate closed.",
        [](const TenantStat& t) { return u64(t.info.gate_waits); });
  per_tenant("gpuos_tenant_gate_wait_seconds_total", "counter", "Time the tenant's threads spent waiting at its closed gate.",
        [](const TenantStat& t) { return seconds(t.info.gate_wait_ns); });
    w.family("gpuos_tenant_gate_wait_duration_seconds", "histogram",
              "Duration of each finished wait at the closed gate (counted by the tenant).");
    for (std::size_t i = 0; i < ts.size(); ++i) {
      uint64_t cum = 0;
      for (int b = 0; b < GPUOS_GATE_WAIT_BUCKETS; ++b) {
        cum += ts[i].gate_wait_hist[b];
        w.sample("gpuos_tenant_gate_wait_duration_seconds_bucket", tl[i] + "," + label("le", kLe[b]), u64(cum));
      }
      w.sample("gpuos_tenant_gate_wait_duration_seconds_sum", tl[i], seconds(ts[i].info.gate_wait_ns));
      w.sample("gpuos_tenant_gate_wait_duration_seconds_count", tl[i], u64(cum));
    }
  per_tenant("gpuos_tenant_busy", "gauge", "1 while the tenant has submitted GPU work that has not finished.",
        [](const TenantStat& t) { return std::string(t.busy ? "1" : "0"); });
  per_tenant("gpuos_tenant_waiting", "gauge", "1 while a thread of the tenant is blocked at its closed gate.",
        [](const TenantStat& t) { return std::string(t.waiting ? "1" : "0"); });
  per_tenant("gpuos_tenant_gate_waiting_seconds", "gauge",
        "How long the tenant has been blocked at its closed gate now (0 when not waiting); "
        "gate_wait_seconds_total counts finished waits only.",
        [](const TenantStat& t) { return seconds(uint64_t{t.info.gate_waiting_ms} * 1000000ull); });
  per_tenant("gpuos_tenant_gated", "gauge", "1 while the tenant's gate is closed.",
        [](const TenantStat& t) { return std::string(t.info.state == GPUOS_TENANT_GATED ? "1" : "0"); });
  w.family("gpuos_tenant_gated_on_gpu", "gauge",
           "1 while the tenant's gate is closed on that GPU (the whole gate, or a partial one holding that GPU).");
  for (std::size_t i = 0; i < ts.size(); ++i) {
    for (std::size_t g = 0; g < core.gpus().size() && g < GPUOS_MAX_DEVICES; ++g) {
      const bool on = ts[i].info.state == GPUOS_TENANT_GATED ||
                      (ts[i].info.gate_by >> (GPUOS_GATE_BY_POLICY_ON_GPUS_SHIFT + g) & 1u) != 0;
      w.sample("gpuos_tenant_gated_on_gpu", tl[i] + "," + label("gpu", std::to_string(g)), on ? "1" : "0");
    }
  }
  per_tenant("gpuos_tenant_held", "gauge",
        "1 while an admin holds the tenant's gate closed (gpuos gate ID close; kept across a gpuosd restart).",
        [](const TenantStat& t) { return std::string((t.info.gate_by & GPUOS_GATE_BY_ADMIN) != 0 ? "1" : "0"); });
  per_tenant("gpuos_tenant_busy_seconds_total", "counter",
        "Time the tenant's busy word was 1, integrated by gpuosd at activity events and 100 ms ticks.",
        [](const TenantStat& t) { return seconds(t.busy_ns); });
  per_tenant("gpuos_tenant_memory_used_bytes", "gauge", "Device memory the tenant holds now (all GPUs).",
        [](const TenantStat& t) { return u64(t.info.mem_used_bytes); });
  // Per GPU (issue #27): what each tenant holds on each of the node's GPUs, by gpuosd's index.
  w.family("gpuos_tenant_gpu_memory_used_bytes", "gauge", "Device memory the tenant holds now on one GPU.");
  for (std::size_t i = 0; i < ts.size(); ++i) {
    for (std::size_t g = 0; g < core.gpus().size() && g < GPUOS_MAX_DEVICES; ++g) {
      w.sample("gpuos_tenant_gpu_memory_used_bytes", tl[i] + "," + label("gpu", std::to_string(g)),
               u64(ts[i].mem_used_per_device[g]));
    }
  }
  per_tenant("gpuos_tenant_memory_peak_bytes", "gauge", "Most device memory the tenant held at once.",
        [](const TenantStat& t) { return u64(t.info.mem_peak_bytes); });
  per_tenant("gpuos_tenant_verified_memory_bytes", "gauge",
        "The tenant's GPU memory as NVML measures it, context included (0 = not measured).",
        [](const TenantStat& t) { return u64(t.verified_mem_bytes); });
  per_tenant("gpuos_tenant_memory_quota_bytes", "gauge", "The tenant's device memory quota (0 = unlimited).",
        [](const TenantStat& t) { return u64(t.info.mem_quota_bytes); });
  per_tenant("gpuos_tenant_gpu_seconds_total", "counter",
        "The tenant's GPU time as the usage check measures it (NVML): each round's span times its mean SM use.",
        [](const TenantStat& t) { return seconds(t.info.gpu_time_ns); });
  per_tenant("gpuos_tenant_energy_joules_total", "counter",
        "The tenant's part of the GPUs' energy (NVML's counter), split each round by GPU time.",
        [&joules](const TenantStat& t) { return joules(t.info.energy_mj); });
  per_tenant("gpuos_tenant_violations_total", "counter",
        "Findings of the usage check (NVML) against the tenant: over its quota, launching while gated.",
        [](const TenantStat& t) { return u64(t.violations); });
  per_tenant("gpuos_tenant_alloc_calls_total", "counter", "Device memory allocation calls.",
        [](const TenantStat& t) { return u64(t.info.alloc_calls); });
  per_tenant("gpuos_tenant_alloc_failures_total", "counter", "Device memory allocation calls that failed.",
        [](const TenantStat& t) { return u64(t.info.alloc_failures); });
  per_tenant("gpuos_tenant_memory_swapped_bytes", "gauge",
        "Device memory of the tenant now held in host memory (swapped out).",
        [](const TenantStat& t) { return u64(t.info.swapped_bytes); });
  per_tenant("gpuos_tenant_kv_resident_bytes", "gauge",
        "GPU memory the tenant's KV pools hold (part of its device memory).",
        [](const TenantStat& t) { return u64(t.info.kv_resident_bytes); });
  per_tenant("gpuos_tenant_kv_target_bytes", "gauge",
        "The most gpuosd asks the tenant's KV pools to hold (-1 = no target: up to its quota).",
        [](const TenantStat& t) { return t.info.kv_target_bytes == UINT64_MAX ? std::string("-1") : u64(t.info.kv_target_bytes); });
  per_tenant("gpuos_tenant_kv_queue_depth", "gauge", "Requests the tenant's engine has waiting, as it reports them.",
        [](const TenantStat& t) { return u64(t.info.kv_queue_depth); });
  per_tenant("gpuos_tenant_engine_slots_active", "gauge",
        "Batch slots of the tenant's engine in use, as it reports them (gpuos_kv_report_slots; 0 = none reported).",
        [](const TenantStat& t) { return u64(t.info.engine_slots_active); });
  per_tenant("gpuos_tenant_engine_slots_capacity", "gauge",
        "Batch slots the tenant's engine has, as it reports them (0 = none reported).",
        [](const TenantStat& t) { return u64(t.info.engine_slots_capacity); });
  per_tenant("gpuos_tenant_swap_out_bytes_total", "counter", "Bytes copied from the GPU to the swap pool.",
        [](const TenantStat& t) { return u64(t.info.swap_out_bytes); });
  per_tenant("gpuos_tenant_swap_in_bytes_total", "counter", "Bytes copied from the swap pool back to the GPU.",
        [](const TenantStat& t) { return u64(t.info.swap_in_bytes); });
  per_tenant("gpuos_tenant_swap_out_seconds_total", "counter", "Time spent copying out and releasing memory.",
        [](const TenantStat& t) { return seconds(t.info.swap_out_ns); });
  per_tenant("gpuos_tenant_swap_in_seconds_total", "counter", "Time spent mapping memory and copying it back.",
        [](const TenantStat& t) { return seconds(t.info.swap_in_ns); });
  per_tenant("gpuos_tenant_memory_waits_total", "counter",
        "Allocations that waited for gpuosd to make room (by swapping another tenant out).",
        [](const TenantStat& t) { return u64(t.info.mem_waits); });
  per_tenant("gpuos_tenant_space_sms", "gauge",
        "SMs of the tenant's spatial partition on its GPU (right-sized or asked for); 0 = unconfined or "
        "not in a spatial domain.",
        [](const TenantStat& t) { return u64(t.info.space_sms); });
  per_tenant("gpuos_tenant_space_sms_saved", "gauge",
        "Right-sizing: SMs of the tenant's default partition it gave back (default minus current); 0 = not "
        "right-sized",
        [](const TenantStat& t) {
          return u64(t.info.space_default_sms > t.info.space_sms ? t.info.space_default_sms - t.info.space_sms : 0);
        });
  per_tenant("gpuos_tenant_max_slowdown_ratio", "gauge",
        "Latency budget of a guaranteed tenant (gpuos run --max-slowdown): its GPU work may take this many "
        "times as long as alone; 0 = none",
        [](const TenantStat& t) { return permille(t.info.max_slowdown_permille); });
  per_tenant("gpuos_tenant_slowdown_ratio", "gauge",
        "A budgeted tenant's slowdown as the time gate measures it: p99 over its window of its timed launches' "
        "duration over their time alone; 0 = not measured",
        [](const TenantStat& t) { return permille(t.info.slowdown_permille); });
  per_tenant("gpuos_tenant_step_slowdown_ratio", "gauge",
        "A budgeted tenant's slowdown over its steps alone, when its engine reports its phases "
        "(gpuos_kv_report_phase); 0 = not measured",
        [](const TenantStat& t) { return permille(t.info.slowdown_step_permille); });
  per_tenant("gpuos_tenant_admission_slowdown_ratio", "gauge",
        "A budgeted tenant's slowdown over its admissions (prefills) alone, when its engine reports its "
        "phases; 0 = not measured",
        [](const TenantStat& t) { return permille(t.info.slowdown_admission_permille); });
  per_tenant("gpuos_tenant_mps_cost_ratio", "gauge",
        "A budgeted tenant in a spatial domain: MPS's cost to it that its budget charges, as a fraction of its "
        "time without MPS (measured from its kernels' mean time alone); 0 = not in a domain",
        [](const TenantStat& t) { return permille(t.info.mps_cost_permille); });
  per_tenant("gpuos_tenant_long_launches_total", "counter",
        "A budgeted guaranteed tenant's launches its own timings marked long (at least twice its typical one "
        "and 0.5 ms: a prefill among decode steps), during which its budget lent nothing",
        [](const TenantStat& t) { return u64(t.info.long_launches); });
  per_tenant("gpuos_tenant_best_effort_share_ratio", "gauge",
        "The share of the GPU's time best-effort tenants are granted beside a budgeted tenant now (0 while it "
        "is measured alone, or over its budget)",
        [](const TenantStat& t) { return permille(t.info.be_share_permille); });
  per_tenant("gpuos_tenant_pace_share_ratio", "gauge",
        "A best-effort tenant's pacing now: the share of the GPU's time its launches may take beside a "
        "budgeted tenant, or 1 while held in a guaranteed tenant's pause (longer launches wait); 0 = not paced",
        [](const TenantStat& t) { return permille(t.info.pace_permille); });
  per_tenant("gpuos_tenant_pace_max_kernel_seconds", "gauge",
        "A paced best-effort tenant's longest launch it may start now (one expected longer waits until the "
        "guaranteed tenant is idle); 0 = no bound",
        [](const TenantStat& t) { return seconds(uint64_t{t.info.pace_max_kernel_us} * 1000); });
  per_tenant("gpuos_tenant_space_sized_latency_ratio", "gauge",
        "Right-sizing: the tenant's kernel latency at its current partition over that at its default one, as "
        "last measured; 0 = not measured",
        [](const TenantStat& t) { return permille(t.info.space_sized_permille); });
  per_tenant("gpuos_tenant_space_kernel_seconds", "gauge",
        "Spatial tenant: the mean time of its kernels in its timed launches (a graph counts its kernel nodes); "
        "MPS adds a fixed time to each ([spatial] mps_kernel_cost_ns); 0 = not timed yet",
        [](const TenantStat& t) {
          char b[24];
          std::snprintf(b, sizeof(b), "%.9g", t.info.space_kernel_ns / 1e9);
          return std::string(b);
        });
  per_tenant("gpuos_tenant_space_launches_total", "counter", "Launches placed on the tenant's SM partition.",
        [](const TenantStat& t) { return u64(t.info.space_launches); });
  per_tenant("gpuos_tenant_space_failures_total", "counter",
        "Launches of a spatial tenant that could not be placed and ran unconfined.",
        [](const TenantStat& t) { return u64(t.info.space_failures); });
  return w.take();
}

// ---------------------------------------------------------------------------------------------
// HTTP endpoint

MetricsHttp::MetricsHttp(Core& core, MetricsContext ctx) : core_(core), ctx_(std::move(ctx)) {}

MetricsHttp::~MetricsHttp() { close_all(); }

bool MetricsHttp::start(const std::string& addr, int epoll_fd, std::string* err) {
  ListenAddress a;
  std::string why;
  if (!parse_listen_address(addr, &a, &why)) {
    *err = "metrics listen address: " + why;
    return false;
  }
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (a.family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(a.port);
    inet_pton(AF_INET, a.host.c_str(), &sin->sin_addr);
    len = sizeof(sockaddr_in);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(a.port);
    inet_pton(AF_INET6, a.host.c_str(), &sin6->sin6_addr);
    len = sizeof(sockaddr_in6);
  }
  int fd = socket(a.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = std::string("metrics socket: ") + std::strerror(errno);
    return false;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (a.family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd, 64) != 0) {
    *err = "metrics: cannot listen on " + addr + ": " + std::strerror(errno);
    close(fd);
    return false;
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen) == 0) {
    port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                             : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    *err = std::string("metrics: epoll_ctl: ") + std::strerror(errno);
    close(fd);
    port_ = 0;
    return false;
  }
  listen_fd_ = fd;
  epoll_fd_ = epoll_fd;
  return true;
}

void MetricsHttp::on_event(int fd, uint32_t events, uint64_t now) {
  if (fd == listen_fd_) {
    on_accept(now);
    return;
  }
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client& c = it->second;
  if (events & EPOLLOUT) {
    on_writable(c);
    if (clients_.count(fd) == 0) return;
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) on_readable(c, now);
}

void MetricsHttp::on_accept(uint64_t now) {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) log::warn("metrics: accept: %s", std::strerror(errno));
      return;
    }
    if (clients_.size() >= kMaxClients) {
      // Full: the oldest connection goes (idle or slow clients cannot lock a scraper out).
      auto oldest = clients_.begin();
      for (auto it = clients_.begin(); it != clients_.end(); ++it) {
        if (it->second.seq < oldest->second.seq) oldest = it;
      }
      log::debug("metrics: %zu clients connected; closing the oldest", clients_.size());
      close_client(oldest->first);
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      continue;
    }
    Client c;
    c.fd = fd;
    c.deadline_ns = now + static_cast<uint64_t>(kRequestTimeoutMs) * 1000000ull;
    c.seq = ++accepted_;
    clients_.emplace(fd, std::move(c));
  }
}

void MetricsHttp::on_readable(Client& c, uint64_t now) {
  char buf[4096];
  const int fd = c.fd;
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      close_client(fd);
      return;
    }
    if (n == 0) {  // the peer is done sending: before a whole request, or after our response
      close_client(fd);
      return;
    }
    if (c.responding) continue;  // drain what comes after the request until the peer closes
    c.in.append(buf, static_cast<std::size_t>(n));
    std::size_t end = c.in.find("\r\n\r\n");
    std::size_t head_bytes = end + 4;
    if (end == std::string::npos) {
      end = c.in.find("\n\n");
      head_bytes = end + 2;
    }
    // A head over kMaxRequestBytes is refused whether it is still coming or came whole in the
    // reads so far (how the bytes were split into reads must not decide).
    if (end == std::string::npos ? c.in.size() > kMaxRequestBytes : head_bytes > kMaxRequestBytes) {
      respond(c, 431, "Request Header Fields Too Large", "text/plain", "request too large\n", false, now);
      if (clients_.count(fd) == 0) return;
      continue;
    }
    if (end == std::string::npos) continue;
    // Request line: METHOD SP TARGET SP HTTP/1.x
    std::string line = c.in.substr(0, c.in.find('\n'));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::size_t s1 = line.find(' ');
    std::size_t s2 = s1 == std::string::npos ? std::string::npos : line.find(' ', s1 + 1);
    std::string method, target, version;
    if (s2 != std::string::npos) {
      method = line.substr(0, s1);
      target = line.substr(s1 + 1, s2 - s1 - 1);
      version = line.substr(s2 + 1);
    }
    bool head = method == "HEAD";
    if (method.empty() || target.empty() || target[0] != '/' || version.rfind("HTTP/1.", 0) != 0 ||
        version.size() != 8) {
      respond(c, 400, "Bad Request", "text/plain", "bad request\n", false, now);
    } else if (method != "GET" && !head) {
      respond(c, 405, "Method Not Allowed", "text/plain", "only GET /metrics\n", false, now);
    } else if (target.substr(0, target.find('?')) != "/metrics") {
      respond(c, 404, "Not Found", "text/plain", "not found: try /metrics\n", head, now);
    } else {
      ++requests_;
      ctx_.scrapes = requests_;
      respond(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", render_metrics(core_, ctx_, now), head, now);
    }
    if (clients_.count(fd) == 0) return;
  }
}

void MetricsHttp::respond(Client& c, int status, const char* reason, const std::string& content_type,
                          const std::string& body, bool head_only, uint64_t now) {
  char head[256];
  std::snprintf(head, sizeof(head),
                "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n", status,
                reason, content_type.c_str(), body.size(), status == 405 ? "Allow: GET, HEAD\r\n" : "");
  c.out = head;
  if (!head_only) c.out += body;
  c.sent = 0;
  c.responding = true;
  c.in.clear();
  c.in.shrink_to_fit();
  on_writable(c);
}

void MetricsHttp::on_writable(Client& c) {
  const int fd = c.fd;
  while (c.sent < c.out.size()) {
    ssize_t n = send(fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLRDHUP | EPOLLOUT;
        ev.data.fd = fd;
        epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
        return;
      }
      close_client(fd);
      return;
    }
    c.sent += static_cast<std::size_t>(n);
  }
  // Everything sent: half-close and wait for the peer's close (what it still sends is discarded),
  // so that unread request bytes do not turn our close into a reset that loses the response. The
  // deadline still bounds the wait.
  c.out.clear();
  c.out.shrink_to_fit();
  shutdown(fd, SHUT_WR);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
}

void MetricsHttp::close_client(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  clients_.erase(it);
}

uint64_t MetricsHttp::next_deadline_ns() const {
  uint64_t d = UINT64_MAX;
  for (const auto& [fd, c] : clients_) d = std::min(d, c.deadline_ns);
  return d;
}

void MetricsHttp::expire(uint64_t now) {
  for (auto it = clients_.begin(); it != clients_.end();) {
    int fd = it->first;
    bool late = it->second.deadline_ns <= now;
    ++it;
    if (late) {
      log::debug("metrics: closing a client after %d ms", kRequestTimeoutMs);
      close_client(fd);
    }
  }
}

void MetricsHttp::close_all() {
  while (!clients_.empty()) close_client(clients_.begin()->first);
  if (listen_fd_ >= 0) {
    if (epoll_fd_ >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

}  // namespace gpuos::daemon
