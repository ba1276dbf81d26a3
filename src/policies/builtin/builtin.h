// The built-in policies, one per slot: what runs when a config chooses nothing else, and what the
// core falls back to when a slot's policy fails (slots/slot.h). Each is trivially safe.
//  - "open" (time gate): admits everything as asked; every gate open.
//  - "unconfined" (space): no partitions: every spatial tenant uses the whole GPU.
//  - "resident" (memory): never swaps out; a request for room is refused (the allocation fails, as
//    without oversubscription); memory already out comes back, one tenant at a time, when it fits.
#pragma once

#include "policies/registry.h"

namespace gpuos::policies {

extern const PolicyEntry kOpenPolicy;
extern const PolicyEntry kUnconfinedPolicy;
extern const PolicyEntry kResidentPolicy;

}  // namespace gpuos::policies
