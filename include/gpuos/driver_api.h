// SPDX-License-Identifier: Apache-2.0
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

// Every entry point that reads or writes device memory without being a kernel launch: copies,
// memsets, prefetches. Part of GPUOS_DRIVER_FUNCS; the interposer generates a governed wrapper
// for each (hooks_stream.cc), so a swappable tenant's call waits while its memory is out.
#define GPUOS_DEVICE_ACCESS_FUNCS(X)                                                               \
  X(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes))                 \
  X(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes))            \
  X(cuMemcpyPeer,                                                                                  \
    (CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t bytes),          \
    (dst, dstCtx, src, srcCtx, bytes))                                                             \
  X(cuMemcpyPeer_ptds,                                                                             \
    (CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t bytes),          \
    (dst, dstCtx, src, srcCtx, bytes))                                                             \
  X(cuMemcpyHtoD_v2, (CUdeviceptr dst, const void* src, size_t bytes), (dst, src, bytes))          \
  X(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dst, const void* src, size_t bytes), (dst, src, bytes))     \
  X(cuMemcpyDtoH_v2, (void* dst, CUdeviceptr src, size_t bytes), (dst, src, bytes))                \
  X(cuMemcpyDtoH_v2_ptds, (void* dst, CUdeviceptr src, size_t bytes), (dst, src, bytes))           \
  X(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes))          \
  X(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes))     \
  X(cuMemcpy2D_v2, (const CUDA_MEMCPY2D* copy), (copy))                                            \
  X(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D* copy), (copy))                                       \
  X(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D* copy), (copy))                                   \
  X(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D* copy), (copy))                              \
  X(cuMemcpy3D_v2, (const CUDA_MEMCPY3D* copy), (copy))                                            \
  X(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D* copy), (copy))                                       \
  X(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER* copy), (copy))                                      \
  X(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER* copy), (copy))                                 \
  X(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream),              \
    (dst, src, bytes, stream))                                                                     \
  X(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream),         \
    (dst, src, bytes, stream))                                                                     \
  X(cuMemcpyPeerAsync,                                                                             \
    (CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t bytes,           \
     CUstream stream),                                                                             \
    (dst, dstCtx, src, srcCtx, bytes, stream))                                                     \
  X(cuMemcpyPeerAsync_ptsz,                                                                        \
    (CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t bytes,           \
     CUstream stream),                                                                             \
    (dst, dstCtx, src, srcCtx, bytes, stream))                                                     \
  X(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void* src, size_t bytes, CUstream stream),       \
    (dst, src, bytes, stream))                                                                     \
  X(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dst, const void* src, size_t bytes, CUstream stream),  \
    (dst, src, bytes, stream))                                                                     \
  X(cuMemcpyDtoHAsync_v2, (void* dst, CUdeviceptr src, size_t bytes, CUstream stream),             \
    (dst, src, bytes, stream))                                                                     \
  X(cuMemcpyDtoHAsync_v2_ptsz, (void* dst, CUdeviceptr src, size_t bytes, CUstream stream),        \
    (dst, src, bytes, stream))                                                                     \
  X(cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream),       \
    (dst, src, bytes, stream))                                                                     \
  X(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream),  \
    (dst, src, bytes, stream))                                                                     \
  X(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D* copy, CUstream stream), (copy, stream))              \
  X(cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D* copy, CUstream stream), (copy, stream))         \
  X(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D* copy, CUstream stream), (copy, stream))              \
  X(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D* copy, CUstream stream), (copy, stream))         \
  X(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER* copy, CUstream stream), (copy, stream))        \
  X(cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER* copy, CUstream stream), (copy, stream))   \
  X(cuMemcpyBatchAsync,                                                                            \
    (CUdeviceptr * dsts, CUdeviceptr * srcs, size_t * sizes, size_t count,                         \
     CUmemcpyAttributes * attrs, size_t * attrsIdxs, size_t numAttrs, size_t * failIdx,            \
     CUstream stream),                                                                             \
    (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, stream))                       \
  X(cuMemcpyBatchAsync_ptsz,                                                                       \
    (CUdeviceptr * dsts, CUdeviceptr * srcs, size_t * sizes, size_t count,                         \
     CUmemcpyAttributes * attrs, size_t * attrsIdxs, size_t numAttrs, size_t * failIdx,            \
     CUstream stream),                                                                             \
    (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, stream))                       \
  X(cuMemcpyBatchAsync_v2,                                                                         \
    (CUdeviceptr * dsts, CUdeviceptr * srcs, size_t * sizes, size_t count,                         \
     CUmemcpyAttributes * attrs, size_t * attrsIdxs, size_t numAttrs, CUstream stream),            \
    (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream))                                \
  X(cuMemcpyBatchAsync_v2_ptsz,                                                                    \
    (CUdeviceptr * dsts, CUdeviceptr * srcs, size_t * sizes, size_t count,                         \
     CUmemcpyAttributes * attrs, size_t * attrsIdxs, size_t numAttrs, CUstream stream),            \
    (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream))                                \
  X(cuMemcpy3DBatchAsync,                                                                          \
    (size_t numOps, CUDA_MEMCPY3D_BATCH_OP * ops, size_t * failIdx, unsigned long long flags,      \
     CUstream stream),                                                                             \
    (numOps, ops, failIdx, flags, stream))                                                         \
  X(cuMemcpy3DBatchAsync_ptsz,                                                                     \
    (size_t numOps, CUDA_MEMCPY3D_BATCH_OP * ops, size_t * failIdx, unsigned long long flags,      \
     CUstream stream),                                                                             \
    (numOps, ops, failIdx, flags, stream))                                                         \
  X(cuMemcpy3DBatchAsync_v2,                                                                       \
    (size_t numOps, CUDA_MEMCPY3D_BATCH_OP * ops, unsigned long long flags, CUstream stream),      \
    (numOps, ops, flags, stream))                                                                  \
  X(cuMemcpy3DBatchAsync_v2_ptsz,                                                                  \
    (size_t numOps, CUDA_MEMCPY3D_BATCH_OP * ops, unsigned long long flags, CUstream stream),      \
    (numOps, ops, flags, stream))                                                                  \
  /* memsets (governed) */                                                                         \
  X(cuMemsetD8_v2, (CUdeviceptr dst, unsigned char value, size_t n), (dst, value, n))              \
  X(cuMemsetD8_v2_ptds, (CUdeviceptr dst, unsigned char value, size_t n), (dst, value, n))         \
  X(cuMemsetD16_v2, (CUdeviceptr dst, unsigned short value, size_t n), (dst, value, n))            \
  X(cuMemsetD16_v2_ptds, (CUdeviceptr dst, unsigned short value, size_t n), (dst, value, n))       \
  X(cuMemsetD32_v2, (CUdeviceptr dst, unsigned int value, size_t n), (dst, value, n))              \
  X(cuMemsetD32_v2_ptds, (CUdeviceptr dst, unsigned int value, size_t n), (dst, value, n))         \
  X(cuMemsetD2D8_v2,                                                                               \
    (CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height),             \
    (dst, pitch, value, width, height))                                                            \
  X(cuMemsetD2D8_v2_ptds,                                                                          \
    (CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height),             \
    (dst, pitch, value, width, height))                                                            \
  X(cuMemsetD2D16_v2,                                                                              \
    (CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height),            \
    (dst, pitch, value, width, height))                                                            \
  X(cuMemsetD2D16_v2_ptds,                                                                         \
    (CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height),            \
    (dst, pitch, value, width, height))                                                            \
  X(cuMemsetD2D32_v2,                                                                              \
    (CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height),              \
    (dst, pitch, value, width, height))                                                            \
  X(cuMemsetD2D32_v2_ptds,                                                                         \
    (CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height),              \
    (dst, pitch, value, width, height))                                                            \
  X(cuMemsetD8Async, (CUdeviceptr dst, unsigned char value, size_t n, CUstream stream),            \
    (dst, value, n, stream))                                                                       \
  X(cuMemsetD8Async_ptsz, (CUdeviceptr dst, unsigned char value, size_t n, CUstream stream),       \
    (dst, value, n, stream))                                                                       \
  X(cuMemsetD16Async, (CUdeviceptr dst, unsigned short value, size_t n, CUstream stream),          \
    (dst, value, n, stream))                                                                       \
  X(cuMemsetD16Async_ptsz, (CUdeviceptr dst, unsigned short value, size_t n, CUstream stream),     \
    (dst, value, n, stream))                                                                       \
  X(cuMemsetD32Async, (CUdeviceptr dst, unsigned int value, size_t n, CUstream stream),            \
    (dst, value, n, stream))                                                                       \
  X(cuMemsetD32Async_ptsz, (CUdeviceptr dst, unsigned int value, size_t n, CUstream stream),       \
    (dst, value, n, stream))                                                                       \
  X(cuMemsetD2D8Async,                                                                             \
    (CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height,              \
     CUstream stream),                                                                             \
    (dst, pitch, value, width, height, stream))                                                    \
  X(cuMemsetD2D8Async_ptsz,                                                                        \
    (CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height,              \
     CUstream stream),                                                                             \
    (dst, pitch, value, width, height, stream))                                                    \
  X(cuMemsetD2D16Async,                                                                            \
    (CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height,             \
     CUstream stream),                                                                             \
    (dst, pitch, value, width, height, stream))                                                    \
  X(cuMemsetD2D16Async_ptsz,                                                                       \
    (CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height,             \
     CUstream stream),                                                                             \
    (dst, pitch, value, width, height, stream))                                                    \
  X(cuMemsetD2D32Async,                                                                            \
    (CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height,               \
     CUstream stream),                                                                             \
    (dst, pitch, value, width, height, stream))                                                    \
  X(cuMemsetD2D32Async_ptsz,                                                                       \
    (CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height,               \
     CUstream stream),                                                                             \
    (dst, pitch, value, width, height, stream))                                                    \
  /* prefetches of managed memory (governed) */                                                    \
  X(cuMemPrefetchAsync, (CUdeviceptr ptr, size_t bytes, CUdevice dstDevice, CUstream stream),      \
    (ptr, bytes, dstDevice, stream))                                                               \
  X(cuMemPrefetchAsync_ptsz, (CUdeviceptr ptr, size_t bytes, CUdevice dstDevice, CUstream stream), \
    (ptr, bytes, dstDevice, stream))                                                               \
  X(cuMemPrefetchAsync_v2,                                                                         \
    (CUdeviceptr ptr, size_t bytes, CUmemLocation location, unsigned int flags, CUstream stream),  \
    (ptr, bytes, location, flags, stream))                                                         \
  X(cuMemPrefetchAsync_v2_ptsz,                                                                    \
    (CUdeviceptr ptr, size_t bytes, CUmemLocation location, unsigned int flags, CUstream stream),  \
    (ptr, bytes, location, flags, stream))                                                         \
  X(cuMemPrefetchBatchAsync,                                                                       \
    (CUdeviceptr * ptrs, size_t * sizes, size_t count, CUmemLocation * locs, size_t * locIdxs,     \
     size_t numLocs, unsigned long long flags, CUstream stream),                                   \
    (ptrs, sizes, count, locs, locIdxs, numLocs, flags, stream))                                   \
  X(cuMemPrefetchBatchAsync_ptsz,                                                                  \
    (CUdeviceptr * ptrs, size_t * sizes, size_t count, CUmemLocation * locs, size_t * locIdxs,     \
     size_t numLocs, unsigned long long flags, CUstream stream),                                   \
    (ptrs, sizes, count, locs, locIdxs, numLocs, flags, stream))

