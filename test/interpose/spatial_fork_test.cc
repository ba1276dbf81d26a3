// SPDX-License-Identifier: Apache-2.0
// The interposer's spatial tables in a child of fork (interpose/spatial.cc): an application that
// forks while another of its threads (gpuos's prefetch helper, a launching thread) holds the lock
// of those tables must not hang in the child.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdarg>

#include "interpose/runtime.h"
#include "interpose/spatial.h"

namespace gpuos::interpose {

// What spatial.cc takes from the rest of the interposer (runtime.cc), standing in here.
void log(LogLevel, const char*, ...) {}
uint64_t monotonic_ns() { return 0; }

namespace {

TEST(SpatialFork, AChildIsNotStuckOnALockHeldAtTheFork) {
  const GpuosDriverTable d{};
  std::mutex& mu = TEST_registry_mutex();
  mu.lock();  // as if the prefetch helper held it when the application forked
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(5);  // a hang ends in SIGALRM
    note_graph_destroyed(d, reinterpret_cast<CUgraphExec>(0x10));  // takes the lock
    _exit(0);
  }
  mu.unlock();
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child hung on the lock (status " << status << ")";
}

}  // namespace
}  // namespace gpuos::interpose
