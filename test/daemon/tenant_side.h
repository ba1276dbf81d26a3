// SPDX-License-Identifier: Apache-2.0
// The tenant's side of its blocks in the core's tests: mappings of the fds gpuosd passed, made the
// way libgpuos.so (or a hostile tenant) makes them: the control block writable, the grant block
// only readable (its memfd is sealed: a writable mapping is refused).
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "common/ipc.h"
#include "daemon/core/core.h"

namespace gpuos::daemon::tenant_side {

constexpr uint64_t GiB = 1ull << 30;

template <typename T>
void put(T& word, T value) {
  std::atomic_ref<T>(word).store(value, std::memory_order_release);
}

struct TenantSide {
  Connection conn;
  gpuos_control_block* cb = nullptr;      // the tenant's own mappings (unmap them)
  const gpuos_grant_block* grants = nullptr;
  uint32_t id = 0;
};

// A reply the core made, as the struct its type names (its size checked).
template <typename M>
M decode(const Outgoing& o) {
  M m{};
  EXPECT_EQ(o.bytes.size(), sizeof(M));
  std::memcpy(&m, o.bytes.data(), std::min(o.bytes.size(), sizeof(M)));
  return m;
}

// A REGISTER as libgpuos.so sends it (pid, class, weight 100, name); set the rest before sending.
inline gpuos_msg_register registration(pid_t pid, uint32_t tenant_class, const char* name = "t") {
  gpuos_msg_register m{};
  init_header(&m.hdr, GPUOS_MSG_REGISTER, sizeof(m), 1);
  m.pid = pid;
  m.tenant_class = tenant_class;
  m.weight = 100;
  copy_name(m.name, sizeof(m.name), name);
  return m;
}

// The fds a REGISTER_REPLY passed (its first reply's): [0] the grant block, [1] the control block.
inline int grant_fd(const Outcome& registered) {
  return registered.replies.empty() ? -1 : registered.replies[0].fds[0];
}
inline int control_fd(const Outcome& registered) {
  return registered.replies.empty() ? -1 : registered.replies[0].fds[1];
}

// Maps the control block a REGISTER_REPLY passed, writable; null on failure.
inline gpuos_control_block* map_block(const Outcome& registered) {
  if (control_fd(registered) < 0) return nullptr;
  void* p = mmap(nullptr, sizeof(gpuos_control_block), PROT_READ | PROT_WRITE, MAP_SHARED,
                 control_fd(registered), 0);
  return p == MAP_FAILED ? nullptr : static_cast<gpuos_control_block*>(p);
}

// Maps the grant block a REGISTER_REPLY passed, read-only (all a tenant can); null on failure.
inline const gpuos_grant_block* map_grants(const Outcome& registered) {
  if (grant_fd(registered) < 0) return nullptr;
  void* p = mmap(nullptr, sizeof(gpuos_grant_block), PROT_READ, MAP_SHARED, grant_fd(registered), 0);
  return p == MAP_FAILED ? nullptr : static_cast<const gpuos_grant_block*>(p);
}

// Maps both blocks a REGISTER_REPLY passed into t, as its tenant does, and notes its id.
inline void adopt(TenantSide& t, const Outcome& registered) {
  t.id = registered.registered;
  t.cb = map_block(registered);
  t.grants = map_grants(registered);
}

// Unmaps what map_block and map_grants mapped for t.
inline void unmap(TenantSide& t) {
  if (t.cb != nullptr) munmap(t.cb, sizeof(gpuos_control_block));
  if (t.grants != nullptr) munmap(const_cast<gpuos_grant_block*>(t.grants), sizeof(gpuos_grant_block));
  t.cb = nullptr;
  t.grants = nullptr;
}

// What libgpuos.so does when a timed launch of the tenant ends: the next entry of its timing ring.
inline void timed_launch(gpuos_control_block* cb, uint64_t key, uint64_t ns) {
  const uint64_t h = std::atomic_ref<uint64_t>(cb->timing_head).load();
  put(cb->timing_ring[h % GPUOS_TIMING_RING].key, key);
  put(cb->timing_ring[h % GPUOS_TIMING_RING].ns, ns);
  std::atomic_ref<uint64_t>(cb->timing_head).store(h + 1);
}

}  // namespace gpuos::daemon::tenant_side
