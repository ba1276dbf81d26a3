// Exported copy, memset and prefetch entry points: every driver call that reads or writes device
// memory without being a kernel launch (GPUOS_DEVICE_ACCESS_FUNCS in driver_api.h). Each forwards
// through governed_copy, so a swappable tenant's copy waits at the gate while its memory is swapped
// out (and the swapper knows when no such call is still on its way into the driver); for everyone
// else it is one relaxed load and the real call. Nothing is counted: copies are not schedulable
// units.
//
// The wrappers are generated from the same list as the driver table, so each has exactly the type
// of the real entry point (GPUOS_GOVERNED in proc_address.cc checks it too); a driver that lacks one
// gets CUDA_ERROR_NOT_FOUND.
#include "interpose/fast_path.h"

namespace gi = gpuos::interpose;

#define GPUOS_COPY_WRAPPER(name, params, args)                                                \
  CUresult CUDAAPI name params {                                                              \
    return gi::governed_copy(                                                                 \
        [&](const GpuosDriverTable& d) { return d.name ? d.name args : CUDA_ERROR_NOT_FOUND; }); \
  }

extern "C" {
GPUOS_DEVICE_ACCESS_FUNCS(GPUOS_COPY_WRAPPER)
}  // extern "C"

#undef GPUOS_COPY_WRAPPER
