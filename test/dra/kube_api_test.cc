// SPDX-License-Identifier: Apache-2.0
// KubeApi and SlicePublisher (src/dra/kube_api.h) against test/dra/fake_apiserver.py, which checks
// every slice written against the resource.k8s.io/v1 rules: create, no-op republish, update with
// generation + 1, conflict retry, identity change, removal; the token (re-read per request), TLS with
// the right and a wrong CA, transport errors, and reading claims.
#include "dra/kube_api.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dra/tenant_config.h"

extern char** environ;

using gpuos::dra::GpuShareInfo;
using gpuos::dra::KubeApi;
using gpuos::dra::KubeApiOptions;
using gpuos::dra::SliceOptions;
using gpuos::dra::SlicePublisher;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A scratch directory, removed with everything in it when the test ends (any path).
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base != nullptr && base[0] != '\0' ? base : "/tmp") + "/gpuos-dra-test.XXXXXX";
    if (mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// fake_apiserver.py as a child process; SIGTERM (then SIGKILL) and reaped in the destructor.
class FakeApiServer {
 public:
  explicit FakeApiServer(const std::vector<std::string>& extra_args) {
    std::vector<std::string> args = {PYTHON3_BIN, FAKE_APISERVER, "--port", "0"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    const int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (rc != 0) {
      pid_ = -1;
      close(out[0]);
      return;
    }
    // "listening on PORT": startup is given a generous bound, it is no measurement.
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (poll(&p, 1, 1000) <= 0) continue;
      char buf[256];
      const ssize_t n = read(out[0], buf, sizeof(buf));
      if (n <= 0) break;
      line.append(buf, static_cast<std::size_t>(n));
    }
    close(out[0]);
    if (line.starts_with("listening on ")) port_ = std::atoi(line.c_str() + 13);
  }
  ~FakeApiServer() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 200; ++i) {  // up to 20 s to exit cleanly, then killed
      if (waitpid(pid_, &status_, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  bool up() const { return port_ > 0; }
  std::string url(const char* scheme = "http") const {
    return std::string(scheme) + "://127.0.0.1:" + std::to_string(port_);
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int status_ = 0;
};

std::vector<GpuShareInfo> gpus(std::size_t n, uint64_t mem = 150754820096ull) {
  std::vector<GpuShareInfo> out;
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back({static_cast<uint32_t>(i), "0d1e2f3a-4b5c-6d7e-8f90-00000000000" + std::to_string(i), "NVIDIA H200",
                   132, mem});
  }
  return out;
}

SliceOptions node_a() {
  SliceOptions o;
  o.node_name = "node-a";
  return o;
}

// The requests the fake logged, as "METHOD path status" lines, and forgets them.
std::vector<std::string> take_log(KubeApi& api) {
  const KubeApi::Response r = api.get("/fake/log");
  std::vector<std::string> lines;
  const json log = json::parse(r.body, nullptr, false);
  if (log.is_array()) {
    for (const json& e : log) {
      std::string path = e.value("path", "");
      path = path.substr(path.find_last_of('/') + 1);
      lines.push_back(e.value("method", "") + " " + path + " " + std::to_string(e.value("status", 0)));
    }
  }
  api.del("/fake/log");
  return lines;
}

json slice_on_server(KubeApi& api) {
  const KubeApi::Response r = api.get(gpuos::dra::resource_slice_path("node-a-gpuos.io"));
  EXPECT_EQ(r.status, 200) << r.body << r.error;
  return json::parse(r.body, nullptr, false);
}

class KubeApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    write_file(dir_.file("token"), "test-token-1\n");
    write_file(dir_.file("claims.json"), "[]");
    server_ = std::make_unique<FakeApiServer>(std::vector<std::string>{
        "--token", "test-token-1", "--claims", dir_.file("claims.json")});
    ASSERT_TRUE(server_->up()) << "fake_apiserver.py did not start";
    KubeApiOptions o;
    o.base_url = server_->url();
    o.token_file = dir_.file("token");
    api_ = std::make_unique<KubeApi>(o);
  }

  TempDir dir_;
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<KubeApi> api_;
};

}  // namespace

