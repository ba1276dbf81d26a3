// SPDX-License-Identifier: Apache-2.0
// A tenant for the Kubernetes tests, run inside a container (test/e2e/test_dra.py): allocates
// device memory in 64 MiB blocks until the driver says no, frees it, and prints one JSON line:
// {"pid": its pid as it sees it, "allocated": bytes it got, "error": the refusing call's result,
//  "visible": the devices it sees, "total": what cuMemGetInfo says the device has}.
// It stops at --max-mib (default 4096), so without a quota it does not take the whole device.
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  unsigned long long max_mib = 4096;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--max-mib") == 0) max_mib = std::strtoull(argv[i + 1], nullptr, 10);
  }
  CUresult r = cuInit(0);
  int count = 0;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (r == CUDA_SUCCESS) r = cuDeviceGetCount(&count);
  if (r == CUDA_SUCCESS) r = cuDeviceGet(&dev, 0);
  if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) {
    std::printf("{\"pid\": %d, \"setup_error\": %d}\n", static_cast<int>(getpid()), static_cast<int>(r));
    return 1;
  }
  size_t free_b = 0, total_b = 0;
  cuMemGetInfo(&free_b, &total_b);
  std::vector<CUdeviceptr> blocks;
  const size_t block = 64ull << 20;
  CUresult refused = CUDA_SUCCESS;
  while (blocks.size() * 64 < max_mib) {
    CUdeviceptr p = 0;
    refused = cuMemAlloc(&p, block);
    if (refused != CUDA_SUCCESS) break;
    blocks.push_back(p);
  }
  for (CUdeviceptr p : blocks) cuMemFree(p);
  std::printf("{\"pid\": %d, \"allocated\": %zu, \"error\": %d, \"visible\": %d, \"total\": %zu}\n",
              static_cast<int>(getpid()), blocks.size() * block, static_cast<int>(refused), count, total_b);
  cuDevicePrimaryCtxRelease(dev);
  return 0;
}
