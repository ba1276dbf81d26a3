// SPDX-License-Identifier: Apache-2.0
// A stand-in for the kubelet's side of a DRA plugin, over the real sockets: what the kubelet's
// plugin watcher and DRA manager do, and nothing more, with the kubelet's deadlines (GetInfo 1 s,
// NotifyRegistrationStatus 5 s, NodePrepareResources / NodeUnprepareResources 45 s). The tests
// (test/e2e/test_dra.py) drive it.
//   gpuos-fake-kubelet kubelet REGISTRY_DIR [--serve v1,v1beta1] [--refuse N]
//       the kubelet, running until its stdin ends. As the kubelet's plugin watcher, it watches
//       REGISTRY_DIR (inotify; what is there at its start counts as created) for sockets (not those
//       named ".*"), and registers each: GetInfo, then NotifyRegistrationStatus, registered when the
//       info names a DRAPlugin and a version this kubelet serves (the first of the plugin's
//       supported_versions among --serve, by default v1.DRAPlugin and v1beta1.DRAPlugin; a kubelet
//       before 1.34 serves v1beta1 only), else refused; the first N registrations are refused
//       whatever the info (a kubelet that cannot take the plugin now). A registration that gets no
//       answer is tried again each second while its socket is there, as the kubelet's reconciler
//       does. A socket removed deregisters its plugin; a socket made anew (a plugin restart, a new
//       registration after a refusal) deregisters the old one and registers the new one. Each of
//       these is a JSON line on stdout: {"event": "registered"|"refused"|"deregistered", "socket",
//       "type", "name", "endpoint", "supported_versions", "api", "error"}.
//       Commands are JSON lines on stdin, each answered by one JSON line with "reply":
//         {"op": "prepare", "driver": D, "claims": [{"namespace", "name", "uid"}...],
//          "containers": {NAME: [{"claim": UID, "request": R}...]}}
//             NodePrepareResources of all the claims in one call (as the kubelet does for a pod's
//             claims of one driver), on the endpoint and API version the driver registered with; the
//             answer as "claims", and the CDI devices each container gets as "containers": as the
//             kubelet, only the devices of the requests a container names (a container's claim entry
//             without a request gets all of the claim's), of claims prepared without error
//         {"op": "unprepare", "driver": D, "claims": [...]}
//         {"op": "drivers"}: the registered drivers, {name: {"endpoint", "api"}}
//       A driver that is not registered is answered {"error": "... not registered ..."}, as the
//       kubelet fails a pod's prepare then.
//   gpuos-fake-kubelet health HOST:PORT SERVICE
//       the kubelet's gRPC probe: grpc.health.v1 Check, prints {"status": "SERVING"|"NOT_SERVING"|...}
// Exit 0 when done (the probe answered, whatever the answer), 1 when not, 2 on a bad command line.
#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dra/dra_api.h"
#include "dra/proto/health_v1.grpc.pb.h"
#include "dra/proto/pluginregistration_v1.grpc.pb.h"

namespace {

using gpuos::dra::DraV1;
using gpuos::dra::DraV1beta1;
using nlohmann::json;

// A channel of its own subchannels: a socket made anew (a restarted plugin) is dialled at once, not
// after the backoff of a shared connection to the socket that went away.
std::shared_ptr<grpc::Channel> channel(const std::string& socket) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel("unix://" + socket, grpc::InsecureChannelCredentials(), args);
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

void emit(const json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

int health(const std::string& address, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext c;
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(with_deadline(&c, kProbeSeconds), req, &resp);
  if (!s.ok()) return fail(s, "Check");
  std::printf("%s\n", json{{"status", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status())}}.dump().c_str());
  return 0;
}

struct Driver {
  std::string socket, endpoint, api;  // api: "v1" or "v1beta1"
};

class Kubelet {
 public:
  Kubelet(std::string dir, std::vector<std::string> serve, int refuse)
      : dir_(std::move(dir)), serve_(std::move(serve)), refuse_(refuse) {}

