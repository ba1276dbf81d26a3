// SPDX-License-Identifier: Apache-2.0
// The gpuos CLI as a user runs it: real processes, exit codes and output.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli_process.h"
#include "common/ipc.h"

namespace {

using gpuos::clitest::DaemonGuard;
using gpuos::clitest::Result;
using gpuos::clitest::run;
using gpuos::clitest::start_gpuosd;

class Cli : public ::testing::Test {
 protected:
  std::string dir;
  void SetUp() override {
    char tmpl[] = "/tmp/gpuos-cli-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) {
    std::string p = dir + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  // Environment that makes the tests independent of the caller's.
  std::vector<std::pair<std::string, const char*>> base_env() {
    return {{"GPUOS_PRELOAD", TEST_PRELOAD_LIB}, {"GPUOS_CONFIG", nullptr}, {"GPUOS_SOCKET", nullptr},
            {"LD_PRELOAD", nullptr},           {"GPUOS_TENANT_PRIORITY", nullptr},
            {"GPUOS_TENANT_WEIGHT", nullptr}};
  }
};

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

TEST_F(Cli, RunSetsTheTenantEnvironmentAndPassesTheExitCode) {
  std::string cfg = write("c.toml", "[tenants]\non_no_daemon = \"refuse\"\ndefault_class = \"guaranteed\"\n");
  Result r = run({GPUOS_CLI_BIN, "run", "--config", cfg, "--socket", "/tmp/x/gpuosd.sock", "--priority", "3",
                  "--weight", "7", "--", "sh", "-c", "env; exit 7"},
                 base_env());
  EXPECT_EQ(r.code, 7) << r.err;
  char abs[PATH_MAX];
  ASSERT_NE(realpath(TEST_PRELOAD_LIB, abs), nullptr);
  EXPECT_TRUE(has_line(r.out, std::string("LD_PRELOAD=") + abs)) << r.out;
  EXPECT_TRUE(has_line(r.out, "GPUOS_SOCKET=/tmp/x/gpuosd.sock")) << r.out;
  EXPECT_TRUE(has_line(r.out, "GPUOS_TENANT_NAME=sh")) << r.out;
  EXPECT_TRUE(has_line(r.out, "GPUOS_TENANT_CLASS=guaranteed")) << r.out;  // config default_class
  EXPECT_TRUE(has_line(r.out, "GPUOS_TENANT_PRIORITY=3")) << r.out;
  EXPECT_TRUE(has_line(r.out, "GPUOS_TENANT_WEIGHT=7")) << r.out;
  EXPECT_TRUE(has_line(r.out, "GPUOS_ON_NO_DAEMON=refuse")) << r.out;
}

TEST_F(Cli, RunPrependsToAnExistingPreloadAndTakesOptions) {
  auto env = base_env();
  env.push_back({"LD_PRELOAD", TEST_PRELOAD_LIB});
  std::string cfg = write("c.toml", "");
  Result r = run({GPUOS_CLI_BIN, "run", "--config", cfg, "--name", "hp", "--class", "best-effort", "--", "env"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  char abs[PATH_MAX];
  ASSERT_NE(realpath(TEST_PRELOAD_LIB, abs), nullptr);
  EXPECT_TRUE(has_line(r.out, std::string("LD_PRELOAD=") + abs + ":" + TEST_PRELOAD_LIB)) << r.out;
  EXPECT_TRUE(has_line(r.out, "GPUOS_TENANT_NAME=hp")) << r.out;
  EXPECT_TRUE(has_line(r.out, "GPUOS_TENANT_CLASS=best-effort")) << r.out;
  EXPECT_TRUE(has_line(r.out, "GPUOS_TENANT_PRIORITY=0")) << r.out;
  EXPECT_TRUE(has_line(r.out, "GPUOS_TENANT_WEIGHT=100")) << r.out;
  EXPECT_TRUE(has_line(r.out, "GPUOS_ON_NO_DAEMON=passthrough")) << r.out;

  Result bad = run({GPUOS_CLI_BIN, "run", "--weight", "0", "--", "true"}, base_env());
  EXPECT_NE(bad.code, 0);
  Result badclass = run({GPUOS_CLI_BIN, "run", "--class", "vip", "--", "true"}, base_env());
  EXPECT_NE(badclass.code, 0);
}

// Issue #62 item 4: `gpuos run --class guaranteed` where no gpuosd answers ran the program
// ungoverned. It is not run at all; the class from the config's default_class is no such request
// (RunSetsTheTenantEnvironmentAndPassesTheExitCode), and where a gpuosd answers the program runs with
// GPUOS_ON_NO_DAEMON=refuse, so that a registration refused later fails CUDA.
TEST_F(Cli, RunClassGuaranteedRunsGovernedOrNotAtAll) {
  std::string cfg = write("c.toml", "");
  auto run_guaranteed = [&](const std::string& sock) {
    return run({GPUOS_CLI_BIN, "run", "--config", cfg, "--socket", sock, "--class", "guaranteed", "--", "sh", "-c",
                "echo $GPUOS_ON_NO_DAEMON; exit 7"},
               base_env());
  };
  Result none = run_guaranteed(dir + "/none/gpuosd.sock");
  EXPECT_EQ(none.code, 1) << none.err;
  EXPECT_EQ(none.out, "");
  EXPECT_NE(none.err.find("gpuos run: --class guaranteed: socket directory " + dir + "/none:"), std::string::npos)
      << none.err;
  EXPECT_NE(none.err.find("; not running sh ungoverned"), std::string::npos) << none.err;
  const std::string sock = dir + "/gpuosd/gpuosd.sock";
  DaemonGuard d{start_gpuosd(sock, cfg)};
  ASSERT_GT(d.pid, 0);
  Result ran = run_guaranteed(sock);
  EXPECT_EQ(ran.code, 7) << ran.err;
  EXPECT_EQ(ran.out, "refuse\n");
}

TEST_F(Cli, BothBinariesTellTheirVersion) {
  for (const char* bin : {GPUOS_CLI_BIN, GPUOSD_BIN}) {
    Result r = run({bin, "--version"});
    EXPECT_EQ(r.code, 0) << bin << ": " << r.err;
    const std::string name = std::string(bin).substr(std::string(bin).find_last_of('/') + 1);
    EXPECT_EQ(r.out.rfind(name + " ", 0), 0u) << r.out;
    EXPECT_NE(r.out.find(GPUOS_VERSION), std::string::npos) << r.out;
  }
}

TEST_F(Cli, RunMissingCommandIs127) {
  std::string cfg = write("c.toml", "");
  Result r = run({GPUOS_CLI_BIN, "run", "--config", cfg, "--", "/nonexistent"}, base_env());
  EXPECT_EQ(r.code, 127);
  EXPECT_NE(r.err.find("/nonexistent: command not found"), std::string::npos) << r.err;
}

TEST_F(Cli, RunRefusesAMissingInterposer) {
  auto env = base_env();
  std::string missing = dir + "/libgpuos.so";
  env[0].second = missing.c_str();
  std::string cfg = write("c.toml", "");
  Result r = run({GPUOS_CLI_BIN, "run", "--config", cfg, "--", "true"}, env);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("libgpuos.so is missing"), std::string::npos) << r.err;
}

TEST_F(Cli, ConfigCheck) {
  Result good = run({GPUOS_CLI_BIN, "config", "check", write("g.toml", "[daemon]\nhistory = 9\n")});
  EXPECT_EQ(good.code, 0) << good.err;
  EXPECT_EQ(good.out.rfind("ok\n", 0), 0u) << good.out;
  EXPECT_NE(good.out.find("history = 9"), std::string::npos) << good.out;
  EXPECT_NE(good.out.find("max_tenants = 256"), std::string::npos) << good.out;

  Result bad = run({GPUOS_CLI_BIN, "config", "check", write("b.toml", "[daemon]\n\nmax_tenants = \"x\"\n")});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("b.toml:3: [daemon] max_tenants: expected an integer"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.out.find("ok"), std::string::npos);

  Result missing = run({GPUOS_CLI_BIN, "config", "check", dir + "/none.toml"});
  EXPECT_EQ(missing.code, 1);
}

TEST_F(Cli, ConfigCheckShowsTheSpatialSection) {
  Result r = run({GPUOS_CLI_BIN, "config", "check",
                  write("s.toml", "[[spatial.domain]]\nname = \"dom\"\nusers = [\"alice\", 7]\ngpus = [1]\n")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("[spatial]\nmps_control = \"nvidia-cuda-mps-control\"\nmps_dir = \"\"\npolicy = \"partition\"\n"
                       "[[spatial.domain]]\nname = \"dom\"\nusers = [\"alice\", \"7\"]\ngpus = [1]\n"),
            std::string::npos)
      << r.out;
  // The space policy's settings, as it reads them (defaults filled in).
  EXPECT_NE(r.out.find("[policy.partition]\nlend_after_ms = 20\nlend_max_kernel_ms = 10\nbe_reserve_groups = 2\n"
                       "right_size_slack_pct = 4\nright_size_below_grid = false\nmps_kernel_cost_ns = 370\n"),
            std::string::npos)
      << r.out;
  // A policy's bad setting is refused like any other bad key, by file, line, table and key.
  Result badp = run({GPUOS_CLI_BIN, "config", "check", write("p.toml", "[spatial]\nbe_reserve_groups = 0\n")});
  EXPECT_EQ(badp.code, 1);
  EXPECT_NE(badp.err.find("p.toml:2: [spatial] be_reserve_groups: value 0 out of range 1..63"), std::string::npos)
      << badp.err;
  Result bad = run({GPUOS_CLI_BIN, "config", "check",
                    write("d.toml", "[[spatial.domain]]\nname = \"x\"\n[[spatial.domain]]\nname = \"x\"\n")});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("d.toml:4: [spatial.domain] name: \"x\" names two domains"), std::string::npos) << bad.err;
}

TEST_F(Cli, RunSpaceNeedsAKnownDomain) {
  std::string cfg = write("c.toml", "[[spatial.domain]]\nname = \"dom\"\n[[spatial.domain]]\nname = \"other\"\n");
  Result r = run({GPUOS_CLI_BIN, "run", "--config", cfg, "--space", "nosuch", "--", "true"}, base_env());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("gpuos run: --space nosuch: no such trust domain in " + cfg + " (known: dom, other)"),
            std::string::npos)
      << r.err;
  Result none = run({GPUOS_CLI_BIN, "run", "--config", write("e.toml", ""), "--space", "dom", "--", "true"},
                    base_env());
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("defines no [[spatial.domain]] (spatial sharing is off)"), std::string::npos) << none.err;

