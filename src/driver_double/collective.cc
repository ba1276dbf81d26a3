// SPDX-License-Identifier: Apache-2.0
// gpuos_collective: a model of an NCCL collective kernel, for multi-GPU tests on the double.
//
// An NCCL kernel spins on its GPU until the kernels of every other rank have arrived, so a rank
// that is late (here: a best-effort rank held at gpuos's gate) stalls its peers on their GPUs. Each
// rank's kernel, once it runs on its SMs, counts itself in at its group's rendezvous in the shared
// segment (Segment::coll, under Segment::mu) and keeps its SMs until every rank of its round has
// arrived; then it does its fixed work. A rank is a process on one simulated GPU; its k-th
// collective of a group is the group's round k.
//
// Nothing here can hang a test for ever: a rank that waits longer than
// GPUOS_SIM_COLLECTIVE_TIMEOUT_S fails with CUDA_ERROR_LAUNCH_TIMEOUT (sticky, as a kernel killed
// by a watchdog is) and breaks the group, and a rank that died before arriving (its pid gone)
// breaks it too: every rank waiting in a broken group, or arriving later, fails with
// CUDA_ERROR_LAUNCH_FAILED, until all of the group's processes have exited and the entry is freed.
#include <unistd.h>

#include "driver_double/internal.h"
#include "driver_double/segment.h"

namespace dd {
namespace {

constexpr int64_t kDeadCheckNs = 50'000'000;  // how often a waiting rank looks for dead peers

bool all_dead(const CollGroup& g) {
  for (uint32_t i = 0; i < g.members; ++i)
    if (!pid_dead(g.member[i].pid)) return false;
  return true;
}

// Under s->mu: the entry of group `id`, made if needed; entries whose processes all exited are
// freed first (so a group id can be used again by new processes). Null when the table is full.
CollGroup* find_group(Segment* s, uint64_t id, uint32_t ranks) {
  for (auto& g : s->coll)
    if (g.used != 0 && all_dead(g)) g.used = 0;
  for (auto& g : s->coll)
    if (g.used != 0 && g.id == id) return &g;
  for (auto& g : s->coll) {
    if (g.used != 0) continue;
    g = CollGroup{};
    g.used = 1;
    g.id = id;
    g.ranks = ranks;
    return &g;
  }
  return nullptr;
}

// Under s->mu: counts this process's rank on simulated GPU pdev in; its round in *round.
CUresult arrive(Segment* s, int pdev, uint64_t id, uint32_t ranks, CollGroup** out, uint64_t* round) {
  CollGroup* g = find_group(s, id, ranks);
  if (g == nullptr) return CUDA_ERROR_LAUNCH_FAILED;  // kCollGroups groups alive at once
  const int32_t me = getpid();
  CollMember* m = nullptr;
  for (uint32_t i = 0; i < g->members && m == nullptr; ++i)
    if (g->member[i].pid == me && g->member[i].dev == pdev) m = &g->member[i];
  if (m == nullptr && g->members < g->ranks) {
    m = &g->member[g->members++];
    *m = CollMember{me, pdev, 0};
  }
  // Ranks that disagree on the group's size, or one rank too many: no round could ever complete.
  if (g->broken != 0 || g->ranks != ranks || m == nullptr) {
    g->broken = 1;
    return CUDA_ERROR_LAUNCH_FAILED;
  }
  *out = g;
  *round = m->arrivals++;
  return CUDA_SUCCESS;
}

enum class Poll { kWait, kReleased, kBroken };

// Under the segment's mutex: has every rank arrived at `round`? look_for_dead: a member that has
// not and whose process is gone breaks the group (it never will).
Poll poll(CollGroup* g, uint64_t round, bool look_for_dead) {
  if (g->broken != 0) return Poll::kBroken;
  uint32_t arrived = 0;
  for (uint32_t i = 0; i < g->members; ++i) {
    if (g->member[i].arrivals > round) {
      ++arrived;
    } else if (look_for_dead && pid_dead(g->member[i].pid)) {
      g->broken = 1;
      return Poll::kBroken;
    }
  }
  return arrived == g->ranks ? Poll::kReleased : Poll::kWait;
}

}  // namespace

CUresult collective_run(int dev, uint64_t slots, uint64_t group, uint32_t ranks, uint64_t work_ns,
                        const std::function<void(const CollectiveTimes&)>& body) {
  Segment* s = shared_segment();
  const int pdev = physical_device(dev);
  CUresult result = CUDA_SUCCESS;
  bool counted_in = false;
  CollGroup* g = nullptr;
  CollectiveTimes t;
  int64_t next_dead_check = 0;
  // The first call comes with the SMs held: the kernel has started running.
  engine_spin(dev, slots, [&] {
    lock_robust(&s->mu);
    const int64_t now = now_ns();
    if (!counted_in) {
      counted_in = true;
      result = arrive(s, pdev, group, ranks, &g, &t.round);
      t.arrive_ns = now;
      next_dead_check = now + kDeadCheckNs;
    }
    bool spin = false;
    if (result == CUDA_SUCCESS) {
      const bool look = now >= next_dead_check;
      if (look) next_dead_check = now + kDeadCheckNs;
      switch (poll(g, t.round, look)) {
        case Poll::kReleased: t.release_ns = now; break;
        case Poll::kBroken: result = CUDA_ERROR_LAUNCH_FAILED; break;
        case Poll::kWait:
          if (static_cast<uint64_t>(now - t.arrive_ns) < config().collective_timeout_ns) {
            spin = true;
          } else {
            g->broken = 1;  // the others would wait for this rank's next round in vain
            result = CUDA_ERROR_LAUNCH_TIMEOUT;
          }
          break;
      }
    }
    pthread_mutex_unlock(&s->mu);
    return spin;
  });
  if (result != CUDA_SUCCESS) return result;
  engine_run(dev, slots, work_ns, [&] { body(t); });
  return CUDA_SUCCESS;
}

}  // namespace dd
