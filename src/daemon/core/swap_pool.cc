// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/swap_pool.h"

#include <algorithm>

namespace gpuos::daemon {

namespace {
constexpr uint64_t kAlign = 2ull << 20;
}

SwapSpace::SwapSpace(uint64_t bytes) : size_(bytes / kAlign * kAlign) {
  if (size_ > 0) free_.emplace(0, size_);
}

uint64_t SwapSpace::align(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

std::optional<uint64_t> SwapSpace::allocate(uint64_t bytes) {
  const uint64_t want = std::max(align(bytes), kAlign);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const uint64_t off = it->first;
    const uint64_t rest = it->second - want;
    free_.erase(it);
    if (rest > 0) free_.emplace(off + want, rest);
    used_.emplace(off, want);
    return off;
  }
  return std::nullopt;
}

void SwapSpace::free(uint64_t offset) {
  auto u = used_.find(offset);
  if (u == used_.end()) return;
  auto it = free_.emplace(u->first, u->second).first;
  used_.erase(u);
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

void SwapSpace::shrink(uint64_t offset, uint64_t bytes) {
  auto u = used_.find(offset);
  if (u == used_.end()) return;
  const uint64_t keep = align(bytes);
  if (keep == 0) return free(offset);
  if (keep >= u->second) return;
  const uint64_t tail = u->second - keep;
  u->second = keep;
  used_.emplace(offset + keep, tail);
  free(offset + keep);
}

uint64_t SwapSpace::largest_free() const {
  uint64_t best = 0;
  for (const auto& [off, size] : free_) best = std::max(best, size);
  return best;
}

uint64_t SwapSpace::free_bytes() const {
  uint64_t sum = 0;
  for (const auto& [off, size] : free_) sum += size;
  return sum;
}

}  // namespace gpuos::daemon
