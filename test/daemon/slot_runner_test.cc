// SPDX-License-Identifier: Apache-2.0
// SlotRunner and run_slot without a Core: a fake engine over a table of ints.
#include "daemon/core/slot_runner.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace gpuos::daemon {
namespace {

struct Answer {
  int value = 0;
};
struct Policy {
  virtual ~Policy() = default;
  virtual const char* name() const = 0;
  virtual Answer decide(const int& view) = 0;
};
struct Builtin final : Policy {
  const char* name() const override { return "builtin"; }
  Answer decide(const int&) override { return {1}; }
};
struct Throws final : Policy {
  const char* name() const override { return "throws"; }
  Answer decide(const int&) override { throw std::runtime_error("boom"); }
};
struct Answers final : Policy {
  int value;
  explicit Answers(int v) : value(v) {}
  const char* name() const override { return "answers"; }
  Answer decide(const int& view) override { return {value + view}; }
};

// The engine shape (slot_runner.h): a view of the "tenants", a contract (no negative answer), apply.
struct FakeEngine {
  using Policy = gpuos::daemon::Policy;
  using View = int;
  using Actions = Answer;
  bool have_view = true;
  int views = 0;
  std::vector<int> applied;
  bool make_view(std::vector<int>& tenants, slots::Event, uint32_t, uint64_t, View* out) {
    ++views;
    *out = static_cast<int>(tenants.size());
    return have_view;
  }
  bool check(const View&, const Actions& a, std::string* why) const {
    if (a.value >= 0) return true;
    *why = "negative";
    return false;
  }
  void apply(std::vector<int>& tenants, const View&, const Actions& a, uint64_t) {
    applied.push_back(a.value);
    tenants.push_back(a.value);
  }
};

SlotRunner<Policy> runner_with(std::unique_ptr<Policy> p) {
  return SlotRunner<Policy>("test", std::move(p), [] { return std::make_unique<Builtin>(); });
}

TEST(SlotRunner, NoPolicyMeansTheBuiltinFromTheStart) {
  auto r = runner_with(nullptr);
  EXPECT_STREQ(r.policy().name(), "builtin");
  EXPECT_EQ(r.failures(), 0u);
}

TEST(RunSlot, AsksThePolicyWithTheViewAndAppliesItsAnswer) {
  auto r = runner_with(std::make_unique<Answers>(10));
  FakeEngine e;
  std::vector<int> tenants{7, 8};
  run_slot(r, e, tenants, slots::Event::kTick, 0, 0);
  EXPECT_EQ(e.applied, std::vector<int>{12});
  EXPECT_EQ(r.failures(), 0u);
}

TEST(RunSlot, NoViewNoQuestion) {
  auto r = runner_with(std::make_unique<Throws>());
  FakeEngine e;
  e.have_view = false;
  std::vector<int> tenants;
  run_slot(r, e, tenants, slots::Event::kTick, 0, 0);
  EXPECT_TRUE(e.applied.empty());
  EXPECT_EQ(r.failures(), 0u);  // never asked, never failed
  EXPECT_STREQ(r.policy().name(), "throws");
}

TEST(RunSlot, AThrowFallsBackAndTheBuiltinAnswersAtOnce) {
  auto r = runner_with(std::make_unique<Throws>());
  int fallbacks = 0;
  r.on_fallback([&] { ++fallbacks; });
  FakeEngine e;
  std::vector<int> tenants;
  run_slot(r, e, tenants, slots::Event::kTick, 0, 0);
  EXPECT_EQ(r.failures(), 1u);
  EXPECT_EQ(fallbacks, 1);
  EXPECT_STREQ(r.policy().name(), "builtin");
  EXPECT_EQ(e.applied, std::vector<int>{1});  // the builtin's answer, in the same round
}

TEST(RunSlot, AnAnswerBreakingTheContractFallsBackToo) {
  auto r = runner_with(std::make_unique<Answers>(-5));
  FakeEngine e;
  std::vector<int> tenants;
  run_slot(r, e, tenants, slots::Event::kTick, 0, 0);
  EXPECT_EQ(r.failures(), 1u);
  EXPECT_EQ(e.applied, std::vector<int>{1});  // the rejected answer was never applied
  run_slot(r, e, tenants, slots::Event::kTick, 0, 0);
  EXPECT_EQ(r.failures(), 1u);  // the builtin keeps the slot
}

}  // namespace
}  // namespace gpuos::daemon
