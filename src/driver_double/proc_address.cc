// SPDX-License-Identifier: Apache-2.0
// cuGetProcAddress: the caller names a base symbol ("cuMemAlloc") and the CUDA version it was
// built for; the driver returns the variant that version means (cuMemAlloc_v2 from 3.2 on) and,
// with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, the _ptsz/_ptds variant where one exists.
//
// DD_PROC_TABLE is the one table of (base name, exported symbol, first CUDA version, per-thread)
// rows. The pointers are the exported functions themselves (the library links with -Bsymbolic,
// so they equal what dlsym returns on this library even under an LD_PRELOAD interposer).
#include <cstring>

#include "driver_double/internal.h"

// X(base, symbol, version, per_thread)
#define DD_PROC_TABLE(X)                                                          \
  X(cuInit, cuInit, 2000, 0)                                                      \
  X(cuDriverGetVersion, cuDriverGetVersion, 2020, 0)                              \
  X(cuGetErrorName, cuGetErrorName, 6000, 0)                                      \
  X(cuGetErrorString, cuGetErrorString, 6000, 0)                                  \
  X(cuGetProcAddress, cuGetProcAddress, 11030, 0)                                 \
  X(cuGetProcAddress, cuGetProcAddress_v2, 12000, 0)                              \
  X(cuDeviceGet, cuDeviceGet, 2000, 0)                                            \
  X(cuDeviceGetCount, cuDeviceGetCount, 2000, 0)                                  \
  X(cuDeviceGetName, cuDeviceGetName, 2000, 0)                                    \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, 0)                          \
  X(cuDeviceTotalMem, cuDeviceTotalMem_v2, 3020, 0)                               \
  X(cuDeviceGetUuid, cuDeviceGetUuid, 9020, 0)                                    \
  X(cuDeviceGetUuid, cuDeviceGetUuid_v2, 11040, 0)                                \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0)                  \
  X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, 0)                \
  X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, 11000, 0)            \
  X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 7000, 0)                    \
  X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, 11000, 0)                \
  X(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags, 7000, 0)              \
  X(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags_v2, 11000, 0)          \
  X(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000, 0)              \
  X(cuCtxCreate, cuCtxCreate_v2, 3020, 0)                                         \
  X(cuCtxCreate, cuCtxCreate_v3, 11040, 0)                                        \
  X(cuCtxCreate, cuCtxCreate_v4, 12050, 0)                                        \
  X(cuCtxDestroy, cuCtxDestroy_v2, 4000, 0)                                       \
  X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, 0)                                    \
  X(cuCtxGetCurrent, cuCtxGetCurrent, 4000, 0)                                    \
  X(cuCtxPushCurrent, cuCtxPushCurrent_v2, 4000, 0)                               \
  X(cuCtxPopCurrent, cuCtxPopCurrent_v2, 4000, 0)                                 \
  X(cuCtxSynchronize, cuCtxSynchronize, 2000, 0)                                  \
  X(cuCtxGetDevice, cuCtxGetDevice, 2000, 0)                                      \
  X(cuCtxGetFlags, cuCtxGetFlags, 7000, 0)                                        \
  X(cuCtxSetLimit, cuCtxSetLimit, 3010, 0)                                        \
  X(cuCtxGetLimit, cuCtxGetLimit, 3010, 0)                                        \
  X(cuCtxGetStreamPriorityRange, cuCtxGetStreamPriorityRange, 5050, 0)            \
  X(cuModuleLoad, cuModuleLoad, 2000, 0)                                          \
  X(cuModuleLoadData, cuModuleLoadData, 2000, 0)                                  \
  X(cuModuleLoadDataEx, cuModuleLoadDataEx, 2010, 0)                              \
  X(cuModuleLoadFatBinary, cuModuleLoadFatBinary, 2000, 0)                        \
  X(cuModuleUnload, cuModuleUnload, 2000, 0)                                      \
  X(cuModuleGetFunction, cuModuleGetFunction, 2000, 0)                            \
  X(cuLibraryLoadData, cuLibraryLoadData, 12000, 0)                               \
  X(cuLibraryUnload, cuLibraryUnload, 12000, 0)                                   \
  X(cuLibraryGetKernel, cuLibraryGetKernel, 12000, 0)                             \
  X(cuKernelGetFunction, cuKernelGetFunction, 12000, 0)                           \
  X(cuLaunchKernel, cuLaunchKernel, 4000, 0)                                      \
  X(cuLaunchKernel, cuLaunchKernel_ptsz, 7000, 1)                                 \
  X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0)                                 \
  X(cuLaunchKernelEx, cuLaunchKernelEx_ptsz, 11060, 1)                            \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 0)                \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz, 9000, 1)           \
  X(cuLaunchHostFunc, cuLaunchHostFunc, 10000, 0)                                 \
  X(cuLaunchHostFunc, cuLaunchHostFunc_ptsz, 10000, 1)                            \
  X(cuStreamCreate, cuStreamCreate, 2000, 0)                                      \
  X(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 5050, 0)              \
  X(cuStreamDestroy, cuStreamDestroy_v2, 4000, 0)                                 \
  X(cuStreamSynchronize, cuStreamSynchronize, 2000, 0)                            \
  X(cuStreamSynchronize, cuStreamSynchronize_ptsz, 7000, 1)                       \
  X(cuStreamQuery, cuStreamQuery, 2000, 0)                                        \
  X(cuStreamQuery, cuStreamQuery_ptsz, 7000, 1)                                   \
  X(cuStreamWaitEvent, cuStreamWaitEvent, 3020, 0)                                \
  X(cuStreamWaitEvent, cuStreamWaitEvent_ptsz, 7000, 1)                           \
  X(cuStreamGetPriority, cuStreamGetPriority, 5050, 0)                            \
  X(cuStreamGetPriority, cuStreamGetPriority_ptsz, 7000, 1)                       \
  X(cuStreamGetFlags, cuStreamGetFlags, 5050, 0)                                  \
  X(cuStreamGetFlags, cuStreamGetFlags_ptsz, 7000, 1)                             \
  X(cuStreamIsCapturing, cuStreamIsCapturing, 10000, 0)                           \
  X(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, 10010, 0) \
  X(cuStreamIsCapturing, cuStreamIsCapturing_ptsz, 10000, 1)                      \
  X(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo, 10010, 0)                    \
  X(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_ptsz, 10010, 1)               \
  X(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v2, 11030, 0)                 \
  X(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v2_ptsz, 11030, 1)            \
  X(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v3, 12030, 0)                 \
  X(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v3_ptsz, 12030, 1)            \
  X(cuStreamBeginCapture, cuStreamBeginCapture, 10000, 0)                         \
  X(cuStreamBeginCapture, cuStreamBeginCapture_ptsz, 10000, 1)                    \
  X(cuStreamBeginCapture, cuStreamBeginCapture_v2, 10010, 0)                      \
  X(cuStreamBeginCapture, cuStreamBeginCapture_v2_ptsz, 10010, 1)                 \
  X(cuStreamEndCapture, cuStreamEndCapture, 10000, 0)                             \
  X(cuStreamEndCapture, cuStreamEndCapture_ptsz, 10000, 1)                        \
  X(cuEventCreate, cuEventCreate, 2000, 0)                                        \
  X(cuEventDestroy, cuEventDestroy_v2, 4000, 0)                                   \
  X(cuEventRecord, cuEventRecord, 2000, 0)                                        \
  X(cuEventRecord, cuEventRecord_ptsz, 7000, 1)                                   \
  X(cuEventQuery, cuEventQuery, 2000, 0)                                          \
  X(cuEventSynchronize, cuEventSynchronize, 2000, 0)                              \
  X(cuEventElapsedTime, cuEventElapsedTime, 2000, 0)                              \
  X(cuEventElapsedTime, cuEventElapsedTime_v2, 12080, 0)                          \
  X(cuGraphCreate, cuGraphCreate, 10000, 0)                                       \
  X(cuGraphDestroy, cuGraphDestroy, 10000, 0)                                     \
  X(cuGraphAddKernelNode, cuGraphAddKernelNode, 10000, 0)                         \
  X(cuGraphAddKernelNode, cuGraphAddKernelNode_v2, 12030, 0)                      \
  X(cuGraphInstantiate, cuGraphInstantiate, 10000, 0)                             \
  X(cuGraphInstantiate, cuGraphInstantiate_v2, 11000, 0)                          \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, 0)           \
  X(cuGraphExecDestroy, cuGraphExecDestroy, 10000, 0)                             \
  X(cuGraphClone, cuGraphClone, 10000, 0)                                         \
  X(cuGraphGetNodes, cuGraphGetNodes, 10000, 0)                                   \
  X(cuGraphNodeGetType, cuGraphNodeGetType, 10000, 0)                             \
  X(cuGraphKernelNodeGetParams, cuGraphKernelNodeGetParams_v2, 12000, 0)          \
  X(cuGraphKernelNodeSetParams, cuGraphKernelNodeSetParams_v2, 12000, 0)          \
  X(cuGraphLaunch, cuGraphLaunch, 10000, 0)                                       \
  X(cuGraphLaunch, cuGraphLaunch_ptsz, 10000, 1)                                  \
  X(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, 11040, 0)                   \
  X(cuGraphAddMemFreeNode, cuGraphAddMemFreeNode, 11040, 0)                     \
  X(cuGraphAddNode, cuGraphAddNode, 12020, 0)                                     \
  X(cuGraphAddNode, cuGraphAddNode_v2, 12030, 0)                                  \
  X(cuGraphMemAllocNodeGetParams, cuGraphMemAllocNodeGetParams, 11040, 0)       \
  X(cuGraphMemFreeNodeGetParams, cuGraphMemFreeNodeGetParams, 11040, 0)         \
  X(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, 11040, 0)                       \
  X(cuDeviceGetGraphMemAttribute, cuDeviceGetGraphMemAttribute, 11040, 0)       \
  X(cuDeviceSetGraphMemAttribute, cuDeviceSetGraphMemAttribute, 11040, 0)       \
  X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 12000, 0)       \
  X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams_ptsz, 12000, 1)  \
  X(cuGraphUpload, cuGraphUpload, 11010, 0)                                     \
  X(cuGraphUpload, cuGraphUpload_ptsz, 11010, 1)                                \
  X(cuGraphAddChildGraphNode, cuGraphAddChildGraphNode, 10000, 0)               \
  X(cuGraphChildGraphNodeGetGraph, cuGraphChildGraphNodeGetGraph, 10000, 0)     \
  X(cuGraphExecUpdate, cuGraphExecUpdate, 10020, 0)                             \
  X(cuGraphExecUpdate, cuGraphExecUpdate_v2, 12000, 0)                          \
  X(cuMemGetInfo, cuMemGetInfo_v2, 3020, 0)                                       \
  X(cuMemAlloc, cuMemAlloc_v2, 3020, 0)                                           \
  X(cuMemAllocPitch, cuMemAllocPitch_v2, 3020, 0)                                 \
  X(cuMemFree, cuMemFree_v2, 3020, 0)                                             \
  X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0)                                \
  X(cuMemAllocHost, cuMemAllocHost_v2, 3020, 0)                                   \
  X(cuMemHostAlloc, cuMemHostAlloc, 2020, 0)                                      \
  X(cuMemFreeHost, cuMemFreeHost, 2000, 0)                                        \
  X(cuMemGetAddressRange, cuMemGetAddressRange_v2, 3020, 0)                       \
  X(cuMemHostRegister, cuMemHostRegister_v2, 6050, 0)                             \
  X(cuMemHostUnregister, cuMemHostUnregister, 4000, 0)                            \
  X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)                                   \
  X(cuMemAllocAsync, cuMemAllocAsync_ptsz, 11020, 1)                              \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0)                   \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz, 11020, 1)              \
  X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0)                                     \
  X(cuMemFreeAsync, cuMemFreeAsync_ptsz, 11020, 1)                                \
  X(cuMemcpy, cuMemcpy, 4000, 0)                                                  \
  X(cuMemcpy, cuMemcpy_ptds, 7000, 1)                                             \
  X(cuMemcpyAsync, cuMemcpyAsync, 4000, 0)                                        \
  X(cuMemcpyAsync, cuMemcpyAsync_ptsz, 7000, 1)                                   \
  X(cuMemcpyPeer, cuMemcpyPeer, 4000, 0)                                          \
  X(cuMemcpyPeer, cuMemcpyPeer_ptds, 7000, 1)                                     \
  X(cuMemcpyPeerAsync, cuMemcpyPeerAsync, 4000, 0)                                \
  X(cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz, 7000, 1)                           \
  X(cuMemcpyHtoD, cuMemcpyHtoD_v2, 3020, 0)                                       \
  X(cuMemcpyHtoD, cuMemcpyHtoD_v2_ptds, 7000, 1)                                  \
  X(cuMemcpyDtoH, cuMemcpyDtoH_v2, 3020, 0)                                       \
  X(cuMemcpyDtoH, cuMemcpyDtoH_v2_ptds, 7000, 1)                                  \
  X(cuMemcpyDtoD, cuMemcpyDtoD_v2, 3020, 0)                                       \
  X(cuMemcpyDtoD, cuMemcpyDtoD_v2_ptds, 7000, 1)                                  \
  X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, 3020, 0)                             \
  X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2_ptsz, 7000, 1)                        \
  X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, 3020, 0)                             \
  X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2_ptsz, 7000, 1)                        \
  X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, 3020, 0)                             \
  X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2_ptsz, 7000, 1)                        \
  X(cuMemcpy2D, cuMemcpy2D_v2, 3020, 0)                                           \
  X(cuMemcpy2D, cuMemcpy2D_v2_ptds, 7000, 1)                                      \
  X(cuMemcpy2DAsync, cuMemcpy2DAsync_v2, 3020, 0)                                 \
  X(cuMemcpy2DAsync, cuMemcpy2DAsync_v2_ptsz, 7000, 1)                            \
  X(cuMemsetD8, cuMemsetD8_v2, 3020, 0)                                           \
  X(cuMemsetD8, cuMemsetD8_v2_ptds, 7000, 1)                                      \
  X(cuMemsetD16, cuMemsetD16_v2, 3020, 0)                                         \
  X(cuMemsetD16, cuMemsetD16_v2_ptds, 7000, 1)                                    \
  X(cuMemsetD32, cuMemsetD32_v2, 3020, 0)                                         \
  X(cuMemsetD32, cuMemsetD32_v2_ptds, 7000, 1)                                    \
  X(cuMemsetD8Async, cuMemsetD8Async, 3020, 0)                                    \
  X(cuMemsetD8Async, cuMemsetD8Async_ptsz, 7000, 1)                               \
  X(cuMemsetD16Async, cuMemsetD16Async, 3020, 0)                                  \
  X(cuMemsetD16Async, cuMemsetD16Async_ptsz, 7000, 1)                             \
  X(cuMemsetD32Async, cuMemsetD32Async, 3020, 0)                                  \
  X(cuMemsetD32Async, cuMemsetD32Async_ptsz, 7000, 1)                             \
  X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020, 0)       \
  X(cuMemAddressReserve, cuMemAddressReserve, 10020, 0)                           \
  X(cuMemAddressFree, cuMemAddressFree, 10020, 0)                                 \
  X(cuMemCreate, cuMemCreate, 10020, 0)                                           \
  X(cuMemRelease, cuMemRelease, 10020, 0)                                         \
  X(cuMemMap, cuMemMap, 10020, 0)                                                 \
  X(cuMemUnmap, cuMemUnmap, 10020, 0)                                             \
  X(cuMemSetAccess, cuMemSetAccess, 10020, 0)                                   \
  X(cuArrayCreate, cuArrayCreate_v2, 3020, 0)                                     \
  X(cuArray3DCreate, cuArray3DCreate_v2, 3020, 0)                                 \
  X(cuArrayDestroy, cuArrayDestroy, 2000, 0)                                      \
  X(cuArrayGetMemoryRequirements, cuArrayGetMemoryRequirements, 11060, 0)         \
  X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0)                      \
  X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0)                    \
  X(cuMipmappedArrayGetMemoryRequirements, cuMipmappedArrayGetMemoryRequirements, 11060, 0) \
  X(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010, 0)                                \
  X(cuIpcOpenMemHandle, cuIpcOpenMemHandle, 4010, 0)                              \
  X(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2, 11000, 0)                          \
  X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, 0)                          \
  X(cuStreamGetCtx, cuStreamGetCtx, 9020, 0)                                      \
  X(cuStreamGetCtx, cuStreamGetCtx_ptsz, 9020, 1)                                 \
  X(cuStreamGetCtx, cuStreamGetCtx_v2, 12050, 0)                                  \
  X(cuStreamGetCtx, cuStreamGetCtx_v2_ptsz, 12050, 1)                             \
  X(cuDeviceGetDevResource, cuDeviceGetDevResource, 12040, 0)                     \
  X(cuCtxGetDevResource, cuCtxGetDevResource, 12040, 0)                           \
  X(cuGreenCtxGetDevResource, cuGreenCtxGetDevResource, 12040, 0)                 \
  X(cuDevSmResourceSplitByCount, cuDevSmResourceSplitByCount, 12040, 0)           \
  X(cuDevResourceGenerateDesc, cuDevResourceGenerateDesc, 12040, 0)               \
  X(cuGreenCtxCreate, cuGreenCtxCreate, 12040, 0)                                 \
  X(cuGreenCtxDestroy, cuGreenCtxDestroy, 12040, 0)                               \
  X(cuCtxFromGreenCtx, cuCtxFromGreenCtx, 12040, 0)                               \
  X(cuGreenCtxRecordEvent, cuGreenCtxRecordEvent, 12040, 0)                       \
  X(cuGreenCtxWaitEvent, cuGreenCtxWaitEvent, 12040, 0)                           \
  X(cuStreamGetGreenCtx, cuStreamGetGreenCtx, 12040, 0)                           \
  X(cuGreenCtxStreamCreate, cuGreenCtxStreamCreate, 12050, 0)                     \
  X(cuGreenCtxGetId, cuGreenCtxGetId, 12090, 0)

