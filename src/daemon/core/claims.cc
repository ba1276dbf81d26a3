// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/claims.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "common/ipc.h"
#include "common/kube_names.h"
#include "common/text.h"
#include "common/log.h"
#include "common/tenant_numbers.h"

namespace gpuos::daemon {
namespace {

bool has_nul_within(const char* s, std::size_t n) { return std::memchr(s, '\0', n) != nullptr; }

bool bare_uuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

bool plain_text(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f || c == '=') return false;
  }
  return true;
}

std::string serialize(const Claim& c) {
  std::ostringstream o;
  o << "uid=" << c.uid << "\tnamespace=" << c.claim_namespace << "\tname=" << c.claim_name
    << "\tpod=" << c.pod_name << "\tpod_uid=" << c.pod_uid << "\tgpu=" << c.gpu_uuid << "\tdomain=" << c.space_domain
    << "\tclass=" << c.tenant_class << "\tpriority=" << c.priority << "\tweight=" << c.weight
    << "\tsms=" << c.space_sms << "\tmem=" << c.mem_bytes << "\tborrow=" << c.borrow_bytes
    << "\tslowdown=" << c.max_slowdown_permille << "\n";
  return o.str();
}

template <typename T>
bool to_number(const std::string& s, T* out) {  // the whole string, decimal, in T's range
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

// One line of the file back into the message it came from, so it is checked by the same rules.
bool parse_line(const std::string& line, Claim* out) {
  gpuos_msg_claim_prepare m{};
  std::istringstream in(line);
  std::string field;
  auto copy = [](char* dst, std::size_t n, const std::string& v) {
    if (v.size() >= n) return false;
    std::memcpy(dst, v.data(), v.size());
    return true;
  };
  while (std::getline(in, field, '\t')) {
    const auto eq = field.find('=');
    if (eq == std::string::npos) return false;
    const std::string k = field.substr(0, eq), v = field.substr(eq + 1);
    bool ok = true;
    if (k == "uid") ok = copy(m.claim_uid, sizeof(m.claim_uid), v);
    else if (k == "namespace") ok = copy(m.claim_namespace, sizeof(m.claim_namespace), v);
    else if (k == "name") ok = copy(m.claim_name, sizeof(m.claim_name), v);
    else if (k == "pod") ok = copy(m.pod_name, sizeof(m.pod_name), v);
    else if (k == "pod_uid") ok = copy(m.pod_uid, sizeof(m.pod_uid), v);
    else if (k == "gpu") ok = copy(m.gpu_uuid, sizeof(m.gpu_uuid), v);
    else if (k == "domain") ok = copy(m.space_domain, sizeof(m.space_domain), v);
    else if (k == "class") ok = to_number(v, &m.tenant_class);
    else if (k == "priority") ok = to_number(v, &m.priority);
    else if (k == "weight") ok = to_number(v, &m.weight);
    else if (k == "sms") ok = to_number(v, &m.space_sms);
    else if (k == "mem") ok = to_number(v, &m.mem_bytes);
    else if (k == "borrow") ok = to_number(v, &m.borrow_bytes);
    else if (k == "slowdown") ok = to_number(v, &m.max_slowdown_permille);
    // (an unknown key is a newer gpuosd's: ignored)
    if (!ok) return false;
  }
  return claim_from_message(m, out).empty();
}

}  // namespace

