// SPDX-License-Identifier: Apache-2.0
// `gpuos run`: sets the tenant environment (docs/CONTRACTS.md) and execs the command.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cli/commands.h"
#include "cli/simulate.h"
#include "client/client.h"
#include "common/command_line.h"
#include "common/config.h"
#include "common/tenant_numbers.h"
#include "policies/budget/budget.h"

namespace gpuos::cli {
using namespace ::gpuos::client;  // the gpuosd client library (src/client)
namespace {

// --space DOMAIN without a gpuosd to ask (`no_daemon` says why): the domain's MPS directories from
// our own config, under the mps_dir of the daemon this run would talk to. False after saying why
// on stderr.
bool space_from_config(const std::string& space, const Config& cfg, const std::string& socket,
                       const std::string& no_daemon, std::string* mps_pipe, std::string* mps_log) {
  if (cfg.spatial.find(space) == nullptr) {
    std::string known;
    for (const auto& d : cfg.spatial.domains) known += (known.empty() ? "" : ", ") + d.name;
    std::string src = cfg.source.empty() ? std::string("the built-in defaults") : cfg.source;
    if (known.empty()) {
      std::fprintf(stderr,
                   "gpuos run: --space %s: no such trust domain: %s defines no [[spatial.domain]] (spatial "
                   "sharing is off), and gpuosd could not be asked (%s)\n",
                   space.c_str(), src.c_str(), no_daemon.c_str());
    } else {
      std::fprintf(stderr, "gpuos run: --space %s: no such trust domain in %s (known: %s), and gpuosd could not be "
                   "asked (%s)\n", space.c_str(), src.c_str(), known.c_str(), no_daemon.c_str());
    }
    return false;
  }
  std::string dir = effective_mps_dir(cfg, socket);
  *mps_pipe = mps_pipe_dir(dir, space);
  *mps_log = mps_log_dir(dir, space);
  // gpuosd keeps <mps_dir>/<domain>/status: say so when the program would not share in space.
  std::string status;
  if (FILE* f = std::fopen(mps_status_file(dir, space).c_str(), "re")) {
    char line[512];
    if (std::fgets(line, sizeof(line), f) != nullptr) status = line;
    std::fclose(f);
    while (!status.empty() && (status.back() == '\n' || status.back() == '\r')) status.pop_back();
  }
  if (status.empty()) {
    std::fprintf(stderr,
                 "gpuos run: warning: trust domain %s has no MPS control daemon (no status in %s: is gpuosd "
                 "running with this config?); the program runs time-shared\n",
                 space.c_str(), dir.c_str());
  } else if (status != "available") {
    std::fprintf(stderr, "gpuos run: warning: trust domain %s: %s; the program runs time-shared\n", space.c_str(),
                 status.c_str());
  }
  return true;
}

}  // namespace

int run_command(const RunOptions& o, const std::vector<std::string>& cmd) {
  if (cmd.empty()) {
    std::fprintf(stderr, "gpuos run: no command given (usage: gpuos run [options] -- CMD [ARGS...])\n");
    return 2;
  }
  ConfigResult cr = load_config(o.config);
  if (!cr) {
    std::fprintf(stderr, "gpuos run: %s\n", cr.error.c_str());
    return 2;
  }
  const Config& cfg = *cr.config;

  // The interposer: $GPUOS_PRELOAD, else <exe dir>/../lib/libgpuos.so.
  std::string preload;
  if (const char* p = std::getenv("GPUOS_PRELOAD"); p != nullptr && p[0] != '\0') {
    preload = p;
  } else {
    preload = exe_dir() + "/../lib/libgpuos.so";
  }
  char abs[PATH_MAX];
  struct stat st;
  if (realpath(preload.c_str(), abs) == nullptr || ::stat(abs, &st) != 0 || !S_ISREG(st.st_mode)) {
    std::fprintf(stderr,
                 "gpuos run: the interposer library %s is missing (%s); build it, or point $GPUOS_PRELOAD "
                 "at libgpuos.so\n",
                 preload.c_str(), std::strerror(errno));
    return 2;
  }
  std::string ld = abs;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && old[0] != '\0') ld += std::string(":") + old;
  // The simulated GPUs are the daemon's (`gpuos daemon --simulate N`): the double's shared segment
  // keeps the count of the first process, so the tenant sets none of its own.
  if (o.simulate && !use_simulated_device("run", 0)) return 2;

