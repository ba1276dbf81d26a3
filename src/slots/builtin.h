// SPDX-License-Identifier: Apache-2.0
// The built-in policies, one per slot: what runs when a config chooses nothing else, and what
// gpuosd's core falls back to when a slot's policy fails (slot.h). Each is trivially safe and never
// fails; they live beside the slots' interface so that the core needs no policy of policies/.
//  - "open" (time gate): admits everything as asked; every gate open.
//  - "unconfined" (space): no partitions: every spatial tenant uses the whole GPU.
//  - "resident" (memory): never swaps out; a request for room is refused (the allocation fails, as
//    without oversubscription); memory already out comes back, one tenant at a time, when it fits.
#pragma once

#include <memory>

#include "slots/memory.h"
#include "slots/space.h"
#include "slots/time_gate.h"

namespace gpuos::slots {

std::unique_ptr<TimeGate> builtin_time_gate();   // "open"
std::unique_ptr<SpacePolicy> builtin_space();    // "unconfined"
std::unique_ptr<MemoryPolicy> builtin_memory();  // "resident"

}  // namespace gpuos::slots