std::string claim_from_message(const gpuos_msg_claim_prepare& m, Claim* out) {
  struct Str {
    const char* field;
    const char* data;
    std::size_t size;
  };
  for (const Str& s : {Str{"claim_uid", m.claim_uid, sizeof(m.claim_uid)},
                       Str{"claim_namespace", m.claim_namespace, sizeof(m.claim_namespace)},
                       Str{"claim_name", m.claim_name, sizeof(m.claim_name)},
                       Str{"pod_name", m.pod_name, sizeof(m.pod_name)},
                       Str{"pod_uid", m.pod_uid, sizeof(m.pod_uid)},
                       Str{"gpu_uuid", m.gpu_uuid, sizeof(m.gpu_uuid)},
                       Str{"space_domain", m.space_domain, sizeof(m.space_domain)}}) {
    if (!has_nul_within(s.data, s.size)) return std::string(s.field) + " is not NUL-terminated";
  }
  Claim c;
  c.uid = m.claim_uid;
  c.claim_namespace = m.claim_namespace;
  c.claim_name = m.claim_name;
  c.pod_name = m.pod_name;
  c.pod_uid = m.pod_uid;
  c.gpu_uuid = m.gpu_uuid;
  c.space_domain = m.space_domain;
  if (!kube_uid(c.uid)) return "claim uid \"" + printable(c.uid) + "\" is not 1..36 of [0-9a-z-]";
  if (!dns_label(c.claim_namespace)) {
    return "claim namespace \"" + printable(c.claim_namespace) + "\" is not a DNS label";
  }
  if (!dns_subdomain(c.claim_name)) return "claim name \"" + printable(c.claim_name) + "\" is not a DNS subdomain";
  if (!c.pod_name.empty() && !dns_subdomain(c.pod_name)) {
    return "pod name \"" + printable(c.pod_name) + "\" is not a DNS subdomain";
  }
  if (!c.pod_uid.empty() && !kube_uid(c.pod_uid)) {
    return "pod uid \"" + printable(c.pod_uid) + "\" is not 1..36 of [0-9a-z-]";
  }
  if (c.pod_name.empty() != c.pod_uid.empty()) return "a pod needs both its name and its uid";
  if (!c.gpu_uuid.empty() && !bare_uuid(c.gpu_uuid)) {
    return "gpu uuid \"" + printable(c.gpu_uuid) + "\" is not a bare 36-character UUID";
  }
  if (!plain_text(c.space_domain)) return "space domain \"" + printable(c.space_domain) + "\" has odd characters";
  // The class, each number in its range, quota + borrow within 64 bits: the check REGISTER and the
  // CLI make too (tenant_numbers.h).
  const TenantNumbers n = numbers_of(m);
  if (std::string no = tenant_numbers_refusal(n); !no.empty()) return no;
  if (m.borrow_bytes != 0 && m.mem_bytes == 0) return "borrow needs a memory quota";
  if (m.space_sms != 0 && c.space_domain.empty()) return "SMs need a spatial domain";
  if (m.max_slowdown_permille != 0 && m.tenant_class != GPUOS_CLASS_GUARANTEED) {
    return "a latency budget is for guaranteed tenants only";
  }
  c.tenant_class = n.tenant_class;
  c.priority = n.priority;
  c.weight = n.weight;
  c.space_sms = n.space_sms;
  c.mem_bytes = n.mem_bytes;
  c.borrow_bytes = n.borrow_bytes;
  c.max_slowdown_permille = n.max_slowdown_permille;
  *out = std::move(c);
  return "";
}

ClaimStore::ClaimStore(std::string path) : path_(std::move(path)) {}

void ClaimStore::load() {
  claims_.clear();
  if (path_.empty()) return;
  std::ifstream in(path_);
  if (!in) return;
  std::string line;
  unsigned n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    Claim c;
    if (!parse_line(line, &c)) {
      log::warn("%s:%u: not a claim; skipped", path_.c_str(), n);
      continue;
    }
    claims_[c.uid] = std::move(c);
  }
}

bool ClaimStore::put(const Claim& c, std::string* why) {
  auto prev = claims_.find(c.uid);
  std::optional<Claim> old;
  if (prev != claims_.end()) old = prev->second;
  claims_[c.uid] = c;
  if (!save(why)) {
    if (old) claims_[c.uid] = *old;
    else claims_.erase(c.uid);
    return false;
  }
  return true;
}

void ClaimStore::erase(const std::string& uid) {
  if (claims_.erase(uid) == 0) return;
  std::string why;
  if (!save(&why)) log::warn("%s", why.c_str());
}

const Claim* ClaimStore::find(const std::string& uid) const {
  auto it = claims_.find(uid);
  return it == claims_.end() ? nullptr : &it->second;
}

