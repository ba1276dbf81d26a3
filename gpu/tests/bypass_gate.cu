// What a hostile tenant loads with dlmopen(LM_ID_NEWLM) (test/e2e/bypass_probe.cc --lib): a CUDA
// runtime and driver of its own, out of libgpuos.so's reach. gpuos_bypass_alloc takes memory past
// the tenant's quota; gpuos_bypass_spin keeps the SMs busy with fixed-work kernels whatever its gate
// says. Only NVML (gpuosd's usage check) sees either. Built on the GPU machine by verify_nvml.sh.
#include <cuda_runtime.h>

__global__ void fixed_work(float* out, int iters) {
  float x = threadIdx.x * 0.001f;
  for (int i = 0; i < iters; ++i) x = x * 1.0000001f + 0.5f;
  if (x == -1.0f) out[blockIdx.x] = x;  // never true: keeps the loop
}

extern "C" __attribute__((visibility("default"))) int gpuos_bypass_alloc(unsigned long long mib) {
  void* p = nullptr;
  if (cudaMalloc(&p, static_cast<size_t>(mib) << 20) != cudaSuccess) return 2;
  return cudaMemset(p, 1, static_cast<size_t>(mib) << 20) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess ? 0 : 3;
}

extern "C" __attribute__((visibility("default"))) int gpuos_bypass_spin(unsigned seconds) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* out = nullptr;
  cudaMalloc(&out, 4096 * sizeof(float));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  float total_ms = 0;
  while (total_ms < seconds * 1000.0f) {
    cudaEventRecord(a);
    for (int k = 0; k < 20; ++k) fixed_work<<<sms * 4, 256>>>(out, 200000);
    cudaEventRecord(b);
    if (cudaEventSynchronize(b) != cudaSuccess) return 4;
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    total_ms += ms;
  }
  return 0;
}
