// SPDX-License-Identifier: Apache-2.0
// gpuos: the command-line interface (daemon, run, ps, top, gate, config check/defaults, demo).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/docgen.h"
#include "cli/simulate.h"
#include "cli/top.h"
#include "client/client.h"
#include "common/command_line.h"
#include "common/config.h"
#include "common/tenant_numbers.h"
#include "policies/registry.h"

using namespace gpuos;
using namespace gpuos::cli;
using namespace gpuos::client;

namespace {

int cmd_daemon(const std::string& config, const std::string& socket, const std::string& policy,
               const std::optional<std::string>& metrics_listen, const std::string& log_level) {
  std::string gpuosd = exe_dir() + "/gpuosd";
  std::vector<std::string> args = {gpuosd};
  if (!config.empty()) args.insert(args.end(), {"--config", config});
  if (!socket.empty()) args.insert(args.end(), {"--socket", socket});
  if (!policy.empty()) args.insert(args.end(), {"--policy", policy});
  if (metrics_listen) args.insert(args.end(), {"--metrics-listen", *metrics_listen});
  if (!log_level.empty()) args.insert(args.end(), {"--log-level", log_level});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(gpuosd.c_str(), argv.data());
  std::fprintf(stderr, "gpuos daemon: cannot run %s: %s\n", gpuosd.c_str(), std::strerror(errno));
  return errno == ENOENT ? 127 : 126;
}

// --policy: a policy of its slot, else a usage error in the words of the config's check.
// Its description lists the slot's policies as CLI11 lists IsMember's values ("{open,priority}"),
// so that the completion, the man page and `--generate usage` offer them.
CLI::Validator policy_check(policies::SlotKind slot) {
  std::string names = policies::policy_names(slot);
  std::erase(names, ' ');
  return CLI::Validator([slot](std::string& name) { return policies::not_a_policy(slot, name); }, "{" + names + "}");
}

// "-1000..1000": a tenant number's range (tenant_numbers.h, the one gpuosd and the claims check).
std::string range_text(const NumberRange& r) { return std::to_string(r.lo) + ".." + std::to_string(r.hi); }

// A whole number in its range, parsed as the interposer parses the variable it becomes
// (tenant_numbers.h), so that what passes here is what gpuosd gets; *out set when given.
template <typename T>
CLI::Option* whole_number_option(CLI::App* app, const std::string& flag, const NumberRange& r, std::optional<T>* out,
                                 const std::string& help) {
  return app
      ->add_option_function<std::string>(
          flag,
          [r, out](const std::string& text) {
            int64_t v = 0;
            char why[GPUOS_TEXT_MAX];
            if (parse_number(text, r, &v, why, sizeof(why))) *out = static_cast<T>(v);
          },
          help)
      ->check(CLI::Validator(
          [r](std::string& text) -> std::string {
            int64_t v = 0;
            char why[GPUOS_TEXT_MAX];
            if (parse_number(text, r, &v, why, sizeof(why))) return "";
            return "\"" + text + "\" is not a whole number " + range_text(r);
          },
          "N"));
}

// --max-slowdown: the interposer's own parser (tenant_numbers.h), into per mille: 1.001..100, at most
// 3 decimals; NaN, inf and signs are refused here, not ignored later.
CLI::Option* slowdown_option(CLI::App* app, uint32_t* permille, const std::string& help) {
  return app
      ->add_option_function<std::string>(
          "--max-slowdown", [permille](const std::string& text) { parse_slowdown_permille(text, permille); }, help)
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            uint32_t permille = 0;
            if (parse_slowdown_permille(text, &permille)) return "";
            return "\"" + text + "\" is not a slowdown factor (a number " + slowdown_text(kMinSlowdownPermille) +
                   ".." + slowdown_text(kMaxSlowdownPermille) + " with at most 3 decimals, e.g. 1.25)";
          },
          "X"));
}

bool load_cfg(const std::string& path, const char* cmd, Config* out) {
  ConfigResult r = load_config(path);
  if (!r) {
    std::fprintf(stderr, "gpuos %s: %s\n", cmd, r.error.c_str());
    return false;
  }
  *out = *r.config;
  return true;
}

// The socket a command talks to; "" after saying why there is none (XDG_RUNTIME_DIR unset).
std::string socket_for(const char* cmd, const std::string& socket_opt, const Config& cfg) {
  std::string why;
  std::string s = resolve_socket(socket_opt, cfg, &why);
  if (s.empty()) std::fprintf(stderr, "gpuos %s: %s\n", cmd, why.c_str());
  return s;
}

