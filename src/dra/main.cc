// SPDX-License-Identifier: Apache-2.0
// gpuos-dra: the Kubernetes DRA kubelet plugin of gpuos (docs/KUBERNETES.md). It registers with
// the kubelet (plugin registration v1; again after a refusal), serves the DRA node service (v1 and
// v1beta1) on its socket, publishes this node's gpuos shares as a ResourceSlice, prepares claims
// through gpuosd (plugin.h), and answers the kubelet's gRPC liveness and readiness probes. Runs in
// the foreground until SIGTERM/SIGINT; its ResourceSlice stays when it stops.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "client/client.h"
#include "common/command_line.h"
#include "common/files.h"
#include "common/log.h"
#include "dra/kube_api.h"
#include "dra/node_check.h"
#include "dra/plugin.h"
#include "dra/dra_api.h"
#include "dra/proto/health_v1.grpc.pb.h"
#include "dra/proto/pluginregistration_v1.grpc.pb.h"

namespace gpuos::dra {
namespace {


namespace reg = pluginregistration;

// gpuosd over its control socket (as an admin: the plugin runs as root beside it).
class GpuosdNode final : public NodeDaemon {
 public:
  explicit GpuosdNode(std::string socket) : socket_(std::move(socket)) {}
  bool prepare(const gpuos_msg_claim_prepare& m, std::string* dir, std::string* why) override {
    return client::prepare_claim(socket_, m, dir, why);
  }
  bool unprepare(const std::string& uid, std::string* why) override { return client::unprepare_claim(socket_, uid, why); }
  bool gpus(std::vector<GpuShareInfo>* out, std::string* why) override {
    client::Listing l;
    if (!client::list_tenants(socket_, false, &l, why)) return false;
    out->clear();
    for (const gpuos_msg_gpu_info& g : l.gpus) {
      GpuShareInfo s;
      s.index = g.index;
      s.uuid = std::string(g.uuid, strnlen(g.uuid, sizeof(g.uuid)));
      s.product_name = std::string(g.name, strnlen(g.name, sizeof(g.name)));
      s.sm_count = g.sm_count;
      s.total_mem_bytes = g.total_mem_bytes;
      out->push_back(std::move(s));
    }
    return true;
  }
  bool space_domain(const std::string& domain, std::string* pipe, std::string* logs, std::string* why) override {
    client::SpaceDomainInfo info;
    if (client::query_space_domain(socket_, domain, &info, why) != client::SpaceQuery::kAnswered) return false;
    if (info.status != GPUOS_OK) {
      *why = info.text;
      return false;
    }
    *pipe = info.pipe_dir;
    *logs = info.log_dir;
    return true;
  }

 private:
  std::string socket_;
};

class ApiServerClaims final : public ClaimSource {
 public:
  explicit ApiServerClaims(KubeApi& api) : api_(api) {}
  bool fetch(const std::string& ns, const std::string& name, std::string* json, std::string* why) override {
    KubeApi::Response r = api_.get("/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims/" + name);
    if (!r.error.empty()) {
      *why = "API server: " + r.error;
      return false;
    }
    if (r.status != 200) {
      *why = "API server answered " + std::to_string(r.status) + ": " + r.body.substr(0, 300);
      return false;
    }
    *json = std::move(r.body);
    return true;
  }

 private:
  KubeApi& api_;
};

// The two DRA versions differ only in their package: one template serves both.
template <typename Api>
class DraService final : public Api::DRAPlugin::Service {
 public:
  explicit DraService(Plugin& p) : plugin_(p) {}
  grpc::Status NodePrepareResources(grpc::ServerContext*, const typename Api::NodePrepareResourcesRequest* req,
                                    typename Api::NodePrepareResourcesResponse* resp) override {
    for (const auto& c : req->claims()) {
      PrepareResult r = plugin_.prepare(ClaimRef{c.namespace_(), c.uid(), c.name()});
      auto& out = (*resp->mutable_claims())[c.uid()];
      out.set_error(r.error);
      for (const PreparedDevice& d : r.devices) {
        auto* dev = out.add_devices();
        for (const auto& n : d.request_names) dev->add_request_names(n);
        dev->set_pool_name(d.pool);
        dev->set_device_name(d.device);
        for (const auto& id : d.cdi_device_ids) dev->add_cdi_device_ids(id);
      }
    }
    return grpc::Status::OK;
  }
  grpc::Status NodeUnprepareResources(grpc::ServerContext*, const typename Api::NodeUnprepareResourcesRequest* req,
                                      typename Api::NodeUnprepareResourcesResponse* resp) override {
    for (const auto& c : req->claims()) {
      (*resp->mutable_claims())[c.uid()].set_error(plugin_.unprepare(ClaimRef{c.namespace_(), c.uid(), c.name()}));
    }
    return grpc::Status::OK;
  }

