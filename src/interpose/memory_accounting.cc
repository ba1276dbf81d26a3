#include "interpose/memory_accounting.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace gpuos::interpose {
namespace {

struct Allocation {
  std::size_t bytes;
  int device;
};

struct Tables {
  std::mutex mu;
  std::unordered_map<uint64_t, Allocation> pointers;
  std::unordered_map<uint64_t, Allocation> handles;
};

Tables& tables() {
  static Tables* t = new Tables();  // never destroyed: frees may arrive during process exit
  return *t;
}

std::unordered_map<uint64_t, Allocation>& table(Tables& t, AllocKind kind) {
  return kind == AllocKind::kPointer ? t.pointers : t.handles;
}

int clamp_device(int device) { return device >= 0 && device < GPUOS_MAX_DEVICES ? device : 0; }

}  // namespace

bool reserve_bytes(gpuos_control_block* cb, std::size_t bytes, bool enforce_quota) {
  const uint64_t quota =
      enforce_quota ? std::atomic_ref<uint64_t>(cb->mem_quota_bytes).load(std::memory_order_relaxed) : 0;
  std::atomic_ref<uint64_t> used(cb->mem_used_bytes);
  uint64_t now = used.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    if (bytes > UINT64_MAX - now) return false;
    next = now + bytes;
    if (quota != 0 && next > quota) return false;
  } while (!used.compare_exchange_weak(now, next, std::memory_order_relaxed));
  std::atomic_ref<uint64_t> peak(cb->mem_peak_bytes);
  uint64_t old = peak.load(std::memory_order_relaxed);
  while (next > old && !peak.compare_exchange_weak(old, next, std::memory_order_relaxed)) {
  }
  return true;
}

void cancel_bytes(gpuos_control_block* cb, std::size_t bytes) {
  std::atomic_ref<uint64_t>(cb->mem_used_bytes).fetch_sub(bytes, std::memory_order_relaxed);
}

void commit_alloc(gpuos_control_block* cb, AllocKind kind, uint64_t key, std::size_t bytes,
                  int device) {
  device = clamp_device(device);
  Tables& t = tables();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    table(t, kind)[key] = Allocation{bytes, device};
  }
  std::atomic_ref<uint64_t>(cb->alloc_calls).fetch_add(1, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(cb->mem_used_per_device[device]).fetch_add(bytes, std::memory_order_relaxed);
}

void account_alloc_failure(gpuos_control_block* cb) {
  std::atomic_ref<uint64_t>(cb->alloc_calls).fetch_add(1, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(cb->alloc_failures).fetch_add(1, std::memory_order_relaxed);
}

void account_free(gpuos_control_block* cb, AllocKind kind, uint64_t key) {
  Allocation a{0, 0};
  bool found = false;
  Tables& t = tables();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    auto& m = table(t, kind);
    auto it = m.find(key);
    if (it != m.end()) {
      a = it->second;
      m.erase(it);
      found = true;
    }
  }
  std::atomic_ref<uint64_t>(cb->free_calls).fetch_add(1, std::memory_order_relaxed);
  if (!found) {
    std::atomic_ref<uint64_t>(cb->untracked_frees).fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::atomic_ref<uint64_t>(cb->mem_used_per_device[a.device]).fetch_sub(a.bytes, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(cb->mem_used_bytes).fetch_sub(a.bytes, std::memory_order_relaxed);
}

}  // namespace gpuos::interpose
