// SPDX-License-Identifier: Apache-2.0
// Swappable device memory (gpuos run --swap): the tenant's cuMemAlloc memory is served from CUDA
// virtual memory (an address range reserved once, a physical allocation mapped per allocation), so
// that gpuosd can have it moved to host memory and back at the same device addresses.
//
// The swapper thread carries out the daemon's SWAP_OUT / SWAP_IN commands (control block
// swap_command, swap_command_seq): it drains the tenant (gate closed, no governed call still on its
// way into the driver, contexts synchronised), copies every arena allocation into the tenant's
// slice of the daemon's swap pool (a memfd every swappable tenant maps and pins once) and releases
// the physical memory; SWAP_IN maps new physical memory at the same addresses and copies back. The
// gate stays closed while the memory is out, so launches, copies and allocations simply wait.
//
// Allocation calls are not on the launch fast path: one mutex guards the arena.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpuos/abi.h"
#include "gpuos/driver_api.h"

namespace gpuos::interpose {

// True when this tenant asked for swappable memory (GPUOS_SWAP=1, set by `gpuos run --swap`) and
// is registered with a daemon.
bool swap_requested(const gpuos_control_block* cb);

// Allocations smaller than this go to the driver as they are (they stay resident): a physical
// allocation has a 2 MiB granularity, and small buffers hardly matter to oversubscription.
constexpr std::size_t kArenaMinBytes = 1u << 20;

// Serves one allocation from the arena. Returns CUDA_SUCCESS with *dptr and *granted (the rounded
// size), or the driver's error (CUDA_ERROR_OUT_OF_MEMORY when the GPU is full). Waits while the
// tenant's memory is swapped out.
CUresult arena_alloc(const GpuosDriverTable& d, gpuos_control_block* cb, CUdeviceptr* dptr,
                     std::size_t bytes, std::size_t* granted);
// Frees an arena allocation. Returns false (and does nothing) if ptr is not one; else *result.
bool arena_free(const GpuosDriverTable& d, CUdeviceptr ptr, CUresult* result);

// KV pools (kv_pool.h): physical memory of `bytes_each` on `device` at each of vas[0..count), which
// the pool reserved, mapped read-write in one batch and movable like arena allocations (from now
// on the tenant is swappable). All or nothing: the driver's error (CUDA_ERROR_OUT_OF_MEMORY when
// the GPU is full) and nothing mapped. Waits while the tenant's memory is swapped out.
CUresult arena_map_at(const GpuosDriverTable& d, gpuos_control_block* cb, CUcontext ctx, int device,
                      const CUdeviceptr* vas, std::size_t count, std::size_t bytes_each);
// Releases the memory at vas[0..count) (mapped by arena_map_at; swapped-out memory is dropped)
// after the device finished the work queued so far. CUDA_ERROR_INVALID_VALUE, and nothing
// released, if one of them is not such memory. `released(ctx, i)`, if given, runs as soon as
// vas[i] is gone (under the arena's lock: it may only count), so that a long batch shows progress.
using ArenaReleased = void (*)(void* ctx, std::size_t i);
CUresult arena_unmap_at(const GpuosDriverTable& d, gpuos_control_block* cb, const CUdeviceptr* vas, std::size_t count,
                        ArenaReleased released = nullptr, void* ctx = nullptr);
// Bytes of [base, base + size) that are swapped out now.
uint64_t arena_swapped_in(CUdeviceptr base, std::size_t size);

// An allocation failed with CUDA_ERROR_OUT_OF_MEMORY: asks gpuosd to make room for `bytes` on
// `device` (-1: the current context's) by swapping another tenant out, and waits for its answer.
// True: try again. False: no daemon, or it cannot make room; the allocation fails.
bool wait_for_room(gpuos_control_block* cb, uint64_t bytes, int device = -1);

// Before a gate is opened locally (gpuosd is gone): brings swapped-out memory back. True when the
// tenant's memory is on the GPU (or it never swapped); false if that is not possible yet.
bool swap_in_locally(gpuos_control_block* cb);

// Re-registration carries the swap words over through kSwapCarryOver (carry_over.h).

}  // namespace gpuos::interpose
