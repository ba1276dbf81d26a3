// SPDX-License-Identifier: Apache-2.0
// Includes cuda.h the way the driver itself sees it: every versioned entry point (_v2, _v3, _ptsz,
// _ptds) keeps its own name instead of being renamed by macros, so gpuos can define and call each
// exported symbol exactly. Include this instead of <cuda.h> everywhere in gpuos.
#pragma once
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>
#include <cstddef>

// OpenGL interop entry points that put work on a stream (cudaGL.h, which needs the GL headers; its
// GLuint is unsigned int). gpuos wraps them like the stream work of cuda.h (driver_api.h).
extern "C" {
CUresult CUDAAPI cuGLMapBufferObjectAsync(CUdeviceptr_v1* dptr, unsigned int* size, unsigned int buffer,
                                          CUstream hStream);
CUresult CUDAAPI cuGLMapBufferObjectAsync_v2(CUdeviceptr* dptr, size_t* size, unsigned int buffer, CUstream hStream);
CUresult CUDAAPI cuGLMapBufferObjectAsync_v2_ptsz(CUdeviceptr* dptr, size_t* size, unsigned int buffer,
                                                  CUstream hStream);
CUresult CUDAAPI cuGLUnmapBufferObjectAsync(unsigned int buffer, CUstream hStream);
}
