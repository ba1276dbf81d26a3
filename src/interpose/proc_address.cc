// SPDX-License-Identifier: Apache-2.0
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
#include "interpose/stream_work.h"

namespace gi = gpuos::interpose;

// Every exported wrapper, once: this list, the copies, memsets and prefetches of
// GPUOS_DEVICE_ACCESS_FUNCS and the other stream work of GPUOS_STREAM_WORK_FUNCS
// (both in hooks_stream.cc). Each must have the exact type of the real entry point
// it stands for; the static_assert below makes the compiler check that against the driver table.
#define GPUOS_GOVERNED(X)                                                                       \
  X(cuInit) X(cuGetProcAddress) X(cuGetProcAddress_v2)                                          \
  X(cuCtxCreate_v2) X(cuCtxCreate_v3) X(cuCtxCreate_v4) X(cuDevicePrimaryCtxRetain)             \
  X(cuCtxSetLimit)                                                                              \
  X(cuStreamCreate) X(cuStreamCreateWithPriority)                                               \
  X(cuStreamBeginCapture) X(cuStreamBeginCapture_ptsz) X(cuStreamBeginCapture_v2)               \
  X(cuStreamBeginCapture_v2_ptsz) X(cuStreamBeginCaptureToGraph) X(cuStreamBeginCaptureToGraph_ptsz) \
  X(cuStreamEndCapture) X(cuStreamEndCapture_ptsz)                                              \
  X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz)         \
  X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz)                                \
  X(cuGraphLaunch) X(cuGraphLaunch_ptsz)                                                        \
  X(cuGraphInstantiateWithFlags) X(cuGraphInstantiateWithParams)                                 \
  X(cuGraphInstantiateWithParams_ptsz) X(cuGraphExecDestroy) X(cuGraphExecUpdate_v2)              \
  X(cuGraphInstantiate) X(cuGraphInstantiate_v2) X(cuGraphExecUpdate) /* pre-12.0 signatures */   \
  X(cuGraphExecKernelNodeSetParams_v2) X(cuGraphExecNodeSetParams)                               \
  X(cuGraphExecMemcpyNodeSetParams) X(cuGraphExecMemsetNodeSetParams)                            \
  X(cuGraphExecHostNodeSetParams) X(cuGraphExecChildGraphNodeSetParams)                          \
  X(cuGraphExecEventRecordNodeSetEvent) X(cuGraphExecEventWaitNodeSetEvent) X(cuGraphNodeSetEnabled) \
  X(cuMemGetInfo_v2) X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemAllocManaged) X(cuMemFree_v2) \
  X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync)                         \
  X(cuMemAllocFromPoolAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz)                      \
  X(cuMemCreate) X(cuMemRelease)                                                                \
  X(cuArrayCreate_v2) X(cuArray3DCreate_v2) X(cuArrayDestroy) X(cuMipmappedArrayCreate)         \
  X(cuMipmappedArrayDestroy) X(cuGraphAddMemAllocNode) X(cuGraphAddMemFreeNode)                 \
  X(cuGraphAddNode) X(cuGraphAddNode_v2)                                                        \
  X(cuIpcOpenMemHandle) X(cuIpcOpenMemHandle_v2) X(cuIpcCloseMemHandle)

#define GPUOS_CHECK_TYPE(name)                                                        \
  static_assert(std::is_same_v<decltype(&::name), decltype(GpuosDriverTable::name)>, \
                #name ": wrapper and real entry point differ in type");
#define GPUOS_CHECK_TYPE3(name, params, args) GPUOS_CHECK_TYPE(name)
GPUOS_GOVERNED(GPUOS_CHECK_TYPE)
GPUOS_DEVICE_ACCESS_FUNCS(GPUOS_CHECK_TYPE3)
GPUOS_STREAM_WORK_FUNCS(GPUOS_CHECK_TYPE3)
#undef GPUOS_CHECK_TYPE3
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
#define GPUOS_ENTRY3(name, params, args) GPUOS_ENTRY(name)
#define GPUOS_COUNT(name) +1
#define GPUOS_COUNT3(name, params, args) +1
constexpr int kGovernedCount =
    0 GPUOS_GOVERNED(GPUOS_COUNT) GPUOS_DEVICE_ACCESS_FUNCS(GPUOS_COUNT3) GPUOS_STREAM_WORK_FUNCS(GPUOS_COUNT3);
#undef GPUOS_COUNT3
#undef GPUOS_COUNT
struct GovernedTable {
  Governed entries[kGovernedCount] = {GPUOS_GOVERNED(GPUOS_ENTRY) GPUOS_DEVICE_ACCESS_FUNCS(GPUOS_ENTRY3)
                                          GPUOS_STREAM_WORK_FUNCS(GPUOS_ENTRY3)};
  const Governed* begin() const { return entries; }
  const Governed* end() const { return entries + kGovernedCount; }
};
#undef GPUOS_ENTRY3
#undef GPUOS_ENTRY

const GovernedTable& governed() {
  static const GovernedTable table;
  return table;
}

void* real_of(const GpuosDriverTable& d, const Governed& g) { return d.*(g.real); }

// An entry point handed out unwrapped: if it may issue stream work, gpuos would not see that work,
// so spatially placed launches keep both joins to their streams from now on (stream_work.h).
void note_unwrapped(const char* name) {
  if (!gi::may_issue_stream_work(name) || gi::g_stream_work_unseen.exchange(true, std::memory_order_seq_cst)) {
    return;
  }
  gi::log(gi::LogLevel::kInfo, "entry point %s is not wrapped: spatially placed launches keep both joins "
          "to their streams", name);
}

// The wrapper standing for real entry point `p` (named `symbol`), or `p` itself if gpuos does not
// govern it.
void* wrapper_for_real(const GpuosDriverTable& d, const char* symbol, void* p) {
  if (p == nullptr) return p;
  for (const Governed& g : governed()) {
    if (real_of(d, g) == p) return g.wrapper;
  }
  note_unwrapped(symbol);
  return p;
}

}  // namespace

extern "C" {

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = d->cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = wrapper_for_real(*d, symbol, *pfn);
  return r;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  const GpuosDriverTable* d = gi::real_driver();
  if (d == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = d->cuGetProcAddress
                   ? d->cuGetProcAddress(symbol, pfn, cudaVersion, flags)
                   : d->cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
  if (r == CUDA_SUCCESS && pfn != nullptr) *pfn = wrapper_for_real(*d, symbol, *pfn);
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
  // Only the driver's own entry points matter (a same-named symbol of another library does not).
  const GpuosDriverTable* d = gi::real_driver();
  if (d != nullptr && d->handle != nullptr && gi::real_dlsym()(d->handle, name) == p) note_unwrapped(name);
  return p;
}

}  // extern "C"
