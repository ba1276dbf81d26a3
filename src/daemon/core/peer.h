// SPDX-License-Identifier: Apache-2.0
// Who is on the other end of a connection: its credentials, whether it is an admin, and what the
// core keeps per connection.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuos::daemon {

// Credentials of the peer of a connection (SO_PEERCRED at accept time) and whether it is an admin.
struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  bool admin = false;
};

// Per-connection state the core keeps in the server's connection record.
struct Connection {
  uint64_t id = 0;
  Peer peer;
  uint32_t tenant_id = 0;  // non-zero once this connection registered a tenant
  std::string claim_uid;   // accepted on this claim's socket (claims.h); "" = gpuosd's own socket
};

// Authorisation: uid 0, the daemon's own uid, or a member of admin_gid (if set).
bool is_admin(uid_t peer_uid, uid_t daemon_uid, const std::vector<gid_t>& peer_groups,
              std::optional<gid_t> admin_gid);
// Whether the peer may see the records of a tenant of `tenant_uid` (LIST: `gpuos ps`, `gpuos top`):
// an admin sees every tenant, anyone else only their own uid's (SO_PEERCRED, never the client's word).
bool sees_tenant(const Peer& peer, uid_t tenant_uid);
// The peer's gids: the Gid: and Groups: lines of /proc/<pid>/status; falls back to getgrouplist on
// the uid's passwd entry. Empty if neither works.
std::vector<gid_t> peer_groups(pid_t pid, uid_t uid, gid_t gid);

}  // namespace gpuos::daemon
