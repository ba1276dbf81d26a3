// SPDX-License-Identifier: Apache-2.0
#include "dra/plugin.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/ipc.h"
#include "common/kube_names.h"
#include "common/log.h"
#include "common/tenant_numbers.h"

namespace gpuos::dra {
namespace {

bool copy_field(char* dst, std::size_t n, const std::string& v, const char* what, std::string* why) {
  if (v.size() >= n) {
    *why = std::string(what) + " \"" + v + "\" is longer than " + std::to_string(n - 1) + " characters";
    return false;
  }
  std::memset(dst, 0, n);
  std::memcpy(dst, v.data(), v.size());
  return true;
}

std::string bare(const std::string& uuid) { return uuid.rfind("GPU-", 0) == 0 ? uuid.substr(4) : uuid; }

}  // namespace

std::string parent_request(const std::string& request) { return request.substr(0, request.find('/')); }

bool claim_message(const ClaimAllocation& a, const std::string& gpu_uuid, gpuos_msg_claim_prepare* out,
                   std::string* why) {
  gpuos_msg_claim_prepare m{};
  init_header(&m.hdr, GPUOS_MSG_CLAIM_PREPARE, sizeof(m), 1);
  const TenantSpec& s = a.spec;
  if (!copy_field(m.claim_uid, sizeof(m.claim_uid), a.claim_uid, "claim uid", why) ||
      !copy_field(m.claim_namespace, sizeof(m.claim_namespace), a.claim_namespace, "namespace", why) ||
      !copy_field(m.claim_name, sizeof(m.claim_name), a.claim_name, "claim name", why) ||
      !copy_field(m.pod_name, sizeof(m.pod_name), a.pod ? a.pod->name : "", "pod name", why) ||
      !copy_field(m.pod_uid, sizeof(m.pod_uid), a.pod ? a.pod->uid : "", "pod uid", why) ||
      !copy_field(m.gpu_uuid, sizeof(m.gpu_uuid), bare(gpu_uuid), "GPU uuid", why) ||
      !copy_field(m.space_domain, sizeof(m.space_domain), s.space.value_or(""), "space", why)) {
    return false;
  }
  m.tenant_class = s.tenant_class.value_or("best-effort") == "guaranteed" ? GPUOS_CLASS_GUARANTEED
                                                                           : GPUOS_CLASS_BEST_EFFORT;
  m.priority = s.priority.value_or(0);
  m.weight = s.weight.value_or(100);
  m.space_sms = s.sms.value_or(0);
  m.mem_bytes = s.mem_bytes.value_or(0);
  m.borrow_bytes = s.borrow_bytes.value_or(0);
  m.max_slowdown_permille = s.max_slowdown_permille.value_or(0);
  *out = m;
  return true;
}

Plugin::Plugin(PluginOptions opts, ClaimSource& claims, NodeDaemon& daemon)
    : opts_(std::move(opts)), claims_(claims), daemon_(daemon) {}

std::optional<PreparedClaim> Plugin::prepared_claim(const std::string& uid) {
  if (auto it = prepared_.find(uid); it != prepared_.end()) return it->second;
  if (opts_.state_dir.empty()) return std::nullopt;
  const std::string path = opts_.state_dir + "/" + uid + ".json";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  auto text = [&](const char* key) {
    auto it = j.is_object() ? j.find(key) : j.end();
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  PreparedClaim c;
  c.share = AllocatedShare{text("request"), text("pool"), text("device")};
  if (!text("podName").empty()) c.pod = PodRef{text("podName"), text("podUid")};
  if (text("claimUid") != uid || c.share.request.empty() || c.share.pool.empty() || c.share.device.empty()) {
    log::warn("%s: not a prepared claim of %s; ignored", path.c_str(), uid.c_str());
    return std::nullopt;
  }
  prepared_[uid] = c;
  return c;
}

std::string Plugin::keep_prepared_claim(const std::string& uid, const PreparedClaim& c) {
  if (!opts_.state_dir.empty()) {
    nlohmann::json j = {{"claimUid", uid}, {"request", c.share.request}, {"pool", c.share.pool},
                        {"device", c.share.device}};
    if (c.pod) {
      j["podName"] = c.pod->name;
      j["podUid"] = c.pod->uid;
    }
    const std::string path = opts_.state_dir + "/" + uid + ".json", tmp = path + ".tmp";
    const std::string text = j.dump() + "\n";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return "cannot write " + tmp + ": " + std::strerror(errno);
    const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
    ::close(fd);
    if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
      std::string why = "cannot write " + path + ": " + std::strerror(errno);
      ::unlink(tmp.c_str());
      return why;
    }
  }
  prepared_[uid] = c;
  return "";
}

void Plugin::forget_prepared_claim(const std::string& uid) {
  prepared_.erase(uid);
  if (opts_.state_dir.empty()) return;
  const std::string path = opts_.state_dir + "/" + uid + ".json";
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    log::warn("cannot remove %s: %s", path.c_str(), std::strerror(errno));
  }
}

std::string Plugin::expand_gpu_device(uint32_t index, const std::string& uuid) const {
  std::string s = opts_.gpu_cdi_device;
  for (auto [key, value] : {std::pair<std::string, std::string>{"{index}", std::to_string(index)},
                            std::pair<std::string, std::string>{"{uuid}", uuid}}) {
    for (auto at = s.find(key); at != std::string::npos; at = s.find(key, at + value.size())) {
      s.replace(at, key.size(), value);
    }
  }
  return s;
}

