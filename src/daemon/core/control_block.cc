// SPDX-License-Identifier: Apache-2.0
#include "daemon/core/control_block.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstddef>

#include "daemon/core/verify_engine.h"

namespace gpuos::daemon {

using slots::LatencyPoint;
using slots::ShapeSamples;

namespace {

// Linux >= 5.1; older C libraries lack the name.
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

// A zero-filled memfd of `bytes`, mapped writable, with `seals` added once mapped. -errno on failure.
int make_block(const char* name, std::size_t bytes, int seals, void** mapped) {
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -errno;
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  // After the mapping: F_SEAL_FUTURE_WRITE keeps ours writable and refuses every writable mapping,
  // mprotect to write and write(2) from then on. SHRINK/GROW: nobody can cut the file under a
  // mapping (SIGBUS). SEAL: nobody can change the seals.
  if (p == MAP_FAILED || fcntl(fd, F_ADD_SEALS, seals) != 0) {
    const int e = errno;
    if (p != MAP_FAILED) munmap(p, bytes);
    close(fd);
    return -e;
  }
  *mapped = p;
  return fd;
}

}  // namespace

int create_tenant_blocks(Tenant& t, uint64_t mem_quota_bytes, uint32_t initial_gate, uint64_t now_ns) {
  void* gp = nullptr;
  void* cp = nullptr;
  const int grant_fd = make_block("gpuos-grants", sizeof(gpuos_grant_block),
                                  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL, &gp);
  if (grant_fd < 0) return grant_fd;
  const int control_fd =
      make_block("gpuos-tenant", sizeof(gpuos_control_block), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, &cp);
  if (control_fd < 0) {
    munmap(gp, sizeof(gpuos_grant_block));
    close(grant_fd);
    return control_fd;
  }
  auto* g = static_cast<gpuos_grant_block*>(gp);
  g->magic = GPUOS_ABI_MAGIC;
  g->abi_version = GPUOS_ABI_VERSION;
  g->size = sizeof(gpuos_grant_block);
  g->tenant_id = t.id;
  g->tenant_class = t.tenant_class;
  g->mem_quota_bytes = mem_quota_bytes;
  g->daemon_heartbeat_ns = now_ns;  // its lease starts now
  std::atomic_ref<uint32_t>(g->daemon_alive).store(1, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(g->gate_closed_devices)
      .store(initial_gate == GPUOS_GATE_CLOSED ? ~0u : 0u, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(g->gate).store(initial_gate, std::memory_order_release);
  auto* cb = static_cast<gpuos_control_block*>(cp);
  cb->magic = GPUOS_ABI_MAGIC;
  cb->abi_version = GPUOS_ABI_VERSION;
  cb->size = sizeof(gpuos_control_block);
  cb->tenant_id = t.id;
  t.grant_fd = grant_fd;
  t.control_fd = control_fd;
  t.grants = g;
  t.cb = cb;
  return 0;
}

void destroy_tenant_blocks(Tenant& t) {
  if (t.grants != nullptr) munmap(t.grants, sizeof(gpuos_grant_block));
  if (t.cb != nullptr) munmap(t.cb, sizeof(gpuos_control_block));
  if (t.grant_fd >= 0) close(t.grant_fd);
  if (t.control_fd >= 0) close(t.control_fd);
  t.grants = nullptr;
  t.cb = nullptr;
  t.grant_fd = t.control_fd = -1;
}

void futex_wake_all(uint32_t* word) {
  // Shared (not FUTEX_PRIVATE_FLAG): tenants wait on the same page through their own mapping.
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void write_gate(gpuos_grant_block* g, uint32_t gate, uint32_t closed_ordinals) {
  const uint32_t closed = gate == GPUOS_GATE_CLOSED ? ~0u : gate == GPUOS_GATE_PARTIAL ? closed_ordinals : 0u;
  std::atomic_ref<uint32_t> devices(g->gate_closed_devices);
  std::atomic_ref<uint32_t> word(g->gate);
  if (devices.load(std::memory_order_relaxed) == closed && word.load(std::memory_order_relaxed) == gate) return;
  std::atomic_ref<uint32_t>(g->grant_epoch).fetch_add(1, std::memory_order_relaxed);
  devices.store(closed, std::memory_order_release);
  word.store(gate, std::memory_order_release);
  futex_wake_all(&g->gate);
  futex_wake_all(&g->gate_closed_devices);
}

void publish_gate(Tenant& t, uint64_t now) {
  const uint32_t word = t.gate.word();
  // The closed devices before and after (gpuosd's own words: the tenant cannot write them).
  auto closed_of = [](uint32_t gate, uint32_t ordinals) {
    return gate == GPUOS_GATE_CLOSED ? ~0u : gate == GPUOS_GATE_PARTIAL ? ordinals : 0u;
  };
  const uint32_t before = closed_of(load(t.grants->gate), load(t.grants->gate_closed_devices));
  const bool closing = (closed_of(word, t.gate.closed_ordinals) & ~before) != 0;
  if (closing) {
    // Closing: what it launched while open may still run (a long kernel); the usage check does not
    // count that against it while this very busy period lasts (verify_engine.cc).
    t.verify.inflight_at_close = t.cb != nullptr && load(t.cb->busy) == 1;
    t.verify.close_transitions = t.cb != nullptr ? load(t.cb->busy_transitions) : 0;
    t.verify.inflight_since_ns = 0;
    // ... and, where its busy word cannot say (untracked work), when it last launched before now.
    const uint64_t n = t.cb != nullptr ? load(t.cb->launches) + load(t.cb->graph_launches) : 0;
    t.verify.untracked_at_close = t.cb != nullptr && load(t.cb->untracked_work) != 0;
    t.verify.close_launch_ns = n != t.verify.round_launches ? UINT64_MAX : t.verify.launch_seen_ns;
  }
  // The time it is closed on its GPUs (as the usage check counts them: gpuosd's indices).
  note_closed_span(&t.verify, word == GPUOS_GATE_CLOSED ? ~0ull : word == GPUOS_GATE_PARTIAL ? t.gate.closed_gpus : 0,
                   closing, now);
  write_gate(t.grants, word, t.gate.closed_ordinals);
}

bool read_shape_samples(const gpuos_control_block& cb, std::vector<ShapeSamples>* out) {
  auto& mutable_cb = const_cast<gpuos_control_block&>(cb);  // atomic_ref needs a non-const object
  for (int attempt = 0; attempt < 3; ++attempt) {
    const uint32_t seq = std::atomic_ref<uint32_t>(mutable_cb.space_sample_seq).load(std::memory_order_acquire);
    if (seq & 1u) continue;
    gpuos_shape_latency copy[GPUOS_SPACE_SHAPES];
    uint32_t blocks[GPUOS_SPACE_SHAPES];
    for (int i = 0; i < GPUOS_SPACE_SHAPES; ++i) {
      gpuos_shape_latency& src = mutable_cb.space_shapes[i];
      blocks[i] = std::atomic_ref<uint32_t>(mutable_cb.space_shape_blocks[i]).load(std::memory_order_relaxed);
      copy[i].key = std::atomic_ref<uint64_t>(src.key).load(std::memory_order_relaxed);
      copy[i].launches = std::atomic_ref<uint64_t>(src.launches).load(std::memory_order_relaxed);
      for (int j = 0; j < GPUOS_SPACE_POINTS; ++j) {
        copy[i].points[j].sms = std::atomic_ref<uint32_t>(src.points[j].sms).load(std::memory_order_relaxed);
        copy[i].points[j].count = std::atomic_ref<uint32_t>(src.points[j].count).load(std::memory_order_relaxed);
        copy[i].points[j].sum_ns = std::atomic_ref<uint64_t>(src.points[j].sum_ns).load(std::memory_order_relaxed);
      }
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (std::atomic_ref<uint32_t>(mutable_cb.space_sample_seq).load(std::memory_order_relaxed) != seq) continue;
    out->clear();
    for (int i = 0; i < GPUOS_SPACE_SHAPES; ++i) {
      const gpuos_shape_latency& s = copy[i];
      if (s.key == 0) continue;
      ShapeSamples shape{s.key, s.launches, {}, blocks[i]};
      for (const gpuos_latency_point& p : s.points) {
        if (p.sms != 0 && p.count != 0) {
          shape.points.push_back(LatencyPoint{p.sms, p.count, static_cast<double>(p.sum_ns) / p.count});
        }
      }
      out->push_back(std::move(shape));
    }
    return true;
  }
  return false;
}

}  // namespace gpuos::daemon
