// SPDX-License-Identifier: Apache-2.0
// A tenant's two shared blocks as libgpuos.so holds them: the grant block (gpuosd's decisions,
// mapped read-only: its memfd is sealed) and the control block (what this process reports).
//
// They are mapped side by side, the grant block kGrantSpan bytes below the control block, so one
// pointer names both: g_control and every function that takes a control block reach the grants
// with grants_of(cb), and a re-registration swaps both with one atomic store.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "gpuos/abi.h"

namespace gpuos::interpose {

// Room for the grant block's mapping below the control block: one page of any size up to 64 KiB.
constexpr std::size_t kGrantSpan = 64 * 1024;
static_assert(sizeof(gpuos_grant_block) <= kGrantSpan);

inline const gpuos_grant_block* grants_of(const gpuos_control_block* cb) {
  return reinterpret_cast<const gpuos_grant_block*>(reinterpret_cast<const char*>(cb) - kGrantSpan);
}

// An atomic load of a grant word (std::atomic_ref needs a non-const object; loads never write, so
// they are fine on the read-only mapping).
template <typename T>
T grant_load(const T& word, std::memory_order order = std::memory_order_acquire) {
  return std::atomic_ref<T>(const_cast<T&>(word)).load(order);
}

// Both blocks in process memory, laid out as map_blocks maps them: for running without gpuosd
// (the grants then say "gate open, no limits") and for tests.
struct LocalBlocks {
  gpuos_grant_block grants;
  char gap[kGrantSpan - sizeof(gpuos_grant_block)];
  gpuos_control_block cb;
};
static_assert(offsetof(LocalBlocks, cb) == kGrantSpan);

// Maps the blocks gpuosd passed (grant block read-only) side by side. Returns the control block,
// or null with errno set. The fds may be closed afterwards.
gpuos_control_block* map_blocks(int grant_fd, int control_fd);
// Unmaps what map_blocks mapped.
void unmap_blocks(gpuos_control_block* cb);

}  // namespace gpuos::interpose