  Result help = run({GPUOS_CLI_BIN, "run", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--space DOMAIN"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("CUDA_MPS_PIPE_DIRECTORY"), std::string::npos) << help.out;
}

// #43 item 5: the tests are hermetic. Without --config and GPUOS_CONFIG the CLI reads the system
// config, and as root it asks the system gpuosd: a host's /etc/gpuos and /run/gpuos made
// RunSpaceNeedsAKnownDomain and RunSpaceSetsTheMpsEnvironment fail. Both are reached through
// $GPUOS_SYSTEM_CONFIG and $GPUOS_SYSTEM_SOCKET, which every process a test starts gets pointed at
// paths that do not exist (cli_process.h): shown here with a stand-in for /etc/gpuos/gpuos.toml.
TEST_F(Cli, TestsReadNoSystemConfigOrDaemon) {
  const std::string etc = write("etc-gpuos.toml", "[[spatial.domain]]\nname = \"hostdom\"\n");
  const std::vector<std::string> cmd = {GPUOS_CLI_BIN, "run", "--space", "hostdom", "--", "true"};
  Result hermetic = run(cmd, base_env());
  EXPECT_EQ(hermetic.code, 2) << hermetic.err;
  EXPECT_NE(hermetic.err.find("the built-in defaults defines no [[spatial.domain]]"), std::string::npos)
      << hermetic.err;
  auto env = base_env();
  env.push_back({"GPUOS_SYSTEM_CONFIG", etc.c_str()});
  Result host = run(cmd, env);
  EXPECT_EQ(host.code, 0) << host.err;  // the stand-in was read: the override is the one way in
  Result ps = run({GPUOS_CLI_BIN, "ps"}, base_env());
  EXPECT_EQ(ps.code, 1);
  EXPECT_NE(ps.err.find("socket directory /nonexistent/gpuos-test:"), std::string::npos) << ps.err;
}

// Issue #40 item 4: a budget that MPS's own cost already spends lends nothing in a spatial domain:
// said at `gpuos run` time.
TEST_F(Cli, RunWarnsWhenMpsAloneSpendsTheBudget) {
  std::string cfg = write("c.toml", "[scheduler]\npolicy = \"budget\"\n[policy.budget]\nmps_cost_pct = 10\n"
                                    "[spatial]\nmps_dir = \"" + dir + "/mps\"\n[[spatial.domain]]\nname = \"dom\"\n");
  // gpuosd answers `--space dom` from the same config (its MPS is unavailable here: said, not fatal).
  const std::string sock = dir + "/gpuosd/gpuosd.sock";
  DaemonGuard d{start_gpuosd(sock, cfg)};
  ASSERT_GT(d.pid, 0);
  auto cmd = [&](const char* budget, bool space) {
    std::vector<std::string> c = {GPUOS_CLI_BIN, "run", "--config", cfg, "--socket", sock, "--class", "guaranteed",
                                  "--max-slowdown", budget};
    if (space) c.insert(c.end(), {"--space", "dom"});
    c.insert(c.end(), {"--", "true"});
    return c;
  };
  Result tight = run(cmd("1.1", true), base_env());
  EXPECT_EQ(tight.code, 0) << tight.err;
  EXPECT_NE(tight.err.find("gpuos run: warning: --max-slowdown 1.1 --space dom: MPS alone costs a tenant's kernels "
                           "about 10%"),
            std::string::npos)
      << tight.err;
  Result roomy = run(cmd("1.25", true), base_env());
  EXPECT_EQ(roomy.err.find("MPS alone"), std::string::npos) << roomy.err;
  Result timeshared = run(cmd("1.1", false), base_env());
  EXPECT_EQ(timeshared.err.find("MPS alone"), std::string::npos) << timeshared.err;
}

TEST_F(Cli, RunSpaceSetsTheMpsEnvironment) {
  std::string cfg = write("c.toml", "[spatial]\nmps_dir = \"" + dir + "/mps\"\n[[spatial.domain]]\nname = \"dom\"\n");
  std::vector<std::string> cmd = {GPUOS_CLI_BIN, "run", "--config", cfg, "--space", "dom", "--", "env"};
  Result r = run(cmd, base_env());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, "CUDA_MPS_PIPE_DIRECTORY=" + dir + "/mps/dom/pipe")) << r.out;
  EXPECT_TRUE(has_line(r.out, "CUDA_MPS_LOG_DIRECTORY=" + dir + "/mps/dom/log")) << r.out;
  EXPECT_TRUE(has_line(r.out, "GPUOS_SPACE_DOMAIN=dom")) << r.out;
  EXPECT_TRUE(has_line(r.out, "GPUOS_TENANT_NAME=env")) << r.out;
  // No gpuosd has set the domain up: said, but the program runs (time-shared).
  EXPECT_NE(r.err.find("warning: trust domain dom has no MPS control daemon"), std::string::npos) << r.err;

