// SPDX-License-Identifier: Apache-2.0
// Exported entry points that put work on a stream or touch device memory without being a kernel
// launch: the copies, memsets and prefetches of GPUOS_DEVICE_ACCESS_FUNCS, and the rest of
// GPUOS_STREAM_WORK_FUNCS (driver_api.h): stream waits, host callbacks, memory operations, external
// semaphores, graphics interop, array copies, the legacy forms of copies and memsets. Each forwards
// through governed_copy: it counts as stream work for spatial placement (stream_work.h), and a
// swappable tenant's call waits at the gate while its memory is swapped out (and the swapper knows
// when no such call is still on its way into the driver); for everyone else it is one relaxed load,
// two counter increments and the real call. Nothing is counted per tenant: these are not
// schedulable units.
//
// The wrappers are generated from the same lists as the driver table, so each has exactly the type
// of the real entry point (GPUOS_GOVERNED in proc_address.cc checks it too); a driver that lacks one
// gets CUDA_ERROR_NOT_FOUND.
#include "interpose/fast_path.h"

namespace gi = gpuos::interpose;

#define GPUOS_STREAM_WRAPPER(name, params, args)                                              \
  CUresult CUDAAPI name params {                                                              \
    return gi::governed_copy(                                                                 \
        [&](const GpuosDriverTable& d) { return d.name ? d.name args : CUDA_ERROR_NOT_FOUND; }); \
  }

extern "C" {
GPUOS_DEVICE_ACCESS_FUNCS(GPUOS_STREAM_WRAPPER)
GPUOS_STREAM_WORK_FUNCS(GPUOS_STREAM_WRAPPER)
}  // extern "C"

#undef GPUOS_STREAM_WRAPPER
