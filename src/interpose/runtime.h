// SPDX-License-Identifier: Apache-2.0
// Process-wide state of libgpuos.so inside a tenant: the real driver table, the tenant's
// registration with gpuosd and its control block. Everything here is set up lazily on the first
// governed driver call; nothing runs in a global constructor.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/clock.h"
#include "gpuos/abi.h"
#include "gpuos/driver_api.h"
#include "interpose/blocks.h"

namespace gpuos::interpose {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// printf-style line to stderr prefixed "gpuos[pid]: ", if `level` is enabled by GPUOS_LOG_LEVEL.
void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// The real driver, resolved once (thread-safe). Returns nullptr if no libcuda could be loaded;
// the reason has then been logged once.
const GpuosDriverTable* real_driver();

// The dlsym of the C library (not ours). Never null after the first call.
DlsymFn real_dlsym();

// The control block this process reports into; grants_of(it) is the grant block it obeys
// (blocks.h). Before registration it is null; after registration (or a decision to pass through)
// it is never null: when gpuosd is absent it points to process-local blocks whose gate is always
// open.
extern std::atomic<gpuos_control_block*> g_control;

// Registers with gpuosd if not done yet (thread-safe, idempotent) and returns the control block.
// Returns null only when the tenant must be refused (GPUOS_ON_NO_DAEMON=refuse and no daemon).
gpuos_control_block* ensure_registered();

// True when this process was refused by configuration; governed calls then fail with
// CUDA_ERROR_NOT_PERMITTED.
bool refused();

// The device a launch or copy of the calling thread goes to, as this process's device ordinal (its
// bit in the grant block's gate_closed_devices): its current context's device, as for every launch
// and copy (a kernel runs in the current context). Asked of the driver only when a gate is partial.
class LaunchDevice {
 public:
  int ordinal();  // -1: no current context, or a device not among the first GPUOS_MAX_DEVICES

 private:
  int ordinal_ = -2;  // not resolved yet
};

// Whether the gate lets a launch on `device` through: open, or partial and open on its device
// (device null, or its device unknown: a partial gate holds it as a closed one does). `gate` is the
// gate word as read.
bool gate_lets_through(const gpuos_grant_block* g, uint32_t gate, LaunchDevice* device);

// Blocks while the gate does not let a launch on `device` through (slow path of the launch gate;
// device null: until the gate is open on every device). Gives up waiting, and says so, when the gate
// no longer binds (gate_binds): a tenant keeps running on its last grant rather than hang. Returns
// true when it returned for that reason (the gate word may still say closed).
bool wait_at_gate(gpuos_control_block* cb, LaunchDevice* device = nullptr);
// Whether the grant block's closed gate holds this tenant: gpuosd did not say it exits
// (daemon_alive), renewed the lease within GPUOS_GATE_LEASE_NS, and its process is not known to be
// gone (daemon_gone). A lost connection alone is no release: the tenant can close it itself, and
// gpuosd governs it through its blocks all the same (issue #62). For a block a re-registration
// replaced, the current block's gate decides. The gate word is gpuosd's; this is the tenant's own
// bound.
bool gate_binds(const gpuos_control_block* cb);
// The connection to gpuosd is lost and gpuosd's process (SO_PEERCRED at registration) is gone.
// False when its pid is not visible here (another pid namespace): the lease then tells.
bool daemon_gone();

// Waits on a control-block word until it no longer holds `expected`, a wake-up, or timeout_ms.
// Shared (not private) futex: gpuosd wakes it through its own mapping of the same memfd.
// True when a signal handler interrupted the wait (EINTR): see note_signalled.
bool futex_wait(const uint32_t* word, uint32_t expected, long timeout_ms);
// The same with a timeout in ns (the pacing of a best-effort tenant waits fractions of a ms).
bool futex_wait_ns(const uint32_t* word, uint32_t expected, uint64_t timeout_ns);

// A wait of this tenant in gpuos was interrupted by a signal handler: the program has a signal to
// act on (SIGTERM, Ctrl-C; Python runs its handlers only once the call returns). Marks it in the
// control block (signalled) and wakes gpuosd, which then lets the tenant run soon.
void note_signalled(gpuos_control_block* cb);

// The connected control socket, or -1 when not registered with a daemon.
int daemon_socket();
// True when the control socket is gone (gpuosd exited or crashed) or was never there.
bool daemon_connection_lost();

// Called by the activity monitor thread about once a second (never from a governed call: it waits
// for those). If gpuosd went away, the tenant keeps running on its last grant (a closed gate is
// opened locally) and tries to register again; if only the connection is gone and gpuosd still
// renews the grant, its gate binds as before (no local swap-in either) and it tries to register
// again once its memory is resident. Once a daemon answers, the tenant moves to the new control
// block, and every feature carries its state over (carry_over.h) once no governed call uses the old
// block any more (quiescence.h).
void maintain_daemon_connection();

// Writes the UUID of each of this process's device ordinals into the control block (device_uuid,
// then device_count), so gpuosd can map its per-device words to GPUs. Needs an initialised driver;
// idempotent; does nothing if the driver cannot say.
void publish_devices(gpuos_control_block* cb);

// Count of stream captures begun and not yet ended in this process: a cheap hint that lets the
// launch path skip cuStreamIsCapturing when nothing is being captured.
extern std::atomic<int> g_active_captures;

}  // namespace gpuos::interpose
