// Per-process accounting of device memory: which allocation (device pointer or VMM handle) holds
// how many bytes on which device, mirrored into the control block for gpuosd, and the tenant's
// memory quota. Allocation calls are not on the launch fast path; a mutex is fine here.
//
// An allocation is accounted in two steps so that concurrent allocations can never overshoot the
// quota together: reserve the bytes first (refused when they would exceed mem_quota_bytes), then
// either commit them under the allocation's key once the driver call succeeded, or cancel them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpuos/abi.h"

namespace gpuos::interpose {

enum class AllocKind { kPointer, kVmmHandle };

// Adds `bytes` to mem_used_bytes unless `enforce_quota` and that would exceed a non-zero
// mem_quota_bytes. Returns false (and changes nothing) when refused. Updates mem_peak_bytes.
bool reserve_bytes(gpuos_control_block* cb, std::size_t bytes, bool enforce_quota = true);
// Takes back a reservation whose allocation failed or was refused.
void cancel_bytes(gpuos_control_block* cb, std::size_t bytes);
// Records a successful allocation of `bytes` (already reserved) on `device` under `key`.
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

}  // namespace gpuos::interpose
