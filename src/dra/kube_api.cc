// SPDX-License-Identifier: Apache-2.0
#include "dra/kube_api.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <memory>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/log.h"

namespace gpuos::dra {
namespace {

using json = nlohmann::json;

constexpr std::size_t kMaxBody = 64u << 20;
// A GPU's product name is whatever NVML says: invalid UTF-8 is replaced, never thrown about.
constexpr auto kReplace = json::error_handler_t::replace;
constexpr int kMaxPublishRounds = 5;
constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

bool fail(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
  return false;
}

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string escape_segment(std::string_view name) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char ch : name) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
        c == '_') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

struct Sink {
  std::string* body;
  bool too_large = false;
};

size_t write_body(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * count;
  if (sink->body->size() + n > kMaxBody) {
    sink->too_large = true;
    return 0;  // aborts the transfer
  }
  sink->body->append(data, n);
  return n;
}

// The token, without the trailing newline a mounted secret may have. False + *why if unreadable.
bool read_token(const std::string& path, std::string* token, std::string* why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(why, "cannot read the token file " + path);
  token->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  while (!token->empty() && (token->back() == '\n' || token->back() == '\r' || token->back() == ' ')) token->pop_back();
  if (token->empty()) return fail(why, "the token file " + path + " is empty");
  if (token->find_first_of("\r\n") != std::string::npos) return fail(why, "the token file " + path + " has several lines");
  return true;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

int64_t pool_generation(const json& slice) {
  const json* spec = slice.contains("spec") ? &slice["spec"] : nullptr;
  if (spec == nullptr || !spec->is_object() || !spec->contains("pool")) return 0;
  const json& pool = (*spec)["pool"];
  if (!pool.is_object() || !pool.contains("generation") || !pool["generation"].is_number_integer()) return 0;
  return pool["generation"].get<int64_t>();
}

bool same_identity(const json& a, const json& b) {
  auto field = [](const json& spec, const char* key) { return spec.is_object() && spec.contains(key) ? spec[key] : json(); };
  auto pool = [&](const json& spec) {
    const json p = field(spec, "pool");
    return p.is_object() && p.contains("name") ? p["name"] : json();
  };
  return field(a, "driver") == field(b, "driver") && field(a, "nodeName") == field(b, "nodeName") && pool(a) == pool(b);
}

}  // namespace

KubeApiOptions in_cluster_options() {
  KubeApiOptions o;
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host != nullptr && host[0] != '\0') {
    std::string h = host;
    if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
    o.base_url = "https://" + h + ":" + (port != nullptr && port[0] != '\0' ? port : "443");
  }
  o.token_file = std::string(kServiceAccountDir) + "/token";
  o.ca_file = std::string(kServiceAccountDir) + "/ca.crt";
  return o;
}

std::string resource_slices_path() { return "/apis/resource.k8s.io/v1/resourceslices"; }
std::string resource_slice_path(std::string_view name) { return resource_slices_path() + "/" + escape_segment(name); }
std::string resource_claim_path(std::string_view claim_namespace, std::string_view name) {
  return "/apis/resource.k8s.io/v1/namespaces/" + escape_segment(claim_namespace) + "/resourceclaims/" +
         escape_segment(name);
}

KubeApi::KubeApi(KubeApiOptions options) : options_(std::move(options)) {
  while (!options_.base_url.empty() && options_.base_url.back() == '/') options_.base_url.pop_back();
  init_curl_once();
}

KubeApi::Response KubeApi::get(const std::string& path) { return request("GET", path, nullptr); }
KubeApi::Response KubeApi::post(const std::string& path, const std::string& json) { return request("POST", path, &json); }
KubeApi::Response KubeApi::put(const std::string& path, const std::string& json) { return request("PUT", path, &json); }
KubeApi::Response KubeApi::del(const std::string& path) { return request("DELETE", path, nullptr); }

