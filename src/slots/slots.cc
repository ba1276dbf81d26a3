// SPDX-License-Identifier: Apache-2.0
#include "slots/slot.h"
#include "slots/space.h"

namespace gpuos::slots {

const char* event_name(Event e) {
  switch (e) {
    case Event::kAdmitted: return "admitted";
    case Event::kExit: return "exit";
    case Event::kActivity: return "activity";
    case Event::kAdmin: return "admin";
    case Event::kTick: return "tick";
  }
  return "?";
}

}  // namespace gpuos::slots
