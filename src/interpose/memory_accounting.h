// Per-process accounting of device memory: which allocation (device pointer or VMM handle) holds
// how many bytes on which device, mirrored into the control block for gpuosd. Allocation calls are
// not on the launch fast path; a mutex is fine here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gpuos/abi.h"

namespace gpuos::interpose {

enum class AllocKind { kPointer, kVmmHandle };

// Records a successful allocation of `bytes` on `device` under `key`.
void account_alloc(gpuos_control_block* cb, AllocKind kind, uint64_t key, std::size_t bytes,
                   int device);
// Records a failed allocation call.
void account_alloc_failure(gpuos_control_block* cb);
// Forgets `key` after a successful free. Unknown keys (allocated before gpuos saw the process, or
// never allocated) are counted in untracked_frees and change nothing else.
void account_free(gpuos_control_block* cb, AllocKind kind, uint64_t key);

}  // namespace gpuos::interpose
