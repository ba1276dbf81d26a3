// The daemon's side of a tenant's control block (include/gpuos/abi.h): making one, writing the
// words gpuosd owns, reading the tenant's samples.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/tenant.h"
#include "slots/space.h"

namespace gpuos::daemon {

// Creates a sealed memfd holding an initialised control block (gate `initial_gate`, daemon_alive 1)
// and maps it. Returns the fd, or -errno with *cb untouched.
int create_control_block(uint32_t tenant_id, uint32_t tenant_class, uint64_t mem_quota_bytes,
                         uint32_t initial_gate, gpuos_control_block** cb);

// Wakes every thread of every tenant waiting on `word` (shared futex: each maps the page itself).
void futex_wake_all(uint32_t* word);

// Stores `gate` (release), bumps grant_epoch and wakes waiters; nothing if the word holds it already.
void write_gate(gpuos_control_block* cb, uint32_t gate);
// Writes the tenant's effective gate (GateState::effective).
inline void publish_gate(Tenant& t) { write_gate(t.cb, t.gate.effective()); }

// Reads a tenant's latency samples (seqlock; false if it was being written and a retry found it
// busy again).
bool read_shape_samples(const gpuos_control_block& cb, std::vector<slots::ShapeSamples>* out);

}  // namespace gpuos::daemon