  std::string why;
  bool answered = true;
  std::string socket = resolve_socket(o.socket, cfg, &why, &answered);
  if (socket.empty()) {
    std::fprintf(stderr, "gpuos run: %s\n", why.empty() ? "cannot determine the control socket path" : why.c_str());
    return 2;
  }

  // --space DOMAIN: the domain's MPS directories under the mps_dir of the daemon this run talks to.
  std::string mps_pipe, mps_log;
  if (o.sms != 0 && o.space.empty()) {
    std::fprintf(stderr, "gpuos run: --sms needs --space DOMAIN (SM partitions exist only in spatial sharing)\n");
    return 2;
  }
  if (!o.space.empty()) {
    // gpuosd owns the config: it says whether the domain exists, whether this user may join it, where
    // its MPS directories are and whether its MPS control daemon is up. Only a daemon that cannot be
    // asked (none running, or one that predates the question) leaves the answer to our config.
    if (o.space.size() >= GPUOS_DOMAIN_MAX) {
      std::fprintf(stderr, "gpuos run: --space %s: a trust domain's name has at most %u bytes\n", o.space.c_str(),
                   GPUOS_DOMAIN_MAX - 1);
      return 2;
    }
    SpaceDomainInfo info;
    std::string asked;
    const SpaceQuery q = query_space_domain(socket, o.space, &info, &asked);
    if (q == SpaceQuery::kFailed) {
      std::fprintf(stderr, "gpuos run: --space %s: asking gpuosd on %s: %s\n", o.space.c_str(), socket.c_str(),
                   asked.c_str());
      return 2;
    }
    if (q == SpaceQuery::kAnswered) {
      if (info.status == GPUOS_ERR_NOT_FOUND || info.status == GPUOS_ERR_INTERNAL) {
        std::fprintf(stderr, "gpuos run: --space %s: %s\n", o.space.c_str(), info.text.c_str());
        return 2;
      }
      mps_pipe = info.pipe_dir;
      mps_log = info.log_dir;
      if (info.status == GPUOS_ERR_PERMISSION) {
        std::fprintf(stderr, "gpuos run: warning: trust domain %s: %s; the program runs time-shared\n",
                     o.space.c_str(), info.text.c_str());
      } else if (!info.available) {
        std::fprintf(stderr, "gpuos run: warning: trust domain %s: unavailable%s%s; the program runs time-shared\n",
                     o.space.c_str(), info.text.empty() ? "" : ": ", info.text.c_str());
      }
    } else if (!space_from_config(o.space, cfg, socket, asked, &mps_pipe, &mps_log)) {
      return 2;
    }
  }

  std::string name = o.name;
  if (name.empty()) {
    std::size_t slash = cmd[0].find_last_of('/');
    name = slash == std::string::npos ? cmd[0] : cmd[0].substr(slash + 1);
  }
  if (name.size() >= GPUOS_NAME_MAX) name.resize(GPUOS_NAME_MAX - 1);

