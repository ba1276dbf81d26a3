// SPDX-License-Identifier: Apache-2.0
#include "interpose/carry_over.h"

namespace gpuos::interpose {
namespace {

// The counters of the launch path (fast_path.h) and of the context and stream hooks
// (hooks_context.cc), which have no source file of their own that could hold their hook.
void carry_launch_counters(gpuos_control_block* from, gpuos_control_block* to) {
  carry_add(from->launches, to->launches);
  carry_add(from->graph_launches, to->graph_launches);
  carry_add(from->captured_launches, to->captured_launches);
  carry_add(from->contexts_created, to->contexts_created);
  carry_add(from->streams_created, to->streams_created);
}

// Adding a feature that keeps state in the control block: define its CarryOver beside the code that
// writes the words, declare it in carry_over.h and list it here.
constinit const CarryOver* const kHooks[] = {
    &kLaunchCountersCarryOver, &kGateCarryOver,    &kMemoryCarryOver,   &kActivityCarryOver,
    &kSpatialCarryOver,        &kSwapCarryOver,    &kKvCarryOver,    &kDeviceMapCarryOver,
};

}  // namespace

constinit const CarryOver kLaunchCountersCarryOver{"launch counters", nullptr, &carry_launch_counters};

std::span<const CarryOver* const> carry_over_hooks() { return kHooks; }

}  // namespace gpuos::interpose
