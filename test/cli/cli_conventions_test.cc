// SPDX-License-Identifier: Apache-2.0
// The command-line conventions of gpuos and gpuosd (issue #25): config check as strict as start-up,
// one exit-code scheme, sizes, help text, `top -n`, the generated completion and man page.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_process.h"

namespace gpuos::clitest {
namespace {

class CliConventions : public ::testing::Test {
 protected:
  std::string dir;
  void SetUp() override {
    char tmpl[] = "/tmp/gpuos-cli-conv-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
  }
  void TearDown() override {
    daemon_.reset();
    std::filesystem::remove_all(dir);
  }
  // The socket of a gpuosd (started at the first call, stopped with the test): `gpuos run --class
  // guaranteed` runs its program only where one answers.
  std::string daemon_socket() {
    const std::string sock = dir + "/gpuosd/gpuosd.sock";
    if (!daemon_) daemon_.emplace(start_gpuosd(sock, write("gpuosd.toml", "")));  // (a temporary guard would stop it)
    EXPECT_GT(daemon_->pid, 0) << "gpuosd did not start";
    return sock;
  }
  std::optional<DaemonGuard> daemon_;
  std::string write(const std::string& name, const std::string& text) {
    std::string p = dir + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  // gpuos run needs an interposer file to exist; any shared library does for these tests.
  std::vector<std::pair<std::string, const char*>> run_env() {
    return {{"GPUOS_PRELOAD", TEST_PRELOAD_LIB}, {"GPUOS_CONFIG", nullptr}, {"GPUOS_SOCKET", nullptr},
            {"LD_PRELOAD", nullptr}, {"GPUOS_TENANT_MEM", nullptr}};
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Item 4: what stops gpuosd is refused by `gpuos config check` with the same words.
TEST_F(CliConventions, ConfigCheckIsAsStrictAsDaemonStartUp) {
  const std::string cfg = write("g.toml", "[daemon]\nadmin_group = \"gpuos-no-such-group\"\n");
  const std::string why = cfg + ": [daemon] admin_group: \"gpuos-no-such-group\": no such group on this host";
  Result check = run({GPUOS_CLI_BIN, "config", "check", cfg});
  EXPECT_EQ(check.code, 1);
  EXPECT_NE(check.err.find(why), std::string::npos) << check.err;
  EXPECT_EQ(check.out.find("ok"), std::string::npos) << check.out;
  Result daemon = run({GPUOSD_BIN, "--config", cfg, "--socket", dir + "/d.sock", "--metrics-listen", ""},
                      {{"GPUOS_DRIVER_LIBRARY", "/nonexistent"}});
  EXPECT_EQ(daemon.code, 1);
  EXPECT_NE(daemon.err.find(why), std::string::npos) << daemon.err;

  // A directory is no config file, for either (gpuosd used to run on the defaults).
  const std::string subdir = dir + "/conf.d";
  ASSERT_EQ(mkdir(subdir.c_str(), 0700), 0);
  Result check_dir = run({GPUOS_CLI_BIN, "config", "check", subdir});
  EXPECT_EQ(check_dir.code, 1);
  EXPECT_NE(check_dir.err.find(subdir + ": is a directory, not a config file"), std::string::npos) << check_dir.err;
  Result daemon_dir = run({GPUOSD_BIN, "--config", subdir, "--socket", dir + "/d.sock", "--metrics-listen", ""},
                          {{"GPUOS_DRIVER_LIBRARY", "/nonexistent"}});
  EXPECT_EQ(daemon_dir.code, 1);
  EXPECT_NE(daemon_dir.err.find("is a directory"), std::string::npos) << daemon_dir.err;

  // A group that exists passes both.
  Result root = run({GPUOS_CLI_BIN, "config", "check", write("r.toml", "[daemon]\nadmin_group = \"root\"\n")});
  EXPECT_EQ(root.code, 0) << root.err;
}

// Item 5: 0 ok, 1 failure, 2 usage error, in both binaries; an unknown command is named.
TEST_F(CliConventions, OneExitCodeSchemeAndUnknownCommandsNamed) {
  Result foo = run({GPUOS_CLI_BIN, "foo"});
  EXPECT_EQ(foo.code, 2);
  EXPECT_NE(foo.err.find("gpuos: unknown command \"foo\" (commands: daemon, run, ps, top, gate, config, demo; "
                         "see gpuos --help)"),
            std::string::npos)
      << foo.err;
  EXPECT_EQ(foo.err.find("A subcommand is required"), std::string::npos) << foo.err;
  Result sub = run({GPUOS_CLI_BIN, "config", "chek", "x.toml"});
  EXPECT_EQ(sub.code, 2);
  EXPECT_NE(sub.err.find("gpuos config: unknown command \"chek\" (commands: check, defaults;"), std::string::npos) << sub.err;
  Result none = run({GPUOS_CLI_BIN});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("a command is required"), std::string::npos) << none.err;

  // CLI11's own errors (104..114 before) are usage errors: 2.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{GPUOS_CLI_BIN, "ps", "--bogus"}, {GPUOS_CLI_BIN, "run", "--weight", "0", "--", "true"},
        {GPUOS_CLI_BIN, "gate", "1"}, {GPUOS_CLI_BIN, "gate", "x", "open"}, {GPUOS_CLI_BIN, "top", "-n", "0"},
        {GPUOS_CLI_BIN, "daemon", "--foreground"}, {GPUOS_CLI_BIN, "daemon", "--log-level", "loud"},
        {GPUOSD_BIN, "--bogus"}, {GPUOSD_BIN, "--foreground"}}) {
    Result r = run(args);
    EXPECT_EQ(r.code, 2) << args[1] << " " << (args.size() > 2 ? args[2] : "") << ": " << r.err;
  }
  for (const char* bin : {GPUOS_CLI_BIN, GPUOSD_BIN}) {
    Result help = run({bin, "--help"});
    EXPECT_EQ(help.code, 0) << help.err;
  }
  // A failure that is no usage error: 1.
  Result ps = run({GPUOS_CLI_BIN, "ps", "--socket", dir + "/nobody.sock"});
  EXPECT_EQ(ps.code, 1) << ps.err;
}

// #43 item 1: an unknown option anywhere before `--` is a usage error (2) in every program, never
// passed on (`gpuos run --clas guaranteed -- job` ran the job best-effort and exited 0), and the
// parser's message names the program and command.
TEST_F(CliConventions, UnknownOptionsAreUsageErrorsNamedByTheProgram) {
  const std::string cfg = write("c.toml", "");
  const std::string marker = dir + "/ran";
  const std::string job = "touch " + marker;
  struct Case {
    std::vector<std::string> args;
    std::string said;
  };
  const std::vector<Case> cases = {
      {{GPUOS_CLI_BIN, "run", "--config", cfg, "--clas", "guaranteed", "--", "sh", "-c", job},
       "gpuos run: unknown option \"--clas\" (see gpuos run --help)"},
      {{GPUOS_CLI_BIN, "run", "--config", cfg, "--clas", "guaranteed", "sh", "-c", job},
       "gpuos run: unknown option \"--clas\""},
      {{GPUOS_CLI_BIN, "run", "--clas=guaranteed", "--config", cfg, "--", "sh", "-c", job},
       "gpuos run: unknown option \"--clas=guaranteed\""},
      {{GPUOS_CLI_BIN, "run", "--config", cfg, "-x", "--", "sh", "-c", job}, "gpuos run: unknown option \"-x\""},
      {{GPUOS_CLI_BIN, "run", "--config", cfg, "sh", "--", "sh", "-c", job}, "gpuos run: \"sh\" before \"--\""},
      {{GPUOS_CLI_BIN, "ps", "--bogus"}, "gpuos ps: "},
      {{GPUOS_CLI_BIN, "config", "check", "--bogus", cfg}, "gpuos config check: "},
      {{GPUOS_CLI_BIN, "daemon", "--policy", "fifo"},
       "gpuos daemon: --policy: \"fifo\" is not a time gate policy (known: open, priority, budget, exclusive)"},
      {{GPUOSD_BIN, "--bogus"}, "gpuosd: "},
      {{GPUOSD_BIN, "--policy", "fifo"}, "gpuosd: --policy: \"fifo\" is not a time gate policy"},
      {{GPUOSD_BIN, "--space-policy", "priority"}, "gpuosd: --space-policy: \"priority\" is not a space policy"},
      {{GPUOSD_BIN, "--memory-policy", "x"}, "gpuosd: --memory-policy: \"x\" is not a memory policy"},
      {{GPUOSD_BIN, "--log-level", "loud"}, "gpuosd: --log-level"},
      // #57 item 5: a relative socket is refused everywhere, and the parser's words are gpuos's own.
      {{GPUOSD_BIN, "--socket", "relative.sock"}, "gpuosd: --socket: \"relative.sock\" is relative: give an absolute path"},
      {{GPUOS_CLI_BIN, "ps", "--socket", "relative.sock"}, "gpuos ps: --socket: \"relative.sock\" is relative"},
      {{GPUOS_CLI_BIN, "run", "--socket", "r.sock", "--", "sh", "-c", job}, "gpuos run: --socket: \"r.sock\" is relative"},
      {{GPUOS_CLI_BIN, "ps", "extra"}, "gpuos ps: does not take \"extra\""},
      {{GPUOS_CLI_BIN, "gate", "abc", "open"}, "gpuos gate: TENANT_ID: \"abc\" is not a valid TENANT_ID"},
      {{GPUOS_NVML_PROBE_BIN, "--bogus", "1"}, "gpuos-nvml-probe: unknown option --bogus"},
      {{GPUOS_NVML_PROBE_BIN, "--rounds", "x"}, "gpuos-nvml-probe: --rounds x: want a whole number"},
#ifdef GPUOS_DRA_BIN
      {{GPUOS_DRA_BIN, "--node-name", "n", "--bogus"}, "gpuos-dra: "},
#endif
  };
  for (const Case& c : cases) {
    Result r = run(c.args, run_env());
    std::string line;
    for (const std::string& a : c.args) line += a + " ";
    EXPECT_EQ(r.code, 2) << line << ": " << r.err;
    EXPECT_NE(r.err.find(c.said), std::string::npos) << line << ": " << r.err;
    EXPECT_EQ(r.err.rfind("gpuos", 0), 0u) << line << ": the message does not start with the program: " << r.err;
    EXPECT_FALSE(std::filesystem::exists(marker)) << line << ": the job ran";
  }
  // A known option and the command still run.
  Result ok = run({GPUOS_CLI_BIN, "run", "--config", cfg, "--socket", daemon_socket(), "--class", "guaranteed", "--",
                   "sh", "-c", job},
                  run_env());
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(std::filesystem::exists(marker));
}

// #42 minor items: values the interposer would ignore later with a warning are refused by the CLI.
TEST_F(CliConventions, RunRefusesValuesThatWouldBeIgnoredLater) {
  const std::string cfg = write("c.toml", "");
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--class", "guaranteed", "--max-slowdown", "NaN"}, "--max-slowdown: \"NaN\" is not a slowdown factor"},
      {{"--class", "guaranteed", "--max-slowdown", "nan"}, "is not a slowdown factor"},
      {{"--class", "guaranteed", "--max-slowdown", "inf"}, "is not a slowdown factor"},
      {{"--class", "guaranteed", "--max-slowdown", "-2"}, "is not a slowdown factor"},
      {{"--class", "guaranteed", "--max-slowdown", "1"}, "is not a slowdown factor"},
      {{"--class", "guaranteed", "--max-slowdown", "100.5"}, "is not a slowdown factor"},
      {{"--class", "guaranteed", "--max-slowdown", "1.2345"}, "is not a slowdown factor"},
      {{"--priority", "2147483648"}, "--priority: \"2147483648\" is not a whole number -1000..1000"},
      {{"--priority", "1001"}, "is not a whole number -1000..1000"},
      {{"--priority", "1.5"}, "is not a whole number -1000..1000"},
      {{"--weight", "1.5"}, "--weight: \"1.5\" is not a whole number 1..10000"},
      // The bounds of common/tenant_numbers.h, as gpuosd's REGISTER and claims check them.
      {{"--weight", "10001"}, "--weight: \"10001\" is not a whole number 1..10000"},
      {{"--class", "guaranteed", "--max-slowdown", "100.001"}, "(a number 1.001..100 with at most 3 decimals"},
      {{"--sms", "4097"}, "Value 4097 not in range 1 to 4096"},
      {{"--mem", "0.3K"}, "--mem \"0.3K\": not a whole number of bytes"},
      {{"--mem", "1G", "--borrow", "0.5"}, "--borrow \"0.5\": a byte count is a whole number"},
      {{"--mem", "1Gi", "--borrow", "18446744072635809792"},
       "--mem 1073741824 + --borrow 18446744072635809792 is more than 2^64 - 1 bytes"},
  };
  for (const auto& [opts, said] : bad) {
    std::vector<std::string> args = {GPUOS_CLI_BIN, "run", "--config", cfg};
    args.insert(args.end(), opts.begin(), opts.end());
    args.insert(args.end(), {"--", "true"});
    Result r = run(args, run_env());
    EXPECT_EQ(r.code, 2) << opts[opts.size() - 1] << ": " << r.err;
    EXPECT_NE(r.err.find(said), std::string::npos) << r.err;
  }
  // The options are parsed once into numbers; the environment carries those numbers' text.
  struct Good {
    std::vector<std::string> opts;
    std::string var, value;
  };
  const std::vector<Good> good = {
      {{"--class", "guaranteed", "--max-slowdown", "1.25"}, "GPUOS_TENANT_MAX_SLOWDOWN", "1.25"},
      {{"--class", "guaranteed", "--max-slowdown", "2.000"}, "GPUOS_TENANT_MAX_SLOWDOWN", "2"},
      {{"--class", "guaranteed", "--max-slowdown", "100"}, "GPUOS_TENANT_MAX_SLOWDOWN", "100"},
      {{"--priority", "-1000"}, "GPUOS_TENANT_PRIORITY", "-1000"},
      {{"--priority", "+7"}, "GPUOS_TENANT_PRIORITY", "7"},
      {{"--weight", "10000"}, "GPUOS_TENANT_WEIGHT", "10000"},
  };
  for (const auto& [opts, var, value] : good) {
    std::vector<std::string> args = {GPUOS_CLI_BIN, "run", "--config", cfg, "--socket", daemon_socket()};
    args.insert(args.end(), opts.begin(), opts.end());
    args.insert(args.end(), {"--", "sh", "-c", "echo $" + var});
    Result r = run(args, run_env());
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, value + "\n") << opts.back();
  }
}

