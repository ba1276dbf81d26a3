// SPDX-License-Identifier: Apache-2.0
#include "dra/node_check.h"

#include <sys/stat.h>

#include <toml++/toml.h>

namespace gpuos::dra {

GpuAccessCheck check_nvidia_runtime_config(const std::vector<std::string>& paths) {
  constexpr const char* kKey = "accept-nvidia-visible-devices-envvar-when-unprivileged";
  GpuAccessCheck c;
  for (const std::string& path : paths) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;
    toml::table root;
    try {
      root = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      c.detail = path + ": not TOML (" + std::string(e.description()) + ")";
      return c;
    } catch (const std::exception& e) {
      c.detail = path + ": " + e.what();
      return c;
    }
    const toml::node* v = root.get(kKey);
    if (v != nullptr && !v->is_boolean()) {
      c.detail = path + ": " + kKey + " is not true or false";
      return c;
    }
    const bool open = v == nullptr || v->value_or(true);
    c.verdict = open ? GpuAccessCheck::Verdict::kOpen : GpuAccessCheck::Verdict::kClaimsOnly;
    c.detail = path + ": " + kKey + (v == nullptr ? " is not set (the NVIDIA toolkit's default: true)" : open ? " = true" : " = false");
    return c;
  }
  c.detail = "no NVIDIA container runtime config at ";
  for (std::size_t i = 0; i < paths.size(); ++i) c.detail += (i ? ", " : "") + paths[i];
  if (paths.empty()) c.detail = "no NVIDIA container runtime config to check";
  return c;
}

}  // namespace gpuos::dra