namespace dd {
namespace {

struct ProcEntry {
  const char* base;
  void* fn;
  int version;
  bool per_thread;
};

#define DD_PROC_ROW(base, symbol, version, pt) \
  {#base, reinterpret_cast<void*>(&::symbol), version, pt != 0},
const ProcEntry kProcTable[] = {DD_PROC_TABLE(DD_PROC_ROW)};
#undef DD_PROC_ROW

CUresult get_proc(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                  CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  const bool want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  *pfn = nullptr;
  bool known_name = false;
  const ProcEntry* best = nullptr;
  const ProcEntry* best_legacy = nullptr;  // fallback for names without a per-thread variant
  for (const auto& e : kProcTable) {
    if (std::strcmp(e.base, symbol) != 0) continue;
    known_name = true;
    if (e.version > cuda_version || (e.per_thread && !want_pt)) continue;
    const ProcEntry*& slot = e.per_thread ? best : best_legacy;
    if (slot == nullptr || e.version > slot->version) slot = &e;
  }
  const ProcEntry* pick = want_pt && best != nullptr ? best : best_legacy;
  if (pick == nullptr) {
    if (status) {
      *status = known_name ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                           : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = pick->fn;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace dd

// Works before cuInit, as the runtime resolves cuInit itself through it.
DD_API cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                           CUdriverProcAddressQueryResult* symbolStatus) {
  return dd::guard([&] { return dd::get_proc(symbol, pfn, cudaVersion, flags, symbolStatus); });
}

DD_API cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return dd::guard([&] { return dd::get_proc(symbol, pfn, cudaVersion, flags, nullptr); });
}