TEST_F(KubeApiTest, PublishCreatesThenLeavesAnUnchangedSliceAlone) {
  SlicePublisher publisher(*api_, node_a());
  std::string why;
  ASSERT_TRUE(publisher.publish(gpus(2), &why)) << why;
  EXPECT_EQ(publisher.generation(), 1);
  // (It first learns its Node's uid, once: the slice's owner.)
  EXPECT_EQ(take_log(*api_),
            (std::vector<std::string>{"GET node-a 200", "GET node-a-gpuos.io 404", "POST resourceslices 201"}));
  json slice = slice_on_server(*api_);
  ASSERT_EQ(slice["metadata"]["ownerReferences"].size(), 1u);
  EXPECT_EQ(slice["metadata"]["ownerReferences"][0]["kind"], "Node");
  EXPECT_EQ(slice["spec"]["pool"]["generation"], 1);
  EXPECT_EQ(slice["spec"]["devices"].size(), 24u);
  EXPECT_EQ(slice["spec"]["nodeName"], "node-a");
  take_log(*api_);

  // Same GPUs (the server rewrote nothing that matters): one GET, no write.
  ASSERT_TRUE(publisher.publish(gpus(2), &why)) << why;
  EXPECT_EQ(take_log(*api_), (std::vector<std::string>{"GET node-a-gpuos.io 200"}));
  EXPECT_EQ(publisher.generation(), 1);

  // A publisher started later (plugin restart) finds the slice as it wants it: no write either.
  SlicePublisher restarted(*api_, node_a());
  ASSERT_TRUE(restarted.publish(gpus(2), &why)) << why;
  EXPECT_EQ(take_log(*api_), (std::vector<std::string>{"GET node-a 200", "GET node-a-gpuos.io 200"}));
  EXPECT_EQ(restarted.generation(), 1);
}

TEST_F(KubeApiTest, CanonicalQuantitiesOnTheServerAreNoChange) {
  SlicePublisher publisher(*api_, node_a());
  std::string why;
  ASSERT_TRUE(publisher.publish(gpus(1, 80000000000ull), &why)) << why;
  EXPECT_EQ(slice_on_server(*api_)["spec"]["devices"][0]["capacity"]["memory"]["value"], "80G");
  take_log(*api_);
  ASSERT_TRUE(publisher.publish(gpus(1, 80000000000ull), &why)) << why;
  EXPECT_EQ(take_log(*api_), (std::vector<std::string>{"GET node-a-gpuos.io 200"}));
}

TEST_F(KubeApiTest, GpuChangesAreWrittenWithTheNextGeneration) {
  SlicePublisher publisher(*api_, node_a());
  std::string why;
  ASSERT_TRUE(publisher.publish(gpus(2), &why)) << why;
  take_log(*api_);

  ASSERT_TRUE(publisher.publish(gpus(1), &why)) << why;  // GPU 1 went away
  EXPECT_EQ(take_log(*api_), (std::vector<std::string>{"GET node-a-gpuos.io 200", "PUT node-a-gpuos.io 200"}));
  EXPECT_EQ(publisher.generation(), 2);
  json slice = slice_on_server(*api_);
  EXPECT_EQ(slice["spec"]["pool"]["generation"], 2);
  EXPECT_EQ(slice["metadata"]["generation"], 2);
  ASSERT_EQ(slice["spec"]["devices"].size(), 12u);
  EXPECT_EQ(slice["spec"]["devices"][11]["name"], "gpu-0-best-effort-7");

  ASSERT_TRUE(publisher.publish({}, &why)) << why;  // gpuosd unreachable: nothing offered
  slice = slice_on_server(*api_);
  EXPECT_EQ(slice["spec"]["pool"]["generation"], 3);
  EXPECT_FALSE(slice["spec"].contains("devices"));  // [] is stored as absent
  take_log(*api_);
  ASSERT_TRUE(publisher.publish({}, &why)) << why;  // and that is no change either
  EXPECT_EQ(take_log(*api_), (std::vector<std::string>{"GET node-a-gpuos.io 200"}));

  // A restarted publisher continues from the server's generation.
  SlicePublisher restarted(*api_, node_a());
  ASSERT_TRUE(restarted.publish(gpus(3), &why)) << why;
  EXPECT_EQ(restarted.generation(), 4);
  EXPECT_EQ(slice_on_server(*api_)["spec"]["pool"]["generation"], 4);
}

