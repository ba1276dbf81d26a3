// SPDX-License-Identifier: Apache-2.0
// Device code of gpuos-synth: the fixed-work kernels named in docs/CONTRACTS.md ("Fixed-work kernels
// shared by the H200 and the driver double"). Compiled at build time into a fatbin (sm_90 SASS plus
// compute_90 PTX) that gpuos-synth embeds and loads with cuModuleLoadData. The driver double resolves
// the same names as built-ins, so the host program runs unchanged on both.
//
// extern "C" keeps the names unmangled so cuModuleGetFunction finds them by these exact strings.

// Fixed work, never a wall-clock spin: every thread runs `iters` dependent FMAs on registers, so the
// kernel's duration scales with the SM time it actually gets (time-slicing and partitioning show up
// in its latency). The result is kept alive by a store that can never happen (the value stays in
// [0, 2) because |b| < 1 and a, c are small and non-negative), which the compiler cannot prove.
__device__ __forceinline__ float fixed_chain(unsigned long long iters) {
  float a = static_cast<float>(threadIdx.x) * (1.0f / 1024.0f);
  const float b = 0.9999999f;
  const float c = 1.0e-7f;
  for (unsigned long long i = 0; i < iters; ++i) {
    a = fmaf(a, b, c);  // each FMA depends on the previous one: no ILP, fixed latency chain
  }
  return a;
}

extern "C" __global__ void gpuos_fixed_work(unsigned long long iters, unsigned long long* done_blocks) {
  const float a = fixed_chain(iters);
  if (a < 0.0f) {  // impossible; keeps the loop from being dropped as dead code
    done_blocks[0] = static_cast<unsigned long long>(-a);
  }
  // Count the block only once all its threads have finished their work.
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(done_blocks, 1ULL);
  }
}

// gpuos-synth --device-trace: the same work, and each block's thread 0 stores, at stamps[3 * block],
// %globaltimer when it started and when the block finished, and its %smid: the GPU's own account
// of the kernel (not a driver-double built-in; gpuos-synth resolves it only with that flag).
extern "C" __global__ void gpuos_fixed_work_traced(unsigned long long iters, unsigned long long* done_blocks,
                                                   unsigned long long* stamps) {
  unsigned long long t0 = 0;
  if (threadIdx.x == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const float a = fixed_chain(iters);
  if (a < 0.0f) {
    done_blocks[0] = static_cast<unsigned long long>(-a);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(done_blocks, 1ULL);
    unsigned long long t1;
    unsigned sm;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    unsigned long long* at = stamps + 3ull * blockIdx.x;
    at[0] = t0;
    at[1] = t1;
    at[2] = sm;
  }
}

// dst[i] = value ^ i (i truncated to 32 bits), grid-stride so any grid covers any n.
extern "C" __global__ void gpuos_fill_u32(unsigned int* dst, unsigned int value, unsigned long long n) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    dst[i] = value ^ static_cast<unsigned int>(i);
  }
}
