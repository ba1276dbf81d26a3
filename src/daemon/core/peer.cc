// SPDX-License-Identifier: Apache-2.0
// Who a peer is: admin or not (from its credentials and groups).
#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "daemon/core/peer.h"

namespace gpuos::daemon {

bool is_admin(uid_t peer_uid, uid_t daemon_uid, const std::vector<gid_t>& peer_groups,
              std::optional<gid_t> admin_gid) {
  if (peer_uid == 0 || peer_uid == daemon_uid) return true;
  if (admin_gid && std::find(peer_groups.begin(), peer_groups.end(), *admin_gid) != peer_groups.end()) {
    return true;
  }
  return false;
}

bool sees_tenant(const Peer& peer, uid_t tenant_uid) { return peer.admin || peer.uid == tenant_uid; }

std::vector<gid_t> peer_groups(pid_t pid, uid_t uid, gid_t gid) {
  std::vector<gid_t> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  bool found = false;
  while (in && std::getline(in, line)) {
    bool is_gid = line.rfind("Gid:", 0) == 0;
    bool is_groups = line.rfind("Groups:", 0) == 0;
    if (!is_gid && !is_groups) continue;
    std::istringstream ss(line.substr(line.find(':') + 1));
    long long g;
    while (ss >> g) {
      if (g >= 0) out.push_back(static_cast<gid_t>(g));
    }
    if (is_groups) found = true;
  }
  if (found) return out;
  out.clear();
  out.push_back(gid);
  struct passwd pw;
  struct passwd* res = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) == 0 && res != nullptr) {
    int n = 64;
    std::vector<gid_t> groups(static_cast<std::size_t>(n));
    if (getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0 && n > 64) {
      groups.resize(static_cast<std::size_t>(n));
      getgrouplist(pw.pw_name, gid, groups.data(), &n);
    }
    groups.resize(static_cast<std::size_t>(std::max(n, 0)));
    out.insert(out.end(), groups.begin(), groups.end());
  }
  return out;
}

}  // namespace gpuos::daemon
