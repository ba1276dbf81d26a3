// SPDX-License-Identifier: Apache-2.0
#include "slots/builtin.h"

namespace gpuos::slots {
namespace {

class OpenGate final : public TimeGate {
 public:
  const char* name() const override { return "open"; }
  GateActions decide(const GateView&) override { return {}; }
};

class Unconfined final : public SpacePolicy {
 public:
  const char* name() const override { return "unconfined"; }
  SpaceActions decide(const SpaceView&) override { return {}; }
};

class Resident final : public MemoryPolicy {
 public:
  const char* name() const override { return "resident"; }
  MemoryActions decide(const MemoryView& view) override {
    MemoryActions out;
    bool pending = false;
    for (const SwapTenant& t : view.tenants) pending = pending || t.command_pending;
    for (const SwapTenant& t : view.tenants) {
      if (t.wants_room && !t.room_made) {
        out.actions.push_back({SwapAction::Kind::kAnswerRefused, t.id});
      } else if (t.wants_room) {
        out.actions.push_back({SwapAction::Kind::kAnswerRetry, t.id});
      }
    }
    for (const SwapTenant& t : view.tenants) {
      if (pending) break;
      if (t.swapped_out && !t.swap_in_failed) {
        out.actions.push_back({SwapAction::Kind::kSwapIn, t.id});
        break;  // one at a time: they share the link, and each needs the previous one's room
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<TimeGate> builtin_time_gate() { return std::make_unique<OpenGate>(); }
std::unique_ptr<SpacePolicy> builtin_space() { return std::make_unique<Unconfined>(); }
std::unique_ptr<MemoryPolicy> builtin_memory() { return std::make_unique<Resident>(); }

}  // namespace gpuos::slots
