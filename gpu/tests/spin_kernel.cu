// SPDX-License-Identifier: Apache-2.0
// The kernel gpuos-bypass-probe --spin-s launches through the real driver, around libgpuos.so
// (verify_nvml.sh builds it into a cubin): fixed work per thread, so the SMs stay busy.
extern "C" __global__ void gpuos_spin(float* out, int iters) {
  float x = threadIdx.x * 0.001f;
  for (int i = 0; i < iters; ++i) x = x * 1.0000001f + 0.5f;
  if (x == -1.0f) out[blockIdx.x] = x;  // never true: keeps the loop
}
