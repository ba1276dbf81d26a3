// SPDX-License-Identifier: Apache-2.0
// The pod a process is in, proven by the kubelet's cgroup rather than by a name (issue #62).
//
// A "pod<uid>" anywhere in /proc/<pid>/cgroup proves nothing: systemd delegates a cgroup subtree to
// every login session, and its user can make `pod<the claim's pod uid>.scope` there. A pod is taken
// as proven only when the process's cgroup v2 path is the kubelet's pod cgroup, under one of the
// kubelet's cgroup roots, in the shape the kubelet names it (systemd driver:
// /kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid with _>.slice/...; cgroupfs driver:
// /kubepods/<qos>/pod<uid>/...), and when every directory of that path on the cgroup mount is a
// directory of root's that no other user may write (a subtree delegated to a user is chowned to
// it), the kubelet's own ones (down to the pod's) carrying no systemd delegation mark.
#pragma once

#include <sys/types.h>

#include <span>
#include <string>
#include <vector>

namespace gpuos::daemon {

// Where the kubelet's pod cgroups are ([daemon] kubelet_cgroup_roots, cgroup_mount).
struct PodCgroups {
  std::vector<std::string> roots{"/kubepods.slice", "/kubepods"};  // cgroup v2 paths
  std::string mount = "/sys/fs/cgroup";                            // the cgroup v2 hierarchy
};

// A process's pod: its uid when proven, else "" and, when its cgroup names a pod all the same (a
// forged or unprovable one), why that pod is not believed.
struct PodOfProcess {
  std::string uid;
  std::string refusal;
};

// The pod that a cgroup v2 path ("/kubepods.slice/...") places in one of `roots`, by its shape
// alone; *pod_depth: how many segments lead to the pod's own cgroup. "" and *why when the path is
// no kubelet pod cgroup (*why "" when it names no pod at all).
std::string pod_of_kubelet_path(const std::string& path, std::span<const std::string> roots, std::size_t* pod_depth,
                                std::string* why);

// Why the directories of `path` under `mount` do not prove it the kubelet's ("" = they do): each
// must be a real directory (no symlink) owned by root and writable by no one else; the first
// `marked_depth` segments (the kubelet's own slices) may carry no `trusted.delegate` or
// `user.delegate` mark. Below the pod, runtimes delegate container scopes to themselves (root).
std::string kubelet_dirs_refusal(const std::string& mount, const std::string& path, std::size_t marked_depth);

// The cgroup v2 path of a /proc/<pid>/cgroup text ("0::/path"); "" when it has none.
std::string cgroup_v2_path(const std::string& proc_cgroup);

// Both checks over /proc/<pid>/cgroup.
PodOfProcess pod_of_cgroup_text(const std::string& proc_cgroup, const PodCgroups& cgroups);
PodOfProcess pod_of_process(pid_t pid, const std::string& proc_root, const PodCgroups& cgroups);

}  // namespace gpuos::daemon
