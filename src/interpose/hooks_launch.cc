// SPDX-License-Identifier: Apache-2.0
// Exported launch entry points: kernels (plain, Ex, cooperative) and graphs, each in its legacy
// and per-thread-default-stream (_ptsz) form. A missing real entry point (older driver) returns
// CUDA_ERROR_NOT_FOUND, never a call through null.
#include "interpose/fast_path.h"

using gpuos::interpose::governed_launch;
using gpuos::interpose::LaunchKind;
using gpuos::interpose::LaunchShape;

// A launch call that takes the placement chosen for it: `s` stands for the stream to launch on
// (the app's, or a partition stream chosen by spatial placement) among the arguments, and
// `placed.graph` for a graph's partition variant.
#define GPUOS_LAUNCH(name, ...)                                                      \
  [&](const GpuosDriverTable& d, const gpuos::interpose::Placement& placed) {        \
    CUstream s = placed.target;                                                      \
    return d.name ? d.name(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND;                      \
  }

namespace {

// cuLaunchKernelEx names its stream inside the config: launch with a copy that names `s`.
template <typename Fn>
CUresult launch_ex(Fn fn, const CUlaunchConfig* config, CUstream s, CUfunction f, void** params, void** extra) {
  if (fn == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (config == nullptr || config->hStream == s) return fn(config, f, params, extra);
  CUlaunchConfig placed = *config;
  placed.hStream = s;
  return fn(&placed, f, params, extra);
}

LaunchShape kernel_shape(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz) {
  return LaunchShape{f, {gx, gy, gz}, {bx, by, bz}};
}

LaunchShape ex_shape(const CUlaunchConfig* c, CUfunction f) {
  if (c == nullptr) return LaunchShape{f, {}, {}};
  return kernel_shape(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ);
}

}  // namespace

extern "C" {

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                        CUstream stream, void** params, void** extra) {
  return governed_launch(LaunchKind::kKernel, stream, false, kernel_shape(f, gx, gy, gz, bx, by, bz),
                         GPUOS_LAUNCH(cuLaunchKernel, f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                             CUstream stream, void** params, void** extra) {
  return governed_launch(LaunchKind::kKernel, stream, true, kernel_shape(f, gx, gy, gz, bx, by, bz),
                         GPUOS_LAUNCH(cuLaunchKernel_ptsz, f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  CUstream stream = config ? config->hStream : nullptr;
  return governed_launch(LaunchKind::kKernel, stream, false, ex_shape(config, f),
                         [&](const GpuosDriverTable& d, const gpuos::interpose::Placement& p) {
                           return launch_ex(d.cuLaunchKernelEx, config, p.target, f, params, extra);
                         });
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                               void** extra) {
  CUstream stream = config ? config->hStream : nullptr;
  return governed_launch(LaunchKind::kKernel, stream, true, ex_shape(config, f),
                         [&](const GpuosDriverTable& d, const gpuos::interpose::Placement& p) {
                           return launch_ex(d.cuLaunchKernelEx_ptsz, config, p.target, f, params, extra);
                         });
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shmem, CUstream stream, void** params) {
  return governed_launch(LaunchKind::kKernel, stream, false, kernel_shape(f, gx, gy, gz, bx, by, bz),
                         GPUOS_LAUNCH(cuLaunchCooperativeKernel, f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shmem, CUstream stream,
                                        void** params) {
  return governed_launch(LaunchKind::kKernel, stream, true, kernel_shape(f, gx, gy, gz, bx, by, bz),
                         GPUOS_LAUNCH(cuLaunchCooperativeKernel_ptsz, f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return governed_launch(LaunchKind::kGraph, stream, false, LaunchShape{exec, {}, {}},
                         GPUOS_LAUNCH(cuGraphLaunch, placed.graph ? placed.graph : exec, s), exec);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return governed_launch(LaunchKind::kGraph, stream, true, LaunchShape{exec, {}, {}},
                         GPUOS_LAUNCH(cuGraphLaunch_ptsz, placed.graph ? placed.graph : exec, s), exec);
}

}  // extern "C"
