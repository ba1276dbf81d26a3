// Spatial placement of a tenant's launches (spatial sharing, gpuos run --space): gpuosd gives each
// tenant of a spatial domain a set of SM groups per device (control block space_mask); every kernel
// or graph launch then runs on a stream of a green context that holds exactly those SMs.
//
// The application's own streams are left alone. A placed launch goes to a partition stream that
// belongs to (application stream, mask) and is joined to the application stream in both
// directions with events:
//     record A on app stream; partition stream waits for A; launch on partition stream;
//     record B on partition stream; app stream waits for B.
// So the launch starts after everything issued before it on the app stream and everything issued
// after it there (copies, events, synchronisation, the next launch, the legacy stream's implicit
// barriers) starts after it ends: stream order is kept exactly and nothing else needs to know.
// A new mask takes effect at the next launch (a kernel boundary): kernels already running finish
// where they started, later ones go to the new partition, still in stream order.
//
// Only launches in a device's primary context are placed (green contexts share the primary
// context's memory, not that of contexts the application created itself); captured launches are
// never placed (they are recorded into a graph; the graph's launch is placed as one unit). A launch
// that cannot be placed runs unconfined on its own stream and counts in space_failures.
#pragma once

#include "gpuos/abi.h"
#include "gpuos/driver_api.h"

namespace gpuos::interpose {

// A launch redirected to a partition stream: what finish_placement needs to join it back.
struct Placement {
  CUstream target = nullptr;  // the stream to launch on (the app's own when not placed)
  CUstream origin = nullptr;  // the app's stream
  CUevent back = nullptr;     // recorded on target after the launch; null when not placed
  bool ptsz = false;
};

// Chooses where a launch on `stream` goes (ptsz: it came through a _ptsz entry point). Call only
// when cb->space_enabled is set. Never fails: on any error the launch stays on `stream`.
Placement place_launch(const GpuosDriverTable& d, gpuos_control_block* cb, CUstream stream, bool ptsz);

// After the launch call: makes the app stream wait for the placed launch (if it was submitted).
void finish_placement(const GpuosDriverTable& d, const Placement& p, bool submitted);

}  // namespace gpuos::interpose
