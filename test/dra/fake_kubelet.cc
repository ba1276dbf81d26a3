// A stand-in for the kubelet's side of a DRA plugin, over the real sockets: what the kubelet's
// plugin watcher and DRA manager call, and nothing more, with the kubelet's deadlines (GetInfo 1 s,
// NotifyRegistrationStatus 5 s, NodePrepareResources / NodeUnprepareResources 45 s). The tests
// (test/e2e/test_dra.py) drive it.
//   gpuos-fake-kubelet register REGISTRY_DIR DRIVER [--refuse]
//       finds DRIVER-reg.sock there, calls GetInfo (printed as JSON) and NotifyRegistrationStatus
//       (registered when the info names a DRAPlugin of that driver, and a version the kubelet serves:
//       as the kubelet, the first of the plugin's supported_versions that is v1.DRAPlugin or
//       v1beta1.DRAPlugin, printed as "api"; else refused; with --refuse, refused whatever the info,
//       as a kubelet that cannot take the plugin now)
//   gpuos-fake-kubelet health HOST:PORT SERVICE
//       the kubelet's gRPC probe: grpc.health.v1 Check, prints {"status": "SERVING"|"NOT_SERVING"|...}
//   gpuos-fake-kubelet prepare|unprepare ENDPOINT v1|v1beta1 NAMESPACE/NAME/UID...
//       calls NodePrepareResources / NodeUnprepareResources with all the claims in one call (as the
//       kubelet does for a pod's claims of one driver), prints the answer as JSON
// Exit 0 when the calls were answered (whatever the answer), 1 when not, 2 on a bad command line.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dra/dra_api.h"
#include "dra/proto/health_v1.grpc.pb.h"
#include "dra/proto/pluginregistration_v1.grpc.pb.h"

namespace {

using gpuos::dra::DraV1;
using gpuos::dra::DraV1beta1;



std::shared_ptr<grpc::Channel> channel(const std::string& socket) {
  return grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials());
}

// The kubelet's deadlines (pkg/kubelet/pluginmanager, pkg/kubelet/cm/dra).
constexpr int kGetInfoSeconds = 1, kNotifySeconds = 5, kPrepareSeconds = 45, kProbeSeconds = 10;

grpc::ClientContext* with_deadline(grpc::ClientContext* c, int seconds) {
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return c;
}

int fail(const grpc::Status& s, const char* what) {
  std::fprintf(stderr, "%s: %s (code %d)\n", what, s.error_message().c_str(), static_cast<int>(s.error_code()));
  return 1;
}

int do_register(const std::string& dir, const std::string& driver, bool refuse) {
  auto stub = pluginregistration::Registration::NewStub(channel(dir + "/" + driver + "-reg.sock"));
  grpc::ClientContext c1;
  pluginregistration::InfoRequest req;
  pluginregistration::PluginInfo info;
  grpc::Status s = stub->GetInfo(with_deadline(&c1, kGetInfoSeconds), req, &info);
  if (!s.ok()) return fail(s, "GetInfo");
  nlohmann::json out = {{"type", info.type()}, {"name", info.name()}, {"endpoint", info.endpoint()},
                        {"supported_versions", std::vector<std::string>(info.supported_versions().begin(),
                                                                        info.supported_versions().end())}};
  std::string api;  // the first version the plugin lists that the kubelet serves
  for (const auto& v : info.supported_versions()) {
    if (v == "v1.DRAPlugin" || v == "v1beta1.DRAPlugin") {
      api = v.substr(0, v.find('.'));
      break;
    }
  }
  pluginregistration::RegistrationStatus st;
  st.set_plugin_registered(info.type() == "DRAPlugin" && info.name() == driver && !api.empty());
  if (!st.plugin_registered()) st.set_error("not a DRAPlugin of " + driver + " serving v1 or v1beta1.DRAPlugin");
  out["api"] = api;
  if (refuse) {
    st.set_plugin_registered(false);
    st.set_error("refused (fake kubelet --refuse)");
  }
  pluginregistration::RegistrationStatusResponse resp;
  grpc::ClientContext c2;
  s = stub->NotifyRegistrationStatus(with_deadline(&c2, kNotifySeconds), st, &resp);
  if (!s.ok()) return fail(s, "NotifyRegistrationStatus");
  out["registered"] = st.plugin_registered();
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

int health(const std::string& address, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext c;
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(with_deadline(&c, kProbeSeconds), req, &resp);
  if (!s.ok()) return fail(s, "Check");
  std::printf("%s\n", nlohmann::json{{"status", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status())}}.dump().c_str());
  return 0;
}

