// SPDX-License-Identifier: Apache-2.0
#include "interpose/shape_table.h"

#include <atomic>

namespace gpuos::interpose {
namespace {

void set64(uint64_t& w, uint64_t v) { std::atomic_ref<uint64_t>(w).store(v, std::memory_order_relaxed); }
void set32(uint32_t& w, uint32_t v) { std::atomic_ref<uint32_t>(w).store(v, std::memory_order_relaxed); }

// The point a new SM count takes: an unused one, else the one with the fewest samples that is
// neither the largest nor the smallest SM count. Those two are kept: the largest is the figure the
// tenant's latency is judged against (its default partition, or the whole GPU), the smallest the
// evidence of the size that proved too small; with them gone the sizer would judge against a
// model's extrapolation.
gpuos_latency_point* evictable_point(gpuos_shape_latency* shape) {
  gpuos_latency_point* largest = nullptr;
  gpuos_latency_point* smallest = nullptr;
  for (gpuos_latency_point& p : shape->points) {
    if (p.sms == 0) return &p;
    if (largest == nullptr || p.sms > largest->sms) largest = &p;
    if (smallest == nullptr || p.sms < smallest->sms) smallest = &p;
  }
  gpuos_latency_point* fewest = nullptr;
  for (gpuos_latency_point& p : shape->points) {
    if (&p == largest || &p == smallest) continue;
    if (fewest == nullptr || p.count < fewest->count) fewest = &p;
  }
  return fewest != nullptr ? fewest : &shape->points[0];
}

}  // namespace

void shape_table_add(gpuos_control_block* cb, uint64_t key, uint32_t blocks, uint32_t sms, uint64_t ns) {
  std::atomic_ref<uint32_t> seq(cb->space_sample_seq);
  const uint32_t s = seq.load(std::memory_order_relaxed);
  seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  gpuos_shape_latency* slot = nullptr;
  gpuos_shape_latency* least = nullptr;  // an unused slot, else the least frequent shape
  for (gpuos_shape_latency& e : cb->space_shapes) {
    if (e.key == key) {
      slot = &e;
      break;
    }
    const uint64_t rank = e.key == 0 ? 0 : e.launches;
    if (least == nullptr || rank < (least->key == 0 ? 0 : least->launches)) least = &e;
  }
  if (slot == nullptr) {
    slot = least;
    set64(slot->key, key);
    set64(slot->launches, 0);
    for (gpuos_latency_point& p : slot->points) {
      set32(p.sms, 0);
      set32(p.count, 0);
      set64(p.sum_ns, 0);
    }
  }
  set32(cb->space_shape_blocks[slot - cb->space_shapes], blocks);
  set64(slot->launches, slot->launches + 1);
  gpuos_latency_point* point = nullptr;
  for (gpuos_latency_point& p : slot->points) {
    if (p.sms == sms) {
      point = &p;
      break;
    }
  }
  if (point == nullptr) {
    point = evictable_point(slot);
    set32(point->sms, sms);
    set32(point->count, 0);
    set64(point->sum_ns, 0);
    // The first timed launch of a shape at a size is left out: it may include loading the kernel
    // into that partition's context (lazy loading), milliseconds that are no part of its latency.
  } else if (point->count < UINT32_MAX) {
    set32(point->count, point->count + 1);
    set64(point->sum_ns, point->sum_ns + ns);
  }
  seq.store(s + 2, std::memory_order_release);
  std::atomic_ref<uint64_t>(cb->space_samples).fetch_add(1, std::memory_order_relaxed);
}

void timing_ring_add(gpuos_control_block* cb, uint64_t key, uint64_t ns) {
  std::atomic_ref<uint64_t> head(cb->timing_head);
  const uint64_t h = head.load(std::memory_order_relaxed);
  gpuos_timed_launch& e = cb->timing_ring[h % GPUOS_TIMING_RING];
  std::atomic_ref<uint64_t>(e.key).store(key, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(e.ns).store(ns, std::memory_order_relaxed);
  head.store(h + 1, std::memory_order_release);
}

}  // namespace gpuos::interpose