  std::string klass = o.tenant_class.empty() ? class_name(cfg.default_class) : o.tenant_class;
  if (o.max_slowdown_permille != 0 && klass != "guaranteed") {
    std::fprintf(stderr, "gpuos run: --max-slowdown is a guaranteed tenant's budget (--class guaranteed); a %s "
                 "tenant is guaranteed nothing\n", klass.c_str());
    return 2;
  }
  // The tenant's numbers: those an outer `gpuos run` passed down (read as the interposer reads
  // them; the class is this run's own), then this run's options. They leave as the environment
  // the interposer reads (tenant_numbers.h), and are checked here as gpuosd checks them.
  unsetenv("GPUOS_TENANT_CLASS");
  TenantNumbers n;
  read_tenant_env(&n, [](const char* var, const char* value, const char* want) {
    std::fprintf(stderr, "gpuos run: warning: ignoring the inherited %s=%s (want %s)\n", var, value, want);
  });
  n.tenant_class = klass == "guaranteed" ? GPUOS_CLASS_GUARANTEED : GPUOS_CLASS_BEST_EFFORT;
  if (o.priority) n.priority = *o.priority;
  if (o.weight) n.weight = *o.weight;
  if (o.sms != 0) n.space_sms = o.sms;
  if (o.max_slowdown_permille != 0) n.max_slowdown_permille = o.max_slowdown_permille;
  // --mem / --borrow as byte counts; unset: inherited from the environment.
  auto size_option = [](const std::string& text, const char* flag, const char* if_left_out, uint64_t* out) {
    if (text.empty()) return true;
    std::string why;
    if (!gpuos::parse_size(text, out, &why)) {
      // Zero bytes is no grant at all: leaving the option out says what the user most likely meant.
      if (why.ends_with("is zero bytes")) why += std::string(" (leave ") + flag + " out " + if_left_out + ")";
      std::fprintf(stderr, "gpuos run: %s %s\n", flag, why.c_str());
      return false;
    }
    return true;
  };
  if (!size_option(o.mem, "--mem", "for no quota", &n.mem_bytes)) return 2;
  if (!size_option(o.borrow, "--borrow", "to borrow nothing", &n.borrow_bytes)) return 2;
  if (!o.borrow.empty() && n.mem_bytes == 0) {
    std::fprintf(stderr, "gpuos run: --borrow needs --mem (borrowed memory is on top of a quota)\n");
    return 2;
  }
  // Quota and borrow are summed into one limit (gpuosd and the interposer saturate it): a sum past
  // 2^64 - 1 is no limit anyone meant.
  if (uint64_t sum = 0; __builtin_add_overflow(n.mem_bytes, n.borrow_bytes, &sum)) {
    std::fprintf(stderr, "gpuos run: --mem %llu + --borrow %llu is more than 2^64 - 1 bytes\n",
                 static_cast<unsigned long long>(n.mem_bytes), static_cast<unsigned long long>(n.borrow_bytes));
    return 2;
  }
  if (std::string no = tenant_numbers_refusal(n); !no.empty()) {  // (the options were checked already)
    std::fprintf(stderr, "gpuos run: %s\n", no.c_str());
    return 2;
  }

  // A guaranteed class is gpuosd's to give: asked for in so many words, the program runs governed
  // or not at all (the interposer fails CUDA if its registration fails later, GPUOS_ON_NO_DAEMON).
  const bool must_register = o.tenant_class == "guaranteed";
  if (std::string no_daemon; must_register && !daemon_answers(socket, &no_daemon)) {
    std::fprintf(stderr, "gpuos run: --class guaranteed: %s; not running %s ungoverned\n", no_daemon.c_str(),
                 cmd[0].c_str());
    return kExitFailure;
  }

