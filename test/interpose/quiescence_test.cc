// SPDX-License-Identifier: Apache-2.0
// The quiescence count of control-block users (interpose/quiescence.h): re-registration carries a
// feature's state over only once every call that loaded the old block has left, and calls that come
// after the switch never hold it up. Nothing here depends on timing: users leave when the test
// says so, and "not yet" is asked with a zero timeout.
#include "interpose/quiescence.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace gpuos::interpose {
namespace {

constexpr uint64_t kLongNs = 60ull * 1000000000ull;  // only ever reached by a broken wait

// A user on its own thread: enters at construction, leaves when released.
class User {
 public:
  explicit User(Quiescence& q) : q_(q), thread_([this] { run(); }) { entered_.wait(false); }
  ~User() {
    release();
    join();
  }
  void release() {
    go_.store(true);
    go_.notify_all();
  }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  bool left() const { return left_.load(); }

 private:
  void run() {
    const unsigned slot = q_.enter();
    entered_.store(true);
    entered_.notify_all();
    go_.wait(false);
    left_.store(true);  // before leaving: a waiter that returned must see it
    q_.leave(slot);
  }
  Quiescence& q_;
  std::atomic<bool> entered_{false};
  std::atomic<bool> go_{false};
  std::atomic<bool> left_{false};
  std::thread thread_;
};

TEST(Quiescence, AWaiterReturnsOnlyAfterEveryUserLeft) {
  Quiescence q;
  std::vector<std::unique_ptr<User>> users;
  for (int i = 0; i < 3; ++i) users.push_back(std::make_unique<User>(q));
  const unsigned slot = q.retire();
  EXPECT_FALSE(q.wait_quiet(slot, 0)) << "three users are inside";
  std::atomic<bool> returned{false};
  int left_when_returned = -1;
  bool quiet = false;
  std::thread waiter([&] {
    quiet = q.wait_quiet(slot, kLongNs);
    left_when_returned = 0;
    for (const auto& u : users) left_when_returned += u->left() ? 1 : 0;
    returned.store(true);
  });
  for (int i = 0; i < 2; ++i) {
    users[i]->release();
    users[i]->join();
    EXPECT_FALSE(q.wait_quiet(slot, 0)) << "a user is still inside after " << i + 1 << " left";
    EXPECT_FALSE(returned.load()) << "the waiter returned while a user was inside";
  }
  users[2]->release();
  waiter.join();
  EXPECT_TRUE(quiet);
  EXPECT_EQ(left_when_returned, 3);
  users.clear();  // (joins the last one)
}

TEST(Quiescence, UsersThatCameAfterTheSwitchDoNotHoldTheWaiterUp) {
  Quiescence q;
  auto before = std::make_unique<User>(q);
  const unsigned first = q.retire();
  User after(q);  // loads the new block: not the waiter's concern
  EXPECT_FALSE(q.wait_quiet(first, 0));
  before.reset();  // leaves
  EXPECT_TRUE(q.wait_quiet(first, kLongNs));
  // The next re-registration waits for it, though.
  const unsigned second = q.retire();
  EXPECT_NE(second, first);
  EXPECT_FALSE(q.wait_quiet(second, 0));
  after.release();
  EXPECT_TRUE(q.wait_quiet(second, kLongNs));
}

TEST(Quiescence, AWaitIsBounded) {
  Quiescence q;
  User stuck(q);  // as a launch blocked in the driver
  const unsigned slot = q.retire();
  EXPECT_FALSE(q.wait_quiet(slot, 1000000));
  EXPECT_EQ(q.users(slot), 1u);
}

// The pattern of re-registration under load: users keep loading the current block and writing to
// it while blocks are switched; once the wait for a block's users returned, nothing writes to it
// any more, so what was read from it then is all it ever got.
TEST(Quiescence, NoWriteLandsOnABlockAfterItsUsersWereWaitedFor) {
  struct Block {
    std::atomic<uint64_t> count{0};
    std::atomic<bool> retired{false};
  };
  Quiescence q;
  std::vector<std::unique_ptr<Block>> blocks;
  blocks.push_back(std::make_unique<Block>());
  std::atomic<Block*> current{blocks.back().get()};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> writes{0}, late{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      uint64_t mine = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const unsigned slot = q.enter();
        Block* b = current.load(std::memory_order_seq_cst);
        b->count.fetch_add(1, std::memory_order_relaxed);
        if (b->retired.load(std::memory_order_acquire)) late.fetch_add(1);
        ++mine;
        q.leave(slot);
      }
      writes.fetch_add(mine);
    });
  }
  uint64_t carried = 0;
  for (int round = 0; round < 200; ++round) {
    blocks.push_back(std::make_unique<Block>());
    Block* old = current.exchange(blocks.back().get(), std::memory_order_seq_cst);
    const unsigned slot = q.retire();
    ASSERT_TRUE(q.wait_quiet(slot, kLongNs));
    old->retired.store(true, std::memory_order_release);
    carried += old->count.load(std::memory_order_acquire);
    std::this_thread::yield();
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(late.load(), 0u) << "users wrote to a block after the wait for its users returned";
  uint64_t after = 0;
  for (size_t i = 0; i + 1 < blocks.size(); ++i) after += blocks[i]->count.load();
  EXPECT_EQ(after, carried) << "retired blocks got writes after they were carried over";
  EXPECT_EQ(carried + current.load()->count.load(), writes.load());
}

}  // namespace
}  // namespace gpuos::interpose