// #43 item 1: a budget under a time policy that keeps none is said at `gpuos run`, not silently
// dropped; under "budget" nothing is said.
TEST_F(CliConventions, RunWarnsOfABudgetNoPolicyKeeps) {
  const std::string open_cfg = write("open.toml", "[scheduler]\npolicy = \"priority\"\n");
  Result r = run({GPUOS_CLI_BIN, "run", "--config", open_cfg, "--socket", daemon_socket(), "--class", "guaranteed",
                  "--max-slowdown", "1.5", "--", "true"},
                 run_env());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("gpuos run: warning: --max-slowdown 1.5: " + open_cfg +
                       " chooses time policy \"priority\", which keeps no latency budget"),
            std::string::npos)
      << r.err;
  const std::string budget_cfg = write("budget.toml", "[scheduler]\npolicy = \"budget\"\n");
  Result b = run({GPUOS_CLI_BIN, "run", "--config", budget_cfg, "--socket", daemon_socket(), "--class", "guaranteed",
                  "--max-slowdown", "1.5", "--", "true"},
                 run_env());
  EXPECT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(b.err.find("warning"), std::string::npos) << b.err;
}

// Item 5: sizes in every common spelling, all binary; zero and garbage refused in words.
TEST_F(CliConventions, RunMemTakesSizesAndRefusesZeroClearly) {
  const std::string cfg = write("c.toml", "");
  const std::pair<const char*, const char*> good[] = {{"8Gi", "8589934592"}, {"8GB", "8589934592"},
                                                      {"8G", "8589934592"},  {"1.5GiB", "1610612736"},
                                                      {"512M", "536870912"}, {"4096", "4096"}};
  for (const auto& [size, bytes] : good) {
    Result r = run({GPUOS_CLI_BIN, "run", "--config", cfg, "--mem", size, "--", "sh", "-c", "echo $GPUOS_TENANT_MEM"},
                   run_env());
    EXPECT_EQ(r.code, 0) << size << ": " << r.err;
    EXPECT_EQ(r.out, std::string(bytes) + "\n") << size;
  }
  Result zero = run({GPUOS_CLI_BIN, "run", "--config", cfg, "--mem", "0", "--", "true"}, run_env());
  EXPECT_EQ(zero.code, 2);
  EXPECT_NE(zero.err.find("gpuos run: --mem \"0\" is zero bytes (leave --mem out for no quota)"), std::string::npos)
      << zero.err;
  Result junk = run({GPUOS_CLI_BIN, "run", "--config", cfg, "--mem", "8 bananas", "--", "true"}, run_env());
  EXPECT_EQ(junk.code, 2);
  EXPECT_NE(junk.err.find("--mem \"8 bananas\": unknown unit \"bananas\""), std::string::npos) << junk.err;
}

