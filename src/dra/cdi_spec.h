// SPDX-License-Identifier: Apache-2.0
// The CDI spec gpuos-dra writes for a prepared claim: what the container runtime (containerd,
// CRI-O, podman) injects into the claim's containers. gpuos injects only its own parts: the
// interposer (LD_PRELOAD), the claim's gpuosd socket directory and the tenant's environment; the
// GPU itself (device nodes, libcuda) is the NVIDIA container toolkit's CDI device, named beside it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpuos::dra {

// Where the container finds gpuos's parts.
inline constexpr const char* kContainerInterposer = "/usr/lib/gpuos/libgpuos.so";
inline constexpr const char* kContainerSocketDir = "/run/gpuos";

struct ClaimInjection {
  std::string driver = "gpuos.io";     // CDI vendor; the kind is "<driver>/claim"
  std::string claim_uid;               // the CDI device's name
  std::string interposer_host_path;    // libgpuos.so on the host
  std::string socket_host_dir;         // the claim's socket directory on the host (gpuosd's answer)
  std::string gpu_uuid;                // "GPU-..." ("" = leave the GPUs the runtime gives)
  std::vector<std::string> env;        // more KEY=VALUE (the tenant's class, ...: informative)
  std::string mps_pipe_host_dir;       // a spatial claim's MPS directories ("" = none)
  std::string mps_log_host_dir;
};

// The spec (cdiVersion 0.5.0: containerd 1.7, CRI-O 1.28 and podman 4.3 read it).
nlohmann::json cdi_spec(const ClaimInjection& c);
// "<driver>/claim=<uid>", what the kubelet hands the runtime.
std::string cdi_device_id(const ClaimInjection& c);
// The spec's file in dir: "<driver>-claim_<uid>.json".
std::string cdi_spec_path(const std::string& dir, const ClaimInjection& c);
// Writes it whole (temp file + rename, so a runtime never reads half a spec): "" or why not.
std::string write_cdi_spec(const std::string& dir, const ClaimInjection& c);
// Removes it (none: fine): "" or why not.
std::string remove_cdi_spec(const std::string& dir, const ClaimInjection& c);

}  // namespace gpuos::dra
