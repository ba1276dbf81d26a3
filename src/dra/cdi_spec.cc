// SPDX-License-Identifier: Apache-2.0
#include "dra/cdi_spec.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpuos::dra {
namespace {

nlohmann::json bind_mount(const std::string& host, const std::string& container, bool read_only) {
  return {{"hostPath", host},
          {"containerPath", container},
          {"options", {read_only ? "ro" : "rw", "nosuid", "nodev", "rbind"}}};
}

}  // namespace

nlohmann::json cdi_spec(const ClaimInjection& c) {
  nlohmann::json env = nlohmann::json::array();
  env.push_back(std::string("LD_PRELOAD=") + kContainerInterposer);
  env.push_back(std::string("GPUOS_SOCKET=") + kContainerSocketDir + "/gpuosd.sock");
  env.push_back("GPUOS_CLAIM_UID=" + c.claim_uid);
  if (!c.gpu_uuid.empty()) env.push_back("CUDA_VISIBLE_DEVICES=" + c.gpu_uuid);
  for (const std::string& e : c.env) env.push_back(e);
  nlohmann::json mounts = nlohmann::json::array();
  mounts.push_back(bind_mount(c.interposer_host_path, kContainerInterposer, true));
  // Read-only: connecting to a socket writes nothing, and the container may not put files where
  // gpuosd will make the claim's socket again after a restart.
  mounts.push_back(bind_mount(c.socket_host_dir, kContainerSocketDir, true));
  if (!c.mps_pipe_host_dir.empty()) {
    // The domain's MPS server, at the same paths (the driver finds it by these variables).
    mounts.push_back(bind_mount(c.mps_pipe_host_dir, c.mps_pipe_host_dir, false));
    env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + c.mps_pipe_host_dir);
    if (!c.mps_log_host_dir.empty()) {
      mounts.push_back(bind_mount(c.mps_log_host_dir, c.mps_log_host_dir, false));
      env.push_back("CUDA_MPS_LOG_DIRECTORY=" + c.mps_log_host_dir);
    }
  }
  return {{"cdiVersion", "0.5.0"},
          {"kind", c.driver + "/claim"},
          {"devices", {{{"name", c.claim_uid}, {"containerEdits", {{"env", env}, {"mounts", mounts}}}}}}};
}

std::string cdi_device_id(const ClaimInjection& c) { return c.driver + "/claim=" + c.claim_uid; }

std::string cdi_spec_path(const std::string& dir, const ClaimInjection& c) {
  return dir + "/" + c.driver + "-claim_" + c.claim_uid + ".json";
}

std::string write_cdi_spec(const std::string& dir, const ClaimInjection& c) {
  const std::string path = cdi_spec_path(dir, c);
  const std::string tmp = path + ".tmp";
  const std::string text = cdi_spec(c).dump(2) + "\n";
  // (A runtime reads every *.json in the directory: the temp name does not end so.)
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot write " + tmp + ": " + std::strerror(errno);
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      std::string why = "cannot write " + tmp + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return why;
    }
    done += static_cast<std::size_t>(w);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = "cannot write " + path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return why;
  }
  return "";
}

std::string remove_cdi_spec(const std::string& dir, const ClaimInjection& c) {
  const std::string path = cdi_spec_path(dir, c);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return "cannot remove " + path + ": " + std::strerror(errno);
  return "";
}

}  // namespace gpuos::dra