bool ClaimStore::save(std::string* why) const {
  if (path_.empty()) return true;
  std::string text;
  for (const auto& [uid, c] : claims_) text += serialize(c);
  const std::string tmp = path_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why = "cannot write " + tmp + ": " + std::strerror(errno);
    return false;
  }
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *why = "cannot write " + tmp + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    done += static_cast<std::size_t>(w);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path_.c_str()) != 0) {
    *why = "cannot replace " + path_ + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

std::string pod_uid_from_cgroup_text(const std::string& text) {
  // The last "pod" followed by a uuid (36 characters of hex and - or _) in any line.
  std::string found;
  for (std::size_t at = text.find("pod"); at != std::string::npos; at = text.find("pod", at + 3)) {
    const std::string cand = text.substr(at + 3, 36);
    if (cand.size() != 36) continue;
    std::string uid = cand;
    for (char& c : uid) {
      if (c == '_') c = '-';
    }
    if (bare_uuid(uid)) {
      const char after = at + 39 < text.size() ? text[at + 39] : '\n';
      if (after == '/' || after == '.' || after == '\n') found = uid;
    }
  }
  return found;
}

std::string pod_uid_of_process(pid_t pid, const std::string& proc_root, const PodCgroups& cgroups) {
  return pod_of_process(pid, proc_root, cgroups).uid;
}

pid_t innermost_pid(pid_t host_pid, const std::string& proc_root) {
  std::ifstream in(proc_root + "/" + std::to_string(host_pid) + "/status");
  if (!in) return 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    long v = 0, last = 0;
    while (fields >> v) last = v;
    return static_cast<pid_t>(last);
  }
  return host_pid;  // a kernel without NSpid (before 4.1): no pid namespaces to tell apart
}

ClaimPeer claim_peer_of(pid_t pid, uid_t uid, const std::string& proc_root, const PodCgroups& cgroups) {
  ClaimPeer p;
  p.pid = pid;
  p.uid = uid;
  if (pid <= 0) return p;
  PodOfProcess pod = pod_of_process(pid, proc_root, cgroups);
  p.pod_uid = std::move(pod.uid);
  p.pod_refusal = std::move(pod.refusal);
  // A namespace is the same one when its nsfs inode (and device) is.
  auto same = [&](const char* ns, bool* out) {
    struct stat mine, theirs;
    const std::string self = proc_root + "/self/ns/" + ns;
    const std::string peer = proc_root + "/" + std::to_string(pid) + "/ns/" + ns;
    if (::stat(self.c_str(), &mine) != 0 || ::stat(peer.c_str(), &theirs) != 0) return false;
    *out = mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev;
    return true;
  };
  p.ns_known = same("pid", &p.host_pid_ns) && same("user", &p.host_user_ns);
  return p;
}

std::string claim_peer_refusal(const Claim& c, const ClaimPeer& p) {
  const std::string who = "pid " + std::to_string(p.pid) + " (uid " + std::to_string(p.uid) + ")";
  const std::string only = "a claim's socket serves its claim's containers only";
  if (p.pid <= 0) return only + "; the peer's pid is not visible to gpuosd (run it with hostPID)";
  // A pod named where only a user could have made it: no fallback to the container checks below.
  if (!p.pod_refusal.empty()) return only + "; " + who + ": " + p.pod_refusal;
  if (!p.pod_uid.empty()) {
    if (c.pod_uid.empty() || p.pod_uid == c.pod_uid) return "";
    return only + "; " + who + " is in pod " + p.pod_uid + ", not the claim's";
  }
  if (!p.ns_known) return only + "; cannot read the namespaces of " + who;
  if (p.host_pid_ns) return only + "; " + who + " is a host process in no pod";
  if (!p.host_user_ns) return only + "; " + who + " is in a user namespace of its own, in no pod";
  return "";
}

std::string claim_socket_dir(const std::string& socket_path, const std::string& uid) {
  const auto slash = socket_path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : socket_path.substr(0, slash);
  return dir + "/claims/" + uid;
}

}  // namespace gpuos::daemon
