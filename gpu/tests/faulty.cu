// SPDX-License-Identifier: Apache-2.0
// A tenant that dies of a GPU fault: an illegal-address write. Exits 3 when the fault is reported
// as expected (any other outcome is a failure of the test setup).
#include <cuda_runtime.h>

#include <cstdio>
#include <unistd.h>

__global__ void bad(int* p) { p[threadIdx.x * 1000000] = 1; }

int main() {
  cudaFree(0);
  usleep(300000);
  bad<<<1, 32>>>(reinterpret_cast<int*>(0x10));
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("faulty: %s\n", cudaGetErrorString(e));
  return e == cudaErrorIllegalAddress ? 3 : 1;
}
