// Exported copy, memset and prefetch entry points: every driver call that reads or writes device
// memory without being a kernel launch. Each forwards through governed_copy, so a swappable
// tenant's copy waits at the gate while its memory is swapped out (and the swapper knows when no
// such call is still on its way into the driver); for everyone else it is one relaxed load and
// the real call. Nothing is counted: copies are not schedulable units.
//
// Each wrapper has exactly the type of the real entry point (GPUOS_GOVERNED in proc_address.cc
// checks it against the driver table); a driver that lacks one gets CUDA_ERROR_NOT_FOUND.
#include "interpose/fast_path.h"

namespace gi = gpuos::interpose;

extern "C" {

// ---- copies ----
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy, dst, src, bytes));
}
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy_ptds, dst, src, bytes));
}
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx,
                      size_t bytes) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyPeer, dst, dstCtx, src, srcCtx, bytes));
}
CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx,
                           size_t bytes) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyPeer_ptds, dst, dstCtx, src, srcCtx, bytes));
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyHtoD_v2, dst, src, bytes));
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t bytes) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyHtoD_v2_ptds, dst, src, bytes));
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyDtoH_v2, dst, src, bytes));
}
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t bytes) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyDtoH_v2_ptds, dst, src, bytes));
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyDtoD_v2, dst, src, bytes));
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyDtoD_v2_ptds, dst, src, bytes));
}
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* copy) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy2D_v2, copy));
}
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* copy) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy2D_v2_ptds, copy));
}
CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* copy) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy2DUnaligned_v2, copy));
}
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* copy) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy2DUnaligned_v2_ptds, copy));
}
CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* copy) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy3D_v2, copy));
}
CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* copy) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy3D_v2_ptds, copy));
}
CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* copy) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy3DPeer, copy));
}
CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* copy) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy3DPeer_ptds, copy));
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyAsync, dst, src, bytes, stream));
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyAsync_ptsz, dst, src, bytes, stream));
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx,
                           size_t bytes, CUstream stream) {
  return gi::governed_copy(
      GPUOS_FORWARD(cuMemcpyPeerAsync, dst, dstCtx, src, srcCtx, bytes, stream));
}
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src,
                                CUcontext srcCtx, size_t bytes, CUstream stream) {
  return gi::governed_copy(
      GPUOS_FORWARD(cuMemcpyPeerAsync_ptsz, dst, dstCtx, src, srcCtx, bytes, stream));
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyHtoDAsync_v2, dst, src, bytes, stream));
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t bytes,
                                   CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyHtoDAsync_v2_ptsz, dst, src, bytes, stream));
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyDtoHAsync_v2, dst, src, bytes, stream));
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyDtoHAsync_v2_ptsz, dst, src, bytes, stream));
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyDtoDAsync_v2, dst, src, bytes, stream));
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                   CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyDtoDAsync_v2_ptsz, dst, src, bytes, stream));
}
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* copy, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy2DAsync_v2, copy, stream));
}
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* copy, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy2DAsync_v2_ptsz, copy, stream));
}
CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* copy, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy3DAsync_v2, copy, stream));
}
CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* copy, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy3DAsync_v2_ptsz, copy, stream));
}
CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* copy, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy3DPeerAsync, copy, stream));
}
CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* copy, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy3DPeerAsync_ptsz, copy, stream));
}
CUresult cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                            CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                            size_t* failIdx, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyBatchAsync, dsts, srcs, sizes, count, attrs,
                                         attrsIdxs, numAttrs, failIdx, stream));
}
CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                 CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                 size_t* failIdx, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyBatchAsync_ptsz, dsts, srcs, sizes, count, attrs,
                                         attrsIdxs, numAttrs, failIdx, stream));
}
CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                               CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                               CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyBatchAsync_v2, dsts, srcs, sizes, count, attrs,
                                         attrsIdxs, numAttrs, stream));
}
CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                    size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs,
                                    size_t numAttrs, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpyBatchAsync_v2_ptsz, dsts, srcs, sizes, count,
                                         attrs, attrsIdxs, numAttrs, stream));
}
CUresult cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* failIdx,
                              unsigned long long flags, CUstream stream) {
  return gi::governed_copy(
      GPUOS_FORWARD(cuMemcpy3DBatchAsync, numOps, ops, failIdx, flags, stream));
}
CUresult cuMemcpy3DBatchAsync_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* failIdx,
                                   unsigned long long flags, CUstream stream) {
  return gi::governed_copy(
      GPUOS_FORWARD(cuMemcpy3DBatchAsync_ptsz, numOps, ops, failIdx, flags, stream));
}
CUresult cuMemcpy3DBatchAsync_v2(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* ops,
                                 unsigned long long flags, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy3DBatchAsync_v2, numOps, ops, flags, stream));
}
CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* ops,
                                      unsigned long long flags, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemcpy3DBatchAsync_v2_ptsz, numOps, ops, flags, stream));
}