PrepareResult Plugin::prepare(const ClaimRef& ref) {
  std::lock_guard<std::mutex> lk(mu_);
  PrepareResult r;
  const std::string what = "claim " + ref.claim_namespace + "/" + ref.name + " (" + ref.uid + ")";
  auto fail = [&](const std::string& why) {
    r.devices.clear();
    r.error = what + ": " + why;
    log::warn("%s", r.error.c_str());
    return r;
  };
  if (!kube_uid(ref.uid)) return fail("the uid is not 1..36 of [0-9a-z-] (not only dashes)");
  std::string json, why;
  if (!claims_.fetch(ref.claim_namespace, ref.name, &json, &why)) return fail("cannot read it: " + why);
  ClaimAllocation a;
  if (!parse_claim(json, opts_.driver, ref.uid, &a, &why)) return fail(why);
  // Prepared before with the same allocation (a kubelet retry, or a shared claim's next pod): gpuosd
  // is asked exactly as then. The pod it names is the one it was first prepared for, not the first
  // of reservedFor now, whose order changes as pods come and go (gpuosd refuses a claim prepared
  // again with other settings).
  const std::optional<PreparedClaim> before = prepared_claim(ref.uid);
  const bool again = before && before->share.request == a.share.request && before->share.pool == a.share.pool &&
                     before->share.device == a.share.device;
  if (again) a.pod = before->pod;
  uint32_t gpu_index = 0, share = 0;
  std::string share_class;
  if (!parse_device_name(a.share.device, &gpu_index, &share_class, &share)) {
    return fail("device \"" + a.share.device + "\" is not a gpuos share");
  }
  if (a.share.pool != opts_.node_name) {
    return fail("its share is in pool \"" + a.share.pool + "\", not this node's (\"" + opts_.node_name + "\")");
  }
  std::vector<GpuShareInfo> gpus;
  if (!daemon_.gpus(&gpus, &why)) return fail("gpuosd: " + why);
  const GpuShareInfo* gpu = nullptr;
  for (const GpuShareInfo& g : gpus) {
    if (g.index == gpu_index) gpu = &g;
  }
  if (gpu == nullptr) {
    return fail("GPU " + std::to_string(gpu_index) + " of its share is not on this node (gpuosd knows " +
                std::to_string(gpus.size()) + ")");
  }
  const std::string uuid = gpu->uuid.rfind("GPU-", 0) == 0 ? gpu->uuid : "GPU-" + gpu->uuid;
  gpuos_msg_claim_prepare m;
  if (!claim_message(a, uuid, &m, &why)) return fail(why);

  ClaimInjection inj;
  inj.driver = opts_.driver;
  inj.claim_uid = ref.uid;
  inj.interposer_host_path = opts_.interposer;
  inj.gpu_uuid = uuid;
  // The tenant's identity as gpuosd admits it (informative: on the claim's socket gpuosd applies the
  // claim, not what the tenant sends), in the variables `gpuos run` sets.
  for (const auto& [var, text] : tenant_env(numbers_of(m))) {
    if (!text.empty()) inj.env.push_back(var + "=" + text);
  }
  if (a.spec.space) {
    if (!daemon_.space_domain(*a.spec.space, &inj.mps_pipe_host_dir, &inj.mps_log_host_dir, &why)) {
      return fail("spatial domain \"" + *a.spec.space + "\": " + why);
    }
    inj.env.push_back("GPUOS_SPACE_DOMAIN=" + *a.spec.space);
  }
  if (!daemon_.prepare(m, &inj.socket_host_dir, &why)) return fail("gpuosd: " + why);
  std::string no = write_cdi_spec(opts_.cdi_dir, inj);
  if (no.empty() && !again) no = keep_prepared_claim(ref.uid, PreparedClaim{a.share, a.pod});
  if (!no.empty()) {
    if (!again) {  // (a claim prepared before stays as it was: its pods may use it)
      std::string undo;
      remove_cdi_spec(opts_.cdi_dir, inj);
      if (!daemon_.unprepare(ref.uid, &undo)) log::warn("%s: undoing gpuosd's part: %s", what.c_str(), undo.c_str());
    }
    return fail(no);
  }
  PreparedDevice d;
  d.request_names = {parent_request(a.share.request)};
  d.pool = a.share.pool;
  d.device = a.share.device;
  d.cdi_device_ids.push_back(cdi_device_id(inj));
  if (!opts_.gpu_cdi_device.empty()) d.cdi_device_ids.push_back(expand_gpu_device(gpu_index, uuid));
  r.devices.push_back(std::move(d));
  log::info("%s prepared: %s share %s on %s, pod %s", what.c_str(), a.spec.tenant_class.value_or("?").c_str(),
            a.share.device.c_str(), uuid.c_str(), a.pod ? (a.pod->name + " (" + a.pod->uid + ")").c_str() : "-");
  return r;
}

std::string Plugin::unprepare(const ClaimRef& ref) {
  std::lock_guard<std::mutex> lk(mu_);
  const std::string what = "claim " + ref.claim_namespace + "/" + ref.name + " (" + ref.uid + ")";
  if (!kube_uid(ref.uid)) return what + ": the uid is not 1..36 of [0-9a-z-] (not only dashes)";
  ClaimInjection inj;
  inj.driver = opts_.driver;
  inj.claim_uid = ref.uid;
  // The spec first: no new container gets the claim while gpuosd lets it go.
  if (std::string no = remove_cdi_spec(opts_.cdi_dir, inj); !no.empty()) return what + ": " + no;
  std::string why;
  if (!daemon_.unprepare(ref.uid, &why)) return what + ": gpuosd: " + why;
  forget_prepared_claim(ref.uid);
  log::info("%s unprepared", what.c_str());
  return "";
}

}  // namespace gpuos::dra
