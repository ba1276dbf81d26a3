// The part of bypass_probe that a hostile tenant loads with dlmopen into a fresh link-map namespace:
// there LD_PRELOAD does not reach, so its libcuda.so.1 is a second copy of the driver that
// libgpuos.so never sees. What it allocates is on the GPU all the same (NVML sees it).
#include <cuda.h>

extern "C" __attribute__((visibility("default"))) int gpuos_bypass_alloc(unsigned long long mib) {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUdeviceptr p = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    return 1;
  }
  return cuMemAlloc(&p, static_cast<size_t>(mib) << 20) == CUDA_SUCCESS ? 0 : 2;
}
