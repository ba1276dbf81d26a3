// SPDX-License-Identifier: Apache-2.0
// The space slot: which SMs each tenant of a spatial domain may use, per GPU (partitions,
// lending, right-sizing). See slot.h for the hook table all slots share.
//
// A GPU's SMs are split into groups of group_sms (8 on Hopper), as the driver's
// cuDevSmResourceSplitByCount makes them (the last group taking the remainder); a partition is a
// set of groups, a bit mask (bit i = group i). The core writes each tenant's masks into its control
// block (by the tenant's device ordinals) and the interposer places every launch on a green context
// of exactly those SMs. Mask 0 = unconfined. The core asks only while a live tenant is in a domain.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "gpuos/abi.h"
#include "slots/slot.h"

namespace gpuos::slots {

// The mean duration of one launch shape at one SM count (the interposer's timed launches).
struct LatencyPoint {
  uint32_t sms = 0;
  uint64_t count = 0;
  double mean_ns = 0;
};

struct ShapeSamples {
  uint64_t key = 0;
  uint64_t launches = 0;  // timed launches of the shape (all sizes)
  std::vector<LatencyPoint> points;
  uint32_t blocks = 0;    // blocks in its grid; 0 = not known (a graph)
};

struct SpaceGpu {
  uint32_t index = 0;
  uint32_t sm_count = 0;
  // SMs of each group as the driver splits the device (the last group takes the remainder); empty:
  // sm_count / group_sms groups. The H200's driver makes 15 groups of 8 and a remainder of 12 of
  // its 132 SMs, not 16 and 4, so the daemon asks the driver.
  std::vector<uint32_t> group_sizes;
};

using SpaceMasks = std::array<uint64_t, GPUOS_MAX_DEVICES>;

// Number of partition groups of a GPU (at most 64: one mask word).
uint32_t space_groups(const SpaceGpu& gpu, uint32_t group_sms);
// SMs of `mask` on that GPU (the last group takes the remainder).
uint32_t space_mask_sms(uint64_t mask, const SpaceGpu& gpu, uint32_t group_sms);
// The `groups` highest groups of `mask` (all of it when it has no more, or groups is 0; 0 stays 0:
// unconfined). A capped best-effort tenant keeps the groups farthest from the guaranteed tenants',
// which the planner gives from group 0 upward.
uint64_t space_keep_highest(uint64_t mask, uint32_t groups);

// What the space slot sees of a live tenant.
struct SpaceTenant {
  uint32_t id = 0;
  std::string name;
  std::string domain;  // "" = not in a spatial domain (never confined)
  uint32_t tenant_class = GPUOS_CLASS_BEST_EFFORT;
  int32_t priority = 0;
  uint32_t weight = 100;
  uint32_t asked_sms = 0;  // SMs it asked for (gpuos run --sms); 0 = none
  uint32_t max_slowdown_permille = 0;  // its latency budget (guaranteed tenants; 0 = none)
  bool busy = false;       // busy or waiting words
  uint32_t gpus = 0;       // bit g: holds memory or launched on GPU g (0: neither yet: on every GPU)
  uint32_t home_gpu = 0;   // the GPU of most of its memory, else the first it launched on, else 0
  // Its timed launches (read only for tenants in a domain): per-shape samples, and false when they
  // were being written and could not be read this time (keep what was read before).
  bool samples_read = false;
  std::vector<ShapeSamples> shapes;
  uint64_t samples = 0;        // timed launches so far
  uint64_t timed_kernels = 0;  // kernels in them (a graph counts its kernels)
  uint64_t timed_ns = 0;       // their total duration
};

struct SpaceView {
  uint64_t now_ns = 0;
  Event event = Event::kTick;
  uint32_t tenant_id = 0;
  uint32_t group_sms = 8;
  std::vector<SpaceGpu> gpus;
  std::vector<SpaceTenant> tenants;  // every live tenant, in id order
};

// One tenant's partition, and what `gpuos ps` shows of its right-sizing.
struct SpaceGrant {
  uint32_t id = 0;
  SpaceMasks masks{};       // per GPU index
  uint32_t sized_sms = 0;   // right-sized to this many SMs (0: not sized)
  uint32_t default_sms = 0; // ... of its default partition
  double sized_latency = 0; // its latency there over that at the default (0: not measured)
};

struct SpaceActions {
  std::vector<SpaceGrant> grants;  // tenants of a domain not named are unconfined
  uint64_t next_ns = 0;            // decide again then (absolute); 0 = at the next event
};

class SpacePolicy : public Slot<SpaceView, SpaceActions> {};

}  // namespace gpuos::slots