int cmd_ps(bool all, bool json, const std::string& socket_opt, const std::string& config) {
  Config cfg;
  if (!load_cfg(config, "ps", &cfg)) return 1;
  std::string socket = socket_for("ps", socket_opt, cfg);
  if (socket.empty()) return 1;
  Listing l;
  std::string err;
  if (!list_tenants(socket, all, &l, &err)) {
    std::fprintf(stderr, "gpuos ps: %s\n", err.c_str());
    return 1;
  }
  // Names are the tenants' bytes: JSON escapes control characters exactly; bytes that are not UTF-8
  // become U+FFFD instead of making dump() throw.
  if (json) std::printf("%s\n", listing_json(l).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  else std::fputs(listing_table(l).c_str(), stdout);
  return 0;
}

int cmd_top(TopOptions o, const std::string& socket_opt, const std::string& config) {
  Config cfg;
  if (!load_cfg(config, "top", &cfg)) return 1;
  o.socket = socket_for("top", socket_opt, cfg);
  if (o.socket.empty()) return 1;
  return top_command(o);
}

int cmd_gate(uint32_t id, const std::string& state, const std::string& socket_opt, const std::string& config) {
  Config cfg;
  if (!load_cfg(config, "gate", &cfg)) return 1;
  std::string socket = socket_for("gate", socket_opt, cfg);
  if (socket.empty()) return 1;
  std::string err;
  if (!set_gate(socket, id, state == "open" ? GPUOS_GATE_OPEN : GPUOS_GATE_CLOSED, &err)) {
    std::fprintf(stderr, "gpuos gate: %s\n", err.c_str());
    return 1;
  }
  std::printf("tenant %u: gate %s\n", id, state.c_str());
  return 0;
}

int cmd_config_check(const std::string& file) {
  ConfigResult r = load_config_file(file);
  std::string why;
  // gpuosd's own start-up check (host names, the policies and their sections), not a weaker copy.
  HostConfig host;
  policies::PolicySet unused;
  if (r && !policies::check_startup_config(*r.config, &host, &unused, &why)) r.error = why;
  if (!r || !why.empty()) {
    std::fprintf(stderr, "%s\n", r.error.c_str());
    return 1;
  }
  // The effective config: the policies' sections as each policy reads them, defaults filled in.
  Config shown = *r.config;
  shown.policy_sections.clear();
  std::printf("ok\n%s%s", format_config(shown).c_str(), policies::format_policy_settings(*r.config).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // `gpuos run [options] -- CMD ARGS...`: everything after the first "--" is the command, untouched.
  std::vector<std::string> command;
  int parse_argc = argc;
  if (argc > 1 && std::strcmp(argv[1], "run") == 0) {
    for (int i = 2; i < argc; ++i) {
      if (std::strcmp(argv[i], "--") == 0) {
        for (int j = i + 1; j < argc; ++j) command.emplace_back(argv[j]);
        parse_argc = i;
        break;
      }
    }
  }

  CLI::App app{"gpuos: GPU multitasking for unchanged programs", "gpuos"};
  // Before the subcommands (they copy it): help names values by what they mean (--mem SIZE).
  app.formatter(std::make_shared<Formatter>(Formatter::ValueNames{
      {"config", "FILE"}, {"socket", "PATH"}, {"policy", "POLICY"}, {"metrics-listen", "HOST:PORT"},
      {"log-level", "LEVEL"}, {"name", "NAME"}, {"class", "CLASS"}, {"priority", "N"}, {"weight", "N"},
      {"mem", "SIZE"}, {"borrow", "SIZE"}, {"interval", "SECONDS"}, {"seconds", "SECONDS"}}));
  app.set_version_flag("--version", std::string("gpuos ") + GPUOS_VERSION);
  app.require_subcommand(0, 1);  // one command; none only with --generate (checked below)
  // Hidden (empty group): what the build runs to write the shell completion and the man page.
  std::string generate;
  app.add_option("--generate", generate, "write bash-completion, man or usage (README.md's lines) to stdout")
      ->check(CLI::IsMember({"bash-completion", "man", "usage"}))
      ->group("");

  std::string config, socket;
  // gpuosd never forks into the background: `gpuos daemon` runs it in the foreground (a service
  // manager such as systemd puts it in the background), so there is no --foreground.
  auto* daemon = app.add_subcommand("daemon", "run the gpuos node daemon (gpuosd) in the foreground");
  daemon->add_option("--config", config, "config file");
  daemon->add_option("--socket", socket, "control socket path")->check(absolute_path());
  std::string policy;
  daemon->add_option("--policy", policy,
                     "time-gate policy: " + policies::policy_names(policies::SlotKind::kTimeGate) +
                         " (overrides [scheduler] policy)")
      ->check(policy_check(policies::SlotKind::kTimeGate));
  std::optional<std::string> metrics_listen;
  daemon->add_option("--metrics-listen", metrics_listen,
                     "Prometheus endpoint HOST:PORT, \"\" to disable (overrides [metrics] listen)");
  std::string daemon_log_level;
  daemon->add_option("--log-level", daemon_log_level, "error | warn | info | debug (overrides [daemon] log_level)")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}));
  unsigned simulate_gpus = 0;
  daemon->add_option("--simulate", simulate_gpus,
                     "no GPU needed: run on N simulated GPUs (default 1; the driver test double, built next to "
                     "gpuos); start tenants with `gpuos run --simulate`")
      ->expected(0, 1)
      ->default_str("1")
      ->check(CLI::Range(1, 16))
      ->type_name("N");

  RunOptions ro;
  auto* run = app.add_subcommand("run", "run a command as a gpuos tenant: gpuos run [options] -- CMD [ARGS...]");
  run->add_option("--name", ro.name, "tenant name (default: the command's basename)");
  run->add_option("--class", ro.tenant_class, "guaranteed | best-effort (default: config default_class)")
      ->check(CLI::IsMember({"guaranteed", "best-effort"}));
  whole_number_option(run, "--priority", kPriorityRange, &ro.priority,
                      "priority " + range_text(kPriorityRange) + " (guaranteed tenants; larger = more important)");
  whole_number_option(run, "--weight", kWeightRange, &ro.weight,
                      "fair-share weight " + range_text(kWeightRange) + " (best-effort tenants)");
  run->add_option("--mem", ro.mem,
                  "device-memory quota, e.g. 512MiB, 8G, 1.5GiB or bytes; units are binary (8G = 8GB = 8GiB = "
                  "8*2^30 bytes) (default: unlimited)");
  run->add_option("--borrow", ro.borrow,
                  "device memory it may hold beyond --mem while the GPU has room, e.g. 8GiB; "
                  "borrowers are swapped out first when others need room");
  run->add_flag("--swap", ro.swap,
                "swappable memory: gpuosd may move this tenant's memory to host while others need the GPU "
                "(needs [memory] swap_pool in gpuosd's config)");
  run->add_option("--space", ro.space,
                  "spatial sharing: run as a client of trust domain DOMAIN's MPS server (a [[spatial.domain]] "
                  "of the config; sets CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY, GPUOS_SPACE_DOMAIN). "
                  "Tenants of one domain share the GPU in space and its fate: a GPU fault in one ends all")
      ->type_name("DOMAIN");
  run->add_option("--sms", ro.sms,
                  "with --space, a guaranteed tenant's SM partition: this many SMs (rounded up to whole groups "
                  "of 8); default: all but the best-effort tenants' reserve")
      ->check(CLI::Range(static_cast<uint32_t>(kSmsRange.lo), static_cast<uint32_t>(kSmsRange.hi)))
      ->type_name("N");
  slowdown_option(run, &ro.max_slowdown_permille,
                  "latency budget of a guaranteed tenant: its kernels and graph replays may take up to this "
                  "many times as long as alone (p99 over gpuosd's window), e.g. 1.25; best-effort tenants get "
                  "the rest of the GPU (time policy \"budget\"). Default: [tenants] max_slowdown")
      ->type_name("X");
  run->add_flag("--simulate", ro.simulate,
                "run on the simulated device of `gpuos daemon --simulate N` (the driver test double)");
  run->add_option("--socket", ro.socket, "control socket path")->check(absolute_path());
  run->add_option("--config", ro.config, "config file");
  run->prefix_command();  // without "--": the first positional starts the command

  bool all = false, json = false;
  auto* ps = app.add_subcommand("ps", "list GPUs and tenants");
  ps->add_flag("--all,-a", all, "include exited tenants");
  ps->add_flag("--json", json, "machine-readable output");
  ps->add_option("--socket", socket, "control socket path")->check(absolute_path());
  ps->add_option("--config", config, "config file");

  TopOptions topt;
  auto* top = app.add_subcommand("top", "live view of GPUs and tenants (q or Ctrl-C quits)");
  // As procps top: -d is the delay between frames, -n the number of frames.
  top->add_option("--interval,-d", topt.interval, "seconds between refreshes (default 1)")
      ->check(CLI::Range(0.1, 3600.0));
  top->add_option("-n,--iterations", topt.iterations,
                  "print N frames as plain text (each with rates over one interval), then exit")
      ->check(CLI::Range(1u, 1000000u))
      ->type_name("N");
  top->add_flag("--once", topt.once, "print one frame (rates over one interval) and exit: -n 1");
  top->add_option("--socket", socket, "control socket path")->check(absolute_path());
  top->add_option("--config", config, "config file");

  uint32_t tenant_id = 0;
  std::string gate_state;
  auto* gate = app.add_subcommand("gate", "open or close a tenant's gate (admin)");
  gate->add_option("TENANT_ID", tenant_id, "tenant id")->required();
  gate->add_option("STATE", gate_state, "open | close")->required()->check(CLI::IsMember({"open", "close"}));
  gate->add_option("--socket", socket, "control socket path")->check(absolute_path());
  gate->add_option("--config", config, "config file");

  std::string check_file;
  auto* cfgcmd = app.add_subcommand("config", "configuration tools");
  cfgcmd->require_subcommand(1);
  auto* check = cfgcmd->add_subcommand("check", "validate a config file and print the effective config");
  check->add_option("FILE", check_file, "config file")->required();
  auto* defaults = cfgcmd->add_subcommand(
      "defaults", "print every table and key with its built-in default and what it does, commented out: a config "
                  "file to start from (packaging/gpuos.toml is this)");

  DemoOptions dopt;
  auto* demo = app.add_subcommand("demo", "run a latency-critical and a best-effort tenant under a private gpuosd");
  demo->add_option("--seconds", dopt.seconds, "about how long each of its four phases runs (default 2)")->check(CLI::Range(0.1, 3600.0));
  demo->add_flag("--json", dopt.json, "machine-readable output");
  demo->add_option("--policy", dopt.policy, "gpuosd scheduling policy (default: priority)")
      ->check(CLI::IsMember({"open", "priority"}));
  demo->add_flag("--keep", dopt.keep, "keep the temporary directory with the logs");
  demo->add_option("--sharing", dopt.sharing,
                   "how the tenants share the GPU: space (SM partitions: MPS on a GPU, modelled by the simulated "
                   "device), time (the gate), auto (default: space on a GPU with MPS and on the simulated device, else "
                   "time)")
      ->check(CLI::IsMember({"auto", "space", "time"}));

  if (int rc = parse_command_line(app, parse_argc, argv, "gpuos"); rc >= 0) return rc;

  if (generate == "bash-completion") return std::fputs(bash_completion(app).c_str(), stdout) >= 0 ? 0 : 1;
  if (generate == "man") return std::fputs(man_page(app, GPUOS_VERSION).c_str(), stdout) >= 0 ? 0 : 1;
  if (generate == "usage") return std::fputs(usage_lines(app).c_str(), stdout) >= 0 ? 0 : 1;
  if (*daemon && simulate_gpus != 0 && !use_simulated_device("daemon", simulate_gpus)) return 2;
  if (*daemon) return cmd_daemon(config, socket, policy, metrics_listen, daemon_log_level);
  if (*run) {
    // CLI11 passes what it does not know on as the command (a prefix command): an option there is a
    // typo (--clas), never the command, which a "--" or a word without a dash starts.
    const std::vector<std::string> rest = run->remaining();
    if (!rest.empty() && (parse_argc < argc || rest.front().starts_with("-"))) {
      return usage_error("gpuos run", rest.front().starts_with("-")
                                          ? "unknown option \"" + rest.front() + "\""
                                          : "\"" + rest.front() + "\" before \"--\": the command goes after it");
    }
    if (command.empty()) command = rest;
    return run_command(ro, command);
  }
  if (*ps) return cmd_ps(all, json, socket, config);
  if (*top) return cmd_top(topt, socket, config);
  if (*gate) return cmd_gate(tenant_id, gate_state, socket, config);
  if (*check) return cmd_config_check(check_file);
  if (*defaults) return std::fputs(policies::format_default_config().c_str(), stdout) >= 0 ? 0 : 1;
  if (*demo) return demo_command(dopt);
  std::fprintf(stderr, "gpuos: a command is required (commands: daemon, run, ps, top, gate, config, demo; see "
               "gpuos --help)\n");
  return kExitUsage;
}