 private:
  Plugin& plugin_;
};

class RegistrationService final : public reg::Registration::Service {
 public:
  // on_status: told each answer of the kubelet (false: it refused the plugin).
  RegistrationService(std::string driver, std::string endpoint, std::function<void(bool)> on_status)
      : driver_(std::move(driver)), endpoint_(std::move(endpoint)), on_status_(std::move(on_status)) {}
  grpc::Status GetInfo(grpc::ServerContext*, const reg::InfoRequest*, reg::PluginInfo* info) override {
    info->set_type("DRAPlugin");
    info->set_name(driver_);
    info->set_endpoint(endpoint_);
    info->add_supported_versions("v1.DRAPlugin");
    info->add_supported_versions("v1beta1.DRAPlugin");
    return grpc::Status::OK;
  }
  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*, const reg::RegistrationStatus* s,
                                        reg::RegistrationStatusResponse*) override {
    if (s->plugin_registered()) {
      log::info("the kubelet registered %s", driver_.c_str());
    } else {
      log::error("the kubelet did not register %s: %s", driver_.c_str(), s->error().c_str());
    }
    registered_ = s->plugin_registered();
    on_status_(s->plugin_registered());
    return grpc::Status::OK;
  }
  bool registered() const { return registered_; }

 private:
  std::string driver_, endpoint_;
  std::function<void(bool)> on_status_;
  std::atomic<bool> registered_{false};
};

// The kubelet's gRPC probes (grpc.health.v1 Check). Service "liveness" (or ""): the plugin answers on
// its own sockets, as the kubelet would call it: GetInfo on the registration socket and a
// NodePrepareResources of no claims on the DRA socket, with the kubelet's deadlines. "readiness":
// that, and the kubelet registered the plugin (after a refusal it is not ready until it is).
class HealthService final : public grpc::health::v1::Health::Service {
 public:
  HealthService(std::string reg_socket, std::string dra_socket, const RegistrationService& registration)
      : reg_socket_(std::move(reg_socket)), dra_socket_(std::move(dra_socket)), registration_(registration) {}
  grpc::Status Check(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest* req,
                     grpc::health::v1::HealthCheckResponse* resp) override {
    const std::string& service = req->service();
    if (!service.empty() && service != "liveness" && service != "readiness") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service (liveness, readiness)");
    }
    std::string why = self_check();
    if (why.empty() && service == "readiness" && !registration_.registered()) why = "not registered with the kubelet";
    resp->set_status(why.empty() ? grpc::health::v1::HealthCheckResponse::SERVING
                                 : grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    std::lock_guard<std::mutex> lk(mu_);
    std::string& last = service == "readiness" ? last_readiness_ : last_liveness_;
    if (why != last) {
      if (why.empty()) {
        log::info("%s: healthy again", service.empty() ? "liveness" : service.c_str());
      } else {
        log::warn("%s: %s", service.empty() ? "liveness" : service.c_str(), why.c_str());
      }
      last = why;
    }
    return grpc::Status::OK;
  }

