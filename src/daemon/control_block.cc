#include "daemon/control_block.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <type_traits>

namespace gpuos::daemon {

using slots::LatencyPoint;
using slots::ShapeSamples;

int create_control_block(uint32_t tenant_id, uint32_t tenant_class, uint64_t mem_quota_bytes,
                         uint32_t initial_gate, gpuos_control_block** out) {
  int fd = memfd_create("gpuos-tenant", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -errno;
  if (ftruncate(fd, sizeof(gpuos_control_block)) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  void* p = mmap(nullptr, sizeof(gpuos_control_block), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return -e;
  }
  // A tenant must not be able to shrink the file under the daemon's mapping (SIGBUS) or grow it.
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    munmap(p, sizeof(gpuos_control_block));
    close(fd);
    return -e;
  }
  auto* cb = static_cast<gpuos_control_block*>(p);  // zero-filled by ftruncate
  cb->magic = GPUOS_ABI_MAGIC;
  cb->abi_version = GPUOS_ABI_VERSION;
  cb->size = sizeof(gpuos_control_block);
  cb->tenant_id = tenant_id;
  cb->tenant_class = tenant_class;
  cb->mem_quota_bytes = mem_quota_bytes;
  std::atomic_ref<uint32_t>(cb->daemon_alive).store(1, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(cb->gate).store(initial_gate, std::memory_order_release);
  *out = cb;
  return fd;
}

void futex_wake_all(uint32_t* word) {
  // Shared (not FUTEX_PRIVATE_FLAG): tenants wait on the same page through their own mapping.
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void write_gate(gpuos_control_block* cb, uint32_t gate) {
  if (std::atomic_ref<uint32_t>(cb->gate).load(std::memory_order_relaxed) == gate) return;
  std::atomic_ref<uint32_t>(cb->grant_epoch).fetch_add(1, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(cb->gate).store(gate, std::memory_order_release);
  futex_wake_all(&cb->gate);
}

uint32_t restore_granted_words(Tenant& t) {
  gpuos_control_block* cb = t.cb;
  uint32_t bits = 0;
  // Puts `want` back into `word` if it differs; true if it did.
  auto keep = [](auto& word, auto want) {
    using T = std::remove_reference_t<decltype(word)>;
    std::atomic_ref<T> w(word);
    if (w.load(std::memory_order_relaxed) == static_cast<T>(want)) return false;
    w.store(static_cast<T>(want), std::memory_order_release);
    return true;
  };
  const uint32_t gate = t.gate.effective();
  if (std::atomic_ref<uint32_t>(cb->gate).load(std::memory_order_relaxed) != gate) {
    write_gate(cb, gate);
    bits |= kTamperedGate;
  }
  // Every word is checked (no short cut): each one changed is put back.
  int memory = 0, admission = 0, masks = 0;
  memory += keep(cb->mem_quota_bytes, t.granted.quota_bytes);
  memory += keep(cb->mem_borrow_bytes, t.granted.borrow_bytes);
  if (memory != 0) bits |= kTamperedMemory;
  admission += keep(cb->tenant_class, t.granted.tenant_class);
  admission += keep(cb->max_inflight, t.granted.max_inflight);
  admission += keep(cb->idle_grace_us, t.granted.idle_grace_us);
  admission += keep(cb->tenant_id, t.id);
  if (admission != 0) bits |= kTamperedAdmission;
  for (uint32_t o = 0; o < GPUOS_MAX_DEVICES; ++o) masks += keep(cb->space_mask[o], t.space.masks[o]);
  if (masks) {
    std::atomic_ref<uint32_t>(cb->space_epoch).fetch_add(1, std::memory_order_release);
    bits |= kTamperedSpace;
  }
  return bits;
}

std::string tampered_names(uint32_t bits) {
  std::string out;
  const char* names[] = {"gate", "memory quota", "admission", "SM masks"};
  for (int i = 0; i < 4; ++i) {
    if (bits >> i & 1u) out += (out.empty() ? "" : ", ") + std::string(names[i]);
  }
  return out;
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
