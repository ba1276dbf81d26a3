// SPDX-License-Identifier: Apache-2.0
// The swap pool's allocator: slices of a tenant's own memfd that its swapped-out memory goes to.
// Mechanism of the memory slot (swap_engine.h); the policy never sees offsets.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace gpuos::daemon {

// Slices of the swap pool (byte offsets into one memfd), first fit, aligned to 2 MiB.
class SwapSpace {
 public:
  explicit SwapSpace(uint64_t bytes);
  std::optional<uint64_t> allocate(uint64_t bytes);  // the slice's offset, or none
  void free(uint64_t offset);                        // a slice allocate() returned
  void shrink(uint64_t offset, uint64_t bytes);      // keeps the slice's first `bytes` (0: frees it)
  uint64_t largest_free() const;
  uint64_t free_bytes() const;
  uint64_t size() const { return size_; }

 private:
  static uint64_t align(uint64_t bytes);
  uint64_t size_;
  std::map<uint64_t, uint64_t> free_;  // offset -> size, coalesced
  std::map<uint64_t, uint64_t> used_;  // offset -> size
};

}  // namespace gpuos::daemon