 private:
  std::string self_check() const {
    auto deadline = [](grpc::ClientContext* c, int seconds) {
      c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
      return c;
    };
    auto reg = reg::Registration::NewStub(grpc::CreateChannel("unix://" + reg_socket_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext c1;
    reg::InfoRequest info_req;
    reg::PluginInfo info;
    if (grpc::Status s = reg->GetInfo(deadline(&c1, 1), info_req, &info); !s.ok()) {
      return "GetInfo on " + reg_socket_ + ": " + s.error_message();
    }
    auto dra = DraV1::DRAPlugin::NewStub(grpc::CreateChannel("unix://" + dra_socket_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext c2;
    DraV1::NodePrepareResourcesRequest prep_req;  // no claims: prepares nothing
    DraV1::NodePrepareResourcesResponse prep;
    if (grpc::Status s = dra->NodePrepareResources(deadline(&c2, 5), prep_req, &prep); !s.ok()) {
      return "NodePrepareResources on " + dra_socket_ + ": " + s.error_message();
    }
    return "";
  }
  std::string reg_socket_, dra_socket_;
  const RegistrationService& registration_;
  std::mutex mu_;
  std::string last_liveness_, last_readiness_;  // what was logged last ("" = healthy)
};

std::unique_ptr<grpc::Server> serve(const std::string& socket, std::vector<grpc::Service*> services, std::string* why) {
  ::unlink(socket.c_str());  // a previous plugin's (the kubelet finds plugins by these files)
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("unix://" + socket, grpc::InsecureServerCredentials(), &port);
  for (grpc::Service* s : services) b.RegisterService(s);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  if (!server) *why = "cannot serve on " + socket;
  return server;
}

}  // namespace
}  // namespace gpuos::dra

int main(int argc, char** argv) {
  using namespace gpuos;
  using namespace gpuos::dra;
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);  // before gRPC's threads: they inherit it

  CLI::App app{"gpuos-dra: the Kubernetes DRA kubelet plugin of gpuos (runs in the foreground)", "gpuos-dra"};
  app.formatter(std::make_shared<Formatter>(Formatter::ValueNames{
      {"node-name", "NODE"}, {"driver-name", "NAME"}, {"gpuos-socket", "PATH"}, {"plugin-dir", "DIR"},
      {"registry-dir", "DIR"}, {"cdi-dir", "DIR"}, {"interposer", "PATH"}, {"gpu-cdi-device", "ID"},
      {"kube-api", "URL"}, {"kube-token-file", "FILE"}, {"kube-ca-file", "FILE"}, {"log-level", "LEVEL"},
      {"health-listen", "HOST:PORT"}, {"nvidia-runtime-config", "PATH"}}));
  app.set_version_flag("--version", std::string("gpuos-dra ") + GPUOS_VERSION);
  PluginOptions po;
  SliceOptions so;
  std::string gpuos_socket = "/run/gpuos/gpuosd.sock", plugin_dir, registry_dir = "/var/lib/kubelet/plugins_registry";
  std::string kube_api, token_file, ca_file, log_level = "info";
  uint32_t publish_interval_s = 10, registration_retry_s = 10;
  std::string health_listen;
  // The GPU's device nodes and driver come as the NVIDIA container toolkit's CDI device, named beside
  // the claim's own (docs/KUBERNETES.md, "Prerequisites"); "none" leaves the GPU to other means.
  po.gpu_cdi_device = "nvidia.com/gpu={uuid}";
  // Where the NVIDIA container runtime's config may be: the toolkit's package, the GPU Operator's.
  std::vector<std::string> runtime_configs = {
      "/etc/nvidia-container-runtime/config.toml",
      "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"};
  app.add_option("--node-name", po.node_name, "this node's name (the downward API's spec.nodeName)")->required();
  app.add_option("--driver-name", po.driver, "the DRA driver name (default gpuos.io)");
  app.add_option("--gpuos-socket", gpuos_socket, "gpuosd's control socket (default /run/gpuos/gpuosd.sock)");
  app.add_option("--plugin-dir", plugin_dir, "where the DRA service socket lives (default /var/lib/kubelet/plugins/DRIVER)");
  app.add_option("--registry-dir", registry_dir, "the kubelet's plugin registry directory (default /var/lib/kubelet/plugins_registry)");
  app.add_option("--cdi-dir", po.cdi_dir, "where CDI specs are written, the runtime's CDI directory (default /var/run/cdi)");
  app.add_option("--interposer", po.interposer, "libgpuos.so's path on the host (default /usr/lib/libgpuos.so)");
  app.add_option("--gpu-cdi-device", po.gpu_cdi_device,
                 "the GPU's own CDI device added to each claim, {index} and {uuid} replaced, or none "
                 "(default nvidia.com/gpu={uuid}: the NVIDIA container toolkit's CDI device)");
  app.add_option("--nvidia-runtime-config", runtime_configs,
                 "the NVIDIA container runtime's config.toml, checked for GPU access without a claim "
                 "(the first that exists; repeatable; none: no check; default "
                 "/etc/nvidia-container-runtime/config.toml, "
                 "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml)");
  app.add_option("--guaranteed-shares", so.guaranteed_shares, "guaranteed shares per GPU (default 4)");
  app.add_option("--best-effort-shares", so.best_effort_shares, "best-effort shares per GPU (default 8)");
  app.add_option("--publish-interval-s", publish_interval_s, "seconds between checks of the ResourceSlice (default 10)")
      ->check(CLI::Range(1u, 3600u));
  app.add_option("--registration-retry-s", registration_retry_s,
                 "seconds before registering again after the kubelet refused the plugin (default 10)")
      ->check(CLI::Range(1u, 3600u));
  app.add_option("--health-listen", health_listen,
                 "where to answer the kubelet's gRPC probes (grpc.health.v1, services liveness and readiness), "
                 "e.g. 0.0.0.0:51515; none by default");
  app.add_option("--kube-api", kube_api, "API server URL (default: in-cluster)");
  app.add_option("--kube-token-file", token_file, "bearer token file (default: the service account's)");
  app.add_option("--kube-ca-file", ca_file, "CA bundle of the API server (default: the service account's)");
  app.add_option("--log-level", log_level, "error|warn|info|debug (default info)");
  if (int rc = parse_command_line(app, argc, argv, "gpuos-dra"); rc >= 0) return rc;

  log::init("gpuos-dra", log::Level::kInfo);
  if (log::Level l; log::parse_level(log_level, &l)) {
    log::set_level(l);
  } else {
    log::error("--log-level %s: not one of error, warn, info, debug", log_level.c_str());
    return kExitUsage;
  }
  if (po.gpu_cdi_device == "none") po.gpu_cdi_device.clear();
  if (runtime_configs == std::vector<std::string>{"none"}) runtime_configs.clear();
  so.driver = po.driver;
  so.node_name = po.node_name;
  if (plugin_dir.empty()) plugin_dir = "/var/lib/kubelet/plugins/" + po.driver;
  KubeApiOptions ko = in_cluster_options();
  if (!kube_api.empty()) ko.base_url = kube_api;
  if (!token_file.empty()) ko.token_file = token_file;
  if (!ca_file.empty()) ko.ca_file = ca_file;
  if (ko.base_url.empty()) {
    log::error("no API server: not in a cluster (KUBERNETES_SERVICE_HOST unset) and no --kube-api");
    return kExitFailure;
  }
  // What each claim was prepared with, kept beside dra.sock (on the host: it outlives the pod).
  po.state_dir = plugin_dir + "/prepared";
  for (const std::string& d : {plugin_dir, registry_dir, po.cdi_dir, po.state_dir}) {
    std::string err;
    if (!make_dirs(d, 0750, 0750, &err)) {
      log::error("%s", err.c_str());
      return kExitFailure;
    }
  }

  KubeApi api(ko);
  ApiServerClaims claims(api);
  GpuosdNode node(gpuos_socket);
  Plugin plugin(po, claims, node);
  DraService<DraV1> dra_v1(plugin);
  DraService<DraV1beta1> dra_v1beta1(plugin);
  const std::string dra_socket = plugin_dir + "/dra.sock";
  const std::string reg_socket = registry_dir + "/" + po.driver + "-reg.sock";
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false, refused = false;
  RegistrationService registration(po.driver, dra_socket, [&](bool registered) {
    std::lock_guard<std::mutex> lk(mu);
    refused = !registered;
    cv.notify_all();
  });
  HealthService health(reg_socket, dra_socket, registration);
  std::string why;
  // The service first: the kubelet calls it as soon as it has read the registration.
  auto dra_server = serve(dra_socket, {&dra_v1, &dra_v1beta1}, &why);
  if (!dra_server) {
    log::error("%s", why.c_str());
    return kExitFailure;
  }
  auto reg_server = serve(reg_socket, {&registration}, &why);
  if (!reg_server) {
    log::error("%s", why.c_str());
    dra_server->Shutdown();
    ::unlink(dra_socket.c_str());
    return kExitFailure;
  }
  std::unique_ptr<grpc::Server> health_server;
  if (!health_listen.empty()) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort(health_listen, grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&health);
    health_server = b.BuildAndStart();
    if (!health_server || port == 0) {
      log::error("--health-listen %s: cannot listen there", health_listen.c_str());
      reg_server->Shutdown();
      dra_server->Shutdown();
      ::unlink(reg_socket.c_str());
      ::unlink(dra_socket.c_str());
      return kExitFailure;
    }
    log::info("answering health probes on %s (port %d)", health_listen.c_str(), port);
  }
  log::info("serving %s on %s (registration %s), node %s, gpuosd %s, API server %s", po.driver.c_str(),
            dra_socket.c_str(), reg_socket.c_str(), po.node_name.c_str(), gpuos_socket.c_str(), ko.base_url.c_str());