  setenv("LD_PRELOAD", ld.c_str(), 1);
  // A default socket where no daemon answers yet is not pinned: the interposer looks again (the
  // user's own socket, then the system one) at the program's first CUDA call.
  if (answered) setenv("GPUOS_SOCKET", socket.c_str(), 1);
  setenv("GPUOS_TENANT_NAME", name.c_str(), 1);
  for (const auto& [var, text] : tenant_env(n)) {
    if (text.empty()) unsetenv(var.c_str());
    else setenv(var.c_str(), text.c_str(), 1);
  }
  setenv("GPUOS_ON_NO_DAEMON", must_register ? "refuse" : cfg.on_no_daemon.c_str(), 1);
  if (o.swap) setenv("GPUOS_SWAP", "1", 1);
  if (o.max_slowdown_permille != 0) {
    const std::string budget_text = slowdown_text(o.max_slowdown_permille);
    // Only the time policy "budget" (and, in spatial sharing, the space policy "partition") keeps a
    // budget; under another the tenant is guaranteed by priority alone. The client knows gpuosd's
    // policy only from the config (gpuosd --policy may override it), so it warns rather than refuses.
    const bool budgeted = cfg.policies.time_gate == "budget" || (!o.space.empty() && cfg.policies.space == "partition");
    if (!budgeted) {
      std::fprintf(stderr,
                   "gpuos run: warning: --max-slowdown %s: %s chooses time policy \"%s\"%s, which keeps no latency "
                   "budget (time policy \"budget\" does); the tenant runs by its class and priority alone unless "
                   "gpuosd runs with --policy budget\n",
                   budget_text.c_str(), cfg.source.empty() ? "the built-in config" : cfg.source.c_str(),
                   cfg.policies.time_gate.c_str(),
                   o.space.empty() ? "" : (" and space policy \"" + cfg.policies.space + "\"").c_str());
    }
    // In a spatial domain MPS costs the tenant's kernels before anything is lent (8-10.6% of a
    // graph-replayed decode step on the H200, PLATFORM.md), a part of the budget the meter cannot
    // see: a budget within it lends nothing.
    if (budgeted && !o.space.empty()) {
      policies::budget::BudgetParams bp;
      std::string unused;
      if (const ConfigSection* sec = cfg.section("budget"); sec != nullptr) {
        policies::budget::parse_budget_params(*sec, &bp, &unused);
      }
      // Its own kernels are not timed yet: a typical decode step's cost, unless the config fixes one
      // (gpuosd measures the tenant's, and warns in its log when that alone takes the budget).
      const double cost = bp.mps_cost_fixed.value_or(policies::budget::kMpsCostUntimed);
      if (o.max_slowdown_permille / 1000.0 <= 1.0 + cost) {
        std::fprintf(stderr,
                     "gpuos run: warning: --max-slowdown %s --space %s: MPS alone costs a tenant's kernels about "
                     "%.0f%% (%s), as much as the budget allows: nothing will be lent beside it; time-shared "
                     "(without --space) the whole budget is the meter's\n",
                     budget_text.c_str(), o.space.c_str(), cost * 100,
                     bp.mps_cost_fixed ? "[policy.budget] mps_cost_pct" : "a graph-replayed decode step's");
      }
    }
  }
  if (!o.space.empty()) {
    setenv("CUDA_MPS_PIPE_DIRECTORY", mps_pipe.c_str(), 1);
    setenv("CUDA_MPS_LOG_DIRECTORY", mps_log.c_str(), 1);
    setenv("GPUOS_SPACE_DOMAIN", o.space.c_str(), 1);
    // A best-effort client runs below normal at MPS's own scheduler (driver 580+): on the H200 this
    // took an LLM server's p99 under MPS from 25x to 5.3x of exclusive at the same BE throughput
    // (PLATFORM.md). The user's own setting wins.
    if (klass == "best-effort") setenv("CUDA_MPS_CLIENT_PRIORITY", "1", 0);
  }

  std::vector<char*> argv;
  for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  int e = errno;
  // Like a shell: 127 for not found, 126 for found but not executable.
  if (e == ENOENT) {
    std::fprintf(stderr, "gpuos run: %s: command not found\n", cmd[0].c_str());
    return 127;
  }
  std::fprintf(stderr, "gpuos run: %s: %s\n", cmd[0].c_str(), std::strerror(e));
  return 126;
}

}  // namespace gpuos::cli