TEST_F(KubeApiTest, ConflictsAreRetriedFromAFreshRead) {
  SlicePublisher publisher(*api_, node_a());
  std::string why;
  ASSERT_TRUE(publisher.publish(gpus(2), &why)) << why;
  take_log(*api_);
  ASSERT_EQ(api_->post("/fake/conflicts", R"({"count": 2})").status, 200);
  ASSERT_TRUE(publisher.publish(gpus(1), &why)) << why;
  EXPECT_EQ(take_log(*api_), (std::vector<std::string>{"GET node-a-gpuos.io 200", "PUT node-a-gpuos.io 409",
                                                       "GET node-a-gpuos.io 200", "PUT node-a-gpuos.io 409",
                                                       "GET node-a-gpuos.io 200", "PUT node-a-gpuos.io 200"}));
  EXPECT_EQ(publisher.generation(), 2);
  EXPECT_EQ(slice_on_server(*api_)["spec"]["devices"].size(), 12u);

  // Bounded: a writer that always wins makes publish fail with a clear message.
  ASSERT_EQ(api_->post("/fake/conflicts", R"({"count": 100})").status, 200);
  EXPECT_FALSE(publisher.publish(gpus(3), &why));
  EXPECT_NE(why.find("still conflicting after 5 attempts"), std::string::npos) << why;
  EXPECT_EQ(publisher.generation(), 2);
}

TEST_F(KubeApiTest, ASliceOfAnotherNodeUnderOurNameIsReplaced) {
  // Immutable fields differ (a stale object): delete and create, never a PUT the server refuses.
  SliceOptions other = node_a();
  json stale = gpuos::dra::resource_slice(other, gpus(1), 9, "");
  stale["spec"]["nodeName"] = "node-b";
  stale["spec"]["pool"]["name"] = "node-b";
  ASSERT_EQ(api_->post(gpuos::dra::resource_slices_path(), stale.dump()).status, 201);
  take_log(*api_);
  SlicePublisher publisher(*api_, node_a());
  std::string why;
  ASSERT_TRUE(publisher.publish(gpus(1), &why)) << why;
  EXPECT_EQ(take_log(*api_), (std::vector<std::string>{"GET node-a 200", "GET node-a-gpuos.io 200",
                                                       "DELETE node-a-gpuos.io 200", "GET node-a-gpuos.io 404",
                                                       "POST resourceslices 201"}));
  const json slice = slice_on_server(*api_);
  EXPECT_EQ(slice["spec"]["nodeName"], "node-a");
  EXPECT_EQ(slice["spec"]["pool"]["generation"], 10);  // above the one it replaced
}

TEST_F(KubeApiTest, RemoveDeletesAndAbsentIsFine) {
  SlicePublisher publisher(*api_, node_a());
  std::string why;
  ASSERT_TRUE(publisher.publish(gpus(1), &why)) << why;
  take_log(*api_);
  ASSERT_TRUE(publisher.remove(&why)) << why;
  ASSERT_TRUE(publisher.remove(&why)) << why;
  EXPECT_EQ(take_log(*api_), (std::vector<std::string>{"DELETE node-a-gpuos.io 200", "DELETE node-a-gpuos.io 404"}));
  EXPECT_EQ(api_->get(gpuos::dra::resource_slice_path("node-a-gpuos.io")).status, 404);
  // Published again after a removal: a new object, the generation still going up.
  ASSERT_TRUE(publisher.publish(gpus(1), &why)) << why;
  EXPECT_EQ(publisher.generation(), 2);
}