// ---- memsets ----
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD8_v2, dst, value, n));
}
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char value, size_t n) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD8_v2_ptds, dst, value, n));
}
CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short value, size_t n) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD16_v2, dst, value, n));
}
CUresult cuMemsetD16_v2_ptds(CUdeviceptr dst, unsigned short value, size_t n) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD16_v2_ptds, dst, value, n));
}
CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t n) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD32_v2, dst, value, n));
}
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int value, size_t n) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD32_v2_ptds, dst, value, n));
}
CUresult cuMemsetD2D8_v2(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width,
                         size_t height) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD2D8_v2, dst, pitch, value, width, height));
}
CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width,
                              size_t height) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD2D8_v2_ptds, dst, pitch, value, width, height));
}
CUresult cuMemsetD2D16_v2(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width,
                          size_t height) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD2D16_v2, dst, pitch, value, width, height));
}
CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width,
                               size_t height) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD2D16_v2_ptds, dst, pitch, value, width, height));
}
CUresult cuMemsetD2D32_v2(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width,
                          size_t height) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD2D32_v2, dst, pitch, value, width, height));
}
CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width,
                               size_t height) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD2D32_v2_ptds, dst, pitch, value, width, height));
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD8Async, dst, value, n, stream));
}
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD8Async_ptsz, dst, value, n, stream));
}
CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t n, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD16Async, dst, value, n, stream));
}
CUresult cuMemsetD16Async_ptsz(CUdeviceptr dst, unsigned short value, size_t n, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD16Async_ptsz, dst, value, n, stream));
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD32Async, dst, value, n, stream));
}
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int value, size_t n, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemsetD32Async_ptsz, dst, value, n, stream));
}
CUresult cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width,
                           size_t height, CUstream stream) {
  return gi::governed_copy(
      GPUOS_FORWARD(cuMemsetD2D8Async, dst, pitch, value, width, height, stream));
}
CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width,
                                size_t height, CUstream stream) {
  return gi::governed_copy(
      GPUOS_FORWARD(cuMemsetD2D8Async_ptsz, dst, pitch, value, width, height, stream));
}
CUresult cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width,
                            size_t height, CUstream stream) {
  return gi::governed_copy(
      GPUOS_FORWARD(cuMemsetD2D16Async, dst, pitch, value, width, height, stream));
}
CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width,
                                 size_t height, CUstream stream) {
  return gi::governed_copy(
      GPUOS_FORWARD(cuMemsetD2D16Async_ptsz, dst, pitch, value, width, height, stream));
}
CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width,
                            size_t height, CUstream stream) {
  return gi::governed_copy(
      GPUOS_FORWARD(cuMemsetD2D32Async, dst, pitch, value, width, height, stream));
}
CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width,
                                 size_t height, CUstream stream) {
  return gi::governed_copy(
      GPUOS_FORWARD(cuMemsetD2D32Async_ptsz, dst, pitch, value, width, height, stream));
}

// ---- prefetches of managed memory ----
CUresult cuMemPrefetchAsync(CUdeviceptr ptr, size_t bytes, CUdevice dstDevice, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemPrefetchAsync, ptr, bytes, dstDevice, stream));
}
CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr ptr, size_t bytes, CUdevice dstDevice,
                                 CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemPrefetchAsync_ptsz, ptr, bytes, dstDevice, stream));
}
CUresult cuMemPrefetchAsync_v2(CUdeviceptr ptr, size_t bytes, CUmemLocation location,
                               unsigned int flags, CUstream stream) {
  return gi::governed_copy(
      GPUOS_FORWARD(cuMemPrefetchAsync_v2, ptr, bytes, location, flags, stream));
}
CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr ptr, size_t bytes, CUmemLocation location,
                                    unsigned int flags, CUstream stream) {
  return gi::governed_copy(
      GPUOS_FORWARD(cuMemPrefetchAsync_v2_ptsz, ptr, bytes, location, flags, stream));
}
CUresult cuMemPrefetchBatchAsync(CUdeviceptr* ptrs, size_t* sizes, size_t count,
                                 CUmemLocation* locs, size_t* locIdxs, size_t numLocs,
                                 unsigned long long flags, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemPrefetchBatchAsync, ptrs, sizes, count, locs, locIdxs,
                                         numLocs, flags, stream));
}
CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr* ptrs, size_t* sizes, size_t count,
                                      CUmemLocation* locs, size_t* locIdxs, size_t numLocs,
                                      unsigned long long flags, CUstream stream) {
  return gi::governed_copy(GPUOS_FORWARD(cuMemPrefetchBatchAsync_ptsz, ptrs, sizes, count, locs,
                                         locIdxs, numLocs, flags, stream));
}

}  // extern "C"