// Item 5: help names values by meaning, without CLI11's type and validator noise, and `run` shows
// its command.
TEST_F(CliConventions, HelpShowsNoTypeNoiseAndRunShowsItsCommand) {
  const std::regex noise(R"(\b(TEXT|UINT|INT|FLOAT|NUMBER|BOOLEAN)\b|:\{|in \[)");
  for (const char* cmd : {"daemon", "run", "ps", "top", "gate", "config", "demo"}) {
    Result r = run({GPUOS_CLI_BIN, cmd, "--help"});
    EXPECT_EQ(r.code, 0) << cmd;
    EXPECT_FALSE(std::regex_search(r.out, noise)) << cmd << ":\n" << r.out;
  }
  Result d = run({GPUOSD_BIN, "--help"});
  EXPECT_FALSE(std::regex_search(d.out, noise)) << d.out;
  Result r = run({GPUOS_CLI_BIN, "run", "--help"});
  EXPECT_NE(r.out.find("Usage: gpuos run [OPTIONS] [--] CMD [ARGS...]\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--mem SIZE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--class CLASS"), std::string::npos) << r.out;
  Result daemon = run({GPUOS_CLI_BIN, "daemon", "--help"});
  EXPECT_NE(daemon.out.find("--log-level LEVEL"), std::string::npos) << daemon.out;
  EXPECT_EQ(daemon.out.find("--foreground"), std::string::npos) << daemon.out;
}