TEST_F(KubeApiTest, TheFakeRefusesWhatV1Refuses) {
  // The publisher is only as good as the checks it passes: these must be refused with 422.
  const json good = gpuos::dra::resource_slice(node_a(), gpus(1), 1, "");
  auto refused = [&](json bad, const char* what) {
    const KubeApi::Response r = api_->post(gpuos::dra::resource_slices_path(), bad.dump());
    EXPECT_EQ(r.status, 422) << what << ": " << r.body;
    EXPECT_NE(gpuos::dra::describe_response(r).find(what), std::string::npos) << gpuos::dra::describe_response(r);
  };
  json bad = good;
  bad["spec"]["devices"][0]["basic"] = {{"attributes", json::object()}};
  refused(bad, "spec.devices[0].basic: unknown field");
  bad = good;
  bad["spec"]["devices"][0]["name"] = "GPU_0";
  refused(bad, "is not a DNS label");
  bad = good;
  bad["spec"]["devices"][0]["attributes"]["index"] = {{"int", 1}, {"string", "1"}};
  refused(bad, "exactly one of int, bool, string, version");
  bad = good;
  bad["spec"]["devices"][0]["capacity"]["memory"]["value"] = "lots";
  refused(bad, "is not a quantity string");
  bad = good;
  bad["spec"]["devices"][0]["capacity"]["memory"]["value"] = 5;
  refused(bad, "is not a quantity string");
  bad = good;
  bad["spec"]["devices"][1]["name"] = bad["spec"]["devices"][0]["name"];
  refused(bad, "is a duplicate");
  bad = gpuos::dra::resource_slice(node_a(), gpus(11), 1, "");
  for (int i = 0; i < 12; ++i) bad["spec"]["devices"].push_back(bad["spec"]["devices"][0]);  // 144 devices
  refused(bad, "at most 128 items");
  bad = good;
  bad["spec"].erase("nodeName");
  refused(bad, "exactly one of nodeName");
  bad = good;
  bad["spec"]["pool"]["resourceSliceCount"] = 0;
  refused(bad, "resourceSliceCount: must be greater than zero");
  bad = good;
  bad["apiVersion"] = "resource.k8s.io/v1beta1";
  refused(bad, "apiVersion");
  EXPECT_EQ(take_log(*api_).size(), 10u);
}

TEST_F(KubeApiTest, TheTokenIsReadPerRequest) {
  const std::string path = gpuos::dra::resource_slices_path();
  EXPECT_EQ(api_->get(path).status, 200);
  write_file(dir_.file("token"), "rotated-away");
  const KubeApi::Response denied = api_->get(path);
  EXPECT_EQ(denied.status, 401);
  EXPECT_EQ(gpuos::dra::describe_response(denied), "HTTP 401: Unauthorized");
  SlicePublisher publisher(*api_, node_a());
  std::string why;
  EXPECT_FALSE(publisher.publish(gpus(1), &why));
  EXPECT_EQ(why, "reading ResourceSlice node-a-gpuos.io: HTTP 401: Unauthorized");
  write_file(dir_.file("token"), "test-token-1");  // no newline this time
  EXPECT_EQ(api_->get(path).status, 200);
  fs::remove(dir_.file("token"));
  const KubeApi::Response unreadable = api_->get(path);
  EXPECT_EQ(unreadable.status, 0);
  EXPECT_NE(unreadable.error.find("cannot read the token file"), std::string::npos) << unreadable.error;
}

TEST_F(KubeApiTest, ClaimsAreReadFromTheServer) {
  const std::string claim = R"({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
    "metadata": {"name": "c1", "namespace": "ns1", "uid": "uid-1"},
    "status": {"allocation": {"devices": {"results": [
      {"request": "gpu", "driver": "gpuos.io", "pool": "node-a", "device": "gpu-0-best-effort-1"}]}},
      "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-1"}]}})";
  const std::string path = gpuos::dra::resource_claim_path("ns1", "c1");
  EXPECT_EQ(path, "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/c1");
  EXPECT_EQ(api_->get(path).status, 404);
  write_file(dir_.file("claims.json"), "[" + claim + "]");  // re-read per request
  const KubeApi::Response r = api_->get(path);
  ASSERT_EQ(r.status, 200) << r.body;
  gpuos::dra::ClaimAllocation a;
  std::string why;
  ASSERT_TRUE(gpuos::dra::parse_claim(r.body, "gpuos.io", "uid-1", &a, &why)) << why;
  EXPECT_EQ(a.share.device, "gpu-0-best-effort-1");
  EXPECT_EQ(a.spec.tenant_class, "best-effort");
  EXPECT_EQ(api_->get(gpuos::dra::resource_claim_path("ns1", "c2")).status, 404);
  // Odd names are escaped, not spliced into the path.
  EXPECT_EQ(gpuos::dra::resource_claim_path("a/b", "c?d"), "/apis/resource.k8s.io/v1/namespaces/a%2Fb/resourceclaims/c%3Fd");
}