template <typename Api>
int call(const std::string& endpoint, bool prepare, const std::vector<std::string>& refs) {
  auto stub = Api::DRAPlugin::NewStub(channel(endpoint));
  auto add_claims = [&](auto* req) {
    for (const std::string& r : refs) {
      const auto a = r.find('/'), b = r.find('/', a == std::string::npos ? a : a + 1);
      if (a == std::string::npos || b == std::string::npos) return false;
      auto* c = req->add_claims();
      c->set_namespace_(r.substr(0, a));
      c->set_name(r.substr(a + 1, b - a - 1));
      c->set_uid(r.substr(b + 1));
    }
    return true;
  };
  nlohmann::json out = nlohmann::json::object();
  grpc::ClientContext ctx;
  if (prepare) {
    typename Api::NodePrepareResourcesRequest req;
    typename Api::NodePrepareResourcesResponse resp;
    if (!add_claims(&req)) return 2;
    grpc::Status s = stub->NodePrepareResources(with_deadline(&ctx, kPrepareSeconds), req, &resp);
    if (!s.ok()) return fail(s, "NodePrepareResources");
    for (const auto& [uid, r] : resp.claims()) {
      nlohmann::json devices = nlohmann::json::array();
      for (const auto& d : r.devices()) {
        devices.push_back({{"request_names", std::vector<std::string>(d.request_names().begin(), d.request_names().end())},
                           {"pool_name", d.pool_name()},
                           {"device_name", d.device_name()},
                           {"cdi_device_ids", std::vector<std::string>(d.cdi_device_ids().begin(), d.cdi_device_ids().end())}});
      }
      out[uid] = {{"error", r.error()}, {"devices", devices}};
    }
  } else {
    typename Api::NodeUnprepareResourcesRequest req;
    typename Api::NodeUnprepareResourcesResponse resp;
    if (!add_claims(&req)) return 2;
    grpc::Status s = stub->NodeUnprepareResources(with_deadline(&ctx, kPrepareSeconds), req, &resp);
    if (!s.ok()) return fail(s, "NodeUnprepareResources");
    for (const auto& [uid, r] : resp.claims()) out[uid] = {{"error", r.error()}};
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if ((a.size() == 3 || (a.size() == 4 && a[3] == "--refuse")) && a[0] == "register") {
    return do_register(a[1], a[2], a.size() == 4);
  }
  if (a.size() == 3 && a[0] == "health") return health(a[1], a[2]);
  if (a.size() >= 4 && (a[0] == "prepare" || a[0] == "unprepare")) {
    std::vector<std::string> refs(a.begin() + 3, a.end());
    if (a[2] == "v1") return call<DraV1>(a[1], a[0] == "prepare", refs);
    if (a[2] == "v1beta1") return call<DraV1beta1>(a[1], a[0] == "prepare", refs);
  }
  std::fprintf(stderr,
               "usage: gpuos-fake-kubelet register REGISTRY_DIR DRIVER [--refuse]\n"
               "       gpuos-fake-kubelet health HOST:PORT SERVICE\n"
               "       gpuos-fake-kubelet prepare|unprepare ENDPOINT v1|v1beta1 NAMESPACE/NAME/UID...\n");
  return 2;
}
