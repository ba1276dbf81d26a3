// The two indirect ways into the driver: cuGetProcAddress (v1 and v2; the CUDA runtime, PyTorch
// and cuBLAS reach every driver function this way) and dlsym on a dlopen'd libcuda (Triton's
// launcher). Both resolve through the real driver first, so its own rules for the caller's
// cudaVersion and flags (_v2/_v3, _ptsz) stay in force; then a real entry point that gpuos governs
// is swapped for gpuos's wrapper of exactly that variant, matched by address. Everything else is
// handed back untouched.
#include <dlfcn.h>

#include <cstring>
#include <type_traits>

#include "interpose/fast_path.h"

namespace gi = gpuos::interpose;

// Every exported wrapper, once. Each must have the exact type of the real entry point it stands
// for; the static_assert below makes the compiler check that against the driver table.
#define GPUOS_GOVERNED(X)                                                                       \
  X(cuInit) X(cuGetProcAddress) X(cuGetProcAddress_v2)                                          \
  X(cuCtxCreate_v2) X(cuCtxCreate_v3) X(cuCtxCreate_v4) X(cuDevicePrimaryCtxRetain)             \
  X(cuStreamCreate) X(cuStreamCreateWithPriority)                                               \
  X(cuStreamBeginCapture) X(cuStreamBeginCapture_ptsz) X(cuStreamBeginCapture_v2)               \
  X(cuStreamBeginCapture_v2_ptsz) X(cuStreamEndCapture) X(cuStreamEndCapture_ptsz)              \
  X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz)         \
  X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz)                                \
  X(cuGraphLaunch) X(cuGraphLaunch_ptsz)                                                        \
  X(cuMemGetInfo_v2) X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged) X(cuMemFree_v2) \
  X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync)                         \
  X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz)                      \
  X(cuMemCreate) X(cuMemRelease)                                                                \
  X(cuArrayCreate_v2) X(cuArray3DCreate_v2) X(cuArrayDestroy) X(cuMipmappedArrayCreate)         \
  X(cuMipmappedArrayDestroy) X(cuGraphAddMemAllocNode) X(cuGraphAddMemFreeNode)                 \
  X(cuGraphAddNode) X(cuGraphAddNode_v2)                                                        \
  X(cuIpcOpenMemHandle) X(cuIpcOpenMemHandle_v2) X(cuIpcCloseMemHandle)                         \
  /* copies, memsets, prefetches (hooks_copy.cc) */                                             \
  X(cuMemcpy) X(cuMemcpy_ptds) X(cuMemcpyPeer) X(cuMemcpyPeer_ptds) X(cuMemcpyHtoD_v2)          \
  X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoH_v2_ptds) X(cuMemcpyDtoD_v2)         \
  X(cuMemcpyDtoD_v2_ptds) X(cuMemcpy2D_v2) X(cuMemcpy2D_v2_ptds) X(cuMemcpy2DUnaligned_v2)      \
  X(cuMemcpy2DUnaligned_v2_ptds) X(cuMemcpy3D_v2) X(cuMemcpy3D_v2_ptds) X(cuMemcpy3DPeer)       \
  X(cuMemcpy3DPeer_ptds) X(cuMemcpyAsync) X(cuMemcpyAsync_ptsz) X(cuMemcpyPeerAsync)            \
  X(cuMemcpyPeerAsync_ptsz) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoDAsync_v2_ptsz)                \
  X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoHAsync_v2_ptsz) X(cuMemcpyDtoDAsync_v2)                  \
  X(cuMemcpyDtoDAsync_v2_ptsz) X(cuMemcpy2DAsync_v2) X(cuMemcpy2DAsync_v2_ptsz)                 \
  X(cuMemcpy3DAsync_v2) X(cuMemcpy3DAsync_v2_ptsz) X(cuMemcpy3DPeerAsync)                       \
  X(cuMemcpy3DPeerAsync_ptsz) X(cuMemcpyBatchAsync) X(cuMemcpyBatchAsync_ptsz)                  \
  X(cuMemcpyBatchAsync_v2) X(cuMemcpyBatchAsync_v2_ptsz) X(cuMemcpy3DBatchAsync)                \
  X(cuMemcpy3DBatchAsync_ptsz) X(cuMemcpy3DBatchAsync_v2) X(cuMemcpy3DBatchAsync_v2_ptsz)       \
  X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds) X(cuMemsetD16_v2) X(cuMemsetD16_v2_ptds)               \
  X(cuMemsetD32_v2) X(cuMemsetD32_v2_ptds) X(cuMemsetD2D8_v2) X(cuMemsetD2D8_v2_ptds)           \
  X(cuMemsetD2D16_v2) X(cuMemsetD2D16_v2_ptds) X(cuMemsetD2D32_v2) X(cuMemsetD2D32_v2_ptds)     \
  X(cuMemsetD8Async) X(cuMemsetD8Async_ptsz) X(cuMemsetD16Async) X(cuMemsetD16Async_ptsz)       \
  X(cuMemsetD32Async) X(cuMemsetD32Async_ptsz) X(cuMemsetD2D8Async) X(cuMemsetD2D8Async_ptsz)   \
  X(cuMemsetD2D16Async) X(cuMemsetD2D16Async_ptsz) X(cuMemsetD2D32Async)                        \
  X(cuMemsetD2D32Async_ptsz) X(cuMemPrefetchAsync) X(cuMemPrefetchAsync_ptsz)                   \
  X(cuMemPrefetchAsync_v2) X(cuMemPrefetchAsync_v2_ptsz) X(cuMemPrefetchBatchAsync)             \
  X(cuMemPrefetchBatchAsync_ptsz)

