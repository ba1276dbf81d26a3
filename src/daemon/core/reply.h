// SPDX-License-Identifier: Apache-2.0
// What the core answers a message with: the datagrams to send (with the fds to pass) and what the
// server does after (close, shut down, watch a new tenant's process).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpuos/abi.h"

namespace gpuos::daemon {

// One datagram to send. The fds >= 0 (borrowed from the core; valid while the tenant lives) are
// passed with SCM_RIGHTS, in order.
struct Outgoing {
  std::vector<uint8_t> bytes;
  std::array<int, 2> fds{-1, -1};
};

// A message struct as the bytes of one datagram.
template <typename Msg>
Outgoing encode(const Msg& m) {
  Outgoing o;
  o.bytes.resize(sizeof(Msg));
  std::memcpy(o.bytes.data(), &m, sizeof(Msg));
  return o;
}

struct Outcome {
  std::vector<Outgoing> replies;
  bool close = false;            // close the connection after sending the replies
  bool shutdown = false;         // orderly daemon shutdown requested (SHUTDOWN by an admin)
  uint32_t registered = 0;       // tenant id registered by this message (server opens a pidfd)
};

// Builds a REPLY (or LIST_END) message.
Outgoing make_reply(uint32_t type, uint32_t seq, gpuos_status status, uint32_t count, const char* text);
// A REPLY with `st` and `why`, and the connection closed.
Outcome refuse(uint32_t seq, gpuos_status st, const char* why);
// An admin's message from a peer that is not one: "<what> needs an admin (uid N is not)", logged, as
// refuse() with GPUOS_ERR_PERMISSION.
Outcome refuse_non_admin(uint32_t seq, const char* what, unsigned uid);
// A REGISTER_REPLY with `st` and `why` (the blocks' sizes filled in), and the connection closed.
Outcome refuse_register(uint32_t seq, gpuos_status st, const char* why);

}  // namespace gpuos::daemon
