// SPDX-License-Identifier: Apache-2.0
// gpuos-dra's decisions, apart from gRPC and HTTP: preparing a claim (read it from the API server,
// check its TenantConfig, have gpuosd admit it, write its CDI spec) and unpreparing it. Both are
// idempotent, as the kubelet retries them; a failure leaves nothing behind.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dra/cdi_spec.h"
#include "dra/resource_slice.h"
#include "dra/tenant_config.h"
#include "gpuos/abi.h"

namespace gpuos::dra {

struct PluginOptions {
  std::string driver = "gpuos.io";
  std::string node_name;
  std::string cdi_dir = "/var/run/cdi";
  std::string interposer = "/usr/lib/libgpuos.so";  // libgpuos.so on the host (where the .deb puts it)
  // The GPU's own CDI device (the NVIDIA container toolkit's), added beside gpuos's in the answer;
  // {index} and {uuid} ("GPU-...") are replaced. "" = none (the runtime gives GPUs otherwise).
  std::string gpu_cdi_device;
  // Where the plugin keeps what it prepared each claim for ("<uid>.json"; "" = in memory only), so
  // that a re-prepare after a plugin restart is answered as the first prepare was.
  std::string state_dir;
};

// Where the plugin reads a ResourceClaim (the API server).
class ClaimSource {
 public:
  virtual ~ClaimSource() = default;
  // The claim's JSON, or false with why (not found, unreachable, refused).
  virtual bool fetch(const std::string& claim_namespace, const std::string& name, std::string* json,
                     std::string* why) = 0;
};

// gpuosd, as the plugin needs it.
class NodeDaemon {
 public:
  virtual ~NodeDaemon() = default;
  virtual bool prepare(const gpuos_msg_claim_prepare& m, std::string* socket_dir, std::string* why) = 0;
  virtual bool unprepare(const std::string& claim_uid, std::string* why) = 0;
  virtual bool gpus(std::vector<GpuShareInfo>* out, std::string* why) = 0;
  // A spatial domain's MPS directories.
  virtual bool space_domain(const std::string& domain, std::string* pipe_dir, std::string* log_dir,
                            std::string* why) = 0;
};

struct ClaimRef {
  std::string claim_namespace, uid, name;
};

struct PreparedDevice {
  std::vector<std::string> request_names;
  std::string pool, device;
  std::vector<std::string> cdi_device_ids;
};

struct PrepareResult {
  std::vector<PreparedDevice> devices;
  std::string error;  // non-empty: not prepared, and nothing of it left
};

// The request a container names for an allocation result's request: "gpu" for "gpu" and for a
// firstAvailable subrequest's "gpu/large". The kubelet matches a container's resources.claims[].request
// against a prepared device's request_names by exact name, so a subrequest's name there would give
// the container none of the claim's CDI devices (and its tenant would run without gpuos).
std::string parent_request(const std::string& request);

// What a claim was prepared with: its allocation result, and the pod named to gpuosd.
struct PreparedClaim {
  AllocatedShare share;
  std::optional<PodRef> pod;
};

// The claim prepared for gpuosd (exposed for tests).
bool claim_message(const ClaimAllocation& a, const std::string& gpu_uuid, gpuos_msg_claim_prepare* out,
                   std::string* why);

class Plugin {
 public:
  Plugin(PluginOptions opts, ClaimSource& claims, NodeDaemon& daemon);
  PrepareResult prepare(const ClaimRef& ref);
  std::string unprepare(const ClaimRef& ref);  // "" = done
  const PluginOptions& options() const { return opts_; }

 private:
  std::string expand_gpu_device(uint32_t index, const std::string& uuid) const;
  std::optional<PreparedClaim> prepared_claim(const std::string& uid);
  std::string keep_prepared_claim(const std::string& uid, const PreparedClaim& c);  // "" or why not
  void forget_prepared_claim(const std::string& uid);
  PluginOptions opts_;
  ClaimSource& claims_;
  NodeDaemon& daemon_;
  std::mutex mu_;  // one claim at a time: preparing is rare, and file and gpuosd steps must pair
  std::map<std::string, PreparedClaim> prepared_;  // by claim uid (a cache of state_dir's files)
};

}  // namespace gpuos::dra
