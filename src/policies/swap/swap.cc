#include "policies/swap/swap.h"

#include <memory>

namespace gpuos::policies {
namespace {
std::unique_ptr<slots::MemoryPolicy> make_swap(const PolicyContext& ctx, std::string* error) {
  if (!ctx.section.all_read(error)) return nullptr;  // its settings are [memory]'s (quantum, headroom)
  return std::make_unique<SwapPolicy>();
}
}  // namespace

const PolicyEntry kSwapPolicy{"swap", SlotKind::kMemory,
                              "idle or best-effort tenants swap out to host memory to make room for others", nullptr,
                              nullptr, &make_swap};

}  // namespace gpuos::policies
