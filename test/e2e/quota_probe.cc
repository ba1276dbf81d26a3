// A tenant that tries every allocation path to exceed its memory quota (GPUOS_TENANT_MEM bytes,
// set by `gpuos run --mem`). Each over-quota attempt must fail with CUDA_ERROR_OUT_OF_MEMORY and
// leave nothing allocated; cuMemGetInfo must show the tenant its own view. Prints one JSON line;
// exits 0 when every expectation held.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "probe_util.h"

namespace {

void expect_oom(CUresult r, const char* path) {
  if (r != CUDA_ERROR_OUT_OF_MEMORY) {
    std::fprintf(stderr, "quota_probe: %s over quota returned %d, want CUDA_ERROR_OUT_OF_MEMORY\n", path, r);
    ++probe::g_failures;
  }
}

}  // namespace

int main() {
  const char* q = std::getenv("GPUOS_TENANT_MEM");
  if (q == nullptr) {
    std::fprintf(stderr, "quota_probe: run me with gpuos run --mem SIZE\n");
    return 2;
  }
  const size_t quota = std::strtoull(q, nullptr, 10);
  CHECK_CU(cuInit(0));
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  CUstream stream;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  // Every path, asked for one byte more than the whole quota.
  CUdeviceptr p = 0;
  size_t pitch = 0;
  expect_oom(cuMemAlloc_v2(&p, quota + 1), "cuMemAlloc_v2");
  expect_oom(cuMemAllocPitch_v2(&p, &pitch, quota / 16 + 1, 16, 4), "cuMemAllocPitch_v2");
  expect_oom(cuMemAllocManaged(&p, quota + 1, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
  expect_oom(cuMemAllocAsync(&p, quota + 1, stream), "cuMemAllocAsync");
  expect_oom(cuMemAllocAsync_ptsz(&p, quota + 1, stream), "cuMemAllocAsync_ptsz");
  // Optional in the driver test double: looked up, not linked.
  auto get_pool = reinterpret_cast<CUresult (*)(CUmemoryPool*, CUdevice)>(
      dlsym(RTLD_DEFAULT, "cuDeviceGetDefaultMemPool"));
  CUmemoryPool pool = nullptr;
  if (get_pool != nullptr && get_pool(&pool, dev) == CUDA_SUCCESS) {
    expect_oom(cuMemAllocFromPoolAsync(&p, quota + 1, pool, stream), "cuMemAllocFromPoolAsync");
  }
  size_t gran = 0;
  CUmemAllocationProp prop = probe::device_prop(dev, &gran);
  CUmemGenericAllocationHandle h;
  expect_oom(cuMemCreate(&h, (quota / gran + 1) * gran, &prop, 0), "cuMemCreate");

  // The tenant's view, then the quota as a running total across paths.
  size_t free_b = 0, total_b = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_b, &total_b));
  probe::expect(total_b == quota, "cuMemGetInfo total is the quota");
  probe::expect(free_b == quota, "cuMemGetInfo free is the whole quota before any allocation");
  CUdeviceptr half;
  CHECK_CU(cuMemAlloc_v2(&half, quota / 2));
  CHECK_CU(cuMemGetInfo_v2(&free_b, &total_b));
  probe::expect(free_b == quota - quota / 2, "cuMemGetInfo free drops by what was allocated");
  expect_oom(cuMemAllocManaged(&p, quota / 2 + quota / 10, CU_MEM_ATTACH_GLOBAL), "managed after half");
  expect_oom(cuMemCreate(&h, ((quota / 2) / gran + 1) * gran, &prop, 0), "cuMemCreate after half");
  CHECK_CU(cuMemFree_v2(half));
  CUdeviceptr big;
  CHECK_CU(cuMemAllocAsync(&big, quota - quota / 10, stream));  // fits again once freed
  CHECK_CU(cuMemFreeAsync(big, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuMemGetInfo_v2(&free_b, &total_b));
  probe::expect(free_b == quota, "everything freed: the whole quota is free again");

  std::printf("{\"pid\": %d, \"quota\": %zu, \"failures\": %d}\n", static_cast<int>(getpid()), quota, probe::g_failures);
  return probe::g_failures == 0 ? 0 : 1;
}
