// SPDX-License-Identifier: Apache-2.0
// Kubernetes claims as gpuosd serves them (CLAIM_PREPARE, CLAIM_UNPREPARE from gpuos-dra): what
// gpuosd itself checks of a claim, the store of admitted claims (claims.h) and a listening socket
// per claim, through which only that claim's tenants come in (admission stage claim).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/core/claims.h"
#include "daemon/core/gpus.h"
#include "daemon/core/peer.h"
#include "daemon/core/reply.h"

namespace gpuos::daemon {

// The server's side of claims: a listening socket per claim (Core asks, the server owns the fds).
class ClaimSockets {
 public:
  virtual ~ClaimSockets() = default;
  // Listens on the claim's socket (its directory made); "" or why not.
  virtual std::string open_claim_socket(const std::string& claim_uid) = 0;
  // Stops listening there and removes the socket and its directory.
  virtual void close_claim_socket(const std::string& claim_uid) = 0;
};

class ClaimDesk {
 public:
  // May a tenant of peer join spatial domain `domain`? "" = yes (CoreOptions::space_admit).
  using SpaceAdmit = std::function<std::string(const std::string& domain, const Peer& peer)>;
  // claims_path: the store's file ("" = in memory only; loaded here). socket_root: the control
  // socket's path, under which the claims' sockets' directories are ("" = claims are refused).
  ClaimDesk(const std::string& claims_path, std::string socket_root, const std::vector<GpuInfo>& gpus,
            uint64_t mem_quota_cap_bytes, SpaceAdmit space_admit);
  const ClaimStore& store() const { return store_; }
  // The server listens for each claim; set once before serving.
  void set_sockets(ClaimSockets* s) { sockets_ = s; }
  // What gpuosd itself checks of a claim (its GPU, its quota against the GPU and the config's cap,
  // its domain): "" or why not.
  std::string check(const Claim& c) const;
  // CLAIM_PREPARE (admins only): checked, its socket opened, stored; the same claim again is OK.
  Outcome prepare(const Connection& conn, const gpuos_msg_claim_prepare& m);
  // CLAIM_UNPREPARE (admins only): its socket closed, dropped from the store.
  Outcome unprepare(const Connection& conn, const gpuos_msg_claim_unprepare& m);

 private:
  ClaimStore store_;
  ClaimSockets* sockets_ = nullptr;
  std::string socket_root_;
  const std::vector<GpuInfo>& gpus_;
  uint64_t mem_quota_cap_bytes_;
  SpaceAdmit space_admit_;
};

}  // namespace gpuos::daemon
