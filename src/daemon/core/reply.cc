// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/reply.h"

#include <cstdio>

#include "common/ipc.h"
#include "common/log.h"

namespace gpuos::daemon {

Outgoing make_reply(uint32_t type, uint32_t seq, gpuos_status status, uint32_t count, const char* text) {
  gpuos_msg_reply r{};
  init_header(&r.hdr, static_cast<gpuos_msg_type>(type), sizeof(r), seq);
  r.status = status;
  r.count = count;
  copy_name(r.text, sizeof(r.text), text);
  return encode(r);
}

Outcome refuse_non_admin(uint32_t seq, const char* what, unsigned uid) {
  char why[GPUOS_TEXT_MAX];
  std::snprintf(why, sizeof(why), "%s needs an admin (uid %u is not)", what, uid);
  log::warn("refused: %s", why);
  return refuse(seq, GPUOS_ERR_PERMISSION, why);
}

Outcome refuse(uint32_t seq, gpuos_status st, const char* why) {
  Outcome o;
  o.replies.push_back(make_reply(GPUOS_MSG_REPLY, seq, st, 0, why));
  o.close = true;
  return o;
}

Outcome refuse_register(uint32_t seq, gpuos_status st, const char* why) {
  gpuos_msg_register_reply r{};
  init_header(&r.hdr, GPUOS_MSG_REGISTER_REPLY, sizeof(r), seq);
  r.status = st;
  r.control_block_size = sizeof(gpuos_control_block);
  r.grant_block_size = sizeof(gpuos_grant_block);
  copy_name(r.text, sizeof(r.text), why);
  Outcome o;
  o.replies.push_back(encode(r));
  o.close = true;
  return o;
}

}  // namespace gpuos::daemon
