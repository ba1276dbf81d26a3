// SPDX-License-Identifier: Apache-2.0
// gpuosd: the gpuos node daemon. Never daemonizes itself: it runs in the foreground under systemd or
// `gpuos daemon` (so neither has a --foreground).
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "common/command_line.h"
#include "common/config.h"
#include "common/ipc.h"
#include "common/log.h"
#include "daemon/core/core.h"
#include "daemon/core/gpus.h"
#include "daemon/server/mps.h"
#include "daemon/server/server.h"
#include "daemon/core/usage_verifier.h"
#include "gpuos/nvml_api.h"
#include "daemon/core/enforce.h"
#include "policies/registry.h"

int main(int argc, char** argv) {
  using namespace gpuos;
  gpuos::daemon::block_shutdown_signals();  // before any thread exists
  CLI::App app{"gpuosd: the gpuos node daemon (runs in the foreground)", "gpuosd"};
  app.formatter(std::make_shared<Formatter>(Formatter::ValueNames{
      {"config", "FILE"}, {"socket", "PATH"}, {"log-level", "LEVEL"}, {"policy", "POLICY"},
      {"space-policy", "POLICY"}, {"memory-policy", "POLICY"}, {"metrics-listen", "HOST:PORT"}}));
  app.set_version_flag("--version", std::string("gpuosd ") + GPUOS_VERSION);
  std::string config_path, socket_opt, log_level_opt, policy_opt, space_policy_opt, memory_policy_opt;
  std::optional<std::string> metrics_opt;
  app.add_option("--config", config_path, "config file (default: $GPUOS_CONFIG, /etc/gpuos/gpuos.toml)");
  app.add_option("--socket", socket_opt, "control socket path (overrides the config)")->check(absolute_path());
  app.add_option("--log-level", log_level_opt, "error|warn|info|debug (overrides the config)")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}));
  // A policy name that is none is a wrong command line (exit 2), not a failed start (1).
  auto policy_check = [](policies::SlotKind slot) {
    return CLI::Validator([slot](std::string& name) { return policies::not_a_policy(slot, name); }, "POLICY");
  };
  app.add_option("--policy", policy_opt,
                 "time-gate policy: " + policies::policy_names(policies::SlotKind::kTimeGate) + " (overrides [scheduler] policy)")
      ->check(policy_check(policies::SlotKind::kTimeGate));
  app.add_option("--space-policy", space_policy_opt,
                 "space policy: " + policies::policy_names(policies::SlotKind::kSpace) + " (overrides [spatial] policy)")
      ->check(policy_check(policies::SlotKind::kSpace));
  app.add_option("--memory-policy", memory_policy_opt,
                 "memory policy: " + policies::policy_names(policies::SlotKind::kMemory) + " (overrides [memory] policy)")
      ->check(policy_check(policies::SlotKind::kMemory));
  app.add_option("--metrics-listen", metrics_opt,
                 "Prometheus endpoint HOST:PORT, \"\" to disable (overrides [metrics] listen)");
  if (int rc = parse_command_line(app, argc, argv, "gpuosd"); rc >= 0) return rc;

  log::init("gpuosd", log::Level::kInfo);
  ConfigResult cr = load_config(config_path);
  if (!cr) {
    log::error("%s", cr.error.c_str());
    return 1;
  }
  Config cfg = *cr.config;
  log::set_level(cfg.log_level);
  if (!log_level_opt.empty()) {
    log::Level l;
    if (!log::parse_level(log_level_opt, &l)) {
      log::error("--log-level %s: not one of error, warn, info, debug", log_level_opt.c_str());
      return 1;
    }
    log::set_level(l);
  }
  if (!cfg.source.empty()) log::info("config from %s", cfg.source.c_str());

  daemon::ServerOptions so;
  if (!socket_opt.empty()) {
    so.socket_path = socket_opt;
  } else if (!cfg.socket.empty()) {
    so.socket_path = cfg.socket;
  } else {
    char buf[128];
    char why[256];
    if (!socket_path(buf, sizeof(buf), why, sizeof(why))) {
      log::error("%s (or pass --socket, or set [daemon] socket)", why);
      return 1;
    }
    so.socket_path = buf;
  }
  so.daemon_uid = geteuid();
  so.handle_signals = true;
  so.metrics_listen = metrics_opt ? *metrics_opt : cfg.metrics_listen;
  if (!so.metrics_listen.empty()) {
    ListenAddress la;
    std::string why;
    if (!parse_listen_address(so.metrics_listen, &la, &why)) {
      log::error("--metrics-listen %s: %s", so.metrics_listen.c_str(), why.c_str());
      return 1;
    }
  }
  so.max_connections = cfg.max_tenants + 64;
  so.max_connections_per_uid = cfg.max_connections_per_uid;
  so.admin_connections = cfg.admin_connections;
  so.idle_timeout_ms = cfg.idle_timeout_ms;
  so.pod_cgroups = {cfg.kubelet_cgroup_roots, cfg.cgroup_mount};
  // Every connection, pidfd and control block is an fd: the soft limit (often 1024) goes up to the
  // hard one, so the connection limits, not EMFILE, decide who gets in.
  if (rlimit rl{}; getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    const rlim_t want = std::min<rlim_t>(rl.rlim_max, 65536);
    if (want > rl.rlim_cur) {
      rl.rlim_cur = want;
      setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  if (!policy_opt.empty()) cfg.policies.time_gate = policy_opt;
  if (!space_policy_opt.empty()) cfg.policies.space = space_policy_opt;
  if (!memory_policy_opt.empty()) cfg.policies.memory = memory_policy_opt;
  daemon::CoreOptions co;
  {
    // The same check as `gpuos config check` (one function: the two cannot drift apart).
    HostConfig host;
    policies::PolicySet set;
    std::string why;
    if (!policies::check_startup_config(cfg, &host, &set, &why)) {
      log::error("%s", why.c_str());
      return 1;
    }
    if (host.has_admin_gid) so.admin_gid = host.admin_gid;
    co.time_gate = std::move(set.time_gate);
    co.space_policy = std::move(set.space);
    co.memory_policy = std::move(set.memory);
  }
  log::info("policies: time gate %s, space %s, memory %s", co.time_gate->name(), co.space_policy->name(),
            co.memory_policy->name());
  // A hook that does not return stalls the event loop: reported after 1 s; after 30 s gpuosd exits
  // (its tenants see the connection close and go on ungoverned; systemd starts a fresh one).
  co.watchdog.stall_ns = 1'000'000'000;
  co.watchdog.on_hung = [](const char* slot, const char* hook, uint64_t) {
    log::error("exiting: the %s slot's %s hook is hung (the event loop cannot serve tenants)", slot, hook);
    std::_Exit(70);
  };
  co.max_tenants = cfg.max_tenants;
  co.max_tenants_per_uid = cfg.max_tenants_per_uid;
  // Beside the socket, in gpuosd's own directory (only its user may write there).
  co.id_ledger_path = so.socket_path.substr(0, so.socket_path.find_last_of('/') + 1) + "tenant-ids";
  // Kubernetes claims (gpuos-dra): kept beside the ledger, their sockets under <socket dir>/claims/.
  co.claims_path = so.socket_path.substr(0, so.socket_path.find_last_of('/') + 1) + "claims.txt";
  co.claim_socket_root = so.socket_path;
  co.history = cfg.history;
  co.pod_cgroups = so.pod_cgroups;
  co.guaranteed_needs_admin = !cfg.guaranteed_for_anyone;
  co.mem_quota_cap_bytes = cfg.mem_quota_cap_bytes;
  co.default_max_slowdown_permille = cfg.max_slowdown_permille;
  co.swap.pool_bytes = cfg.memory.swap_pool_bytes;
  co.swap.quantum_ns = static_cast<uint64_t>(cfg.memory.swap_quantum_ms) * 1000000ull;
  co.swap.headroom_bytes = cfg.memory.swap_headroom_bytes;
  if (co.swap.pool_bytes != 0) {
    log::info("memory oversubscription: swap pool %llu MiB per swappable tenant, quantum %u ms, headroom %llu MiB",
              static_cast<unsigned long long>(co.swap.pool_bytes >> 20), cfg.memory.swap_quantum_ms,
              static_cast<unsigned long long>(co.swap.headroom_bytes >> 20));
  }
  std::string warning;
  co.gpus = daemon::discover_gpus(nullptr, &warning);
  if (!warning.empty()) log::warn("%s", warning.c_str());
  if (co.gpus.empty()) log::warn("running with zero GPUs (tenants still register)");
  for (const auto& g : co.gpus) {
    log::info("GPU %u: %s %s, %u SMs (%zu partition groups of >= %u), %llu MiB", g.index, g.name.c_str(),
              g.uuid.c_str(), g.sm_count, g.sm_groups.size(), g.sm_group_min,
              static_cast<unsigned long long>(g.total_mem_bytes >> 20));
  }
  // Spatial partitions are groups of the driver's minimum partition size (8 SMs on Hopper).
  if (!co.gpus.empty() && co.gpus.front().sm_group_min != 0) co.space_group_sms = co.gpus.front().sm_group_min;

  // Spatial sharing: one MPS control daemon per trust domain, supervised on a helper thread. Built
  // before the core (which may consult it), started once the socket directory exists (so a
  // non-root daemon's socket directory is created 0700 by the server, not 0755 on our way to
  // <socket dir>/mps), stopped (quit) after the server.
  daemon::MpsOptions mo = daemon::MpsSupervisor::options_from(cfg, so.socket_path);
  for (const auto& g : co.gpus) {
    if (mo.gpu_uuids.size() <= g.index) mo.gpu_uuids.resize(g.index + 1);
    mo.gpu_uuids[g.index] = g.uuid;
  }
  daemon::MpsSupervisor mps(std::move(mo));
  if (cfg.spatial.domains.empty()) log::debug("spatial sharing off (no [[spatial.domain]])");
  // A tenant joins a domain only if the config lets its uid in and the domain's MPS control daemon
  // is up: without MPS, processes cannot run side by side on disjoint SMs (they would only lose SMs).
  co.space_admit = [&mps](const std::string& domain, const daemon::Peer& peer) -> std::string {
    std::optional<daemon::SpaceDomainStatus> st = mps.query(domain);
    if (!st) return "no such domain in [spatial]";
    if (!mps.allows(domain, peer.uid, peer.admin)) return "uid " + std::to_string(peer.uid) + " may not join it";
    if (!st->available) return "its MPS control daemon is not running (" + st->reason + ")";
    return "";
  };
  // `gpuos run --space DOMAIN` asks here rather than reading a config file of its own, which may
  // not be the one this daemon runs with.
  std::string known_domains;
  for (const auto& d : cfg.spatial.domains) known_domains += (known_domains.empty() ? "" : ", ") + d.name;
  const std::string config_name = cfg.source.empty() ? std::string("built-in defaults") : cfg.source;
  co.space_query = [&mps, known_domains, config_name](const std::string& domain, const daemon::Peer& peer) {
    daemon::SpaceDomainAnswer a;
    std::optional<daemon::SpaceDomainStatus> st = mps.query(domain);
    if (!st) {
      a.status = GPUOS_ERR_NOT_FOUND;
      a.text = known_domains.empty()
                   ? "gpuosd's config (" + config_name + ") defines no [[spatial.domain]] (spatial sharing is off)"
                   : "no such trust domain in gpuosd's config (known: " + known_domains + ")";
      return a;
    }
    a.pipe_dir = st->pipe_dir;
    a.log_dir = st->log_dir;
    a.available = st->available;
    if (!mps.allows(domain, peer.uid, peer.admin)) {
      a.status = GPUOS_ERR_PERMISSION;
      a.text = "uid " + std::to_string(peer.uid) + " may not join it (its [[spatial.domain]] users)";
    } else {
      a.status = GPUOS_OK;
      a.text = st->available ? "" : st->reason;
    }
    return a;
  };

  // The usage check: NVML's view of every GPU against the grants, independent of the tenants. NVML
  // also backs requests for room (memory oversubscription): the GPU's free memory as the driver
  // counts it, never a tenant's word.
  GpuosNvmlTable nvml{};
  std::unique_ptr<daemon::NvmlReader> nvml_reader;
  daemon::SystemEnforcer enforcer;
  if ((cfg.verify.enabled || co.swap.pool_bytes != 0) && !co.gpus.empty()) {
    char nvml_err[256];
    const char* what = cfg.verify.enabled ? "usage check off" : "NVML (for requests for room)";
    if (!load_nvml(&nvml, nullptr, nvml_err, sizeof(nvml_err))) {
      log::warn("%s: %s", what, nvml_err);
    } else if (nvml_reader = std::make_unique<daemon::NvmlReader>(nvml, co.gpus); !nvml_reader->available()) {
      log::warn("%s: %s", what, nvml_reader->why_not().c_str());
    } else {
      co.swap.gpu_free = [r = nvml_reader.get()](uint32_t gpu, uint64_t* free) { return r->free_bytes(gpu, free); };
    }
  }
  if (co.swap.gpu_free && cfg.verify.enabled) {
    daemon::VerifyOptions& v = co.verify;
    v.interval_ns = static_cast<uint64_t>(cfg.verify.interval_ms) * 1000000ull;
    v.check.memory_slack_bytes = cfg.verify.memory_slack_bytes;
    v.check.gated_sm_util_percent = cfg.verify.gated_sm_util_percent;
    daemon::parse_enforce_mode(cfg.verify.enforce, &v.enforce.mode);  // checked by the config
    v.enforce.grace_rounds = cfg.verify.grace_rounds;
    v.enforcer = &enforcer;
    v.ignored.insert(getpid());
    // MPS servers hold the contexts of their clients; they are no tenant by design.
    v.sample = [r = nvml_reader.get()] {
      daemon::UsageSample s = r->read();
      std::erase_if(s.processes, [](const daemon::ObservedProcess& p) { return daemon::is_mps_server(p.pid); });
      return s;
    };
    log::info("usage check on: NVML every %u ms, enforce \"%s\" after %u rounds", cfg.verify.interval_ms,
              cfg.verify.enforce.c_str(), cfg.verify.grace_rounds);
  }

  daemon::Core core(std::move(co));
  daemon::Server server(core, so);
  std::string err;
  if (!server.start(&err)) {
    log::error("%s", err.c_str());
    return 1;
  }
  mps.start();
  int rc = server.run();
  mps.shutdown(core.live_space_domains());
  return rc;
}