// Issue #57: README.md's usage block names every command with every option and value the binary
// has, and nothing else: its `gpuos ...` lines are `gpuos --generate usage`'s (a line's own
// comment goes on the line above it).
TEST_F(CliConventions, TheReadmeUsageIsTheBinarys) {
  Result gen = run({GPUOS_CLI_BIN, "--generate", "usage"});
  ASSERT_EQ(gen.code, 0) << gen.err;
  std::ifstream in(GPUOS_SOURCE_DIR "/README.md");
  std::string readme, line;
  bool usage = false, block = false;
  for (; std::getline(in, line);) {
    if (line == "## Usage") usage = true;
    else if (usage && !block && line == "```sh") block = true;
    else if (block && line == "```") break;
    else if (block && line.rfind("gpuos ", 0) == 0) readme += line + "\n";
  }
  EXPECT_GT(readme.size(), 0u) << "no ```sh block under \"## Usage\" in README.md";
  EXPECT_EQ(readme, gen.out) << "README.md's usage block differs from `build/bin/gpuos --generate usage`: paste "
                                "its lines there";
  for (const char* cmd : {"daemon", "run", "ps", "top", "gate", "config check", "config defaults", "demo"}) {
    const std::string at = "gpuos " + std::string(cmd);
    EXPECT_TRUE(gen.out.find(at + " ") != std::string::npos || gen.out.find(at + "\n") != std::string::npos) << cmd;
  }
  EXPECT_NE(gen.out.find("[--policy open|priority|budget|exclusive]"), std::string::npos) << gen.out;
  EXPECT_NE(gen.out.find("[--max-slowdown X]"), std::string::npos) << gen.out;
}

