// SPDX-License-Identifier: Apache-2.0
// Per-process accounting of device memory: which allocation (device pointer, VMM handle, CUDA
// array) holds how many bytes on which device, mirrored into the control block for gpuosd, and the
// tenant's memory quota. Allocation calls are not on the launch fast path; a mutex is fine here.
//
// An allocation is accounted in two steps so that concurrent allocations can never overshoot the
// quota together: reserve the bytes first (refused when they would exceed mem_quota_bytes), then
// either commit them under the allocation's key once the driver call succeeded, or cancel them.
//
// Device memory of other processes mapped in through CUDA IPC is no allocation of this tenant (its
// owner is charged): it is only counted in mem_imported_bytes (account_import / account_unimport).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpuos/abi.h"
#include "gpuos/cuda_internal.h"

namespace gpuos::interpose {

// Each kind is its own key space: a key is only ever looked up under the kind it was committed as.
enum class AllocKind : uint8_t {
  kPointer,         // device pointers: cuMemAlloc*, pitched, managed, stream-ordered and pool
                    // allocations; the addresses of graph allocations (0 bytes: their memory is
                    // the graph pool's, charged per executable graph, see GraphFootprint)
  kVmmHandle,       // cuMemCreate handles
  kArray,           // CUarray handles (cuArrayCreate_v2, cuArray3DCreate_v2)
  kMipmappedArray,  // CUmipmappedArray handles
  kMallocHeap,      // a context's device malloc heap (cuCtxSetLimit CU_LIMIT_MALLOC_HEAP_SIZE), by CUcontext
};
inline constexpr int kAllocKindCount = 5;

// The most the tenant may hold: its quota plus what it may borrow; 0 = unlimited.
uint64_t memory_limit(const gpuos_control_block* cb);

// What the process holds as the quota check counts it. Kept in the process's own memory: the
// control block's mem_used_bytes only mirrors it for gpuosd (the tenant can rewrite that word; no
// check reads it back).
uint64_t memory_used(const gpuos_control_block* cb);
// Tests only: the count starts again from 0 (each test's blocks are new, the process is the same).
void forget_memory_usage();

// Adds `bytes` to what the process holds (memory_used, mirrored into mem_used_bytes) unless
// `enforce_quota` and that would exceed a non-zero quota + borrow. Returns false (and changes
// nothing) when refused. Updates mem_peak_bytes.
bool reserve_bytes(gpuos_control_block* cb, std::size_t bytes, bool enforce_quota = true);
// Takes back a reservation whose allocation failed or was refused.
void cancel_bytes(gpuos_control_block* cb, std::size_t bytes);
// Records a successful allocation of `bytes` (already reserved) on `device` under `key`. A key that
// is still recorded (its free went by a path gpuos does not see) is replaced, its bytes dropped.
void commit_alloc(gpuos_control_block* cb, AllocKind kind, uint64_t key, std::size_t bytes,
                  int device);
// Records a failed (or refused) allocation call.
void account_alloc_failure(gpuos_control_block* cb);
// Forgets `key` after a successful free. Unknown keys (allocated before gpuos saw the process, or
// never allocated) are counted in untracked_frees and change nothing else.
void account_free(gpuos_control_block* cb, AllocKind kind, uint64_t key);

// Both steps at once, for allocations made without a quota check (tests, adoption).
inline void account_alloc(gpuos_control_block* cb, AllocKind kind, uint64_t key, std::size_t bytes,
                          int device) {
  if (reserve_bytes(cb, bytes)) commit_alloc(cb, kind, key, bytes, device);
}

// Another process's memory mapped in at `key` (cuIpcOpenMemHandle): `bytes` are added to
// mem_imported_bytes only, never to mem_used_bytes or the quota. The driver reference-counts a
// handle opened again in the same context (same pointer back): only the first open adds bytes.
void account_import(gpuos_control_block* cb, uint64_t key, std::size_t bytes);
// One cuIpcCloseMemHandle of `key`; the last one takes its bytes off. Unknown keys change nothing.
void account_unimport(gpuos_control_block* cb, uint64_t key);

// ---- the device malloc heap (cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE)) ----
// Device memory the driver reserves for a context's in-kernel malloc: charged like an allocation,
// the size set last (the driver's default heap, before any set, is the context's own memory, as NVML
// shows it). What context `ctx`'s heap is charged now (0: never set).
uint64_t malloc_heap_bytes(uint64_t ctx);
// The heap of `ctx` on `device` is `bytes` now, `before` as malloc_heap_bytes said: a larger heap's
// growth was reserved (reserve_bytes) before the driver was asked; a smaller one gives back.
void set_malloc_heap(gpuos_control_block* cb, uint64_t ctx, uint64_t bytes, int device, uint64_t before);

// ---- pitched allocations ----
// cuMemAllocPitch pads every row to the device's pitch alignment: 512 bytes on the H200 (driver
// 13.0, the device's CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT; TEXTURE_PITCH_ALIGNMENT says 32), so
// a row of 1 byte takes 512. What it can take: width rounded up to `align`, times height
// (saturating: the quota check refuses what cannot exist).
inline constexpr uint64_t kPitchAlignFloor = 512;
uint64_t pitched_bytes(uint64_t width, uint64_t height, uint64_t align);

// ---- CUDA graph memory (graph memory nodes, stream-ordered allocations under capture) ----
// The driver backs them from a per-device graph memory pool, not at the node: an executable
// graph maps its allocations when it is launched or uploaded and keeps them; the pool keeps the
// memory after the exec (and graph) are destroyed, until cuDeviceGraphMemTrim. So an
// instantiation is charged, from cuGraphInstantiate on, what the pool can take for it. Measured
// on the H200 (driver 13.0; test/interpose/memory_accounting_test.cc has the table): every
// allocation maps whole pages (kGraphPageBytes); each graph of the instantiated tree maps its own
// allocations in whole chunks (kGraphChunkBytes: 1 byte takes 32 MiB, 3 x 17 MiB take 64), and a
// child graph whose subtree allocates takes one chunk more (a child of 64 MiB takes 96). Graphs
// that cannot run concurrently share memory in the driver; each exec is counted apart here, so
// this is an upper bound. When the exec is destroyed its charge is retained (the pool still has
// the memory) until a trim shows what the pool really still holds.
inline constexpr uint64_t kGraphPageBytes = 2ull << 20;
inline constexpr uint64_t kGraphChunkBytes = 32ull << 20;
// The pages one allocation of `bytesize` maps.
uint64_t graph_pages(uint64_t bytesize);
struct GraphFootprint {
  uint64_t bytes[GPUOS_MAX_DEVICES] = {};
  uint64_t on(int device) const;  // 0 for an out-of-range device
  uint64_t total() const;
};
// One graph of an instantiated tree (the graph itself, or a child graph at any depth).
struct GraphLevel {
  std::size_t parent = 0;                   // index of its parent graph (the root: 0)
  uint64_t pages[GPUOS_MAX_DEVICES] = {};  // of its own alloc nodes (graph_pages), per device
};
// What the pool can take for an exec of the tree levels[0..count), in breadth-first order (every
// parent before its children, the root first).
GraphFootprint graph_tree_footprint(const GraphLevel* levels, std::size_t count);
// Records the footprint of a successful instantiation of `exec`, its bytes already reserved
// (reserve_bytes(fp.total())). An exec still recorded under that handle is retired first.
void commit_graph_exec(gpuos_control_block* cb, uint64_t exec, const GraphFootprint& fp);
// `exec` was destroyed: its charge stays, as retained charge of its devices. Unknown: nothing.
void retire_graph_exec(gpuos_control_block* cb, uint64_t exec);
// The retained charge of `device` (0 for an out-of-range one), and of all devices.
uint64_t graph_retained(int device);
uint64_t graph_retained_total();
// `device`'s pool held `reserved` bytes after a trim that began when the retained charge was
// `before`: the retained charge is lowered to what the pool can still hold for it, min(before,
// reserved), keeping what was retained meanwhile (after the trim began). Returns bytes released.
uint64_t settle_graph_retained(gpuos_control_block* cb, int device, uint64_t before, uint64_t reserved);

// ---- what a CUDA array holds, estimated from its descriptor ----
// Bytes of a width x height x depth array level (height and depth 0 mean 1) of `channels` channels
// of `format`. Most formats are a size per channel; packed and planar video formats a size per
// pixel (NV12: 1.5 bytes), block-compressed ones per 4x4 block; a format not known here counts 4
// bytes per channel, the most any channel takes. Saturates at UINT64_MAX instead of overflowing
// (the driver refuses such an array anyway, and the quota check refuses it first).
uint64_t array_level_bytes(uint64_t width, uint64_t height, uint64_t depth, CUarray_format format,
                           unsigned channels);
// Sparse and deferred-mapping arrays own no memory: it is mapped into them later from cuMemCreate
// handles (cuMemMapArrayAsync), which are accounted themselves.
bool array_owns_memory(unsigned flags);
// An array (cuArrayCreate_v2 descriptors as depth 0, flags 0): 0 for null or one owning no memory.
uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR* desc);
// The sum over the levels, each half the previous one in every dimension but never below 1; the
// depth of a layered or cubemap array counts layers (faces), which do not shrink.
uint64_t mipmapped_array_bytes(const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned levels);

}  // namespace gpuos::interpose
