// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/claim_desk.h"

#include <algorithm>
#include <cstdio>

#include "common/config.h"
#include "common/ipc.h"
#include "common/kube_names.h"
#include "common/log.h"

namespace gpuos::daemon {

ClaimDesk::ClaimDesk(const std::string& claims_path, std::string socket_root, const std::vector<GpuInfo>& gpus,
                     uint64_t mem_quota_cap_bytes, SpaceAdmit space_admit)
    : store_(claims_path),
      socket_root_(std::move(socket_root)),
      gpus_(gpus),
      mem_quota_cap_bytes_(mem_quota_cap_bytes),
      space_admit_(std::move(space_admit)) {
  store_.load();
}

std::string ClaimDesk::check(const Claim& c) const {
  const GpuInfo* gpu = nullptr;
  if (!c.gpu_uuid.empty()) {
    for (const GpuInfo& g : gpus_) {
      if (g.uuid == "GPU-" + c.gpu_uuid || g.uuid == c.gpu_uuid) gpu = &g;
    }
    if (gpu == nullptr) return "no GPU " + c.gpu_uuid + " on this node";
  }
  // The node's cap on a quota: the GPU's memory (any GPU's when the claim names none), and the
  // config's [tenants] cap, which a claim may not pass either.
  uint64_t largest = 0;
  for (const GpuInfo& g : gpus_) largest = std::max(largest, g.total_mem_bytes);
  const uint64_t gpu_mem = gpu != nullptr ? gpu->total_mem_bytes : largest;
  if (gpu_mem != 0 && c.mem_bytes > gpu_mem) {
    return "memory quota " + std::to_string(c.mem_bytes) + " bytes is more than the GPU has (" +
           std::to_string(gpu_mem) + ")";
  }
  // Checked: a borrow near 2^64 wrapped the sum below the cap (#42: 1Gi + 18446744072635809792
  // passed a 64 MiB cap, and the tenant took 8 GiB).
  uint64_t limit = 0;
  if (__builtin_add_overflow(c.mem_bytes, c.borrow_bytes, &limit)) {
    return "memory quota " + std::to_string(c.mem_bytes) + " + borrow " + std::to_string(c.borrow_bytes) +
           " bytes is more than 2^64 - 1";
  }
  if (mem_quota_cap_bytes_ != 0 && limit > mem_quota_cap_bytes_) {
    return "memory quota + borrow " + std::to_string(limit) + " bytes is more than this node's cap ([tenants] "
           "mem_quota_cap, " + std::to_string(mem_quota_cap_bytes_) + ")";
  }
  if (!c.space_domain.empty()) {
    Peer admin;
    admin.admin = true;
    std::string no = space_admit_ ? space_admit_(c.space_domain, admin)
                                       : std::string("no spatial domains are configured");
    if (!no.empty()) return "spatial domain \"" + c.space_domain + "\": " + no;
  }
  return "";
}

Outcome ClaimDesk::prepare(const Connection& conn, const gpuos_msg_claim_prepare& m) {
  char why[GPUOS_TEXT_MAX];
  if (!conn.peer.admin) return refuse_non_admin(m.hdr.seq, "CLAIM_PREPARE", static_cast<unsigned>(conn.peer.uid));
  Claim c;
  if (std::string no = claim_from_message(m, &c); !no.empty()) {
    log::warn("refused a claim: %s", no.c_str());
    return refuse(m.hdr.seq, GPUOS_ERR_BAD_MESSAGE, no.c_str());
  }
  if (sockets_ == nullptr || socket_root_.empty()) {
    return refuse(m.hdr.seq, GPUOS_ERR_REFUSED, "this gpuosd serves no claims (no socket directory)");
  }
  const std::string dir = claim_socket_dir(socket_root_, c.uid);
  Outcome o;
  if (const Claim* have = store_.find(c.uid)) {  // the plugin (or the kubelet) asks again
    if (!(*have == c)) {
      std::snprintf(why, sizeof(why), "claim %s is prepared already, with other settings", c.uid.c_str());
      log::warn("refused: %s", why);
      return refuse(m.hdr.seq, GPUOS_ERR_BAD_MESSAGE, why);
    }
    // (Its socket too: one that could not be made when gpuosd started is tried again.)
    if (std::string no = sockets_->open_claim_socket(c.uid); !no.empty()) {
      return refuse(m.hdr.seq, GPUOS_ERR_INTERNAL, no.c_str());
    }
    o.replies.push_back(make_reply(GPUOS_MSG_REPLY, m.hdr.seq, GPUOS_OK, 0, dir.c_str()));
    return o;
  }
  if (std::string no = check(c); !no.empty()) {
    log::warn("refused claim %s (%s/%s): %s", c.uid.c_str(), c.claim_namespace.c_str(), c.claim_name.c_str(), no.c_str());
    return refuse(m.hdr.seq, GPUOS_ERR_REFUSED, no.c_str());
  }
  if (std::string no = sockets_->open_claim_socket(c.uid); !no.empty()) {
    log::error("claim %s: %s", c.uid.c_str(), no.c_str());
    return refuse(m.hdr.seq, GPUOS_ERR_INTERNAL, no.c_str());
  }
  if (std::string no; !store_.put(c, &no)) {
    sockets_->close_claim_socket(c.uid);
    log::error("claim %s: %s", c.uid.c_str(), no.c_str());
    return refuse(m.hdr.seq, GPUOS_ERR_INTERNAL, no.c_str());
  }
  log::info("claim %s prepared: %s/%s for pod %s (uid %s), class %s, mem %llu borrow %llu%s%s", c.uid.c_str(),
            c.claim_namespace.c_str(), c.claim_name.c_str(), c.pod_name.empty() ? "-" : c.pod_name.c_str(),
            c.pod_uid.empty() ? "-" : c.pod_uid.c_str(), class_name(c.tenant_class),
            static_cast<unsigned long long>(c.mem_bytes), static_cast<unsigned long long>(c.borrow_bytes),
            c.space_domain.empty() ? "" : ", domain ", c.space_domain.c_str());
  o.replies.push_back(make_reply(GPUOS_MSG_REPLY, m.hdr.seq, GPUOS_OK, 0, dir.c_str()));
  return o;
}

Outcome ClaimDesk::unprepare(const Connection& conn, const gpuos_msg_claim_unprepare& m) {
  if (!conn.peer.admin) return refuse_non_admin(m.hdr.seq, "CLAIM_UNPREPARE", static_cast<unsigned>(conn.peer.uid));
  if (!has_nul(m.claim_uid, sizeof(m.claim_uid)) || !kube_uid(m.claim_uid)) {
    return refuse(m.hdr.seq, GPUOS_ERR_BAD_MESSAGE, "claim uid is not 1..36 of [0-9a-z-]");
  }
  const std::string uid = m.claim_uid;
  if (store_.find(uid) != nullptr) {
    if (sockets_ != nullptr) sockets_->close_claim_socket(uid);
    store_.erase(uid);
    log::info("claim %s unprepared", uid.c_str());
  }
  Outcome o;
  o.replies.push_back(make_reply(GPUOS_MSG_REPLY, m.hdr.seq, GPUOS_OK, 0, "unprepared"));
  return o;
}

}  // namespace gpuos::daemon
