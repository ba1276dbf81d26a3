// SPDX-License-Identifier: Apache-2.0
// How fast can a KV pool grow and shrink on this GPU? Times the CUDA VMM calls a pool makes for
// 1 GiB of 2 MiB pages, in the ways a pool could batch them:
//   per_page       create, map, set access for each page (what a naive pool does);
//   batched        create every page, map every page, then one cuMemSetAccess over the range;
//   threads_N      as batched, the cuMemCreate calls split over N threads;
//   unmap_range    one cuMemUnmap over the range (spans many mappings) vs one per page;
// Prints one JSON object. Build: nvcc -O2 -o vmm_grow vmm_grow.cu -lcuda
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

#define CHECK(x)                                                                        \
  do {                                                                                  \
    CUresult r_ = (x);                                                                  \
    if (r_ != CUDA_SUCCESS) {                                                           \
      const char* s_ = nullptr;                                                         \
      cuGetErrorName(r_, &s_);                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?"); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

size_t kPage = size_t{2} << 20;  // the physical allocation's size (main sets it)

CUmemAllocationProp prop_of(int dev) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  return p;
}

void create_range(std::vector<CUmemGenericAllocationHandle>& h, size_t from, size_t to, int dev, CUcontext ctx) {
  CHECK(cuCtxSetCurrent(ctx));
  CUmemAllocationProp p = prop_of(dev);
  for (size_t i = from; i < to; ++i) CHECK(cuMemCreate(&h[i], kPage, &p, 0));
}

struct Times {
  double create = 0, map = 0, access = 0, unmap = 0, release = 0, total = 0;
};

// Grows [va, va + n pages) and shrinks it again.
Times run(CUdeviceptr va, size_t n, int dev, CUcontext ctx, int threads, bool per_page, bool unmap_range) {
  std::vector<CUmemGenericAllocationHandle> h(n);
  CUmemAccessDesc acc{};
  acc.location = prop_of(dev).location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  Times t;
  const double t0 = now_ms();
  if (per_page) {
    CUmemAllocationProp p = prop_of(dev);
    for (size_t i = 0; i < n; ++i) {
      CHECK(cuMemCreate(&h[i], kPage, &p, 0));
      CHECK(cuMemMap(va + i * kPage, kPage, 0, h[i], 0));
      CHECK(cuMemSetAccess(va + i * kPage, kPage, &acc, 1));
    }
    t.total = now_ms() - t0;
  } else {
    if (threads <= 1) {
      create_range(h, 0, n, dev, ctx);
    } else {
      std::vector<std::thread> ts;
      for (int k = 0; k < threads; ++k) {
        ts.emplace_back(create_range, std::ref(h), n * k / threads, n * (k + 1) / threads, dev, ctx);
      }
      for (auto& x : ts) x.join();
    }
    const double t1 = now_ms();
    for (size_t i = 0; i < n; ++i) CHECK(cuMemMap(va + i * kPage, kPage, 0, h[i], 0));
    const double t2 = now_ms();
    CHECK(cuMemSetAccess(va, n * kPage, &acc, 1));
    const double t3 = now_ms();
    t.create = t1 - t0;
    t.map = t2 - t1;
    t.access = t3 - t2;
    t.total = t3 - t0;
  }
  CHECK(cuMemsetD8(va, 1, n * kPage));  // the memory works
  CHECK(cuCtxSynchronize());
  const double u0 = now_ms();
  if (unmap_range) {
    CHECK(cuMemUnmap(va, n * kPage));
  } else {
    for (size_t i = 0; i < n; ++i) CHECK(cuMemUnmap(va + i * kPage, kPage));
  }
  const double u1 = now_ms();
  for (size_t i = 0; i < n; ++i) CHECK(cuMemRelease(h[i]));
  t.unmap = u1 - u0;
  t.release = now_ms() - u1;
  return t;
}

void print(const char* name, const Times& t, bool last) {
  std::printf("  \"%s\": {\"grow_ms_per_gib\": %.3f, \"create_ms\": %.3f, \"map_ms\": %.3f, \"access_ms\": %.3f, "
              "\"unmap_ms\": %.3f, \"release_ms\": %.3f}%s\n",
              name, t.total, t.create, t.map, t.access, t.unmap, t.release, last ? "" : ",");
}

}  // namespace

int main() {
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  const size_t n = (size_t{1} << 30) / kPage;
  CUdeviceptr va;
  CHECK(cuMemAddressReserve(&va, n * kPage, 0, 0, 0));
  // Warm-up (first VMM calls set up driver state).
  run(va, n, dev, ctx, 1, false, false);
  std::printf("{\n");
  print("per_page", run(va, n, dev, ctx, 1, true, false), false);
  print("batched", run(va, n, dev, ctx, 1, false, false), false);
  print("batched_again", run(va, n, dev, ctx, 1, false, false), false);
  print("threads_2", run(va, n, dev, ctx, 2, false, false), false);
  print("threads_4", run(va, n, dev, ctx, 4, false, false), false);
  print("threads_8", run(va, n, dev, ctx, 8, false, false), false);
  print("unmap_range", run(va, n, dev, ctx, 1, false, true), false);
  // Mapping handles that already exist (a pool's cache of unmapped pages): map + access only.
  {
    std::vector<CUmemGenericAllocationHandle> h(n);
    create_range(h, 0, n, dev, ctx);
    CUmemAccessDesc acc{};
    acc.location = prop_of(dev).location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    Times t;
    for (int round = 0; round < 2; ++round) {
      const double t0 = now_ms();
      for (size_t i = 0; i < n; ++i) CHECK(cuMemMap(va + i * kPage, kPage, 0, h[i], 0));
      const double t1 = now_ms();
      CHECK(cuMemSetAccess(va, n * kPage, &acc, 1));
      const double t2 = now_ms();
      CHECK(cuMemUnmap(va, n * kPage));
      t.map = t1 - t0;
      t.access = t2 - t1;
      t.total = t2 - t0;
      t.unmap = now_ms() - t2;
    }
    for (size_t i = 0; i < n; ++i) CHECK(cuMemRelease(h[i]));
    print("remap_cached", t, false);
  }
  // Larger physical allocations: is the cost per mapping or per byte?
  const size_t two = kPage;
  for (size_t mib : {4, 8, 32, 64}) {
    kPage = mib << 20;
    char name[32];
    std::snprintf(name, sizeof(name), "batched_%zumib", mib);
    print(name, run(va, (size_t{1} << 30) / kPage, dev, ctx, 1, false, false), mib == 64);
  }
  kPage = two;
  std::printf("}\n");
  CHECK(cuMemAddressFree(va, n * kPage));
  return 0;
}
