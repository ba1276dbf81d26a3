// SPDX-License-Identifier: Apache-2.0
// Graph variants (spatial.h): a graph's kernel nodes run in the context they were made in, whatever
// stream launches it, so a graph launch is placed by launching a variant of it whose kernel nodes
// name the partition's green context. The variants are made from a private copy of the graph it was
// instantiated from (note_graph_instantiated), one per (executable graph, device, mask), found
// through a per-thread cache in front of the registry.
#pragma once

#include "interpose/spatial_registry.h"

namespace gpuos::interpose::spatial {

// The variant of exec for partition (dev, mask), its SMs and kernels, or null (made on first use).
CUgraphExec graph_variant(const GpuosDriverTable& d, gpuos_control_block* cb, CUgraphExec exec, int dev, uint64_t mask,
                          uint32_t* sms, uint32_t* kernels);

// The kernel nodes of an instantiated graph (0 = not known).
uint32_t kernels_of(CUgraphExec exec);

// What make_variant needs, taken under the registry lock: a clone of exec's source graph (null if
// it has none or cannot be cloned), its flags and the version of the source it was cloned from.
struct VariantSource {
  CUgraph copy = nullptr;
  unsigned long long flags = 0;
  uint64_t version = 0;
};
VariantSource clone_source(const GpuosDriverTable& d, const Registry& r, CUgraphExec exec);

// A variant of a graph for partition `green`, made from `copy` (a clone of its source, which this
// consumes): its kernel nodes name the partition's context. Null when it cannot be placed. Slow
// (instantiation): called without the registry lock.
CUgraphExec make_variant(const GpuosDriverTable& d, gpuos_control_block* cb, CUgraph copy, unsigned long long flags,
                         CUgreenCtx green);

// Files a variant of exec made from source `version` (registry lock held) and returns the one
// filed. A variant whose source was updated or destroyed meanwhile, or that another thread beat
// to it, is destroyed (then the other's is returned, or null).
CUgraphExec file_variant(const GpuosDriverTable& d, Registry& r, CUgraphExec exec, int dev, uint64_t mask,
                         uint64_t version, CUgraphExec made);

}  // namespace gpuos::interpose::spatial
