// SPDX-License-Identifier: Apache-2.0
// Kubernetes ResourceClaims that gpuosd admitted (CLAIM_PREPARE from the DRA plugin, gpuos-dra):
// what a claim's tenants get, kept across gpuosd restarts, and the facts about a process that
// tie it to a pod (its cgroup path, its pid inside its container).
//
// A claim's settings are an admin's word (the plugin read them from the claim the cluster's
// scheduler allocated); its tenants' own REGISTER fields are not consulted for them. The file lives
// in gpuosd's socket directory, which only gpuosd's user may write; it is rewritten whole (temp file
// + rename) at every change. One claim per line: "<field>=<value>" pairs separated by tabs, values
// of the checked character sets below (no tab, no newline).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

#include "daemon/core/pod_cgroup.h"
#include "gpuos/abi.h"

namespace gpuos::daemon {

struct Claim {
  std::string uid;
  std::string claim_namespace;
  std::string claim_name;
  std::string pod_name;
  std::string pod_uid;
  std::string gpu_uuid;  // bare 36-character form; "" = any GPU
  std::string space_domain;
  uint32_t tenant_class = GPUOS_CLASS_BEST_EFFORT;
  int32_t priority = 0;
  uint32_t weight = 100;
  uint32_t space_sms = 0;
  uint64_t mem_bytes = 0;  // 0 = no quota
  uint64_t borrow_bytes = 0;
  uint32_t max_slowdown_permille = 0;
  bool operator==(const Claim&) const = default;
};

// A CLAIM_PREPARE's fields checked and copied: "" and *out filled, or why not. Checks what does not
// need gpuosd's state (strings, character sets, ranges, borrow needs a quota, SMs need a domain).
std::string claim_from_message(const gpuos_msg_claim_prepare& m, Claim* out);

class ClaimStore {
 public:
  // path "": kept in memory only.
  explicit ClaimStore(std::string path);
  // Reads the file. A missing file is no claim; a malformed line is skipped (and logged).
  void load();
  // Adds or replaces a claim and rewrites the file. False with why if the file cannot be written
  // (the claim is then not kept).
  bool put(const Claim& c, std::string* why);
  // Forgets a claim (none: nothing) and rewrites the file.
  void erase(const std::string& uid);
  const Claim* find(const std::string& uid) const;
  const std::map<std::string, Claim>& all() const { return claims_; }

 private:
  bool save(std::string* why) const;
  std::string path_;
  std::map<std::string, Claim> claims_;
};

// The pod uid a process's cgroup text names anywhere, as the kubelet names pod cgroups ("pod<uid>"
// with the uid's dashes, or underscores under the systemd driver, e.g.
// ".../kubepods-burstable-pod1a2b..._....slice/cri-containerd-....scope"); "" if none. A name only:
// any user can make such a cgroup in a subtree delegated to it; pod_cgroup.h proves one.
std::string pod_uid_from_cgroup_text(const std::string& proc_cgroup);
// The pod of a process, proven by the kubelet's cgroup (pod_of_process); "" when none is.
std::string pod_uid_of_process(pid_t pid, const std::string& proc_root = "/proc", const PodCgroups& cgroups = {});
// The pid of host_pid in its innermost pid namespace (the last NSpid field of its status), its own
// pid if it is in gpuosd's namespace; 0 if the process is gone.
pid_t innermost_pid(pid_t host_pid, const std::string& proc_root = "/proc");

// A process that connects to a claim's socket, as gpuosd sees it (claim_peer_of reads it from /proc).
struct ClaimPeer {
  pid_t pid = 0;  // SO_PEERCRED (0: not visible in gpuosd's pid namespace)
  uid_t uid = 0;
  std::string pod_uid;       // its pod, proven by the kubelet's cgroup ("" = none)
  std::string pod_refusal;   // its cgroup names a pod that is not proven: why (a forged one)
  bool ns_known = false;     // its namespaces could be read
  bool host_pid_ns = false;  // in gpuosd's own pid namespace: a process of the host, no container's
  bool host_user_ns = false; // in gpuosd's own user namespace (a pid namespace of its own then took root)
};
ClaimPeer claim_peer_of(pid_t pid, uid_t uid, const std::string& proc_root = "/proc", const PodCgroups& cgroups = {});
// Whether a peer may use claim c's socket: "" = yes, else why not. Only the claim's containers may:
// a process in the claim's pod's kubelet cgroup (any pod's, when the claim names none); with no pod
// in its cgroup, only a container that a privileged runtime made (a pid namespace of its own, in
// the host's user namespace: no unprivileged host user can make one). Any other host process,
// root's included, and one whose cgroup names a pod it is not proven in (pod_refusal), is refused:
// the socket would give it the claim's settings.
std::string claim_peer_refusal(const Claim& c, const ClaimPeer& p);

// Where a claim's socket lives: <socket dir>/claims/<uid>/gpuosd.sock.
std::string claim_socket_dir(const std::string& socket_path, const std::string& uid);

}  // namespace gpuos::daemon