KubeApi::Response KubeApi::request(const char* method, const std::string& path, const std::string* body) {
  Response r;
  if (options_.base_url.empty()) {
    r.error = "no API server configured (not in a cluster: KUBERNETES_SERVICE_HOST unset; give --kube-api)";
    return r;
  }
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) {
    r.error = "curl_easy_init failed";
    return r;
  }
  curl_slist* raw = nullptr;
  raw = curl_slist_append(raw, "Accept: application/json");
  if (body != nullptr) {
    raw = curl_slist_append(raw, "Content-Type: application/json");
    raw = curl_slist_append(raw, "Expect:");  // no 100-continue round trip for bodies over 1 KiB
  }
  if (!options_.token_file.empty()) {
    std::string token;
    if (!read_token(options_.token_file, &token, &r.error)) {
      curl_slist_free_all(raw);
      return r;
    }
    raw = curl_slist_append(raw, ("Authorization: Bearer " + token).c_str());
  }
  std::unique_ptr<curl_slist, SlistDeleter> headers(raw);

  const std::string url = options_.base_url + path;
  char error[CURL_ERROR_SIZE] = {0};
  Sink sink{&r.body};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for timeouts: other threads run
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, options_.timeout_ms);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "gpuos-dra");
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!options_.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, options_.ca_file.c_str());
  if (body != nullptr) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  }
  const CURLcode rc = curl_easy_perform(c);
  if (sink.too_large) {
    r.body.clear();
    r.error = std::string(method) + " " + url + ": the answer is larger than 64 MiB";
    return r;
  }
  if (rc != CURLE_OK) {
    r.body.clear();
    r.error = std::string(method) + " " + url + ": " + (error[0] != '\0' ? error : curl_easy_strerror(rc));
    return r;
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  return r;
}

std::string describe_response(const KubeApi::Response& response) {
  if (response.status == 0) return response.error.empty() ? "no answer" : response.error;
  std::string text = "HTTP " + std::to_string(response.status);
  const json body = json::parse(response.body, nullptr, false);
  if (!body.is_discarded() && body.is_object() && body.contains("message") && body["message"].is_string()) {
    text += ": " + body["message"].get<std::string>();
  } else if (!response.body.empty()) {
    text += ": " + response.body.substr(0, 200);
  }
  return text;
}

SlicePublisher::SlicePublisher(KubeApi& api, SliceOptions options)
    : api_(api), options_(std::move(options)), name_(slice_name(options_)) {}

int64_t SlicePublisher::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

bool SlicePublisher::publish(const std::vector<GpuShareInfo>& gpus, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  return publish_locked(gpus, why);
}

bool SlicePublisher::publish_locked(const std::vector<GpuShareInfo>& gpus, std::string* why) {
  std::string reason;
  if (!check_slice_options(options_, &reason)) return fail(why, "ResourceSlice options: " + reason);
  const SharePlan plan = plan_shares(options_, gpus.size());
  if (plan.note != logged_note_) {
    if (!plan.note.empty()) log::warn("ResourceSlice %s: %s", name_.c_str(), plan.note.c_str());
    logged_note_ = plan.note;
  }
  learn_node_uid();
  const std::string path = resource_slice_path(name_);
  for (int round = 0; round < kMaxPublishRounds; ++round) {
    const KubeApi::Response got = api_.get(path);
    if (got.status == 404) {
      const int64_t generation = generation_ + 1;
      const KubeApi::Response made = api_.post(resource_slices_path(), resource_slice(options_, gpus, generation, "").dump(-1, ' ', false, kReplace));
      if (made.status == 200 || made.status == 201) {
        generation_ = generation;
        return true;
      }
      if (made.status == 409) continue;  // created by someone else in between: look again
      return fail(why, "creating ResourceSlice " + name_ + ": " + describe_response(made));
    }
    if (got.status != 200) return fail(why, "reading ResourceSlice " + name_ + ": " + describe_response(got));
    const json current = json::parse(got.body, nullptr, false);
    if (current.is_discarded() || !current.is_object() || !current.contains("spec") ||
        !current.contains("metadata") || !current["metadata"].is_object()) {
      return fail(why, "reading ResourceSlice " + name_ + ": the answer is not a ResourceSlice");
    }
    const json& spec = current["spec"];
    const int64_t server_generation = pool_generation(current);
    const json wanted = resource_slice_spec(options_, gpus, 0);
    if (same_offer(wanted, spec) && owned_as_wanted(current)) {
      generation_ = server_generation;
      return true;
    }
    if (!same_identity(wanted, spec)) {
      // driver, nodeName and pool name are immutable: start over with a new object.
      const KubeApi::Response gone = api_.del(path);
      if (gone.status != 200 && gone.status != 202 && gone.status != 404) {
        return fail(why, "replacing ResourceSlice " + name_ + ": " + describe_response(gone));
      }
      generation_ = std::max(generation_, server_generation);
      continue;
    }
    std::string resource_version;
    if (const json& meta = current["metadata"]; meta.contains("resourceVersion") && meta["resourceVersion"].is_string()) {
      resource_version = meta["resourceVersion"].get<std::string>();
    }
    const int64_t generation = std::max(generation_, server_generation) + 1;
    const KubeApi::Response put = api_.put(path, resource_slice(options_, gpus, generation, resource_version).dump(-1, ' ', false, kReplace));
    if (put.status == 200 || put.status == 201) {
      generation_ = generation;
      return true;
    }
    if (put.status == 409) continue;  // changed since our GET: read it again
    return fail(why, "updating ResourceSlice " + name_ + ": " + describe_response(put));
  }
  return fail(why, "ResourceSlice " + name_ + ": still conflicting after " + std::to_string(kMaxPublishRounds) +
                       " attempts (another writer keeps changing it)");
}

