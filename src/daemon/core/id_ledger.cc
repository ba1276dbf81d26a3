// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/id_ledger.h"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/log.h"

namespace gpuos::daemon {

uint64_t process_start_time(pid_t pid, const std::string& proc_root) {
  std::ifstream in(proc_root + "/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  // The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

bool process_runs(pid_t pid, uint64_t start_time, const std::string& proc_root) {
  if (start_time == 0 || process_start_time(pid, proc_root) != start_time) return false;
  const std::string tasks = proc_root + "/" + std::to_string(pid) + "/task";
  DIR* d = opendir(tasks.c_str());
  if (d == nullptr) return false;  // gone since
  bool runs = false;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(tasks + "/" + e->d_name + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;  // a thread that ended meanwhile
    const std::size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state, field;
    unsigned long long flags = 0;
    rest >> state;  // field 3; then ppid, pgrp, session, tty_nr, tpgid (4-8) and flags (9)
    for (int i = 4; i <= 9 && rest >> field; ++i) {
      if (i == 9) flags = std::strtoull(field.c_str(), nullptr, 10);
    }
    constexpr unsigned long long kPfExiting = 0x4;  // PF_EXITING (include/linux/sched.h)
    if (!state.empty() && state != "Z" && state != "X" && state != "x" && (flags & kPfExiting) == 0) {
      runs = true;
      break;
    }
  }
  closedir(d);
  return runs;
}

IdLedger::IdLedger(std::string path, std::function<uint64_t(pid_t)> start_time)
    : path_(std::move(path)), start_time_(start_time ? std::move(start_time) : [](pid_t p) { return process_start_time(p); }) {}

void IdLedger::load() {
  entries_.clear();
  if (path_.empty()) return;
  std::ifstream in(path_);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    unsigned long long id = 0, uid = 0, start = 0;
    long long pid = 0;
    if (!(ss >> id >> uid >> pid >> start) || id == 0 || id > UINT32_MAX || pid <= 0) continue;
    std::string flag;
    const bool held = ss >> flag && flag == "held";
    const Entry e{static_cast<uid_t>(uid), static_cast<pid_t>(pid), start, held};
    if (start != 0 && start_time_(e.pid) == start) entries_[static_cast<uint32_t>(id)] = e;
  }
}

bool IdLedger::owned_by(uint32_t id, uid_t uid, pid_t pid) const {
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  const Entry& e = it->second;
  return e.uid == uid && e.pid == pid && e.start != 0 && e.start == start_time_(pid);
}

bool IdLedger::kept_for_another(uint32_t id, uid_t uid, pid_t pid) const {
  auto it = entries_.find(id);
  return it != entries_.end() && !owned_by(id, uid, pid);
}

bool IdLedger::held(uid_t uid, pid_t pid) const {
  for (const auto& [id, e] : entries_) {
    if (e.held && e.uid == uid && e.pid == pid && e.start != 0 && e.start == start_time_(pid)) return true;
  }
  return false;
}

void IdLedger::record(uint32_t id, uid_t uid, pid_t pid, bool held) {
  if (path_.empty()) return;
  std::erase_if(entries_, [&](const auto& kv) { return kv.second.uid == uid && kv.second.pid == pid; });
  entries_[id] = Entry{uid, pid, start_time_(pid), held};
  save();
}

void IdLedger::set_held(uint32_t id, bool held) {
  auto it = entries_.find(id);
  if (path_.empty() || it == entries_.end() || it->second.held == held) return;
  it->second.held = held;
  save();
}

void IdLedger::forget(uint32_t id) {
  if (path_.empty() || entries_.erase(id) == 0) return;
  save();
}

void IdLedger::save() const {
  const std::string tmp = path_ + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "we");
  if (f == nullptr) {
    log::warn("tenant id ledger %s: cannot write: %s", tmp.c_str(), std::strerror(errno));
    return;
  }
  for (const auto& [id, e] : entries_) {
    std::fprintf(f, "%u %u %d %llu%s\n", id, static_cast<unsigned>(e.uid), static_cast<int>(e.pid),
                 static_cast<unsigned long long>(e.start), e.held ? " held" : "");
  }
  const bool ok = std::fflush(f) == 0;
  std::fclose(f);
  if (!ok || std::rename(tmp.c_str(), path_.c_str()) != 0) {
    log::warn("tenant id ledger %s: cannot replace: %s", path_.c_str(), std::strerror(errno));
    unlink(tmp.c_str());
  }
}

}  // namespace gpuos::daemon
