// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/enforcer.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "daemon/core/id_ledger.h"

namespace gpuos::daemon {

namespace {

// The cgroup v2 path of pid ("0::/path" in /proc/<pid>/cgroup); "" when it has none.
std::string cgroup_of(const std::string& proc, pid_t pid) {
  std::ifstream in(proc + "/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

// The real uid of pid (the first number of "Uid:" in /proc/<pid>/status); -1 when it is gone.
long uid_of(const std::string& proc, pid_t pid) {
  std::ifstream in(proc + "/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) == 0) return std::strtol(line.c_str() + 4, nullptr, 10);
  }
  return -1;
}

// Freezes (or thaws) the cgroup at directory `dir`; false if its freezer cannot be written.
bool write_freeze(const std::string& dir, bool frozen) {
  std::ofstream f(dir + "/cgroup.freeze");
  f << (frozen ? "1\n" : "0\n");
  f.flush();
  return static_cast<bool>(f);
}

}  // namespace

long process_uid(pid_t pid, const std::string& proc_root) { return uid_of(proc_root, pid); }

unsigned long long SystemEnforcer::start_time(pid_t pid) const { return process_start_time(pid, proc_); }

bool SystemEnforcer::freeze(pid_t pid, uid_t uid, unsigned long long start, const std::set<pid_t>& others,
                            std::string* why) {
  if (start_time(pid) != start) {
    *why = "the process is gone (its pid may be reused)";
    return false;
  }
  const std::string cg = cgroup_of(proc_, pid);
  if (cg.empty() || cg == "/") {
    *why = "it is in the root cgroup (or has no cgroup v2): freezing would stop the whole node";
    return false;
  }
  const std::string dir = cgroup_ + cg;
  // Everything in that cgroup and the cgroups below it would stop: only the offender's own
  // processes may be there.
  std::vector<std::string> lists{dir + "/cgroup.procs"};
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) lists.push_back(it->path().string() + "/cgroup.procs");
  }
  if (ec) {
    *why = "cannot walk " + dir + ": " + ec.message();
    return false;
  }
  for (const std::string& list : lists) {
    std::ifstream procs(list);
    if (!procs) {
      *why = "cannot read " + list;
      return false;
    }
    for (long other; procs >> other;) {
      const auto p = static_cast<pid_t>(other);
      if (p == getpid()) {
        *why = "its cgroup " + cg + " also holds gpuosd";
        return false;
      }
      if (others.count(p) != 0) {
        *why = "its cgroup " + cg + " also holds tenant pid " + std::to_string(p);
        return false;
      }
      if (uid_of(proc_, p) != static_cast<long>(uid)) {
        *why = "its cgroup " + cg + " also holds pid " + std::to_string(p) + " of another user";
        return false;
      }
    }
  }
  if (!write_freeze(dir, true)) {
    *why = "cannot write " + dir + "/cgroup.freeze (no cgroup v2 freezer, or no permission)";
    return false;
  }
  *why = "froze cgroup " + cg + " (thaw: echo 0 > " + dir + "/cgroup.freeze)";
  return true;
}

bool SystemEnforcer::thaw(pid_t pid, std::string* why) {
  const std::string cg = cgroup_of(proc_, pid);
  if (cg.empty() || cg == "/") {
    *why = "it has no cgroup v2 of its own";
    return false;
  }
  if (!write_freeze(cgroup_ + cg, false)) {
    *why = "cannot write " + cgroup_ + cg + "/cgroup.freeze";
    return false;
  }
  *why = "thawed cgroup " + cg;
  return true;
}

bool SystemEnforcer::kill(pid_t pid, unsigned long long start, std::string* why) {
  if (start == 0 || start_time(pid) != start) {
    *why = "the process is gone (its pid may be reused)";
    return false;
  }
  if (::kill(pid, SIGKILL) != 0) {
    *why = std::string("kill: ") + std::strerror(errno);
    return false;
  }
  *why = "killed (SIGKILL)";
  return true;
}

}  // namespace gpuos::daemon
