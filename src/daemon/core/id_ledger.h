// SPDX-License-Identifier: Apache-2.0
// Which process had which tenant id, kept across gpuosd restarts: a tenant re-registering after a
// restart asks for the id it had (REGISTER previous_tenant_id), and gets it only if the ledger
// says that id was its own: same uid, same pid, same process start time (so a pid reused by
// another process, or another user's process, cannot take it). The file lives in gpuosd's socket
// directory, which only gpuosd's user may write; it is rewritten whole (temp file + rename) at
// every registration and exit. Lines: "<id> <uid> <pid> <start time in clock ticks>[ held]".
//
// It also keeps gpuosd's one piece of authoritative per-tenant state that must outlive the daemon:
// an admin's hold (`gpuos gate ID close`, "held"). A process whose entry is held is held again when
// it re-registers with a new gpuosd, whatever id it gets. (A daemon that predates the flag ignores
// the trailing word.)
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace gpuos::daemon {

// The start time of a live process (field 22 of /proc/<pid>/stat, clock ticks since boot); 0 if it
// does not exist.
uint64_t process_start_time(pid_t pid, const std::string& proc_root = "/proc");

// Whether the process of `start_time` runs on: pid has that start time and a thread of it is
// neither dead, a zombie nor exiting (PF_EXITING, set as a thread enters do_exit). A process that
// exits closes its files only after every thread sharing them set PF_EXITING, so its connection to
// gpuosd closes while this is already false; one that closed or shut down its connection itself
// runs on.
bool process_runs(pid_t pid, uint64_t start_time, const std::string& proc_root = "/proc");

class IdLedger {
 public:
  struct Entry {
    uid_t uid = 0;
    pid_t pid = 0;
    uint64_t start = 0;
    bool held = false;  // an admin holds the tenant's gate closed
  };
  // path "": nothing is kept (no id is ever honoured). start_time null: process_start_time.
  IdLedger(std::string path, std::function<uint64_t(pid_t)> start_time);
  // Reads the file, keeping the entries whose process still runs (same pid and start time). A
  // missing file is an empty ledger; a malformed line is skipped.
  void load();
  // Whether `id` was this process's (uid, pid and its start time now).
  bool owned_by(uint32_t id, uid_t uid, pid_t pid) const;
  // Whether `id` is kept for another process than this one (a tenant of the previous daemon that
  // has not re-registered yet): a new tenant does not get it.
  bool kept_for_another(uint32_t id, uid_t uid, pid_t pid) const;
  // Whether an admin held this process's tenant (same uid, pid and start time) under any id.
  bool held(uid_t uid, pid_t pid) const;
  // Records `id` as this process's (replacing any other entry of the process), held or not.
  void record(uint32_t id, uid_t uid, pid_t pid, bool held = false);
  // Sets or clears the hold of `id`'s entry (none: nothing).
  void set_held(uint32_t id, bool held);
  void forget(uint32_t id);
  const std::map<uint32_t, Entry>& entries() const { return entries_; }

 private:
  void save() const;
  std::string path_;
  std::function<uint64_t(pid_t)> start_time_;
  std::map<uint32_t, Entry> entries_;
};

}  // namespace gpuos::daemon
