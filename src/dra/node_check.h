// SPDX-License-Identifier: Apache-2.0
// Whether this node lets pods reach its GPUs without a gpuos claim, around gpuos (gpuos-dra warns of
// it: docs/KUBERNETES.md, "Security model").
#pragma once

#include <string>
#include <vector>

namespace gpuos::dra {

struct GpuAccessCheck {
  enum class Verdict { kClaimsOnly, kOpen, kUnknown };
  Verdict verdict = Verdict::kUnknown;
  std::string detail;  // what was found, where (kUnknown: why it cannot tell)
};

// The NVIDIA container runtime's config.toml, the first of paths that exists. Its top-level
// accept-nvidia-visible-devices-envvar-when-unprivileged, true when absent (the toolkit's default),
// lets any unprivileged container get GPUs by setting NVIDIA_VISIBLE_DEVICES, without a claim: kOpen.
// false: kClaimsOnly (the GPU then reaches a pod only as a CDI device, a volume-mount list or a
// privileged container). No file, or one that is not TOML or has another type there: kUnknown.
GpuAccessCheck check_nvidia_runtime_config(const std::vector<std::string>& paths);

}  // namespace gpuos::dra
