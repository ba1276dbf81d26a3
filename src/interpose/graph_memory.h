// SPDX-License-Identifier: Apache-2.0
// CUDA graph memory against the tenant's quota: the driver calls behind the bookkeeping of
// memory_accounting.h (GraphFootprint). An instantiation is charged what the driver's graph
// memory pool can take for it (hooks_graph.cc), before the driver is asked; a destroyed exec's
// charge is retained until a trim of the pool shows the memory is back (reclaim_graph_memory).
// Not a fast path: instantiation, destruction, and allocations that would exceed the quota.
#pragma once

#include <cstdint>

#include "gpuos/abi.h"
#include "gpuos/driver_api.h"
#include "interpose/memory_accounting.h"

namespace gpuos::interpose {

// The alloc nodes of `graph`, child graphs included, as the driver reports them. Fails with the
// driver's error for a bad graph, or CUDA_ERROR_NOT_SUPPORTED when it cannot tell an alloc
// node's size (the instantiation is then refused rather than left uncounted).
CUresult graph_footprint(const GpuosDriverTable& d, CUgraph graph, GraphFootprint* out);

// Trims the driver's graph memory pools that hold retained charge (cuDeviceGraphMemTrim) and
// lowers that charge to what they still hold (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT). Side
// effect of the trim: idle execs map their memory again at their next launch. True when any charge
// was released.
bool reclaim_graph_memory(const GpuosDriverTable& d, gpuos_control_block* cb);

// reserve_bytes with the quota enforced (0 bytes always pass); when refused while destroyed
// graphs' memory is retained, reclaims it and tries once more.
bool reserve_within_quota(const GpuosDriverTable& d, gpuos_control_block* cb, uint64_t bytes);

// The id of the capture sequence `stream` is in (cuStreamGetCaptureInfo), 0 when it is not
// capturing or the driver cannot say. ptsz: stream 0 is the per-thread default stream. One relaxed
// load when no capture is active in the process.
uint64_t capture_sequence(const GpuosDriverTable& d, CUstream stream, bool ptsz);

}  // namespace gpuos::interpose
