// The one boundary between gpuos and the CUDA driver.
//
// Every real-driver call gpuos makes (interposer and daemon alike) goes through a DriverTable: typed
// function pointers resolved from a libcuda by dlsym on its own handle. The real libcuda and the
// driver test double (src/driver_double, a stand-in libcuda.so.1) export the same names, so which of
// them is loaded is decided only by the library path; nothing else knows.
//
// GPUOS_DRIVER_FUNCS is the single list: it generates the table's members, the loader's name list
// and the interposer's wrapper bookkeeping. X(name, parameter declarations, argument names).
#pragma once

#include "gpuos/cuda_internal.h"

#define GPUOS_DRIVER_FUNCS(X)                                                                       \
  /* discovery and errors */                                                                      \
  X(cuInit, (unsigned int flags), (flags))                                                         \
  X(cuDriverGetVersion, (int* version), (version))                                                 \
  X(cuDeviceGet, (CUdevice * dev, int ordinal), (dev, ordinal))                                    \
  X(cuDeviceGetCount, (int* count), (count))                                                       \
  X(cuDeviceGetName, (char* name, int len, CUdevice dev), (name, len, dev))                        \
  X(cuDeviceGetAttribute, (int* pi, CUdevice_attribute attrib, CUdevice dev), (pi, attrib, dev))   \
  X(cuDeviceTotalMem_v2, (size_t * bytes, CUdevice dev), (bytes, dev))                             \
  X(cuDeviceGetUuid_v2, (CUuuid * uuid, CUdevice dev), (uuid, dev))                                \
  X(cuGetErrorName, (CUresult error, const char** str), (error, str))                              \
  X(cuGetErrorString, (CUresult error, const char** str), (error, str))                            \
  X(cuGetProcAddress, (const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags),         \
    (symbol, pfn, cudaVersion, flags))                                                             \
  X(cuGetProcAddress_v2,                                                                           \
    (const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,                            \
     CUdriverProcAddressQueryResult* status),                                                      \
    (symbol, pfn, cudaVersion, flags, status))                                                     \
  /* contexts and streams */                                                                      \
  X(cuCtxGetCurrent, (CUcontext * ctx), (ctx))                                                     \
  X(cuCtxSetCurrent, (CUcontext ctx), (ctx))                                                       \
  X(cuCtxGetDevice, (CUdevice * dev), (dev))                                                       \
  X(cuCtxCreate_v2, (CUcontext * ctx, unsigned int flags, CUdevice dev), (ctx, flags, dev))        \
  X(cuCtxCreate_v3,                                                                                \
    (CUcontext * ctx, CUexecAffinityParam * params, int numParams, unsigned int flags,             \
     CUdevice dev),                                                                                \
    (ctx, params, numParams, flags, dev))                                                          \
  X(cuCtxCreate_v4, (CUcontext * ctx, CUctxCreateParams * params, unsigned int flags, CUdevice dev),\
    (ctx, params, flags, dev))                                                                     \
  X(cuDevicePrimaryCtxRetain, (CUcontext * ctx, CUdevice dev), (ctx, dev))                         \
  X(cuStreamCreate, (CUstream * stream, unsigned int flags), (stream, flags))                      \
  X(cuStreamCreateWithPriority, (CUstream * stream, unsigned int flags, int priority),             \
    (stream, flags, priority))                                                                     \
  X(cuStreamIsCapturing, (CUstream stream, CUstreamCaptureStatus * status), (stream, status))      \
  X(cuStreamIsCapturing_ptsz, (CUstream stream, CUstreamCaptureStatus * status), (stream, status)) \
  /* events: completion tracking of submitted work */                                              \
  X(cuEventCreate, (CUevent * event, unsigned int flags), (event, flags))                          \
  X(cuEventDestroy_v2, (CUevent event), (event))                                                   \
  X(cuEventRecord, (CUevent event, CUstream stream), (event, stream))                              \
  X(cuEventRecord_ptsz, (CUevent event, CUstream stream), (event, stream))                         \
  X(cuEventSynchronize, (CUevent event), (event))                                                  \
  X(cuEventQuery, (CUevent event), (event))                                                        \
  X(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode * mode), (mode))                       \
  /* stream capture (tracked so captured launches are counted apart and never gated) */           \
  X(cuStreamBeginCapture, (CUstream stream), (stream))                                             \
  X(cuStreamBeginCapture_ptsz, (CUstream stream), (stream))                                        \
  X(cuStreamBeginCapture_v2, (CUstream stream, CUstreamCaptureMode mode), (stream, mode))          \
  X(cuStreamBeginCapture_v2_ptsz, (CUstream stream, CUstreamCaptureMode mode), (stream, mode))     \
  X(cuStreamEndCapture, (CUstream stream, CUgraph * graph), (stream, graph))                       \
  X(cuStreamEndCapture_ptsz, (CUstream stream, CUgraph * graph), (stream, graph))                  \
  /* launches */                                                                                  \
  X(cuLaunchKernel,                                                                                \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,             \
     unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void** params,         \
     void** extra),                                                                                \
    (f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra))                                     \
  X(cuLaunchKernel_ptsz,                                                                           \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,             \
     unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void** params,         \
     void** extra),                                                                                \
    (f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra))                                     \
  X(cuLaunchKernelEx, (const CUlaunchConfig* config, CUfunction f, void** params, void** extra),   \
    (config, f, params, extra))                                                                    \
  X(cuLaunchKernelEx_ptsz,                                                                         \
    (const CUlaunchConfig* config, CUfunction f, void** params, void** extra),                     \
    (config, f, params, extra))                                                                    \
  X(cuLaunchCooperativeKernel,                                                                     \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,             \
     unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void** params),        \
    (f, gx, gy, gz, bx, by, bz, shmem, stream, params))                                            \
  X(cuLaunchCooperativeKernel_ptsz,                                                                \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,             \
     unsigned int by, unsigned int bz, unsigned int shmem, CUstream stream, void** params),        \
    (f, gx, gy, gz, bx, by, bz, shmem, stream, params))                                            \
  X(cuGraphLaunch, (CUgraphExec exec, CUstream stream), (exec, stream))                            \
  X(cuGraphLaunch_ptsz, (CUgraphExec exec, CUstream stream), (exec, stream))                       \
  /* memory */                                                                                    \
  X(cuMemGetInfo_v2, (size_t * free_bytes, size_t * total_bytes), (free_bytes, total_bytes))     \
  X(cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytes), (dptr, bytes))                              \
  X(cuMemAllocPitch_v2,                                                                            \
    (CUdeviceptr * dptr, size_t * pitch, size_t width, size_t height, unsigned int elemSize),      \
    (dptr, pitch, width, height, elemSize))                                                        \
  X(cuMemAllocManaged, (CUdeviceptr * dptr, size_t bytes, unsigned int flags), (dptr, bytes, flags))\
  X(cuMemFree_v2, (CUdeviceptr dptr), (dptr))                                                      \
  X(cuMemAllocAsync, (CUdeviceptr * dptr, size_t bytes, CUstream stream), (dptr, bytes, stream))  \
  X(cuMemAllocAsync_ptsz, (CUdeviceptr * dptr, size_t bytes, CUstream stream),                     \
    (dptr, bytes, stream))                                                                         \
  X(cuMemAllocFromPoolAsync,                                                                       \
    (CUdeviceptr * dptr, size_t bytes, CUmemoryPool pool, CUstream stream),                        \
    (dptr, bytes, pool, stream))                                                                   \
  X(cuMemAllocFromPoolAsync_ptsz,                                                                  \
    (CUdeviceptr * dptr, size_t bytes, CUmemoryPool pool, CUstream stream),                        \
    (dptr, bytes, pool, stream))                                                                   \
  X(cuMemFreeAsync, (CUdeviceptr dptr, CUstream stream), (dptr, stream))                           \
  X(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream stream), (dptr, stream))                      \
  X(cuMemCreate,                                                                                   \
    (CUmemGenericAllocationHandle * handle, size_t bytes, const CUmemAllocationProp* prop,         \
     unsigned long long flags),                                                                    \
    (handle, bytes, prop, flags))                                                                  \
  X(cuMemRelease, (CUmemGenericAllocationHandle handle), (handle))

// Typed function-pointer table over one loaded libcuda. A member is null when the loaded driver
// does not export that name (older drivers); callers must check before calling.
struct GpuosDriverTable {
#define GPUOS_DRIVER_MEMBER(name, params, args) CUresult(CUDAAPI* name) params;
  GPUOS_DRIVER_FUNCS(GPUOS_DRIVER_MEMBER)
#undef GPUOS_DRIVER_MEMBER
  void* handle;  // dlopen handle of the library the table was resolved from
};

namespace gpuos {

using DlsymFn = void* (*)(void* handle, const char* name);

// Loads `library` (default: $GPUOS_DRIVER_LIBRARY, else "libcuda.so.1") and fills *table.
// `lookup` is the dlsym to use (the interposer passes the real one it captured; others pass
// nullptr for ::dlsym). Returns true on success; on failure writes a reason into err and leaves the
// table zeroed. Missing individual symbols are not an error (their members stay null).
// Thread-safety: none; call once and publish the table.
bool load_driver(GpuosDriverTable* table, const char* library, DlsymFn lookup, char* err,
                 std::size_t err_len);

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"-style text for a CUresult, without calling the driver.
const char* cu_result_name(CUresult r);

}  // namespace gpuos