// Item 5: `gpuos daemon --log-level` reaches gpuosd: at "error" its start-up info line is gone.
TEST_F(CliConventions, DaemonPassesTheLogLevel) {
  const std::string cfg = write("g.toml", "[daemon]\nadmin_group = \"gpuos-no-such-group\"\n");
  const std::vector<std::pair<std::string, const char*>> env = {{"GPUOS_DRIVER_LIBRARY", "/nonexistent"}};
  Result info = run({GPUOS_CLI_BIN, "daemon", "--config", cfg, "--socket", dir + "/d.sock"}, env);
  EXPECT_EQ(info.code, 1);
  EXPECT_NE(info.err.find("config from " + cfg), std::string::npos) << info.err;
  Result quiet = run({GPUOS_CLI_BIN, "daemon", "--log-level", "error", "--config", cfg, "--socket", dir + "/d.sock"}, env);
  EXPECT_EQ(quiet.code, 1);
  EXPECT_EQ(quiet.err.find("config from"), std::string::npos) << quiet.err;
  EXPECT_NE(quiet.err.find("no such group"), std::string::npos) << quiet.err;
}

// Item 5: `top -n N` prints N frames and exits, as procps top; -d is the delay.
TEST_F(CliConventions, TopDashNCountsFrames) {
  const std::string sock = dir + "/gpuosd.sock";
  const std::string cfg = write("d.toml", "[daemon]\nlog_level = \"warn\"\n");
  DaemonGuard daemon{start_daemon({GPUOSD_BIN, "--socket", sock, "--config", cfg, "--metrics-listen", ""}, sock)};
  ASSERT_GT(daemon.pid, 0);
  Result r = run({GPUOS_CLI_BIN, "top", "-n", "3", "-d", "0.1", "--socket", sock});
  EXPECT_EQ(r.code, 0) << r.err;
  std::size_t frames = 0;
  for (std::size_t at = r.out.find("gpuos top - "); at != std::string::npos; at = r.out.find("gpuos top - ", at + 1)) {
    ++frames;
  }
  EXPECT_EQ(frames, 3u) << r.out;
  EXPECT_NE(r.out.find("every 0.1s"), std::string::npos) << r.out;
  Result once = run({GPUOS_CLI_BIN, "top", "--once", "-d", "0.1", "--socket", sock});
  EXPECT_EQ(once.code, 0) << once.err;
  EXPECT_EQ(once.out.find("gpuos top - "), once.out.rfind("gpuos top - ")) << once.out;
}