  std::filesystem::create_directories(dir + "/mps/dom");
  write("mps/dom/status", "unavailable: mps_control \"x\" not found in PATH\n");
  Result down = run(cmd, base_env());
  EXPECT_EQ(down.code, 0) << down.err;
  EXPECT_NE(down.err.find("warning: trust domain dom: unavailable: mps_control \"x\" not found in PATH; the program "
                          "runs time-shared"),
            std::string::npos)
      << down.err;
  write("mps/dom/status", "available\n");
  Result up = run(cmd, base_env());
  EXPECT_EQ(up.code, 0) << up.err;
  EXPECT_EQ(up.err, "");

  // Without mps_dir: next to the control socket this run talks to.
  std::string cfg2 = write("c2.toml", "[[spatial.domain]]\nname = \"dom\"\n");
  Result derived = run({GPUOS_CLI_BIN, "run", "--config", cfg2, "--socket", "/tmp/x/gpuosd.sock", "--space", "dom",
                        "--", "env"},
                       base_env());
  ASSERT_EQ(derived.code, 0) << derived.err;
  EXPECT_TRUE(has_line(derived.out, "CUDA_MPS_PIPE_DIRECTORY=/tmp/x/mps/dom/pipe")) << derived.out;
  // Without --space nothing MPS-related is set.
  Result plain = run({GPUOS_CLI_BIN, "run", "--config", cfg, "--", "env"}, base_env());
  EXPECT_EQ(plain.out.find("GPUOS_SPACE_DOMAIN="), std::string::npos) << plain.out;
}

// gpuosd with a [[spatial.domain]] starts its control daemon (a fake one here), reports it in
// <mps_dir>/<domain>/status, and tells it to quit on SIGTERM.
TEST_F(Cli, DaemonSupervisesTheDomainsControlDaemon) {
  std::string fake = write("fake-mps-control", R"SH(#!/bin/sh
p="$CUDA_MPS_PIPE_DIRECTORY"
alive() { [ -f "$p/pid" ] && kill -0 "$(cat "$p/pid")" 2>/dev/null && ! grep -q ') Z' "/proc/$(cat "$p/pid")/stat"; }
if [ "$1" = "-d" ]; then
  sleep 100000 </dev/null >/dev/null 2>&1 &
  echo $! > "$p/pid"
  : > "$p/control"
  exit 0
fi
read -r cmd
case "$cmd" in
  get_server_list) alive ;;
  quit) kill "$(cat "$p/pid")"; echo quit > "$p/quit"; exit 0 ;;
esac
)SH");
  chmod(fake.c_str(), 0755);
  std::string sock = dir + "/gpuosd.sock";
  std::string cfg = write("d.toml", "[daemon]\nlog_level = \"warn\"\n[metrics]\nlisten = \"\"\n[spatial]\nmps_control = \"" +
                                        fake + "\"\n[[spatial.domain]]\nname = \"dom\"\n");
  pid_t d = fork();
  if (d == 0) {
    setenv("GPUOS_DRIVER_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    execl(GPUOSD_BIN, GPUOSD_BIN, "--socket", sock.c_str(), "--config", cfg.c_str(), nullptr);
    _exit(99);
  }
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string status = dir + "/mps/dom/status";  // mps_dir = <socket dir>/mps
  bool up = false;
  for (int i = 0; i < 1000 && !up; ++i) {
    up = slurp(status) == "available\n";
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(up) << slurp(status);
  pid_t sleeper = static_cast<pid_t>(std::atol(slurp(dir + "/mps/dom/pipe/pid").c_str()));
  EXPECT_GT(sleeper, 0);

  Result r = run({GPUOS_CLI_BIN, "run", "--config", cfg, "--socket", sock, "--space", "dom", "--", "env"}, base_env());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(has_line(r.out, "CUDA_MPS_PIPE_DIRECTORY=" + dir + "/mps/dom/pipe")) << r.out;

  kill(d, SIGTERM);
  int st = 0;
  ASSERT_EQ(waitpid(d, &st, 0), d);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_EQ(slurp(dir + "/mps/dom/pipe/quit"), "quit\n");
  EXPECT_EQ(slurp(status), "stopped\n");
  // `quit` signalled it; its exit is asynchronous (and slow on a loaded machine): give it 5 s.
  std::string stat;
  for (int i = 0; i < 500 && sleeper > 0 && kill(sleeper, 0) == 0; ++i) {
    stat = slurp("/proc/" + std::to_string(sleeper) + "/stat");
    if (stat.find(") Z") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (sleeper > 0 && kill(sleeper, 0) == 0) {
    EXPECT_NE(stat.find(") Z"), std::string::npos) << "the control daemon outlived gpuosd";
    kill(sleeper, SIGKILL);
  }
}

TEST_F(Cli, PsWithoutDaemonFailsClearly) {
  Result r = run({GPUOS_CLI_BIN, "ps", "--socket", dir + "/nobody.sock"}, base_env());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no gpuosd answering on " + dir + "/nobody.sock"), std::string::npos) << r.err;
}

TEST_F(Cli, PsJsonGateAndSigtermAgainstALiveDaemon) {
  std::string sock = dir + "/gpuosd.sock";
  std::string cfg = write("d.toml", "[daemon]\nlog_level = \"warn\"\n");
  pid_t d = fork();
  if (d == 0) {
    setenv("GPUOS_DRIVER_LIBRARY", "/nonexistent/libcuda.so.1", 1);  // zero GPUs, deterministic
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    execl(GPUOSD_BIN, GPUOSD_BIN, "--socket", sock.c_str(), "--config", cfg.c_str(), nullptr);
    _exit(99);
  }
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    int fd = gpuos::connect_control_socket(sock.c_str());
    if (fd >= 0) {
      close(fd);
      up = true;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ASSERT_TRUE(up);

  // A second daemon on the same socket refuses to start.
  Result second = run({GPUOSD_BIN, "--socket", sock, "--config", cfg}, {{"GPUOS_DRIVER_LIBRARY", "/nonexistent"}});
  EXPECT_EQ(second.code, 1);
  EXPECT_NE(second.err.find("already serving"), std::string::npos) << second.err;

  Result ps = run({GPUOS_CLI_BIN, "ps", "--all", "--json", "--socket", sock}, base_env());
  ASSERT_EQ(ps.code, 0) << ps.err;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(ps.out)) << ps.out;
  ASSERT_TRUE(j.contains("gpus") && j["gpus"].is_array());
  ASSERT_TRUE(j.contains("tenants") && j["tenants"].is_array());
  EXPECT_EQ(j["gpus"].size(), 0u);
  EXPECT_EQ(j["tenants"].size(), 0u);

  Result table = run({GPUOS_CLI_BIN, "ps", "--socket", sock}, base_env());
  EXPECT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("ID    PID      NAME"), std::string::npos) << table.out;

  Result gate = run({GPUOS_CLI_BIN, "gate", "99", "close", "--socket", sock}, base_env());
  EXPECT_EQ(gate.code, 1);
  EXPECT_NE(gate.err.find("not found"), std::string::npos) << gate.err;

  kill(d, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(d, &status, 0), d);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  struct stat st;
  EXPECT_NE(::stat(sock.c_str(), &st), 0) << "socket not removed";
}

// --- Issue #22: other local users are untrusted ---

// Another user's gpuosd must not be believed: the CLI refuses a socket directory that user owns,
// and a daemon that runs as that user even when its socket sits in a directory of ours.
TEST_F(Cli, PsAndGateRefuseADaemonOfAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a daemon as another user";
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);  // the other user must reach its directory below
  std::string theirs = dir + "/theirs";
  ASSERT_EQ(mkdir(theirs.c_str(), 0700), 0);
  ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
  std::string cfg = write("d.toml", "[daemon]\nlog_level = \"warn\"\n");
  chmod(cfg.c_str(), 0644);
  std::string sock = theirs + "/gpuosd.sock";
  DaemonGuard d{start_gpuosd(sock, cfg, 65534)};
  ASSERT_GT(d.pid, 0) << "the other user's gpuosd did not come up";

  Result ps = run({GPUOS_CLI_BIN, "ps", "--socket", sock}, base_env());
  EXPECT_EQ(ps.code, 1);
  EXPECT_NE(ps.err.find("socket directory " + theirs + " is owned by uid 65534, not by root or uid 0"),
            std::string::npos)
      << ps.err;

  // Its socket moved into a directory of ours that passes the directory check: the daemon's uid
  // (SO_PEERCRED) still gives it away.
  std::string ours = dir + "/ours";
  ASSERT_EQ(mkdir(ours.c_str(), 0755), 0);
  ASSERT_EQ(rename(sock.c_str(), (ours + "/gpuosd.sock").c_str()), 0);
  ps = run({GPUOS_CLI_BIN, "ps", "--json", "--socket", ours + "/gpuosd.sock"}, base_env());
  EXPECT_EQ(ps.code, 1);
  EXPECT_EQ(ps.out, "");
  EXPECT_NE(ps.err.find("refusing the gpuosd at " + ours + "/gpuosd.sock: it runs as uid 65534"), std::string::npos)
      << ps.err;
  Result gate = run({GPUOS_CLI_BIN, "gate", "1", "close", "--socket", ours + "/gpuosd.sock"}, base_env());
  EXPECT_EQ(gate.code, 1);
  EXPECT_NE(gate.err.find("it runs as uid 65534"), std::string::npos) << gate.err;
}

// #43 item 2: a user other than root reaches the system gpuosd (root's) by default: its own socket
// first ($XDG_RUNTIME_DIR/gpuos/gpuosd.sock), then the system one. $GPUOS_SYSTEM_SOCKET stands in for
// /run/gpuos/gpuosd.sock, so the test talks only to daemons it started. `gpuos run` pins the socket
// that answered in GPUOS_SOCKET, and none when nothing answers (the interposer looks again).
TEST_F(Cli, AUserFindsTheSystemDaemonAfterItsOwn) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the CLI as another user";
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  const std::string cfg = write("d.toml", "[daemon]\nlog_level = \"warn\"\n");
  chmod(cfg.c_str(), 0644);
  const std::string sys_dir = dir + "/system", xdg = dir + "/xdg";
  ASSERT_EQ(mkdir(sys_dir.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(xdg.c_str(), 0700), 0);
  ASSERT_EQ(chown(xdg.c_str(), 65534, 65534), 0);
  const std::string sys_sock = sys_dir + "/gpuosd.sock", own_sock = xdg + "/gpuos/gpuosd.sock";
  auto env = base_env();
  env.insert(env.end(), {{"GPUOS_SYSTEM_SOCKET", sys_sock.c_str()}, {"XDG_RUNTIME_DIR", xdg.c_str()},
                         {"GPUOS_CONFIG", cfg.c_str()}});
  const std::vector<std::string> show = {GPUOS_CLI_BIN, "run", "--", "sh", "-c", "echo \"[$GPUOS_SOCKET]\""};

  // No daemon anywhere: nothing pinned; ps names the user's own socket (its directory is missing).
  Result none = run(show, env, 65534);
  EXPECT_EQ(none.code, 0) << none.err;
  EXPECT_EQ(none.out, "[]\n");
  Result ps = run({GPUOS_CLI_BIN, "ps"}, env, 65534);
  EXPECT_EQ(ps.code, 1);
  EXPECT_NE(ps.err.find(xdg + "/gpuos"), std::string::npos) << ps.err;

  // The system gpuosd (root's): found after the user's own socket, which does not exist.
  DaemonGuard sys{start_gpuosd(sys_sock, cfg)};
  ASSERT_GT(sys.pid, 0);
  Result r = run(show, env, 65534);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[" + sys_sock + "]\n");
  ps = run({GPUOS_CLI_BIN, "ps"}, env, 65534);
  EXPECT_EQ(ps.code, 0) << ps.err;

  // The user's own gpuosd comes first.
  ASSERT_EQ(mkdir((xdg + "/gpuos").c_str(), 0700), 0);
  ASSERT_EQ(chown((xdg + "/gpuos").c_str(), 65534, 65534), 0);
  DaemonGuard own{start_gpuosd(own_sock, cfg, 65534)};
  ASSERT_GT(own.pid, 0);
  r = run(show, env, 65534);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[" + own_sock + "]\n");

  // GPUOS_SOCKET given: no fallback from it.
  const std::string nowhere = dir + "/nowhere.sock";
  auto pinned = env;
  pinned.push_back({"GPUOS_SOCKET", nowhere.c_str()});
  ps = run({GPUOS_CLI_BIN, "ps"}, pinned, 65534);
  EXPECT_EQ(ps.code, 1);
  EXPECT_EQ(ps.err.find(sys_sock), std::string::npos) << ps.err;
}

// Without GPUOS_SOCKET and XDG_RUNTIME_DIR a non-root user has no default socket (no /tmp fallback
// that another user could create first): the CLI says what to set.
TEST_F(Cli, NoTmpFallbackWithoutXdgRuntimeDir) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the CLI as another user";
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  std::string cfg = write("empty.toml", "");  // not /etc/gpuos/gpuos.toml, which may name a socket
  chmod(cfg.c_str(), 0644);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    dup2(fds[1], 1);
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(98);
    unsetenv("XDG_RUNTIME_DIR");
    unsetenv("GPUOS_SOCKET");
    unsetenv("GPUOS_CONFIG");
    setenv("GPUOS_SYSTEM_SOCKET", (dir + "/no-system/gpuosd.sock").c_str(), 1);  // not /run/gpuos's
    execl(GPUOS_CLI_BIN, GPUOS_CLI_BIN, "ps", "--config", cfg.c_str(), nullptr);
    _exit(99);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << st << " " << out;
  EXPECT_NE(out.find("XDG_RUNTIME_DIR is not set; set XDG_RUNTIME_DIR"), std::string::npos) << out;
  EXPECT_NE(out.find("GPUOS_SOCKET"), std::string::npos) << out;
  EXPECT_EQ(out.find("/tmp/gpuos-65534"), std::string::npos) << out;
}

