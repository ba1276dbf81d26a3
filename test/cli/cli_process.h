// SPDX-License-Identifier: Apache-2.0
// Running the real gpuos and gpuosd binaries from a test: one process with its output captured, and
// a private gpuosd (zero GPUs, no metrics) stopped when the test ends.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/ipc.h"

namespace gpuos::clitest {

struct Result {
  int code = -1;
  std::string out, err;
};

// No test reads the host's /etc/gpuos/gpuos.toml or talks to its /run/gpuos gpuosd: every process a
// test starts sees paths that do not exist in their place (a test's own env may name others).
inline void hermetic_env() {
  setenv("GPUOS_SYSTEM_CONFIG", "/nonexistent/gpuos-test/gpuos.toml", 1);
  setenv("GPUOS_SYSTEM_SOCKET", "/nonexistent/gpuos-test/gpuosd.sock", 1);
}

// Runs argv with extra environment (value nullptr = unset), capturing stdout and stderr; as uid
// when non-zero.
inline Result run(const std::vector<std::string>& args,
                  const std::vector<std::pair<std::string, const char*>>& env = {}, uid_t uid = 0) {
  char out_tmpl[] = "/tmp/gpuos-cli-out-XXXXXX";
  char err_tmpl[] = "/tmp/gpuos-cli-err-XXXXXX";
  int out_fd = mkstemp(out_tmpl);
  int err_fd = mkstemp(err_tmpl);
  pid_t pid = fork();
  if (pid == 0) {
    hermetic_env();
    for (const auto& [k, v] : env) {
      if (v) setenv(k.c_str(), v, 1);
      else unsetenv(k.c_str());
    }
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    if (uid != 0 && (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0)) _exit(98);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(99);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto slurp = [](const char* p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  r.out = slurp(out_tmpl);
  r.err = slurp(err_tmpl);
  close(out_fd);
  close(err_fd);
  unlink(out_tmpl);
  unlink(err_tmpl);
  return r;
}

// Starts `argv` (gpuosd, or gpuos daemon) with zero GPUs, as uid when non-zero, and waits until
// sock answers; -1 when it exited or never answered (then it is gone). stderr goes to err_path
// ("" = /dev/null).
inline pid_t start_daemon(const std::vector<std::string>& args, const std::string& sock,
                          const std::string& err_path = "", uid_t uid = 0) {
  pid_t d = fork();
  if (d == 0) {
    if (uid != 0 && (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0)) _exit(98);
    hermetic_env();
    setenv("GPUOS_DRIVER_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    int null = open("/dev/null", O_WRONLY);
    int err = err_path.empty() ? null : open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(null, 1);
    dup2(err, 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(99);
  }
  for (int i = 0; i < 1000; ++i) {  // a raw connect: no trust checks, only "is it up"
    int fd = connect_control_socket(sock.c_str());
    if (fd >= 0) {
      close(fd);
      return d;
    }
    int st = 0;
    if (waitpid(d, &st, WNOHANG) == d) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(d, SIGKILL);
  waitpid(d, nullptr, 0);
  return -1;
}

// Starts gpuosd on sock (zero GPUs, no metrics), as uid when non-zero; waits until it answers.
inline pid_t start_gpuosd(const std::string& sock, const std::string& cfg, uid_t uid = 0) {
  return start_daemon({GPUOSD_BIN, "--socket", sock, "--config", cfg, "--metrics-listen", ""}, sock, "", uid);
}

// Stops the daemon when the test ends, also on a failed ASSERT.
struct DaemonGuard {
  pid_t pid;
  ~DaemonGuard() {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
};

}  // namespace gpuos::clitest