  int run() {
    int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (in < 0 || inotify_add_watch(in, dir_.c_str(), IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM) < 0) {
      std::fprintf(stderr, "cannot watch %s: %s\n", dir_.c_str(), std::strerror(errno));
      return 1;
    }
    // What is there at the kubelet's start counts as created (the watcher walks the directory).
    if (DIR* d = opendir(dir_.c_str())) {
      while (dirent* e = readdir(d)) created(e->d_name);
      closedir(d);
    }
    reconcile();
    std::string line;
    char buf[4096];
    while (true) {
      pollfd fds[2] = {{0, POLLIN, 0}, {in, POLLIN, 0}};
      // Unregistered sockets are tried again each second (the kubelet's reconciler loop).
      int n = poll(fds, 2, pending_.empty() ? -1 : 1000);
      if (n < 0 && errno != EINTR) return 1;
      if (fds[1].revents & POLLIN) {
        ssize_t len = read(in, buf, sizeof(buf));
        for (ssize_t at = 0; at < len;) {
          auto* ev = reinterpret_cast<inotify_event*>(buf + at);
          std::string name = ev->len ? ev->name : "";
          if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) removed(name);
          if (ev->mask & (IN_CREATE | IN_MOVED_TO)) created(name);
          at += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
        }
      }
      if (fds[0].revents & (POLLIN | POLLHUP)) {
        ssize_t len = read(0, buf, sizeof(buf));
        if (len <= 0) break;  // stdin ended: the kubelet stops
        line.append(buf, static_cast<std::size_t>(len));
        for (auto nl = line.find('\n'); nl != std::string::npos; nl = line.find('\n')) {
          std::string cmd = line.substr(0, nl);
          line.erase(0, nl + 1);
          if (!cmd.empty()) emit(command(cmd));
        }
      }
      reconcile();
    }
    close(in);
    return 0;
  }

 private:
  void created(const std::string& name) {
    if (name.empty() || name[0] == '.') return;
    struct stat st {};
    const std::string path = dir_ + "/" + name;
    if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return;
    deregister(path);  // a socket made anew: the plugin restarted, or registers again
    pending_.insert(path);
  }

  void removed(const std::string& name) {
    const std::string path = dir_ + "/" + name;
    pending_.erase(path);
    deregister(path);
  }

  void deregister(const std::string& path) {
    for (auto it = drivers_.begin(); it != drivers_.end(); ++it) {
      if (it->second.socket == path) {
        emit({{"event", "deregistered"}, {"socket", path}, {"name", it->first}});
        drivers_.erase(it);
        return;
      }
    }
  }