// Item 5: the installed completion and man page are what the binary generates, and they work.
TEST_F(CliConventions, GeneratedCompletionAndManPage) {
  Result gen = run({GPUOS_CLI_BIN, "--generate", "bash-completion"});
  ASSERT_EQ(gen.code, 0) << gen.err;
  EXPECT_EQ(read_file(GPUOS_COMPLETION_FILE), gen.out) << "the build's completion is stale";
  Result syntax = run({"/bin/bash", "-n", GPUOS_COMPLETION_FILE});
  EXPECT_EQ(syntax.code, 0) << syntax.err;

  // Completes as bash would: COMP_WORDS up to the cursor, then what _gpuos offers.
  auto complete = [&](const std::string& words, int cword) {
    const std::string script = "source '" + std::string(GPUOS_COMPLETION_FILE) + "'; COMP_WORDS=(" + words +
                               "); COMP_CWORD=" + std::to_string(cword) +
                               "; _gpuos; for w in \"${COMPREPLY[@]}\"; do echo \"$w\"; done | sort";
    Result r = run({"/bin/bash", "-c", script});
    EXPECT_EQ(r.code, 0) << r.err;
    return r.out;
  };
  EXPECT_EQ(complete("gpuos t", 1), "top\n");
  EXPECT_EQ(complete("gpuos ''", 1),
            "--help\n--version\n-h\nconfig\ndaemon\ndemo\ngate\nps\nrun\ntop\n");
  EXPECT_EQ(complete("gpuos config c", 2), "check\n");
  EXPECT_EQ(complete("gpuos run --class ''", 3), "best-effort\nguaranteed\n");
  EXPECT_EQ(complete("gpuos run --mem 8G --swa", 4), "--swap\n");
  EXPECT_EQ(complete("gpuos top --i", 2), "--interval\n--iterations\n");
  EXPECT_EQ(complete("gpuos gate 3 ''", 3).find("close\n") != std::string::npos, true);
  EXPECT_EQ(complete("gpuos daemon --log-level w", 3), "warn\n");
  // After `run [OPTIONS] --` the word is a command (compgen -c), not an option of gpuos.
  EXPECT_NE(complete("gpuos run -- bas", 3).find("bash\n"), std::string::npos);
  EXPECT_EQ(complete("gpuos run -- bash --swa", 4), "");

  Result man = run({GPUOS_CLI_BIN, "--generate", "man"});
  ASSERT_EQ(man.code, 0) << man.err;
  EXPECT_EQ(read_file(GPUOS_MAN_FILE), man.out) << "the build's man page is stale";
  for (const char* want : {".TH GPUOS 1", ".SH EXIT STATUS", "gpuos run [OPTIONS] [\\-\\-] CMD [ARGS...]",
                           "\\fB\\-\\-mem\\fR \\fISIZE\\fR", "\\fB\\-n\\fR, \\fB\\-\\-iterations\\fR \\fIN\\fR",
                           "gpuos config check [OPTIONS] FILE", ".SH SIZES"}) {
    EXPECT_NE(man.out.find(want), std::string::npos) << want;
  }
  // groff finds nothing to warn about (when it is installed).
  if (access("/usr/bin/groff", X_OK) == 0) {
    Result g = run({"/usr/bin/groff", "-man", "-ww", "-z", GPUOS_MAN_FILE});
    EXPECT_EQ(g.code, 0) << g.err;
    EXPECT_EQ(g.err, "");
  }
}

