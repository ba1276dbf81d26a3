// SPDX-License-Identifier: Apache-2.0
// The Kubernetes API server as gpuos-dra (#26) uses it: a few REST calls over libcurl with the
// service-account token, and the publisher that keeps this node's ResourceSlice true.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "dra/resource_slice.h"

namespace gpuos::dra {

struct KubeApiOptions {
  std::string base_url;    // "https://10.96.0.1:443", no trailing slash needed; "" = not configured
  std::string token_file;  // read per request (tokens rotate); "" = no Authorization header
  std::string ca_file;     // the CA that signs the server's certificate (https); "" = the system's CAs
  long timeout_ms = 10000; // whole request, connection included
};

// In a pod: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (an IPv6 host bracketed; port
// 443 when unset), /var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}. base_url is "" when
// KUBERNETES_SERVICE_HOST is unset (not in a cluster).
KubeApiOptions in_cluster_options();

// API paths. Names are percent-encoded where they are not DNS-label characters.
std::string resource_slices_path();                           // /apis/resource.k8s.io/v1/resourceslices
std::string resource_slice_path(std::string_view name);       // .../resourceslices/NAME
std::string resource_claim_path(std::string_view claim_namespace, std::string_view name);

// Thread-safety: every method may be called from any thread at once (one curl handle per call; the
// options are never changed after construction).
class KubeApi {
 public:
  explicit KubeApi(KubeApiOptions options);

  struct Response {
    long status = 0;    // HTTP status; 0 when no answer came (error says why)
    std::string body;   // at most 64 MiB (more: error set, status 0)
    std::string error;  // transport failure text ("" when an HTTP answer came, whatever its status)
  };
  // path starts with '/'. Bearer token from token_file, Accept and (with a body) Content-Type
  // application/json, TLS verified against ca_file (peer and host name) when base_url is https.
  Response get(const std::string& path);
  Response post(const std::string& path, const std::string& json);
  Response put(const std::string& path, const std::string& json);
  Response del(const std::string& path);

  const KubeApiOptions& options() const { return options_; }

 private:
  Response request(const char* method, const std::string& path, const std::string* body);
  KubeApiOptions options_;
};

// "HTTP 422: <the Status object's message>" or "cannot reach <url>: <transport error>": what went
// wrong with a response, for messages.
std::string describe_response(const KubeApi::Response& response);

// Posts a core/v1 Event about Node node_name (namespace "default", where `kubectl describe node`
// finds it): type "Warning" or "Normal", a CamelCase reason, the message; reported by component
// (e.g. "gpuos-dra") on instance node_name. False + *why when the API server did not take it.
bool post_node_event(KubeApi& api, const std::string& node_name, const std::string& component,
                     const std::string& type, const std::string& reason, const std::string& message,
                     std::string* why);

// Keeps the API server holding exactly this node's slice (resource_slice.h) for the GPUs given.
// Thread-safety: publish and remove may be called from any thread; calls are serialized.
class SlicePublisher {
 public:
  SlicePublisher(KubeApi& api, SliceOptions options);

  // GET the slice by name; absent → POST it with generation 1 (or one above the last published);
  // present and offering the same (same_offer) → nothing written, its generation remembered;
  // otherwise PUT with the server's resourceVersion and generation + 1 (a slice whose driver,
  // nodeName or pool name differ, which are immutable, is deleted and created again). 409 Conflict
  // (someone else wrote it in between) → again from the GET, at most 5 rounds. A share plan that had
  // to cap the shares (plan_shares) is logged once per change. False + *why ("HTTP 422: ...",
  // transport error, or bad options) on failure.
  bool publish(const std::vector<GpuShareInfo>& gpus, std::string* why);
  // DELETE the slice; absent (404) is fine. False + *why otherwise.
  bool remove(std::string* why);

  // The pool generation last published or found unchanged; 0 before the first success.
  int64_t generation() const;
  const std::string& name() const { return name_; }

 private:
  bool publish_locked(const std::vector<GpuShareInfo>& gpus, std::string* why);
  KubeApi& api_;
  SliceOptions options_;  // guarded by mu_ (node_uid is learnt)
  const std::string name_;
  mutable std::mutex mu_;
  int64_t generation_ = 0;   // guarded by mu_
  std::string logged_note_;  // guarded by mu_: the plan note last logged
  bool node_uid_warned_ = false;  // guarded by mu_
  // The Node's uid, once (GET /api/v1/nodes/NAME), for the slice's owner reference.
  void learn_node_uid();
  // Whether the slice on the server names our Node as its owner (when we know its uid).
  bool owned_as_wanted(const nlohmann::json& current) const;
};

}  // namespace gpuos::dra
