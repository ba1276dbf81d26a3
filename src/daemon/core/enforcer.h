// SPDX-License-Identifier: Apache-2.0
// The mechanisms behind an enforcement decision (enforce.h): freezing a process's cgroup
// (cgroup v2 freezer) or killing it, each refusing when it would hit what it must not.
#pragma once

#include <sys/types.h>

#include <set>
#include <string>

namespace gpuos::daemon {

class Enforcer {
 public:
  virtual ~Enforcer() = default;
  // Freezes the cgroup v2 of `pid`. Refused (false, with why) when that cgroup also holds gpuosd,
  // a process of another uid than `uid`, or one of `others` (other tenants): freezing it would stop
  // them too. A process that is not the one of `start_time` (its pid was reused) is left alone.
  virtual bool freeze(pid_t pid, uid_t uid, unsigned long long start_time, const std::set<pid_t>& others,
                      std::string* why) = 0;
  // SIGKILL to `pid` if it is still the process of `start_time`.
  virtual bool kill(pid_t pid, unsigned long long start_time, std::string* why) = 0;
};

// The real uid of a process (the first number of "Uid:" in <proc_root>/<pid>/status); -1 when it is
// gone.
long process_uid(pid_t pid, const std::string& proc_root = "/proc");

// The real one: /proc and the cgroup v2 hierarchy under the given roots (tests pass temporary
// directories).
class SystemEnforcer final : public Enforcer {
 public:
  explicit SystemEnforcer(std::string proc_root = "/proc", std::string cgroup_root = "/sys/fs/cgroup")
      : proc_(std::move(proc_root)), cgroup_(std::move(cgroup_root)) {}
  bool freeze(pid_t pid, uid_t uid, unsigned long long start_time, const std::set<pid_t>& others,
              std::string* why) override;
  bool kill(pid_t pid, unsigned long long start_time, std::string* why) override;
  // Thaws the cgroup v2 of `pid` (what an admin does once the case is settled; freezing is never
  // undone by gpuosd on its own). False, with why, when it has no cgroup or the write fails.
  bool thaw(pid_t pid, std::string* why);
  // The process's start time (field 22 of /proc/<pid>/stat); 0 when it is gone.
  unsigned long long start_time(pid_t pid) const;

 private:
  std::string proc_, cgroup_;
};

}  // namespace gpuos::daemon