// Registers this process as a tenant named `name` over a connection kept open; returns it.
int register_self(const std::string& sock, const std::string& name) {
  int s = gpuos::connect_control_socket(sock.c_str());
  EXPECT_GE(s, 0);
  gpuos_msg_register m{};
  gpuos::init_header(&m.hdr, GPUOS_MSG_REGISTER, sizeof(m), 1);
  m.pid = getpid();
  m.tenant_class = GPUOS_CLASS_BEST_EFFORT;
  m.weight = 100;
  std::memcpy(m.name, name.data(), std::min(name.size(), sizeof(m.name) - 1));
  EXPECT_EQ(gpuos::send_message(s, &m, sizeof(m)), 0);
  alignas(8) unsigned char buf[GPUOS_MSG_MAX_SIZE + 1];
  int fd = -1;
  long n = gpuos::receive_message(s, buf, sizeof(buf), &fd, 10000);
  EXPECT_EQ(n, static_cast<long>(sizeof(gpuos_msg_register_reply)));
  gpuos_msg_register_reply r{};
  std::memcpy(&r, buf, sizeof(r));
  EXPECT_EQ(r.status, GPUOS_OK) << r.text;
  if (fd >= 0) close(fd);
  return s;
}

// A tenant chooses its name; `gpuos ps` and `gpuos top` must not pass its escape sequences to the
// terminal (retitle, clear the screen, hide rows), while --json keeps the exact name.
TEST_F(Cli, PsAndTopEscapeTenantNames) {
  std::string sock = dir + "/gpuosd.sock";
  DaemonGuard d{start_gpuosd(sock, write("d.toml", "[daemon]\nlog_level = \"warn\"\n"))};
  ASSERT_GT(d.pid, 0);
  const std::string evil = "ev\x1b]0;owned\x07il\x1b[2J\r\x9b" "1m\xe2\x80\xae" "x";  // OSC, CSI, CR, C1, RLO
  int s = register_self(sock, evil);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{s};
  const std::string shown = "ev\\x1b]0;owned\\x07il\\x1b[2J\\x0d\\x9b1m\\u202ex";

  Result ps = run({GPUOS_CLI_BIN, "ps", "--socket", sock}, base_env());
  ASSERT_EQ(ps.code, 0) << ps.err;
  EXPECT_EQ(ps.out.find('\x1b'), std::string::npos) << ps.out;
  EXPECT_EQ(ps.out.find('\r'), std::string::npos) << ps.out;
  EXPECT_EQ(ps.out.find('\x07'), std::string::npos) << ps.out;
  EXPECT_NE(ps.out.find(shown), std::string::npos) << ps.out;

  Result top = run({GPUOS_CLI_BIN, "top", "--once", "--interval", "0.1", "--socket", sock}, base_env());
  ASSERT_EQ(top.code, 0) << top.err;
  EXPECT_EQ(top.out.find('\x1b'), std::string::npos) << top.out;
  EXPECT_EQ(top.out.find('\x07'), std::string::npos) << top.out;
  EXPECT_NE(top.out.find(shown.substr(0, 11) + "~"), std::string::npos) << top.out;  // the column's width

  Result js = run({GPUOS_CLI_BIN, "ps", "--json", "--socket", sock}, base_env());
  ASSERT_EQ(js.code, 0) << js.err;
  EXPECT_EQ(js.out.find('\x1b'), std::string::npos);
  // The JSON name is exact, except bytes that are not UTF-8 (the lone 0x9b) become U+FFFD.
  std::string expect = evil;
  expect.replace(expect.find('\x9b'), 1, "\xef\xbf\xbd");
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(js.out)) << js.out;
  ASSERT_EQ(j["tenants"].size(), 1u);
  EXPECT_EQ(j["tenants"][0]["name"].get<std::string>(), expect);
}