  // A refused registration is tried again: the kubelet's plugin watcher registers a plugin when its
  // socket appears in plugins_registry, so the socket is made anew after --registration-retry-s.
  std::thread registrar([&] {
    std::unique_lock<std::mutex> lk(mu);
    while (!stopping) {
      cv.wait(lk, [&] { return stopping || refused; });
      if (cv.wait_for(lk, std::chrono::seconds(registration_retry_s), [&] { return stopping || !refused; })) continue;
      refused = false;
      lk.unlock();
      reg_server->Shutdown();
      std::string err;
      reg_server = serve(reg_socket, {&registration}, &err);
      if (reg_server) {
        log::info("registering with the kubelet again: %s made anew", reg_socket.c_str());
      } else {
        log::error("%s; trying again in %u s", err.c_str(), registration_retry_s);
      }
      lk.lock();
      if (!reg_server) refused = true;  // (tried again, as a refusal is)
    }
  });

  // The ResourceSlice: this node's shares while gpuosd answers, none while it does not.
  std::thread publisher([&] {
    SlicePublisher pub(api, so);
    std::string last_error;
    // A run of failed publishes is logged when it starts, then every 5 minutes, and when it ends
    // (not at every interval: the API server may be away for long).
    uint64_t publish_failures = 0;
    auto last_failure_log = std::chrono::steady_clock::time_point{};
    // The node's own GPU access (node_check.h), re-read each round: logged when it changes, and a
    // Warning Event on the Node while pods can reach GPUs without a claim (once per finding).
    std::string access_seen, access_reported, event_error;
    std::unique_lock<std::mutex> lk(mu);
    while (!stopping) {
      lk.unlock();
      if (!runtime_configs.empty()) {
        const GpuAccessCheck access = check_nvidia_runtime_config(runtime_configs);
        const bool open = access.verdict == GpuAccessCheck::Verdict::kOpen;
        if (access.detail != access_seen) {
          if (open) {
            log::warn("pods on this node can reach its GPUs without a gpuos claim, by setting "
                      "NVIDIA_VISIBLE_DEVICES (%s): set it to false (docs/KUBERNETES.md, \"Security model\")",
                      access.detail.c_str());
          } else if (access.verdict == GpuAccessCheck::Verdict::kClaimsOnly) {
            log::info("GPU access without a claim: closed (%s)", access.detail.c_str());
          } else {
            log::info("GPU access without a claim: cannot tell (%s)", access.detail.c_str());
          }
          access_seen = access.detail;
        }
        if (!open) access_reported.clear();
        if (open && access_reported != access.detail) {
          std::string err;
          if (post_node_event(api, po.node_name, "gpuos-dra", "Warning", "GPUAccessWithoutClaim",
                              "pods can reach this node's GPUs without a gpuos claim, by setting "
                              "NVIDIA_VISIBLE_DEVICES: " + access.detail,
                              &err)) {
            access_reported = access.detail;
            event_error.clear();
          } else if (err != event_error) {
            log::warn("%s (tried again every %u s)", err.c_str(), publish_interval_s);
            event_error = err;
          }
        }
      }
      std::vector<GpuShareInfo> gpus;
      std::string err;
      if (!node.gpus(&gpus, &err)) {
        if (err != last_error) log::warn("gpuosd: %s; offering no shares until it answers", err.c_str());
        last_error = err;
        gpus.clear();
      } else if (!last_error.empty()) {
        log::info("gpuosd answers again: %zu GPU(s)", gpus.size());
        last_error.clear();
      }
      if (!pub.publish(gpus, &err)) {
        const auto now = std::chrono::steady_clock::now();
        if (publish_failures++ == 0 || now - last_failure_log >= std::chrono::minutes(5)) {
          log::warn("ResourceSlice: %s (%llu failed so far; retried every %u s)", err.c_str(),
                    static_cast<unsigned long long>(publish_failures), publish_interval_s);
          last_failure_log = now;
        }
      } else if (publish_failures != 0) {
        log::info("ResourceSlice published again, after %llu failed attempts",
                  static_cast<unsigned long long>(publish_failures));
        publish_failures = 0;
      }
      lk.lock();
      cv.wait_for(lk, std::chrono::seconds(publish_interval_s), [&] { return stopping; });
    }
    // The slice stays: a restarting plugin (an update, a crash) would otherwise withdraw the node's
    // shares from the scheduler, and its claims' pods could not be placed meanwhile. The next plugin
    // takes it over; the Node owns it, so it goes with the node.
  });

  int sig = 0;
  sigwait(&sigs, &sig);
  log::info("received %s, stopping", strsignal(sig));
  {
    std::lock_guard<std::mutex> lk(mu);
    stopping = true;
  }
  cv.notify_all();
  publisher.join();
  registrar.join();
  if (health_server) health_server->Shutdown();
  if (reg_server) reg_server->Shutdown();
  dra_server->Shutdown();
  ::unlink(reg_socket.c_str());
  ::unlink(dra_socket.c_str());
  log::info("stopped");
  return kExitOk;
}