  void reconcile() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      it = register_plugin(*it) ? pending_.erase(it) : std::next(it);
    }
  }

  // False: no answer (tried again later).
  bool register_plugin(const std::string& path) {
    auto stub = pluginregistration::Registration::NewStub(channel(path));
    grpc::ClientContext c1;
    pluginregistration::InfoRequest req;
    pluginregistration::PluginInfo info;
    if (grpc::Status s = stub->GetInfo(with_deadline(&c1, kGetInfoSeconds), req, &info); !s.ok()) {
      fail(s, ("GetInfo on " + path).c_str());
      return false;
    }
    json out = {{"socket", path}, {"type", info.type()}, {"name", info.name()}, {"endpoint", info.endpoint()},
                {"supported_versions", std::vector<std::string>(info.supported_versions().begin(),
                                                                info.supported_versions().end())}};
    std::string api;  // the first version the plugin lists that this kubelet serves
    for (const auto& v : info.supported_versions()) {
      const std::string version = v.substr(0, v.find('.'));
      if (v == version + ".DRAPlugin" && std::find(serve_.begin(), serve_.end(), version) != serve_.end()) {
        api = version;
        break;
      }
    }
    pluginregistration::RegistrationStatus st;
    st.set_plugin_registered(info.type() == "DRAPlugin" && !info.name().empty() && !api.empty());
    if (!st.plugin_registered()) st.set_error("not a DRAPlugin that serves a version this kubelet serves");
    if (refuse_ > 0) {
      --refuse_;
      st.set_plugin_registered(false);
      st.set_error("refused (fake kubelet --refuse)");
    }
    pluginregistration::RegistrationStatusResponse resp;
    grpc::ClientContext c2;
    if (grpc::Status s = stub->NotifyRegistrationStatus(with_deadline(&c2, kNotifySeconds), st, &resp); !s.ok()) {
      fail(s, ("NotifyRegistrationStatus on " + path).c_str());
      return false;
    }
    out["api"] = api;
    out["error"] = st.error();
    out["event"] = st.plugin_registered() ? "registered" : "refused";
    if (st.plugin_registered()) drivers_[info.name()] = Driver{path, info.endpoint(), api};
    emit(out);
    return true;
  }

  json command(const std::string& text) {
    json c = json::parse(text, nullptr, false);
    if (!c.is_object() || !c.contains("op") || !c["op"].is_string()) return {{"reply", ""}, {"error", "not a command"}};
    const std::string op = c["op"];
    json reply = {{"reply", op}};
    if (op == "drivers") {
      reply["drivers"] = json::object();
      for (const auto& [name, d] : drivers_) reply["drivers"][name] = {{"endpoint", d.endpoint}, {"api", d.api}};
      return reply;
    }
    if (op != "prepare" && op != "unprepare") {
      reply["error"] = "unknown op";
      return reply;
    }
    const std::string driver = c.value("driver", "");
    auto it = drivers_.find(driver);
    if (it == drivers_.end()) {
      reply["error"] = "DRA driver " + driver + " is not registered";
      return reply;
    }
    std::string why;
    const json& claims = c.contains("claims") ? c["claims"] : json::array();
    if (it->second.api == "v1") {
      why = call<DraV1>(it->second.endpoint, op == "prepare", claims, &reply);
    } else {
      why = call<DraV1beta1>(it->second.endpoint, op == "prepare", claims, &reply);
    }
    if (!why.empty()) {
      reply["error"] = why;
      return reply;
    }
    if (op == "prepare" && c.contains("containers")) {
      // The kubelet's view of a container's CDI devices: the devices of the requests it names.
      json containers = json::object();
      for (const auto& [name, refs] : c["containers"].items()) {
        json ids = json::array();
        for (const json& ref : refs) {
          const std::string uid = ref.value("claim", ""), request = ref.value("request", "");
          const json& r = reply["claims"].contains(uid) ? reply["claims"][uid] : json::object();
          if (!r.is_object() || r.value("error", "x") != "") continue;
          for (const json& d : r["devices"]) {
            const auto& names = d["request_names"];
            if (!request.empty() && std::find(names.begin(), names.end(), request) == names.end()) continue;
            for (const json& id : d["cdi_device_ids"]) ids.push_back(id);
          }
        }
        containers[name] = ids;
      }
      reply["containers"] = containers;
    }
    return reply;
  }

  template <typename Api>
  static std::string call(const std::string& endpoint, bool prepare, const json& claims, json* reply) {
    auto stub = Api::DRAPlugin::NewStub(channel(endpoint));
    auto add_claims = [&](auto* req) {
      for (const json& r : claims) {
        auto* c = req->add_claims();
        c->set_namespace_(r.value("namespace", ""));
        c->set_name(r.value("name", ""));
        c->set_uid(r.value("uid", ""));
      }
    };
    json out = json::object();
    grpc::ClientContext ctx;
    if (prepare) {
      typename Api::NodePrepareResourcesRequest req;
      typename Api::NodePrepareResourcesResponse resp;
      add_claims(&req);
      grpc::Status s = stub->NodePrepareResources(with_deadline(&ctx, kPrepareSeconds), req, &resp);
      if (!s.ok()) return "NodePrepareResources: " + s.error_message();
      for (const auto& [uid, r] : resp.claims()) {
        json devices = json::array();
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
      add_claims(&req);
      grpc::Status s = stub->NodeUnprepareResources(with_deadline(&ctx, kPrepareSeconds), req, &resp);
      if (!s.ok()) return "NodeUnprepareResources: " + s.error_message();
      for (const auto& [uid, r] : resp.claims()) out[uid] = {{"error", r.error()}};
    }
    (*reply)["claims"] = out;
    return "";
  }

  std::string dir_;
  std::vector<std::string> serve_;
  int refuse_;
  std::set<std::string> pending_;          // sockets seen, not yet answered
  std::map<std::string, Driver> drivers_;  // registered, by driver name
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 3 && a[0] == "health") return health(a[1], a[2]);
  if (a.size() >= 2 && a[0] == "kubelet") {
    std::vector<std::string> serve = {"v1", "v1beta1"};
    int refuse = 0;
    bool ok = true;
    for (std::size_t i = 2; i < a.size(); i += 2) {
      if (i + 1 >= a.size()) {
        ok = false;
      } else if (a[i] == "--serve") {
        serve.clear();
        std::stringstream ss(a[i + 1]);
        for (std::string v; std::getline(ss, v, ',');) serve.push_back(v);
      } else if (a[i] == "--refuse") {
        refuse = std::atoi(a[i + 1].c_str());
      } else {
        ok = false;
      }
    }
    if (ok) return Kubelet(a[1], serve, refuse).run();
  }
  std::fprintf(stderr,
               "usage: gpuos-fake-kubelet kubelet REGISTRY_DIR [--serve v1,v1beta1] [--refuse N]\n"
               "       gpuos-fake-kubelet health HOST:PORT SERVICE\n");
  return 2;
}