// What the demo may leave behind: its simulated device's segments (/dev/shm/gpuos-sim-demo-PID)
// and processes running from its directory (the MPS control daemon's stand-in). Only those of
// demos no longer running count, so a demo someone else runs meanwhile does not.
std::vector<std::string> demo_leftovers() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("gpuos-sim-demo-", 0) != 0) continue;
    const std::string pid = name.substr(std::strlen("gpuos-sim-demo-"));
    if (!std::filesystem::exists("/proc/" + pid)) out.push_back(e.path().string());
  }
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    std::ifstream in(e.path() / "cmdline");
    std::string exe;
    std::getline(in, exe, '\0');
    if (exe.rfind("/tmp/gpuos-demo-", 0) != 0) continue;
    const std::string demo_dir = exe.substr(0, exe.find('/', std::strlen("/tmp/gpuos-demo-")));
    if (!std::filesystem::exists(demo_dir)) out.push_back(e.path().string() + " " + exe);
  }
  return out;
}

// Item 6: the demo shows hp alone (the baseline) against hp shared, and a one-line verdict; issue
// #57: it names the mechanism and the machine's measured load, and shows progress on stderr. No
// assertion on the numbers or on how often progress comes: they depend on the machine's load.
TEST_F(CliConventions, DemoShowsTheBaselineAndAVerdict) {
  const std::vector<std::string> before = demo_leftovers();
  Result r = run({GPUOS_CLI_BIN, "demo", "--seconds", "0.3"},
                 {{"GPUOS_PRELOAD", nullptr}, {"GPUOS_CONFIG", nullptr}, {"GPUOS_SOCKET", nullptr}, {"LD_PRELOAD", nullptr}});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::vector<std::string> rows;
  std::stringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  auto row = [&](const std::string& start) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].rfind(start, 0) == 0) return static_cast<int>(i);
    }
    return -1;
  };
  const int alone = row("hp alone "), shared = row("hp shared "), be = row("be shared "), again = row("hp alone 2 "),
            verdict = row("verdict: ");
  ASSERT_GE(alone, 0) << r.out;
  EXPECT_GT(shared, alone) << r.out;
  EXPECT_GT(be, alone) << r.out;
  EXPECT_GT(again, shared) << r.out;
  EXPECT_EQ(verdict, static_cast<int>(rows.size()) - 1) << r.out;  // one line, last
  const std::string& v = rows[verdict];
  EXPECT_EQ(v.find("verdict: beside be ("), 0u) << r.out;
  EXPECT_NE(v.find("x its latency alone at the median ("), std::string::npos) << r.out;
  EXPECT_NE(v.find("x at p99 ("), std::string::npos) << r.out;
  if (r.out.find("running on the simulated device") != std::string::npos) {
    // The double models SM partitions: the demo shares in space there, and says so.
    EXPECT_NE(v.find("with SM partitions in one spatial domain (hp on 32 SMs of its own, be on the other 100; the "
                     "simulated device runs kernels of disjoint partitions side by side"),
              std::string::npos)
        << v;
  }
  EXPECT_NE(v.find("; machine: other processes kept "), std::string::npos) << v;
  EXPECT_NE(v.find(" load average "), std::string::npos) << v;
  EXPECT_NE(v.find("hp alone measured twice came out "), std::string::npos) << v;
  EXPECT_EQ(v.find("other work"), std::string::npos) << v;  // no guess

  // Progress on stderr: each phase's line, "gpuos demo: [T s] ...", T never going back.
  const std::regex progress(R"(^gpuos demo: \[([0-9]+\.[0-9]) s\] .+)");
  double last = -1;
  int progress_lines = 0;
  std::stringstream err(r.err);
  for (std::string line; std::getline(err, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, progress)) continue;
    ++progress_lines;
    const double t = std::stod(m[1]);
    EXPECT_GE(t, last) << line;
    last = t;
  }
  EXPECT_GE(progress_lines, 5) << r.err;
  for (const char* phase : {"] phase 1/4, hp alone, ", "] phase 2/4, be alone, ", "] phase 3/4, hp beside be, ",
                            "] phase 4/4, hp alone again, "}) {
    EXPECT_NE(r.err.find(phase), std::string::npos) << phase << "\n" << r.err;
  }

  // Nothing left behind: no segment, no process of a finished demo (beyond what was there before).
  for (const std::string& left : demo_leftovers()) {
    EXPECT_NE(std::find(before.begin(), before.end(), left), before.end()) << "left behind: " << left;
  }
}

}  // namespace
}  // namespace gpuos::clitest
