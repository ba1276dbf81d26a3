// The daemon's side of a tenant's control block (include/gpuos/abi.h): making one, writing the
// words gpuosd owns, reading the tenant's samples.
#pragma once

#include <cstdint>
#include <string>
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

// Puts back every word gpuosd owns that the tenant changed (gate, quota, borrow, class,
// max_inflight, idle grace, SM masks): the tenant maps the block writable, so these words are
// only as good as this check. Returns a bit per kind of word changed (kTampered*), 0 = none.
enum : uint32_t {
  kTamperedGate = 1u << 0,
  kTamperedMemory = 1u << 1,    // quota or borrow
  kTamperedAdmission = 1u << 2, // class, max_inflight, idle grace, id
  kTamperedSpace = 1u << 3,     // SM masks
};
uint32_t restore_granted_words(Tenant& t);
// "gate", "memory quota", ... for the bits of restore_granted_words.
std::string tampered_names(uint32_t bits);

// Reads a tenant's latency samples (seqlock; false if it was being written and a retry found it
// busy again).
bool read_shape_samples(const gpuos_control_block& cb, std::vector<slots::ShapeSamples>* out);

}  // namespace gpuos::daemon
