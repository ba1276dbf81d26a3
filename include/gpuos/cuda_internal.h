// Includes cuda.h the way the driver itself sees it: every versioned entry point (_v2, _v3, _ptsz,
// _ptds) keeps its own name instead of being renamed by macros, so gpuos can define and call each
// exported symbol exactly. Include this instead of <cuda.h> everywhere in gpuos.
#pragma once
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>
#include <cstddef>
