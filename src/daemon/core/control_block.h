// SPDX-License-Identifier: Apache-2.0
// The daemon's side of a tenant's control block (include/gpuos/abi.h): making one, writing the
// words gpuosd owns, reading the tenant's samples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/tenant.h"
#include "slots/space.h"

namespace gpuos::daemon {

// Creates t's two blocks (t.grants, t.cb and their fds) for t.id and t.tenant_class, initialised:
// quota, gate `initial_gate`, daemon_alive 1, the heartbeat `now_ns` (its lease starts then); the
// grant block sealed with F_SEAL_FUTURE_WRITE. Returns 0, or -errno with t untouched.
int create_tenant_blocks(Tenant& t, uint64_t mem_quota_bytes, uint32_t initial_gate, uint64_t now_ns);
// Unmaps and closes both (the tenant's own mappings stay valid).
void destroy_tenant_blocks(Tenant& t);

// Wakes every thread of every tenant waiting on `word` (shared futex: each maps the page itself).
void futex_wake_all(uint32_t* word);

// Stores `gate` and gate_closed_devices (that word first, release: 0 for OPEN, all bits for CLOSED,
// `closed_ordinals` for PARTIAL); bumps grant_epoch and wakes the waiters of both; nothing if the
// words hold them already.
void write_gate(gpuos_grant_block* g, uint32_t gate, uint32_t closed_ordinals = 0);
// Writes the tenant's gate (GateState::word). Where it closes on a device it was open on, notes
// whether the tenant had work in flight then (Tenant::verify_inflight_at_close), and notes the time
// its gate was closed (VerifyState::closed_spans; `now`: CLOCK_MONOTONIC ns).
void publish_gate(Tenant& t, uint64_t now);

// Reads a tenant's latency samples (seqlock; false if it was being written and a retry found it
// busy again).
bool read_shape_samples(const gpuos_control_block& cb, std::vector<slots::ShapeSamples>* out);

}  // namespace gpuos::daemon
