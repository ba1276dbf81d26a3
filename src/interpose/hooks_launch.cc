// Exported launch entry points: kernels (plain, Ex, cooperative) and graphs, each in its legacy
// and per-thread-default-stream (_ptsz) form. A missing real entry point (older driver) returns
// CUDA_ERROR_NOT_FOUND, never a call through null.
#include "interpose/fast_path.h"

using gpuos::interpose::governed_launch;
using gpuos::interpose::LaunchKind;


extern "C" {

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                        CUstream stream, void** params, void** extra) {
  return governed_launch(LaunchKind::kKernel, stream, false,
                         GPUOS_FORWARD(cuLaunchKernel, f, gx, gy, gz, bx, by, bz, shmem, stream,
                                       params, extra));
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                             CUstream stream, void** params, void** extra) {
  return governed_launch(LaunchKind::kKernel, stream, true,
                         GPUOS_FORWARD(cuLaunchKernel_ptsz, f, gx, gy, gz, bx, by, bz, shmem,
                                       stream, params, extra));
}

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  CUstream stream = config ? config->hStream : nullptr;
  return governed_launch(LaunchKind::kKernel, stream, false,
                         GPUOS_FORWARD(cuLaunchKernelEx, config, f, params, extra));
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                               void** extra) {
  CUstream stream = config ? config->hStream : nullptr;
  return governed_launch(LaunchKind::kKernel, stream, true,
                         GPUOS_FORWARD(cuLaunchKernelEx_ptsz, config, f, params, extra));
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shmem, CUstream stream, void** params) {
  return governed_launch(LaunchKind::kKernel, stream, false,
                         GPUOS_FORWARD(cuLaunchCooperativeKernel, f, gx, gy, gz, bx, by, bz, shmem,
                                       stream, params));
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shmem, CUstream stream,
                                        void** params) {
  return governed_launch(LaunchKind::kKernel, stream, true,
                         GPUOS_FORWARD(cuLaunchCooperativeKernel_ptsz, f, gx, gy, gz, bx, by, bz,
                                       shmem, stream, params));
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return governed_launch(LaunchKind::kGraph, stream, false, GPUOS_FORWARD(cuGraphLaunch, exec, stream));
}

CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return governed_launch(LaunchKind::kGraph, stream, true,
                         GPUOS_FORWARD(cuGraphLaunch_ptsz, exec, stream));
}

}  // extern "C"
