#include "policies/builtin/builtin.h"

namespace gpuos::policies {
namespace {

class OpenGate final : public slots::TimeGate {
 public:
  const char* name() const override { return "open"; }
  slots::GateActions decide(const slots::GateView&) override { return {}; }
};

class Unconfined final : public slots::SpacePolicy {
 public:
  const char* name() const override { return "unconfined"; }
  slots::SpaceActions decide(const slots::SpaceView&) override { return {}; }
};

class Resident final : public slots::MemoryPolicy {
 public:
  const char* name() const override { return "resident"; }
  slots::MemoryActions decide(const slots::MemoryView& view) override {
    slots::MemoryActions out;
    bool pending = false;
    for (const slots::SwapTenant& t : view.tenants) pending = pending || t.command_pending;
    for (const slots::SwapTenant& t : view.tenants) {
      if (t.wants_room && !t.room_made) {
        out.actions.push_back({slots::SwapAction::Kind::kAnswerRefused, t.id});
      } else if (t.wants_room) {
        out.actions.push_back({slots::SwapAction::Kind::kAnswerRetry, t.id});
      }
    }
    for (const slots::SwapTenant& t : view.tenants) {
      if (pending) break;
      if (t.swapped_out && !t.swap_in_failed) {
        out.actions.push_back({slots::SwapAction::Kind::kSwapIn, t.id});
        break;  // one at a time: they share the link, and each needs the previous one's room
      }
    }
    return out;
  }
};

template <typename P, typename Base>
std::unique_ptr<Base> make_checked(const PolicyContext& ctx, std::string* error) {
  if (!ctx.section.all_read(error)) return nullptr;  // these take no settings
  return std::make_unique<P>();
}

}  // namespace

std::unique_ptr<slots::TimeGate> builtin_time_gate() { return std::make_unique<OpenGate>(); }
std::unique_ptr<slots::SpacePolicy> builtin_space() { return std::make_unique<Unconfined>(); }
std::unique_ptr<slots::MemoryPolicy> builtin_memory() { return std::make_unique<Resident>(); }

const PolicyEntry kOpenPolicy{"open", SlotKind::kTimeGate, "no gating: every tenant may launch at any time",
                              &make_checked<OpenGate, slots::TimeGate>};
const PolicyEntry kUnconfinedPolicy{"unconfined", SlotKind::kSpace,
                                    "no SM partitions: spatial tenants share every SM",
                                    nullptr, &make_checked<Unconfined, slots::SpacePolicy>};
const PolicyEntry kResidentPolicy{"resident", SlotKind::kMemory,
                                  "no swapping out: an allocation that does not fit fails",
                                  nullptr, nullptr, &make_checked<Resident, slots::MemoryPolicy>};

}  // namespace gpuos::policies
