// SPDX-License-Identifier: Apache-2.0
// Copies and memsets through libgpuos.so: run under LD_PRELOAD on the driver test double (see
// CMakeLists.txt), it reaches the copy wrappers by the exported symbols, by cuGetProcAddress_v2
// (legacy and per-thread default stream) and by dlsym on the dlopen'd libcuda, checks that each
// path hands out gpuos's wrapper of exactly the variant asked for, and checks the data every copy
// moved. Exit status 0: all good; 1: an expectation failed; 2: a driver call failed.
#include <dlfcn.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpuos/cuda_internal.h"

namespace {

int g_failures = 0;

void expect(bool ok, const char* path, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "copy_probe [%s]: expectation failed: %s\n", path, what);
    ++g_failures;
  }
}

#define CHECK_CU(call)                                                                  \
  do {                                                                                  \
    CUresult r_ = (call);                                                               \
    if (r_ != CUDA_SUCCESS) {                                                           \
      std::fprintf(stderr, "copy_probe: %s failed: %d\n", #call, static_cast<int>(r_)); \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

// True if `p` is code of libgpuos.so (not of the driver or this program).
bool in_gpuos(void* p) {
  Dl_info info{};
  return p != nullptr && dladdr(p, &info) != 0 && info.dli_fname != nullptr &&
         std::strstr(info.dli_fname, "libgpuos.so") != nullptr;
}

// One way of reaching each entry point under test.
struct CopyFns {
  decltype(&cuMemcpyHtoD_v2) htod;
  decltype(&cuMemcpyDtoD_v2) dtod;
  decltype(&cuMemcpyDtoH_v2) dtoh;
  decltype(&cuMemsetD16_v2) memset16;
  decltype(&cuMemcpy2D_v2) copy2d;
  decltype(&cuMemcpyHtoDAsync_v2) htod_async;
};

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 2654435761u + seed) >> 13);
  return v;
}

// HtoD, DtoD, DtoH, async HtoD, memsetD16 and a 2D round trip, each checked by reading back.
void exercise(const CopyFns& f, const char* path, uint32_t seed, CUstream stream) {
  constexpr size_t kBytes = 64 * 1024;
  CUdeviceptr a = 0, b = 0;
  CHECK_CU(cuMemAlloc_v2(&a, kBytes));
  CHECK_CU(cuMemAlloc_v2(&b, kBytes));
  const std::vector<uint8_t> src = pattern(kBytes, seed);
  std::vector<uint8_t> back(kBytes, 0);

  CHECK_CU(f.htod(a, src.data(), kBytes));
  CHECK_CU(f.dtod(b, a, kBytes));
  CHECK_CU(f.dtoh(back.data(), b, kBytes));
  expect(back == src, path, "HtoD -> DtoD -> DtoH returns the data");

  const std::vector<uint8_t> src2 = pattern(kBytes, seed + 1);
  CHECK_CU(f.htod_async(a, src2.data(), kBytes, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(f.dtoh(back.data(), a, kBytes));
  expect(back == src2, path, "async HtoD lands in stream order");

  const uint16_t v16 = static_cast<uint16_t>(0xbe00 | (seed & 0xff));
  CHECK_CU(f.memset16(b + 2, v16, kBytes / 2 - 2));  // leaves the first and last u16 alone
  std::vector<uint16_t> words(kBytes / 2, 0);
  CHECK_CU(f.dtoh(words.data(), b, kBytes));
  bool ok = words.front() == static_cast<uint16_t>(src[0] | src[1] << 8) &&
            words.back() == static_cast<uint16_t>(src[kBytes - 2] | src[kBytes - 1] << 8);
  for (size_t i = 1; i + 1 < words.size(); ++i) ok = ok && words[i] == v16;
  expect(ok, path, "memsetD16 writes exactly its range");

  // 2D: a 40x16 block from a host image (pitch 48) to device (pitch 256, at x=8, y=2) and back
  // into a host image of pitch 64 pre-filled with 0xee (its padding must stay untouched).
  constexpr size_t kW = 40, kH = 16, kHostPitch = 48, kDevPitch = 256, kBackPitch = 64;
  const std::vector<uint8_t> img = pattern(kHostPitch * kH, seed + 2);
  CUDA_MEMCPY2D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = img.data();
  up.srcPitch = kHostPitch;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = a;
  up.dstXInBytes = 8;
  up.dstY = 2;
  up.dstPitch = kDevPitch;
  up.WidthInBytes = kW;
  up.Height = kH;
  CHECK_CU(f.copy2d(&up));
  std::vector<uint8_t> img_back(kBackPitch * kH, 0xee);
  CUDA_MEMCPY2D down{};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = a;
  down.srcXInBytes = 8;
  down.srcY = 2;
  down.srcPitch = kDevPitch;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = img_back.data();
  down.dstPitch = kBackPitch;
  down.WidthInBytes = kW;
  down.Height = kH;
  CHECK_CU(f.copy2d(&down));
  ok = true;
  for (size_t y = 0; y < kH; ++y) {
    for (size_t x = 0; x < kBackPitch; ++x) {
      const uint8_t want = x < kW ? img[y * kHostPitch + x] : 0xee;
      ok = ok && img_back[y * kBackPitch + x] == want;
    }
  }
  expect(ok, path, "2D copy up and down returns the block and leaves the padding alone");

  CHECK_CU(cuMemFree_v2(a));
  CHECK_CU(cuMemFree_v2(b));
}

// cuGetProcAddress_v2(base) must hand out libgpuos's wrapper of exactly `variant`.
void* lookup(const char* base, const char* variant, cuuint64_t flags, const char* path) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult q{};
  CHECK_CU(cuGetProcAddress_v2(base, &p, 13000, flags, &q));
  char what[160];
  std::snprintf(what, sizeof what, "cuGetProcAddress(%s) gives the governed %s", base, variant);
  expect(p != nullptr && p == dlsym(RTLD_DEFAULT, variant) && in_gpuos(p), path, what);
  return p;
}

template <class Fn>
Fn as(void* p) {
  return reinterpret_cast<Fn>(p);
}

CopyFns by_proc_address(cuuint64_t flags, bool pt, const char* path) {
  CopyFns f{};
  f.htod = as<decltype(f.htod)>(
      lookup("cuMemcpyHtoD", pt ? "cuMemcpyHtoD_v2_ptds" : "cuMemcpyHtoD_v2", flags, path));
  f.dtod = as<decltype(f.dtod)>(
      lookup("cuMemcpyDtoD", pt ? "cuMemcpyDtoD_v2_ptds" : "cuMemcpyDtoD_v2", flags, path));
  f.dtoh = as<decltype(f.dtoh)>(
      lookup("cuMemcpyDtoH", pt ? "cuMemcpyDtoH_v2_ptds" : "cuMemcpyDtoH_v2", flags, path));
  f.memset16 = as<decltype(f.memset16)>(
      lookup("cuMemsetD16", pt ? "cuMemsetD16_v2_ptds" : "cuMemsetD16_v2", flags, path));
  f.copy2d = as<decltype(f.copy2d)>(
      lookup("cuMemcpy2D", pt ? "cuMemcpy2D_v2_ptds" : "cuMemcpy2D_v2", flags, path));
  f.htod_async = as<decltype(f.htod_async)>(lookup(
      "cuMemcpyHtoDAsync", pt ? "cuMemcpyHtoDAsync_v2_ptsz" : "cuMemcpyHtoDAsync_v2", flags, path));
  return f;
}

}  // namespace

