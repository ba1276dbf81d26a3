// The tenant's side of a control block in the core's tests: a second, writable mapping of the fd
// gpuosd passed, written the way libgpuos.so (or a hostile tenant) writes it.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <cstdint>

#include "daemon/core.h"

namespace gpuos::daemon::tenant_side {

constexpr uint64_t GiB = 1ull << 30;

template <typename T>
void put(T& word, T value) {
  std::atomic_ref<T>(word).store(value, std::memory_order_release);
}

struct TenantSide {
  Connection conn;
  gpuos_control_block* cb = nullptr;  // the tenant's own mapping (unmap it)
  uint32_t id = 0;
};

// Maps the control block a REGISTER_REPLY passed (its first reply's fd); null on failure.
inline gpuos_control_block* map_block(const Outcome& registered) {
  if (registered.replies.empty() || registered.replies[0].fd < 0) return nullptr;
  void* p = mmap(nullptr, sizeof(gpuos_control_block), PROT_READ | PROT_WRITE, MAP_SHARED,
                 registered.replies[0].fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<gpuos_control_block*>(p);
}

}  // namespace gpuos::daemon::tenant_side
