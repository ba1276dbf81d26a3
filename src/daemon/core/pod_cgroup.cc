// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/pod_cgroup.h"

#include <sys/stat.h>
#include <sys/xattr.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string_view>

#include "common/text.h"
#include "daemon/core/claims.h"

namespace gpuos::daemon {
namespace {

// "/a/b/c" as {"a", "b", "c"}; false for a relative path or a "", "." or ".." segment (a path seen
// from another cgroup namespace starts with "/..").
bool split_path(std::string_view path, std::vector<std::string_view>* out) {
  out->clear();
  if (path.empty() || path[0] != '/') return false;
  if (path == "/") return true;
  std::size_t at = 1;
  while (true) {
    const std::size_t end = path.find('/', at);
    const std::string_view seg = path.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    if (seg.empty() || seg == "." || seg == "..") return false;
    out->push_back(seg);
    if (end == std::string_view::npos) return true;
    at = end + 1;
  }
}

// A pod uid as the kubelet writes it: 36 characters of lowercase hex and `sep` at the uuid's dashes.
// The systemd driver writes '_' there ('-' is systemd's slice separator).
bool uid_with(std::string_view s, char sep) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool dash_at = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_at ? c != sep : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// `seg` == prefix + <uid> + suffix: the uid (with dashes), else "".
std::string uid_between(std::string_view seg, std::string_view prefix, std::string_view suffix, char sep) {
  if (seg.size() != prefix.size() + 36 + suffix.size() || seg.substr(0, prefix.size()) != prefix ||
      seg.substr(prefix.size() + 36) != suffix) {
    return "";
  }
  std::string uid(seg.substr(prefix.size(), 36));
  if (!uid_with(uid, sep)) return "";
  for (char& c : uid) {
    if (c == '_') c = '-';
  }
  return uid;
}

bool delegation_marked(const std::string& dir) {
  for (const char* name : {"trusted.delegate", "user.delegate"}) {
    if (::lgetxattr(dir.c_str(), name, nullptr, 0) >= 0) return true;
  }
  return false;  // (ENODATA, or no xattrs on this file system)
}

std::string joined(std::span<const std::string> roots) {
  std::string s;
  for (const std::string& r : roots) s += (s.empty() ? "" : ", ") + r;
  return s;
}

}  // namespace

std::string pod_of_kubelet_path(const std::string& path, std::span<const std::string> roots, std::size_t* pod_depth,
                                std::string* why) {
  std::vector<std::string_view> segs, root_segs;
  if (!split_path(path, &segs)) {
    *why = "a \"..\", \".\" or empty segment in its cgroup (is gpuosd in the host's cgroup namespace?)";
    return "";
  }
  for (const std::string& root : roots) {
    if (!split_path(root, &root_segs) || root_segs.empty() || root_segs.size() + 1 > segs.size() ||
        !std::equal(root_segs.begin(), root_segs.end(), segs.begin())) {
      continue;
    }
    std::size_t at = root_segs.size();
    const std::string_view base = root_segs.back();
    std::string uid;
    if (base.size() > 6 && base.substr(base.size() - 6) == ".slice") {  // the systemd driver
      std::string slice(base.substr(0, base.size() - 6));
      if (segs[at] == slice + "-burstable.slice" || segs[at] == slice + "-besteffort.slice") {
        slice = std::string(segs[at].substr(0, segs[at].size() - 6));
        ++at;
      }
      if (at < segs.size()) uid = uid_between(segs[at], slice + "-pod", ".slice", '_');
    } else {  // the cgroupfs driver
      if (segs[at] == "burstable" || segs[at] == "besteffort") ++at;
      if (at < segs.size()) uid = uid_between(segs[at], "pod", "", '-');
    }
    if (uid.empty()) {
      *why = "not where the kubelet puts a pod's cgroup under " + root;
      return "";
    }
    *pod_depth = at + 1;
    return uid;
  }
  *why = "not under the kubelet's cgroup roots (" + joined(roots) + ")";
  return "";
}

std::string kubelet_dirs_refusal(const std::string& mount, const std::string& path, std::size_t marked_depth) {
  std::vector<std::string_view> segs;
  if (!split_path(path, &segs)) return "a \"..\", \".\" or empty segment in its cgroup";
  std::string dir = mount;
  for (std::size_t depth = 0; depth <= segs.size(); ++depth) {
    if (depth > 0) dir += "/" + std::string(segs[depth - 1]);
    struct stat st;
    if (::lstat(dir.c_str(), &st) != 0) return "cannot read " + dir + " (gpuosd needs the host's cgroup tree)";
    if (!S_ISDIR(st.st_mode)) return "no directory: " + dir;
    if (st.st_uid != 0) {
      return "a directory owned by uid " + std::to_string(st.st_uid) + " (delegated to a user): " + dir;
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return "a directory writable by others than root: " + dir;
    if (depth <= marked_depth && delegation_marked(dir)) return "a directory delegated (systemd's mark): " + dir;
  }
  return "";
}

std::string cgroup_v2_path(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

PodOfProcess pod_of_cgroup_text(const std::string& text, const PodCgroups& cgroups) {
  const std::string named = pod_uid_from_cgroup_text(text);
  const std::string path = cgroup_v2_path(text);
  std::size_t depth = 0;
  std::string why;
  std::string uid = path.empty() ? "" : pod_of_kubelet_path(path, cgroups.roots, &depth, &why);
  if (uid.empty()) {
    if (named.empty()) return {};  // no pod at all: a host process, or a container in no pod
    if (path.empty()) why = "no cgroup v2 path (pods are proven on cgroup v2 only)";
    return {"", why + "; its cgroup names pod " + named + ": \"" + printable(path) + "\""};
  }
  if (std::string no = kubelet_dirs_refusal(cgroups.mount, path, depth); !no.empty()) {
    return {"", printable(no)};
  }
  return {uid, ""};
}

PodOfProcess pod_of_process(pid_t pid, const std::string& proc_root, const PodCgroups& cgroups) {
  std::ifstream in(proc_root + "/" + std::to_string(pid) + "/cgroup");
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return pod_of_cgroup_text(ss.str(), cgroups);
}

}  // namespace gpuos::daemon