int main() {
  // The simulated GPU is this probe's own (GPUOS_SIM_SHM, set by ctest): its name goes with it.
  std::atexit([] {
    if (const char* shm = std::getenv("GPUOS_SIM_SHM"); shm != nullptr && shm[0] == '/') shm_unlink(shm);
  });
  CHECK_CU(cuInit(0));
  CUdevice dev = 0;
  CHECK_CU(cuDeviceGet(&dev, 0));
  CUcontext ctx = nullptr;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  // Path 1: the exported symbols this program is linked against bind to libgpuos.so.
  expect(in_gpuos(dlsym(RTLD_DEFAULT, "cuMemcpyHtoD_v2")), "symbols", "libgpuos.so is preloaded");
  for (const char* name : {"cuMemcpyDtoD_v2", "cuMemcpyDtoH_v2", "cuMemsetD16_v2", "cuMemcpy2D_v2",
                           "cuMemcpyHtoDAsync_v2", "cuMemcpy2DAsync_v2_ptsz", "cuMemsetD2D8_v2",
                           "cuMemcpyBatchAsync_v2", "cuMemPrefetchAsync_v2"}) {
    expect(in_gpuos(dlsym(RTLD_DEFAULT, name)), "symbols", name);
  }
  exercise({cuMemcpyHtoD_v2, cuMemcpyDtoD_v2, cuMemcpyDtoH_v2, cuMemsetD16_v2, cuMemcpy2D_v2,
            cuMemcpyHtoDAsync_v2},
           "symbols", 1, stream);

  // An entry point the driver lacks (the double has no 2D memsets) fails cleanly, no crash.
  expect(cuMemsetD2D8_v2(0, 64, 0, 16, 2) == CUDA_ERROR_NOT_FOUND, "symbols",
         "a wrapper whose driver entry point is missing returns CUDA_ERROR_NOT_FOUND");

  // Path 2: cuGetProcAddress_v2, legacy and per-thread default stream.
  exercise(by_proc_address(CU_GET_PROC_ADDRESS_LEGACY_STREAM, false, "procaddr"), "procaddr", 10,
           stream);
  exercise(by_proc_address(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, true, "procaddr-pt"),
           "procaddr-pt", 20, stream);

  // Path 3: dlsym on the dlopen'd driver.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  expect(lib != nullptr, "dlsym", "libcuda.so.1 is loaded");
  void* dl_dtoh = lib ? dlsym(lib, "cuMemcpyDtoH_v2") : nullptr;
  expect(dl_dtoh == dlsym(RTLD_DEFAULT, "cuMemcpyDtoH_v2") && in_gpuos(dl_dtoh), "dlsym",
         "dlsym(libcuda, cuMemcpyDtoH_v2) gives the governed one");

  // cuMemHostRegister is in the driver table but not governed: lookups pass it through.
  void* reg = nullptr;
  CHECK_CU(cuGetProcAddress_v2("cuMemHostRegister", &reg, 13000, 0, nullptr));
  expect(reg != nullptr && !in_gpuos(reg) && lib != nullptr &&
             reg == dlsym(lib, "cuMemHostRegister_v2"),
         "procaddr", "cuMemHostRegister passes through untouched");

  CHECK_CU(cuStreamDestroy_v2(stream));
  std::printf("copy_probe: %d failure(s)\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