// Every other entry point that puts work on a stream: stream waits, host callbacks, memory
// operations, external semaphores, graphics interop, array copies, the legacy forms of copies and
// memsets. Part of GPUOS_DRIVER_FUNCS; the interposer wraps each (hooks_stream.cc) so that it sees
// all stream work a tenant issues (interpose/stream_work.h; test/interpose/stream_work_test.cc
// checks the whole set against the toolkit's cuda.h).
#define GPUOS_STREAM_WORK_FUNCS(X)                                                                 \
  X(cuStreamWaitEvent,                                                                             \
    (CUstream hStream, CUevent hEvent, unsigned int Flags),                                        \
    (hStream, hEvent, Flags))                                                                      \
  X(cuStreamWaitEvent_ptsz,                                                                        \
    (CUstream hStream, CUevent hEvent, unsigned int Flags),                                        \
    (hStream, hEvent, Flags))                                                                      \
  X(cuLaunchHostFunc, (CUstream hStream, CUhostFn fn, void *userData), (hStream, fn, userData))    \
  X(cuLaunchHostFunc_ptsz,                                                                         \
    (CUstream hStream, CUhostFn fn, void *userData),                                               \
    (hStream, fn, userData))                                                                       \
  X(cuStreamAddCallback,                                                                           \
    (CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags),             \
    (hStream, callback, userData, flags))                                                          \
  X(cuStreamAddCallback_ptsz,                                                                      \
    (CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags),             \
    (hStream, callback, userData, flags))                                                          \
  X(cuStreamWaitValue32,                                                                           \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWaitValue32_ptsz,                                                                      \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWaitValue32_v2,                                                                        \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWaitValue32_v2_ptsz,                                                                   \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWaitValue64,                                                                           \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWaitValue64_ptsz,                                                                      \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWaitValue64_v2,                                                                        \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWaitValue64_v2_ptsz,                                                                   \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWriteValue32,                                                                          \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWriteValue32_ptsz,                                                                     \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWriteValue32_v2,                                                                       \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWriteValue32_v2_ptsz,                                                                  \
    (CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWriteValue64,                                                                          \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWriteValue64_ptsz,                                                                     \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWriteValue64_v2,                                                                       \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamWriteValue64_v2_ptsz,                                                                  \
    (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),                     \
    (stream, addr, value, flags))                                                                  \
  X(cuStreamBatchMemOp,                                                                            \
    (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int       \
    flags),                                                                                        \
    (stream, count, paramArray, flags))                                                            \
  X(cuStreamBatchMemOp_ptsz,                                                                       \
    (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int       \
    flags),                                                                                        \
    (stream, count, paramArray, flags))                                                            \
  X(cuStreamBatchMemOp_v2,                                                                         \
    (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int       \
    flags),                                                                                        \
    (stream, count, paramArray, flags))                                                            \
  X(cuStreamBatchMemOp_v2_ptsz,                                                                    \
    (CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int       \
    flags),                                                                                        \
    (stream, count, paramArray, flags))                                                            \
  X(cuSignalExternalSemaphoresAsync,                                                               \
    (const CUexternalSemaphore *extSemArray, const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS           \
    *paramsArray, unsigned int numExtSems, CUstream stream),                                       \
    (extSemArray, paramsArray, numExtSems, stream))                                                \
  X(cuSignalExternalSemaphoresAsync_ptsz,                                                          \
    (const CUexternalSemaphore *extSemArray, const CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS           \
    *paramsArray, unsigned int numExtSems, CUstream stream),                                       \
    (extSemArray, paramsArray, numExtSems, stream))                                                \
  X(cuWaitExternalSemaphoresAsync,                                                                 \
    (const CUexternalSemaphore *extSemArray, const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS             \
    *paramsArray, unsigned int numExtSems, CUstream stream),                                       \
    (extSemArray, paramsArray, numExtSems, stream))                                                \
  X(cuWaitExternalSemaphoresAsync_ptsz,                                                            \
    (const CUexternalSemaphore *extSemArray, const CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS             \
    *paramsArray, unsigned int numExtSems, CUstream stream),                                       \
    (extSemArray, paramsArray, numExtSems, stream))                                                \
  X(cuGraphicsMapResources,                                                                        \
    (unsigned int count, CUgraphicsResource *resources, CUstream hStream),                         \
    (count, resources, hStream))                                                                   \
  X(cuGraphicsMapResources_ptsz,                                                                   \
    (unsigned int count, CUgraphicsResource *resources, CUstream hStream),                         \
    (count, resources, hStream))                                                                   \
  X(cuGraphicsUnmapResources,                                                                      \
    (unsigned int count, CUgraphicsResource *resources, CUstream hStream),                         \
    (count, resources, hStream))                                                                   \
  X(cuGraphicsUnmapResources_ptsz,                                                                 \
    (unsigned int count, CUgraphicsResource *resources, CUstream hStream),                         \
    (count, resources, hStream))                                                                   \
  X(cuMemMapArrayAsync,                                                                            \
    (CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream),                           \
    (mapInfoList, count, hStream))                                                                 \
  X(cuMemMapArrayAsync_ptsz,                                                                       \
    (CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream),                           \
    (mapInfoList, count, hStream))                                                                 \
  X(cuStreamAttachMemAsync,                                                                        \
    (CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags),                       \
    (hStream, dptr, length, flags))                                                                \
  X(cuStreamAttachMemAsync_ptsz,                                                                   \
    (CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags),                       \
    (hStream, dptr, length, flags))                                                                \
  X(cuGraphUpload, (CUgraphExec hGraph, CUstream hStream), (hGraph, hStream))                      \
  X(cuGraphUpload_ptsz, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream))         \
  X(cuMemBatchDecompressAsync,                                                                     \
    (CUmemDecompressParams *paramsArray, size_t count, unsigned int flags, size_t *errorIndex,     \
    CUstream stream),                                                                              \
    (paramsArray, count, flags, errorIndex, stream))                                               \
  X(cuMemBatchDecompressAsync_ptsz,                                                                \
    (CUmemDecompressParams *paramsArray, size_t count, unsigned int flags, size_t *errorIndex,     \
    CUstream stream),                                                                              \
    (paramsArray, count, flags, errorIndex, stream))                                               \
  X(cuMemDiscardBatchAsync,                                                                        \
    (CUdeviceptr *dptrs, size_t *sizes, size_t count, unsigned long long flags, CUstream           \
    hStream),                                                                                      \
    (dptrs, sizes, count, flags, hStream))                                                         \
  X(cuMemDiscardBatchAsync_ptsz,                                                                   \
    (CUdeviceptr *dptrs, size_t *sizes, size_t count, unsigned long long flags, CUstream           \
    hStream),                                                                                      \
    (dptrs, sizes, count, flags, hStream))                                                         \
  X(cuMemDiscardAndPrefetchBatchAsync,                                                             \
    (CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs, size_t          \
    *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream),         \
    (dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream))         \
  X(cuMemDiscardAndPrefetchBatchAsync_ptsz,                                                        \
    (CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs, size_t          \
    *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream),         \
    (dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, hStream))         \
  X(cuMemcpyAtoHAsync_v2,                                                                          \
    (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream),       \
    (dstHost, srcArray, srcOffset, ByteCount, hStream))                                            \
  X(cuMemcpyAtoHAsync_v2_ptsz,                                                                     \
    (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream),       \
    (dstHost, srcArray, srcOffset, ByteCount, hStream))                                            \
  X(cuMemcpyHtoAAsync_v2,                                                                          \
    (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream           \
    hStream),                                                                                      \
    (dstArray, dstOffset, srcHost, ByteCount, hStream))                                            \
  X(cuMemcpyHtoAAsync_v2_ptsz,                                                                     \
    (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream           \
    hStream),                                                                                      \
    (dstArray, dstOffset, srcHost, ByteCount, hStream))                                            \
  /* OpenGL interop (cudaGL.h, not cuda.h; GLuint is unsigned int): cudart resolves these too */   \
  X(cuGLMapBufferObjectAsync,                                                                      \
    (CUdeviceptr_v1 * dptr, unsigned int* size, unsigned int buffer, CUstream hStream),            \
    (dptr, size, buffer, hStream))                                                                 \
  X(cuGLMapBufferObjectAsync_v2, (CUdeviceptr * dptr, size_t* size, unsigned int buffer, CUstream hStream), \
    (dptr, size, buffer, hStream))                                                                 \
  X(cuGLMapBufferObjectAsync_v2_ptsz,                                                              \
    (CUdeviceptr * dptr, size_t* size, unsigned int buffer, CUstream hStream),                     \
    (dptr, size, buffer, hStream))                                                                 \
  X(cuGLUnmapBufferObjectAsync, (unsigned int buffer, CUstream hStream), (buffer, hStream))         \
  X(cuLaunch, (CUfunction f), (f))                                                                 \
  X(cuLaunchGrid, (CUfunction f, int grid_width, int grid_height), (f, grid_width, grid_height))    \
  X(cuLaunchGridAsync,                                                                             \
    (CUfunction f, int grid_width, int grid_height, CUstream hStream),                             \
    (f, grid_width, grid_height, hStream))                                                         \
  X(cuLaunchCooperativeKernelMultiDevice,                                                          \
    (CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices, unsigned int flags),           \
    (launchParamsList, numDevices, flags))                                                         \
  X(cuMemcpyAtoA_v2,                                                                               \
    (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount),    \
    (dstArray, dstOffset, srcArray, srcOffset, ByteCount))                                         \
  X(cuMemcpyAtoA_v2_ptds,                                                                          \
    (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount),    \
    (dstArray, dstOffset, srcArray, srcOffset, ByteCount))                                         \
  X(cuMemcpyAtoD_v2,                                                                               \
    (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount),                 \
    (dstDevice, srcArray, srcOffset, ByteCount))                                                   \
  X(cuMemcpyAtoD_v2_ptds,                                                                          \
    (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount),                 \
    (dstDevice, srcArray, srcOffset, ByteCount))                                                   \
  X(cuMemcpyDtoA_v2,                                                                               \
    (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount),                 \
    (dstArray, dstOffset, srcDevice, ByteCount))                                                   \
  X(cuMemcpyDtoA_v2_ptds,                                                                          \
    (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount),                 \
    (dstArray, dstOffset, srcDevice, ByteCount))                                                   \
  X(cuMemcpyAtoH_v2,                                                                               \
    (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount),                         \
    (dstHost, srcArray, srcOffset, ByteCount))                                                     \
  X(cuMemcpyAtoH_v2_ptds,                                                                          \
    (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount),                         \
    (dstHost, srcArray, srcOffset, ByteCount))                                                     \
  X(cuMemcpyHtoA_v2,                                                                               \
    (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount),                   \
    (dstArray, dstOffset, srcHost, ByteCount))                                                     \
  X(cuMemcpyHtoA_v2_ptds,                                                                          \
    (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount),                   \
    (dstArray, dstOffset, srcHost, ByteCount))                                                     \
  X(cuMemcpyHtoDAsync,                                                                             \
    (CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount, CUstream hStream),     \
    (dstDevice, srcHost, ByteCount, hStream))                                                      \
  X(cuMemcpyDtoHAsync,                                                                             \
    (void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount, CUstream hStream),           \
    (dstHost, srcDevice, ByteCount, hStream))                                                      \
  X(cuMemcpyDtoDAsync,                                                                             \
    (CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount, CUstream          \
    hStream),                                                                                      \
    (dstDevice, srcDevice, ByteCount, hStream))                                                    \
  X(cuMemcpy2DAsync, (const CUDA_MEMCPY2D_v1 *pCopy, CUstream hStream), (pCopy, hStream))          \
  X(cuMemcpy3DAsync, (const CUDA_MEMCPY3D_v1 *pCopy, CUstream hStream), (pCopy, hStream))          \
  X(cuMemcpyAtoHAsync,                                                                             \
    (void *dstHost, CUarray srcArray, unsigned int srcOffset, unsigned int ByteCount, CUstream     \
    hStream),                                                                                      \
    (dstHost, srcArray, srcOffset, ByteCount, hStream))                                            \
  X(cuMemcpyHtoAAsync,                                                                             \
    (CUarray dstArray, unsigned int dstOffset, const void *srcHost, unsigned int ByteCount,        \
    CUstream hStream),                                                                             \
    (dstArray, dstOffset, srcHost, ByteCount, hStream))                                            \
  X(cuMemcpyHtoD,                                                                                  \
    (CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount),                       \
    (dstDevice, srcHost, ByteCount))                                                               \
  X(cuMemcpyDtoH,                                                                                  \
    (void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount),                             \
    (dstHost, srcDevice, ByteCount))                                                               \
  X(cuMemcpyDtoD,                                                                                  \
    (CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount),                  \
    (dstDevice, srcDevice, ByteCount))                                                             \
  X(cuMemcpy2D, (const CUDA_MEMCPY2D_v1 *pCopy), (pCopy))                                          \
  X(cuMemcpy2DUnaligned, (const CUDA_MEMCPY2D_v1 *pCopy), (pCopy))                                 \
  X(cuMemcpy3D, (const CUDA_MEMCPY3D_v1 *pCopy), (pCopy))                                          \
  X(cuMemcpyAtoA,                                                                                  \
    (CUarray dstArray, unsigned int dstOffset, CUarray srcArray, unsigned int srcOffset, unsigned  \
    int ByteCount),                                                                                \
    (dstArray, dstOffset, srcArray, srcOffset, ByteCount))                                         \
  X(cuMemcpyAtoD,                                                                                  \
    (CUdeviceptr_v1 dstDevice, CUarray srcArray, unsigned int srcOffset, unsigned int ByteCount),  \
    (dstDevice, srcArray, srcOffset, ByteCount))                                                   \
  X(cuMemcpyDtoA,                                                                                  \
    (CUarray dstArray, unsigned int dstOffset, CUdeviceptr_v1 srcDevice, unsigned int ByteCount),  \
    (dstArray, dstOffset, srcDevice, ByteCount))                                                   \
  X(cuMemcpyAtoH,                                                                                  \
    (void *dstHost, CUarray srcArray, unsigned int srcOffset, unsigned int ByteCount),             \
    (dstHost, srcArray, srcOffset, ByteCount))                                                     \
  X(cuMemcpyHtoA,                                                                                  \
    (CUarray dstArray, unsigned int dstOffset, const void *srcHost, unsigned int ByteCount),       \
    (dstArray, dstOffset, srcHost, ByteCount))                                                     \
  X(cuMemsetD8, (CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N), (dstDevice, uc, N))  \
  X(cuMemsetD16,                                                                                   \
    (CUdeviceptr_v1 dstDevice, unsigned short us, unsigned int N),                                 \
    (dstDevice, us, N))                                                                            \
  X(cuMemsetD32, (CUdeviceptr_v1 dstDevice, unsigned int ui, unsigned int N), (dstDevice, ui, N))  \
  X(cuMemsetD2D8,                                                                                  \
    (CUdeviceptr_v1 dstDevice, unsigned int dstPitch, unsigned char uc, unsigned int Width,        \
    unsigned int Height),                                                                          \
    (dstDevice, dstPitch, uc, Width, Height))                                                      \
  X(cuMemsetD2D16,                                                                                 \
    (CUdeviceptr_v1 dstDevice, unsigned int dstPitch, unsigned short us, unsigned int Width,       \
    unsigned int Height),                                                                          \
    (dstDevice, dstPitch, us, Width, Height))                                                      \
  X(cuMemsetD2D32,                                                                                 \
    (CUdeviceptr_v1 dstDevice, unsigned int dstPitch, unsigned int ui, unsigned int Width,         \
    unsigned int Height),                                                                          \
    (dstDevice, dstPitch, ui, Width, Height))

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
  X(cuCtxSetLimit, (CUlimit limit, size_t value), (limit, value))                                  \
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
  X(cuStreamGetPriority, (CUstream stream, int* priority), (stream, priority))                     \
  X(cuStreamGetPriority_ptsz, (CUstream stream, int* priority), (stream, priority))                \
  /* SM partitions (green contexts): spatial placement of a tenant's launches */                    \
  X(cuDeviceGetDevResource, (CUdevice dev, CUdevResource * resource, CUdevResourceType type),      \
    (dev, resource, type))                                                                         \
  X(cuDevSmResourceSplitByCount,                                                                   \
    (CUdevResource * result, unsigned int* nbGroups, const CUdevResource* input,                   \
     CUdevResource* remaining, unsigned int useFlags, unsigned int minCount),                      \
    (result, nbGroups, input, remaining, useFlags, minCount))                                      \
  X(cuDevResourceGenerateDesc,                                                                     \
    (CUdevResourceDesc * desc, CUdevResource * resources, unsigned int nbResources),               \
    (desc, resources, nbResources))                                                                \
  X(cuGreenCtxCreate, (CUgreenCtx * ctx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags),\
    (ctx, desc, dev, flags))                                                                       \
  X(cuGreenCtxDestroy, (CUgreenCtx ctx), (ctx))                                                    \
  X(cuGreenCtxStreamCreate, (CUstream * stream, CUgreenCtx ctx, unsigned int flags, int priority), \
    (stream, ctx, flags, priority))                                                                \
  /* events: completion tracking of submitted work */                                              \
  X(cuEventCreate, (CUevent * event, unsigned int flags), (event, flags))                          \
  X(cuEventDestroy_v2, (CUevent event), (event))                                                   \
  X(cuEventRecord, (CUevent event, CUstream stream), (event, stream))                              \
  X(cuEventRecord_ptsz, (CUevent event, CUstream stream), (event, stream))                         \
  X(cuEventSynchronize, (CUevent event), (event))                                                  \
  X(cuEventQuery, (CUevent event), (event))                                                        \
  X(cuEventElapsedTime_v2, (float* ms, CUevent start, CUevent end), (ms, start, end))             \
  X(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode * mode), (mode))                       \
  /* stream capture (tracked so captured launches are counted apart and never gated) */           \
  X(cuStreamBeginCapture, (CUstream stream), (stream))                                             \
  X(cuStreamBeginCapture_ptsz, (CUstream stream), (stream))                                        \
  X(cuStreamBeginCapture_v2, (CUstream stream, CUstreamCaptureMode mode), (stream, mode))          \
  X(cuStreamBeginCapture_v2_ptsz, (CUstream stream, CUstreamCaptureMode mode), (stream, mode))     \
  X(cuStreamBeginCaptureToGraph,                                                                   \
    (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData      \
    *dependencyData, size_t numDependencies, CUstreamCaptureMode mode),                            \
    (hStream, hGraph, dependencies, dependencyData, numDependencies, mode))                        \
  X(cuStreamBeginCaptureToGraph_ptsz,                                                              \
    (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData      \
    *dependencyData, size_t numDependencies, CUstreamCaptureMode mode),                            \
    (hStream, hGraph, dependencies, dependencyData, numDependencies, mode))                        \
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
  /* graphs: spatial placement keeps a copy of each instantiated graph and, per SM partition, an    \
     executable variant whose kernel nodes run in the partition's green context */                 \
  X(cuGraphInstantiateWithFlags, (CUgraphExec * exec, CUgraph graph, unsigned long long flags),     \
    (exec, graph, flags))                                                                          \
  X(cuGraphInstantiateWithParams, (CUgraphExec * exec, CUgraph graph,                              \
                                   CUDA_GRAPH_INSTANTIATE_PARAMS * params), (exec, graph, params)) \
  X(cuGraphInstantiateWithParams_ptsz, (CUgraphExec * exec, CUgraph graph,                         \
                                        CUDA_GRAPH_INSTANTIATE_PARAMS * params), (exec, graph, params)) \
  /* the pre-12.0 signatures, still exported and handed out by cuGetProcAddress ("cuGraphInstantiate": \
     _v2 at every version from 11.0 on, 13.0 included; "cuGraphExecUpdate": below 12.0) */        \
  X(cuGraphInstantiate,                                                                            \
    (CUgraphExec * exec, CUgraph graph, CUgraphNode * errNode, char* log, size_t logSize),         \
    (exec, graph, errNode, log, logSize))                                                          \
  X(cuGraphInstantiate_v2,                                                                         \
    (CUgraphExec * exec, CUgraph graph, CUgraphNode * errNode, char* log, size_t logSize),         \
    (exec, graph, errNode, log, logSize))                                                          \
  X(cuGraphExecDestroy, (CUgraphExec exec), (exec))                                                \
  X(cuGraphExecUpdate_v2, (CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo * info),   \
    (exec, graph, info))                                                                           \
  X(cuGraphExecUpdate,                                                                             \
    (CUgraphExec exec, CUgraph graph, CUgraphNode * errNode, CUgraphExecUpdateResult * result),    \
    (exec, graph, errNode, result))                                                                \
  X(cuGraphExecKernelNodeSetParams_v2, (CUgraphExec exec, CUgraphNode node,                        \
                                        const CUDA_KERNEL_NODE_PARAMS* p), (exec, node, p))        \
  X(cuGraphExecNodeSetParams, (CUgraphExec exec, CUgraphNode node, CUgraphNodeParams * p),         \
    (exec, node, p))                                                                               \
  X(cuGraphExecMemcpyNodeSetParams, (CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* p,   \
                                     CUcontext ctx), (exec, node, p, ctx))                         \
  X(cuGraphExecMemsetNodeSetParams, (CUgraphExec exec, CUgraphNode node,                           \
                                     const CUDA_MEMSET_NODE_PARAMS* p, CUcontext ctx),             \
    (exec, node, p, ctx))                                                                          \
  X(cuGraphExecHostNodeSetParams, (CUgraphExec exec, CUgraphNode node,                             \
                                   const CUDA_HOST_NODE_PARAMS* p), (exec, node, p))               \
  X(cuGraphExecChildGraphNodeSetParams, (CUgraphExec exec, CUgraphNode node, CUgraph child),       \
    (exec, node, child))                                                                           \
  X(cuGraphExecEventRecordNodeSetEvent, (CUgraphExec exec, CUgraphNode node, CUevent e),           \
    (exec, node, e))                                                                               \
  X(cuGraphExecEventWaitNodeSetEvent, (CUgraphExec exec, CUgraphNode node, CUevent e),             \
    (exec, node, e))                                                                               \
  X(cuGraphNodeSetEnabled, (CUgraphExec exec, CUgraphNode node, unsigned int on), (exec, node, on)) \
  X(cuGraphClone, (CUgraph * clone, CUgraph graph), (clone, graph))                                \
  X(cuGraphDestroy, (CUgraph graph), (graph))                                                      \
  X(cuGraphGetNodes, (CUgraph graph, CUgraphNode * nodes, size_t * count), (graph, nodes, count))  \
  X(cuGraphNodeGetType, (CUgraphNode node, CUgraphNodeType * type), (node, type))                  \
  X(cuGraphKernelNodeGetParams_v2, (CUgraphNode node, CUDA_KERNEL_NODE_PARAMS * p), (node, p))     \
  X(cuGraphKernelNodeSetParams_v2, (CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p), (node, p)) \
  X(cuGraphChildGraphNodeGetGraph, (CUgraphNode node, CUgraph * child), (node, child))             \
  X(cuCtxFromGreenCtx, (CUcontext * ctx, CUgreenCtx green), (ctx, green))                          \
  /* used by the swapper (not governed): contexts, its own stream, virtual memory */              \
  X(cuCtxPushCurrent_v2, (CUcontext ctx), (ctx))                                                   \
  X(cuCtxPopCurrent_v2, (CUcontext * pctx), (pctx))                                                \
  X(cuCtxSynchronize, (), ())                                                                      \
  X(cuStreamSynchronize, (CUstream stream), (stream))                                              \
  X(cuStreamDestroy_v2, (CUstream stream), (stream))                                               \
  X(cuMemGetAllocationGranularity,                                                                 \
    (size_t * granularity, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags option),\
    (granularity, prop, option))                                                                   \
  X(cuMemAddressReserve,                                                                           \
    (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags),\
    (ptr, size, alignment, addr, flags))                                                           \
  X(cuMemAddressFree, (CUdeviceptr ptr, size_t size), (ptr, size))                                 \
  X(cuMemMap,                                                                                      \
    (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,             \
     unsigned long long flags),                                                                    \
    (ptr, size, offset, handle, flags))                                                            \
  X(cuMemUnmap, (CUdeviceptr ptr, size_t size), (ptr, size))                                       \
  X(cuMemSetAccess, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count),     \
    (ptr, size, desc, count))                                                                      \
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
  X(cuMemRelease, (CUmemGenericAllocationHandle handle), (handle))                                 \
  /* CUDA arrays: accounted from the descriptor (the driver's size where it can tell) */           \
  X(cuArrayCreate_v2, (CUarray * handle, const CUDA_ARRAY_DESCRIPTOR* desc), (handle, desc))       \
  X(cuArray3DCreate_v2, (CUarray * handle, const CUDA_ARRAY3D_DESCRIPTOR* desc), (handle, desc))   \
  X(cuArrayDestroy, (CUarray array), (array))                                                      \
  X(cuArrayGetMemoryRequirements,                                                                  \
    (CUDA_ARRAY_MEMORY_REQUIREMENTS * req, CUarray array, CUdevice dev), (req, array, dev))        \
  X(cuMipmappedArrayCreate,                                                                        \
    (CUmipmappedArray * handle, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned int numMipmapLevels),\
    (handle, desc, numMipmapLevels))                                                               \
  X(cuMipmappedArrayDestroy, (CUmipmappedArray mipmap), (mipmap))                                  \
  X(cuMipmappedArrayGetMemoryRequirements,                                                         \
    (CUDA_ARRAY_MEMORY_REQUIREMENTS * req, CUmipmappedArray mipmap, CUdevice dev),                 \
    (req, mipmap, dev))                                                                            \
  /* graph memory nodes (the generic cuGraphAddNode can add them too) */                          \
  X(cuGraphAddMemAllocNode,                                                                        \
    (CUgraphNode * node, CUgraph graph, const CUgraphNode* deps, size_t numDeps,                   \
     CUDA_MEM_ALLOC_NODE_PARAMS* params),                                                          \
    (node, graph, deps, numDeps, params))                                                          \
  X(cuGraphAddMemFreeNode,                                                                         \
    (CUgraphNode * node, CUgraph graph, const CUgraphNode* deps, size_t numDeps, CUdeviceptr dptr),\
    (node, graph, deps, numDeps, dptr))                                                            \
  X(cuGraphAddNode,                                                                                \
    (CUgraphNode * node, CUgraph graph, const CUgraphNode* deps, size_t numDeps,                   \
     CUgraphNodeParams* params),                                                                   \
    (node, graph, deps, numDeps, params))                                                          \
  X(cuGraphAddNode_v2,                                                                             \
    (CUgraphNode * node, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges,     \
     size_t numDeps, CUgraphNodeParams* params),                                                   \
    (node, graph, deps, edges, numDeps, params))                                                   \
  /* CUDA IPC: imported memory is the exporter's (counted apart, never charged here) */           \
  X(cuIpcGetMemHandle, (CUipcMemHandle * handle, CUdeviceptr dptr), (handle, dptr))               \
  X(cuIpcOpenMemHandle, (CUdeviceptr * dptr, CUipcMemHandle handle, unsigned int flags),          \
    (dptr, handle, flags))                                                                         \
  X(cuIpcOpenMemHandle_v2, (CUdeviceptr * dptr, CUipcMemHandle handle, unsigned int flags),       \
    (dptr, handle, flags))                                                                         \
  X(cuIpcCloseMemHandle, (CUdeviceptr dptr), (dptr))                                               \
  X(cuMemGetAddressRange_v2, (CUdeviceptr * base, size_t * size, CUdeviceptr dptr),               \
    (base, size, dptr))                                                                            \
  GPUOS_DEVICE_ACCESS_FUNCS(X)                                                                     \
  GPUOS_STREAM_WORK_FUNCS(X)                                                                       \
  /* host memory registration (not governed; the swapper pins its buffers) */                      \
  X(cuMemHostRegister_v2, (void* p, size_t bytes, unsigned int flags), (p, bytes, flags))          \
  X(cuMemHostUnregister, (void* p), (p))

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