TEST(KubeApi, TransportFailuresAreReported) {
  // A port nobody listens on: bound, then closed.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(s);
  KubeApiOptions o;
  o.base_url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/";
  KubeApi api(o);
  const KubeApi::Response r = api.get("/apis");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.error.find("GET http://127.0.0.1:"), std::string::npos) << r.error;
  EXPECT_EQ(gpuos::dra::describe_response(r), r.error);

  KubeApi unconfigured(KubeApiOptions{});
  EXPECT_NE(unconfigured.get("/apis").error.find("no API server configured"), std::string::npos);

  SliceOptions bad = node_a();
  bad.node_name = "Not A Node";
  SlicePublisher publisher(api, bad);
  std::string why;
  EXPECT_FALSE(publisher.publish(gpus(1), &why));
  EXPECT_NE(why.find("is not a DNS subdomain"), std::string::npos) << why;
}

TEST(KubeApi, InClusterOptions) {
  const char* saved_host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* saved_port = std::getenv("KUBERNETES_SERVICE_PORT");
  const std::string host = saved_host ? saved_host : "", port = saved_port ? saved_port : "";
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  KubeApiOptions o = gpuos::dra::in_cluster_options();
  EXPECT_EQ(o.base_url, "https://10.96.0.1:443");
  EXPECT_EQ(o.token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
  EXPECT_EQ(o.ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
  setenv("KUBERNETES_SERVICE_HOST", "fd00:10:96::1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
  EXPECT_EQ(gpuos::dra::in_cluster_options().base_url, "https://[fd00:10:96::1]:6443");
  unsetenv("KUBERNETES_SERVICE_PORT");
  EXPECT_EQ(gpuos::dra::in_cluster_options().base_url, "https://[fd00:10:96::1]:443");
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(gpuos::dra::in_cluster_options().base_url, "");
  if (saved_host) setenv("KUBERNETES_SERVICE_HOST", host.c_str(), 1);
  if (saved_port) setenv("KUBERNETES_SERVICE_PORT", port.c_str(), 1);
}

namespace {
// A self-signed certificate for the address 127.0.0.1 (only) with its key, by openssl req -x509.
bool make_certificate(const std::string& dir, const std::string& name) {
  const std::string cmd = std::string(OPENSSL_BIN) + " req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=gpuos-test" +
                          " -addext subjectAltName=IP:127.0.0.1 -keyout " + dir + "/" + name +
                          ".key -out " + dir + "/" + name + ".crt >" + dir + "/openssl.log 2>&1";
  return std::system(cmd.c_str()) == 0;
}
}  // namespace

TEST(KubeApiTls, TheServerIsVerifiedAgainstTheCaFile) {
  if (std::string(OPENSSL_BIN).empty()) GTEST_SKIP() << "no openssl command to make a certificate";
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  ASSERT_TRUE(make_certificate(dir.path(), "server"));
  ASSERT_TRUE(make_certificate(dir.path(), "stranger"));
  FakeApiServer server({"--tls-cert", dir.file("server.crt"), "--tls-key", dir.file("server.key")});
  ASSERT_TRUE(server.up());

  KubeApiOptions o;
  o.base_url = server.url("https");
  o.ca_file = dir.file("server.crt");
  KubeApi api(o);
  SlicePublisher publisher(api, node_a());
  std::string why;
  ASSERT_TRUE(publisher.publish(gpus(1), &why)) << why;
  EXPECT_EQ(api.get(gpuos::dra::resource_slice_path("node-a-gpuos.io")).status, 200);

  // Another CA: the handshake fails, nothing is sent.
  o.ca_file = dir.file("stranger.crt");
  KubeApi wrong_ca(o);
  const KubeApi::Response r = wrong_ca.get(gpuos::dra::resource_slices_path());
  EXPECT_EQ(r.status, 0);
  EXPECT_FALSE(r.error.empty());
  SlicePublisher refused(wrong_ca, node_a());
  EXPECT_FALSE(refused.publish(gpus(2), &why));
  EXPECT_NE(why.find("reading ResourceSlice node-a-gpuos.io: GET https://127.0.0.1:"), std::string::npos) << why;

  // The host name is checked too: the certificate names 127.0.0.1, not localhost.
  o.ca_file = dir.file("server.crt");
  o.base_url = "https://localhost:" + server.url().substr(server.url().rfind(':') + 1);
  KubeApi wrong_host(o);
  const KubeApi::Response other_name = wrong_host.get(gpuos::dra::resource_slices_path());
  EXPECT_EQ(other_name.status, 0);
  EXPECT_FALSE(other_name.error.empty());
}