#define GPUOS_CHECK_TYPE(name)                                                        \
  static_assert(std::is_same_v<decltype(&::name), decltype(GpuosDriverTable::name)>, \
                #name ": wrapper and real entry point differ in type");
GPUOS_GOVERNED(GPUOS_CHECK_TYPE)
#undef GPUOS_CHECK_TYPE

namespace {

struct Governed {
  const char* name;
  void* wrapper;
  void* GpuosDriverTable::*real;  // where the real entry point sits in the table
};

// Built on first use rather than at load time: the member-pointer casts are not constant
// expressions, and the interposer runs no global constructors.
#define GPUOS_ENTRY(name) \
  Governed{#name, reinterpret_cast<void*>(&::name), reinterpret_cast<void* GpuosDriverTable::*>(&GpuosDriverTable::name)},
#define GPUOS_COUNT(name) +1
constexpr int kGovernedCount = 0 GPUOS_GOVERNED(GPUOS_COUNT);
#undef GPUOS_COUNT
struct GovernedTable {
  Governed entries[kGovernedCount] = {GPUOS_GOVERNED(GPUOS_ENTRY)};
  const Governed* begin() const { return entries; }
  const Governed* end() const { return entries + kGovernedCount; }
};
#undef GPUOS_ENTRY

const GovernedTable& governed() {
  static const GovernedTable table;
  return table;
}

void* real_of(const GpuosDriverTable& d, const Governed& g) { return d.*(g.real); }

// The wrapper standing for real entry point `p`, or `p` itself if gpuos does not govern it.
void* wrapper_for_real(const GpuosDriverTable& d, void* p) {
  if (p == nullptr) return p;
  for (const Governed& g : governed()) {
    if (real_of(d, g) == p) return g.wrapper;
  }
  return p;
}

}  // namespace

extern "C" {

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = d->cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = wrapper_for_real(*d, *pfn);
  return r;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = d->cuGetProcAddress
                   ? d->cuGetProcAddress(symbol, pfn, cudaVersion, flags)
                   : d->cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = wrapper_for_real(*d, *pfn);
  return r;
}

// Interposes dlsym itself: a program that dlopen's libcuda and looks up a governed entry point
// gets the wrapper. Only symbols that resolve to the very entry point the driver table holds are
// swapped, so a same-named symbol of another library is left alone.
void* dlsym(void* handle, const char* name) {
  void* p = gi::real_dlsym()(handle, name);
  if (p == nullptr || name[0] != 'c' || name[1] != 'u') return p;
  for (const Governed& g : governed()) {
    if (std::strcmp(g.name, name) != 0) continue;
    if (p == g.wrapper) return p;  // already ours (lookup through the global scope)
    const GpuosDriverTable* d = gi::real_driver();
    return d != nullptr && real_of(*d, g) == p ? g.wrapper : p;
  }
  return p;
}

}  // extern "C"
