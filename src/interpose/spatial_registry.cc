// SPDX-License-Identifier: Apache-2.0
#include "interpose/spatial_registry.h"

#include <pthread.h>

#include <new>

#include "interpose/spatial.h"

namespace gpuos::interpose {
namespace spatial {
namespace {

Registry* g_registry = nullptr;

// A child of fork has only the forking thread: a lock another thread (the prefetch helper, a
// launching thread) held at the fork is never released there. The child cannot use the parent's
// CUDA contexts anyway; its lock must merely not hang it.
void registry_after_fork_in_child() {
  new (&g_registry->mu) std::mutex();
  new (&g_registry->sample_mu) std::mutex();
}

}  // namespace

Registry& registry() {
  static Registry* r = [] {
    g_registry = new Registry;
    pthread_atfork(nullptr, nullptr, &registry_after_fork_in_child);
    return g_registry;
  }();
  return *r;
}

}  // namespace spatial

std::mutex& TEST_registry_mutex() { return spatial::registry().mu; }

}  // namespace gpuos::interpose