// `--simulate`: the driver test double beside the binary (bin/../lib/driver_double) for gpuosd and
// its tenants, so gpuos runs by hand without a GPU (README "Try it without a GPU").
TEST_F(Cli, SimulateSelectsTheDriverDoubleBesideTheBinary) {
  const std::string bin = GPUOS_CLI_BIN;
  char dd[PATH_MAX];
  ASSERT_NE(realpath((bin.substr(0, bin.find_last_of('/')) + "/../lib/driver_double").c_str(), dd), nullptr);
  auto env = base_env();
  env.push_back({"LD_LIBRARY_PATH", "/opt/mine"});
  env.push_back({"GPUOS_SIM_DEVICES", nullptr});
  Result r = run({GPUOS_CLI_BIN, "run", "--simulate", "--config", write("c.toml", ""), "--", "env"}, env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, std::string("LD_LIBRARY_PATH=") + dd + ":/opt/mine")) << r.out;
  EXPECT_TRUE(has_line(r.out, std::string("GPUOS_DRIVER_LIBRARY=") + dd + "/libcuda.so.1")) << r.out;
  EXPECT_EQ(r.out.find("GPUOS_SIM_DEVICES="), std::string::npos) << r.out;  // the daemon's count holds

  // gpuos daemon --simulate 2: gpuosd finds two simulated GPUs (through the double's libcuda).
  std::string sock = dir + "/gpuosd.sock";
  std::string cfg = write("d.toml", "[daemon]\nlog_level = \"warn\"\n[metrics]\nlisten = \"\"\n");
  const std::string shm = "/gpuos-cli-sim-" + std::to_string(getpid());
  pid_t d = fork();
  if (d == 0) {
    setenv("GPUOS_SIM_SHM", shm.c_str(), 1);
    unsetenv("GPUOS_SIM_DEVICES");
    unsetenv("GPUOS_DRIVER_LIBRARY");
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl(GPUOS_CLI_BIN, GPUOS_CLI_BIN, "daemon", "--simulate", "2", "--socket", sock.c_str(), "--config",
          cfg.c_str(), nullptr);
    _exit(99);
  }
  DaemonGuard guard{d};
  Result ps;
  for (int i = 0; i < 1000; ++i) {  // up to 10 s: gpuosd loads the double and counts its GPUs first
    ps = run({GPUOS_CLI_BIN, "ps", "--json", "--socket", sock}, base_env());
    if (ps.code == 0 || waitpid(d, nullptr, WNOHANG) == d) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(ps.code, 0) << ps.err;
  nlohmann::json j = nlohmann::json::parse(ps.out);
  EXPECT_EQ(j["gpus"].size(), 2u) << ps.out;
  kill(d, SIGTERM);
  waitpid(d, nullptr, 0);
  guard.pid = 0;
  shm_unlink(shm.c_str());
}

}  // namespace
