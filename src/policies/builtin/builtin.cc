// SPDX-License-Identifier: Apache-2.0
#include "policies/builtin/builtin.h"

#include "slots/builtin.h"

namespace gpuos::policies {
namespace {

// The built-ins take no settings.
template <typename Base, std::unique_ptr<Base> (*Make)()>
std::unique_ptr<Base> make_checked(const PolicyContext& ctx, std::string* error) {
  if (!ctx.section.all_read(error)) return nullptr;
  return Make();
}

}  // namespace

const PolicyEntry kOpenPolicy{"open", SlotKind::kTimeGate, "no gating: every tenant may launch at any time",
                              &make_checked<slots::TimeGate, &slots::builtin_time_gate>};
const PolicyEntry kUnconfinedPolicy{"unconfined", SlotKind::kSpace,
                                    "no SM partitions: spatial tenants share every SM",
                                    nullptr, &make_checked<slots::SpacePolicy, &slots::builtin_space>};
const PolicyEntry kResidentPolicy{"resident", SlotKind::kMemory,
                                  "no swapping out: an allocation that does not fit fails",
                                  nullptr, nullptr, &make_checked<slots::MemoryPolicy, &slots::builtin_memory>};

}  // namespace gpuos::policies
