// SPDX-License-Identifier: Apache-2.0
// The swap policy (memory slot "swap"): a pure function from what the tenants look like now to
// what to do next. The core carries it out (daemon/swap_engine.h).
#pragma once

#include <cstdint>
#include <vector>

#include "policies/kv/shrink_rules.h"
#include "slots/memory.h"

namespace gpuos::policies::swap {

using slots::SwapAction;
using slots::SwapParams;
using slots::SwapTenant;

// The swap policy. One swap at a time (they share the PCIe link, and each decision needs the
// previous one's outcome): nothing new while a command is pending. Only as much memory moves as
// is needed (plus a margin), so tenants that do not fit together trade the difference, not their
// whole footprint. Rules:
//  - A request for room is answered "retry" once memory was freed since it was made; otherwise a
//    victim moves out what the request needs (with a quota: what the requester may still
//    allocate). Without a victim it waits, unless it could never fit beside the memory that
//    cannot move (other tenants' unswappable bytes): then "refused" (the allocation fails).
//  - A swapped-out tenant that wants to run is swapped in when it fits, else a victim moves out
//    the difference first; the one out longest goes first (guaranteed tenants before the rest), so
//    a victim's memory does not come back before the tenant it made room for.
//  - A signalled tenant (a signal to act on, which it can only once gpuos lets its call return)
//    goes first, and its peers' quantum does not hold it back: stopping a swapped-out job with
//    SIGTERM or Ctrl-C takes a swap, not the rest of another tenant's quantum. It is no victim
//    itself while signalled (and gpuosd spares it for a quantum once it came back for its signal).
//  - Everything is per GPU: only a tenant on the beneficiary's GPU can make room there.
//  - Victims: swappable, with movable memory on the GPU, not the beneficiary; a best-effort tenant
//    never displaces a guaranteed one; peers (same class) only after the victim held its memory
//    for a quantum, unless it holds borrowed memory (beyond its quota): borrowers give it back
//    first, quantum or not. Then idle victims, then best-effort, then the one resident longest.
// KV pools (include/gpuos/kv.h) give memory back by shrinking before anyone is swapped:
//  - A request for room first waits for the KV targets on its GPU that are not met yet (kv_bytes
//    above the target) and not overdue. A donor past its deadline has the rest (kv_bytes - target,
//    plus the margin) moved out by a swap-out, if it is a victim this requester may have. Else the
//    need (as a swap would free it) is spread over the KV donors by the rule (kv/shrink_rules.h):
//    kSetKvTarget for each, with the deadline. Only when no donor can give does a victim swap.
//  - A target is raised once it held params.kv_hold_ns and nothing on its GPU wants memory (no
//    request for room, no swapped-out tenant waiting to come back): to kv_bytes plus its share of
//    the free memory less the margin, only if that is at least a margin above the old target (no
//    churn). It is lifted instead when that would not limit it: with a quota (guaranteed_bytes or
//    quota_left_bytes > 0) when its share covers what its quota still allows (quota_left_bytes);
//    with none when its share is at least what its pools hold (they could double).
struct KvSettings {
  kv::KvRule rule = kv::KvRule::kFair;
  uint32_t deadline_ms = 1000;  // put in each kSetKvTarget: the daemon sets the deadline from it
};
std::vector<SwapAction> plan_swaps(const std::vector<SwapTenant>& tenants, const SwapParams& params,
                                   uint64_t now_ns, const KvSettings& kv = {});

}  // namespace gpuos::policies::swap
