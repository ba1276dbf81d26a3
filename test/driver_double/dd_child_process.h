// SPDX-License-Identifier: Apache-2.0
// A running dd_child (the driver double loaded by path, nothing else) with pipes to its stdin and
// stdout, for the tests that need a second process on the same simulated GPU (the same
// GPUOS_SIM_SHM). Needs GPUOS_DD_CHILD_PATH.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

namespace ddtest {

struct ChildProcess {
  pid_t pid = -1;
  int in = -1;   // write end of the child's stdin
  int out = -1;  // read end of the child's stdout

  // dd_child ARGS..., with this process's environment plus env_extra ("NAME=value").
  explicit ChildProcess(std::vector<std::string> args, std::vector<std::string> env_extra = {}) {
    int pin[2], pout[2];
    if (pipe2(pin, O_CLOEXEC) != 0 || pipe2(pout, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
    posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
    args.insert(args.begin(), GPUOS_DD_CHILD_PATH);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    for (auto& e : env_extra) env_strings.push_back(std::move(e));
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    if (posix_spawn(&pid, GPUOS_DD_CHILD_PATH, &fa, nullptr, argv.data(), envp.data()) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(pin[0]);
    close(pout[1]);
    in = pin[1];
    out = pout[0];
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Reads one line of the child's output ("" at EOF).
  std::string line() {
    std::string s;
    char c;
    while (read(out, &c, 1) == 1 && c != '\n') s += c;
    return s;
  }
  // Everything it writes until it exits.
  std::string rest() {
    std::string s;
    char buf[256];
    ssize_t n;
    while ((n = read(out, buf, sizeof buf)) > 0) s.append(buf, static_cast<std::size_t>(n));
    return s;
  }
  // `serve` mode: runs one kernel of `ms` simulated milliseconds; the child's answer.
  std::string kernel(int ms) {
    const std::string cmd = "k " + std::to_string(ms) + "\n";
    if (write(in, cmd.data(), cmd.size()) != static_cast<ssize_t>(cmd.size())) return "write failed";
    return line();
  }
  // Closes its stdin (which ends a serving child) and waits; its exit code.
  int wait() {
    if (in >= 0) close(in), in = -1;
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~ChildProcess() {
    if (pid > 0) kill(pid, SIGKILL), wait();
    if (in >= 0) close(in);
    if (out >= 0) close(out);
  }
};

}  // namespace ddtest
