// Exported launch entry points: kernels (plain, Ex, cooperative) and graphs, each in its legacy
// and per-thread-default-stream (_ptsz) form. A missing real entry point (older driver) returns
// CUDA_ERROR_NOT_FOUND, never a call through null.
#include "interpose/fast_path.h"

using gpuos::interpose::governed_launch;
using gpuos::interpose::LaunchKind;

// A launch call that takes the stream to launch on (the app's, or a partition stream chosen by
// spatial placement): `s` stands for it among the arguments.
#define GPUOS_LAUNCH(name, ...) \
  [&](const GpuosDriverTable& d, CUstream s) { return d.name ? d.name(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND; }

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

}  // namespace


extern "C" {

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                        CUstream stream, void** params, void** extra) {
  return governed_launch(LaunchKind::kKernel, stream, false,
                         GPUOS_LAUNCH(cuLaunchKernel, f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                             CUstream stream, void** params, void** extra) {
  return governed_launch(LaunchKind::kKernel, stream, true,
                         GPUOS_LAUNCH(cuLaunchKernel_ptsz, f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  CUstream stream = config ? config->hStream : nullptr;
  return governed_launch(LaunchKind::kKernel, stream, false,
                         [&](const GpuosDriverTable& d, CUstream s) { return launch_ex(d.cuLaunchKernelEx, config, s, f, params, extra); });
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                               void** extra) {
  CUstream stream = config ? config->hStream : nullptr;
  return governed_launch(LaunchKind::kKernel, stream, true,
                         [&](const GpuosDriverTable& d, CUstream s) {
                           return launch_ex(d.cuLaunchKernelEx_ptsz, config, s, f, params, extra);
                         });
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shmem, CUstream stream, void** params) {
  return governed_launch(LaunchKind::kKernel, stream, false,
                         GPUOS_LAUNCH(cuLaunchCooperativeKernel, f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shmem, CUstream stream,
                                        void** params) {
  return governed_launch(LaunchKind::kKernel, stream, true,
                         GPUOS_LAUNCH(cuLaunchCooperativeKernel_ptsz, f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return governed_launch(LaunchKind::kGraph, stream, false, GPUOS_LAUNCH(cuGraphLaunch, exec, s));
}

CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return governed_launch(LaunchKind::kGraph, stream, true,
                         GPUOS_LAUNCH(cuGraphLaunch_ptsz, exec, s));
}

}  // extern "C"