void SlicePublisher::learn_node_uid() {
  if (!options_.node_uid.empty()) return;
  const KubeApi::Response r = api_.get("/api/v1/nodes/" + pool_name(options_));
  const json node = r.status == 200 ? json::parse(r.body, nullptr, false) : json();
  const json* uid = node.is_object() && node.contains("metadata") && node["metadata"].is_object()
                        ? (node["metadata"].contains("uid") ? &node["metadata"]["uid"] : nullptr)
                        : nullptr;
  if (uid != nullptr && uid->is_string() && !uid->get<std::string>().empty()) {
    options_.node_uid = uid->get<std::string>();
    return;
  }
  // Published without an owner meanwhile (asked again next time): a slice is still right without.
  if (!node_uid_warned_) {
    log::warn("Node %s: cannot read its uid (%s); ResourceSlice %s has no owner until it can",
              options_.node_name.c_str(), describe_response(r).c_str(), name_.c_str());
    node_uid_warned_ = true;
  }
}

bool SlicePublisher::owned_as_wanted(const json& current) const {
  if (options_.node_uid.empty()) return true;
  const json& meta = current["metadata"];
  if (!meta.contains("ownerReferences") || !meta["ownerReferences"].is_array()) return false;
  for (const json& o : meta["ownerReferences"]) {
    if (o.is_object() && o.value("kind", "") == "Node" && o.value("uid", "") == options_.node_uid) return true;
  }
  return false;
}

bool SlicePublisher::remove(std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  const KubeApi::Response r = api_.del(resource_slice_path(name_));
  if (r.status == 200 || r.status == 202 || r.status == 404) return true;
  return fail(why, "deleting ResourceSlice " + name_ + ": " + describe_response(r));
}

bool post_node_event(KubeApi& api, const std::string& node_name, const std::string& component,
                     const std::string& type, const std::string& reason, const std::string& message,
                     std::string* why) {
  json involved = {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node_name}};
  const KubeApi::Response node = api.get("/api/v1/nodes/" + node_name);
  if (node.status == 200) {  // the uid ties the event to this Node (without it: to its name)
    const json n = json::parse(node.body, nullptr, false);
    if (n.is_object() && n.contains("metadata") && n["metadata"].is_object() && n["metadata"].contains("uid") &&
        n["metadata"]["uid"].is_string()) {
      involved["uid"] = n["metadata"]["uid"];
    }
  }
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char stamp[32];
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
  const json event = {{"apiVersion", "v1"},
                      {"kind", "Event"},
                      {"metadata", {{"generateName", node_name + "." + component + "."}, {"namespace", "default"}}},
                      {"involvedObject", involved},
                      {"type", type},
                      {"reason", reason},
                      {"message", message},
                      {"source", {{"component", component}, {"host", node_name}}},
                      {"reportingComponent", component},
                      {"reportingInstance", node_name},
                      {"firstTimestamp", stamp},
                      {"lastTimestamp", stamp},
                      {"count", 1}};
  const KubeApi::Response r = api.post("/api/v1/namespaces/default/events", event.dump());
  if (r.status == 200 || r.status == 201) return true;
  return fail(why, "posting Event " + reason + " about Node " + node_name + ": " + describe_response(r));
}

}  // namespace gpuos::dra
