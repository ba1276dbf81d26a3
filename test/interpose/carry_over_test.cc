// SPDX-License-Identifier: Apache-2.0
// Re-registration after a daemon restart (interpose/runtime.cc, maintain_daemon_connection), run by
// the interposer's real runtime against a stand-in daemon in this test, without a driver: every
// feature's state in the control block survives it (carry_over.h), a call that still used the old
// block when the daemon came back holds the carry-over until it is done and what it wrote there is
// carried too (quiescence.h), and a second restart carries everything again.
//
// The runtime is process-wide state, so this is one test. No timing decides a pass: the one bounded
// wait for "not yet" only gives a broken runtime the chance to show itself. Cleanup: the socket and
// its directory are removed; the control blocks are memfds (no /dev/shm); no process is started.
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/ipc.h"
#include "interpose/memory_accounting.h"
#include "interpose/quiescence.h"
#include "interpose/runtime.h"

namespace gpuos::interpose {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

uint64_t get(uint64_t& w) { return std::atomic_ref<uint64_t>(w).load(); }
uint32_t get(uint32_t& w) { return std::atomic_ref<uint32_t>(w).load(); }
void set(uint64_t& w, uint64_t v) { std::atomic_ref<uint64_t>(w).store(v); }
void set(uint32_t& w, uint32_t v) { std::atomic_ref<uint32_t>(w).store(v); }
void bump(uint64_t& w) { std::atomic_ref<uint64_t>(w).fetch_add(1); }

// Polls `done` until it holds or `ms` passed. A correct runtime gets there at once; the deadline
// only ends a broken run.
template <typename Done>
bool eventually(Done done, int ms = 60000) {
  for (int i = 0; i < ms; ++i) {
    if (done()) return true;
    timespec t{0, 1000000};
    nanosleep(&t, nullptr);
  }
  return done();
}

// Answers REGISTER as gpuosd does (a memfd control block passed with the reply), one at a time.
class StandInDaemon {
 public:
  StandInDaemon() {
    char tmpl[] = "/tmp/gpuos-carry-over-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) dir_ = tmpl;
    path_ = dir_ + "/gpuosd.sock";
    listen_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof(a.sun_path) - 1);
    ok_ = !dir_.empty() && listen_ >= 0 && bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
          listen(listen_, 4) == 0;
  }
  ~StandInDaemon() {
    join();
    drop();
    if (listen_ >= 0) close(listen_);
    unlink(path_.c_str());
    if (!dir_.empty()) rmdir(dir_.c_str());
    for (gpuos_control_block* b : blocks_) munmap(b, sizeof(*b));
    for (gpuos_grant_block* g : grants_) munmap(g, sizeof(*g));
  }
  bool ok() const { return ok_; }
  const std::string& path() const { return path_; }
  // Answers the next registration on a thread of its own, as tenant `id`; join() waits for it.
  void serve_next(uint32_t id) {
    server_ = std::thread([this, id] { serve(id); });
  }
  void join() {
    if (server_.joinable()) server_.join();
  }
  // gpuosd goes away without any cleanup: the tenant's connection closes.
  void drop() {
    if (conn_ >= 0) close(conn_);
    conn_ = -1;
  }
  uint32_t previous_id() const { return previous_id_; }

 private:
  void serve(uint32_t id) {
    pollfd p{listen_, POLLIN, 0};
    if (poll(&p, 1, 60000) != 1) {
      ADD_FAILURE() << "the tenant never connected";
      return;
    }
    const int c = accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
    alignas(8) char buf[GPUOS_MSG_MAX_SIZE + 1];
    gpuos_msg_register req{};
    if (c < 0 || receive_message(c, buf, sizeof(buf), nullptr, 60000) != static_cast<long>(sizeof(req))) {
      ADD_FAILURE() << "no REGISTER from the tenant";
      if (c >= 0) close(c);
      return;
    }
    std::memcpy(&req, buf, sizeof(req));
    previous_id_ = req.previous_tenant_id;
    // Its two blocks, as gpuosd makes them: the grant block (the tenant maps it read-only) and
    // the control block.
    int fds[2] = {memfd_create("gpuos-carry-over-grants", MFD_CLOEXEC),
                  memfd_create("gpuos-carry-over-test", MFD_CLOEXEC)};
    const std::size_t sizes[2] = {sizeof(gpuos_grant_block), sizeof(gpuos_control_block)};
    void* m[2] = {MAP_FAILED, MAP_FAILED};
    for (int i = 0; i < 2; ++i) {
      if (fds[i] >= 0 && ftruncate(fds[i], static_cast<off_t>(sizes[i])) == 0) {
        m[i] = mmap(nullptr, sizes[i], PROT_READ | PROT_WRITE, MAP_SHARED, fds[i], 0);
      }
    }
    if (m[0] == MAP_FAILED || m[1] == MAP_FAILED) {
      ADD_FAILURE() << "no blocks: " << std::strerror(errno);
      for (int i = 0; i < 2; ++i) {
        if (m[i] != MAP_FAILED) munmap(m[i], sizes[i]);
        if (fds[i] >= 0) close(fds[i]);
      }
      close(c);
      return;
    }
    auto* g = static_cast<gpuos_grant_block*>(m[0]);
    g->magic = GPUOS_ABI_MAGIC;
    g->abi_version = GPUOS_ABI_VERSION;
    g->size = sizeof(gpuos_grant_block);
    g->tenant_id = id;
    g->tenant_class = req.tenant_class;
    g->gate = GPUOS_GATE_OPEN;
    g->daemon_alive = 1;
    auto* cb = static_cast<gpuos_control_block*>(m[1]);
    cb->magic = GPUOS_ABI_MAGIC;
    cb->abi_version = GPUOS_ABI_VERSION;
    cb->size = sizeof(gpuos_control_block);
    cb->tenant_id = id;
    grants_.push_back(g);
    blocks_.push_back(cb);
    gpuos_msg_register_reply rep{};
    init_header(&rep.hdr, GPUOS_MSG_REGISTER_REPLY, sizeof(rep), req.hdr.seq);
    rep.status = GPUOS_OK;
    rep.tenant_id = id;
    rep.control_block_size = sizeof(gpuos_control_block);
    rep.grant_block_size = sizeof(gpuos_grant_block);
    rep.tenant_class = req.tenant_class;
    EXPECT_EQ(send_message_fds(c, &rep, sizeof(rep), fds, 2), 0);
    close(fds[0]);
    close(fds[1]);
    conn_ = c;
  }

  std::string dir_, path_;
  int listen_ = -1;
  int conn_ = -1;
  bool ok_ = false;
  uint32_t previous_id_ = 0;
  std::vector<gpuos_control_block*> blocks_;
  std::vector<gpuos_grant_block*> grants_;
  std::thread server_;
};

const uint8_t kUuid[2][16] = {{0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x10},
                              {0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x20}};

// Gives every feature state in the block, through the feature's own calls where it has them.
void fill(gpuos_control_block* cb) {
  // launch path and creation counters
  set(cb->launches, 7);
  set(cb->graph_launches, 3);
  set(cb->captured_launches, 2);
  set(cb->contexts_created, 1);
  set(cb->streams_created, 4);
  // gate
  set(cb->gate_waits, 5);
  set(cb->gate_wait_ns, 12345);
  set(cb->gate_wait_hist[1], 5);
  // memory: a 3 MiB allocation on device 1, a refused one, a free of something never seen, an import
  ASSERT_TRUE(reserve_bytes(cb, 3 * kMiB));
  commit_alloc(cb, AllocKind::kPointer, 0x10000, 3 * kMiB, 1);
  account_alloc_failure(cb);
  account_free(cb, AllocKind::kPointer, 0xdead0000);
  account_import(cb, 0x20000, 4096);
  // activity
  set(cb->busy, 1);
  set(cb->busy_transitions, 2);
  set(cb->inflight_waits, 6);
  set(cb->untracked_work, 1);
  // spatial
  set(cb->space_devices, 0b101);
  // swap
  set(cb->swappable, 1);
  set(cb->swappable_bytes, 3 * kMiB);
  set(cb->swap_outs, 1);
  set(cb->swap_ins, 1);
  set(cb->swap_out_bytes, 2 * kMiB);
  set(cb->swap_in_bytes, 2 * kMiB);
  set(cb->swap_out_ns, 10);
  set(cb->swap_in_ns, 20);
  set(cb->max_swap_in_ns, 20);
  set(cb->mem_waits, 3);
  set(cb->mem_wait_ns, 30);
  // device map, as publish_devices writes it
  for (int i = 0; i < 2; ++i) std::memcpy(cb->device_uuid[i], kUuid[i], 16);
  std::atomic_ref<uint32_t>(cb->device_count).store(2, std::memory_order_release);
}

// What fill() left, plus what the call in flight during the first restart added: a launch and a
// 1 MiB allocation on device 1 on the old block, and a launch on the new one.
void expect_carried(gpuos_control_block* cb) {
  SCOPED_TRACE("tenant " + std::to_string(cb->tenant_id));
  EXPECT_EQ(get(cb->launches), 9u);
  EXPECT_EQ(get(cb->graph_launches), 3u);
  EXPECT_EQ(get(cb->captured_launches), 2u);
  EXPECT_EQ(get(cb->contexts_created), 1u);
  EXPECT_EQ(get(cb->streams_created), 4u);
  EXPECT_EQ(get(cb->gate_waits), 5u);
  EXPECT_EQ(get(cb->gate_wait_ns), 12345u);
  EXPECT_EQ(get(cb->gate_wait_hist[1]), 5u);
  EXPECT_EQ(get(cb->alloc_calls), 3u);
  EXPECT_EQ(get(cb->alloc_failures), 1u);
  EXPECT_EQ(get(cb->free_calls), 1u);
  EXPECT_EQ(get(cb->untracked_frees), 1u);
  EXPECT_EQ(get(cb->mem_used_bytes), 4 * kMiB);
  EXPECT_EQ(get(cb->mem_used_per_device[1]), 4 * kMiB);
  EXPECT_EQ(get(cb->mem_used_per_device[0]), 0u);
  EXPECT_EQ(get(cb->mem_peak_bytes), 4 * kMiB);
  EXPECT_EQ(get(cb->mem_imported_bytes), 4096u);
  EXPECT_EQ(get(cb->busy), 1u);
  EXPECT_EQ(get(cb->busy_transitions), 2u);
  EXPECT_EQ(get(cb->inflight_waits), 6u);
  EXPECT_EQ(get(cb->untracked_work), 1u);
  EXPECT_EQ(get(cb->space_devices), 0b101u);
  EXPECT_EQ(get(cb->swappable), 1u);
  EXPECT_EQ(get(cb->swappable_bytes), 3 * kMiB);
  EXPECT_EQ(get(cb->swap_outs), 1u);
  EXPECT_EQ(get(cb->swap_ins), 1u);
  EXPECT_EQ(get(cb->swap_out_bytes), 2 * kMiB);
  EXPECT_EQ(get(cb->swap_in_bytes), 2 * kMiB);
  EXPECT_EQ(get(cb->swap_out_ns), 10u);
  EXPECT_EQ(get(cb->swap_in_ns), 20u);
  EXPECT_EQ(get(cb->max_swap_in_ns), 20u);
  EXPECT_EQ(get(cb->mem_waits), 3u);
  EXPECT_EQ(get(cb->mem_wait_ns), 30u);
  ASSERT_EQ(std::atomic_ref<uint32_t>(cb->device_count).load(std::memory_order_acquire), 2u);
  EXPECT_EQ(std::memcmp(cb->device_uuid[0], kUuid[0], 16), 0);
  EXPECT_EQ(std::memcmp(cb->device_uuid[1], kUuid[1], 16), 0);
}

TEST(CarryOver, EveryFeatureKeepsItsStateAcrossDaemonRestarts) {
  StandInDaemon daemon;
  ASSERT_TRUE(daemon.ok()) << std::strerror(errno);
  setenv("GPUOS_SOCKET", daemon.path().c_str(), 1);
  // No driver: the activity monitor thread then ends at once, and re-registration runs only here.
  setenv("GPUOS_DRIVER_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  unsetenv("GPUOS_SWAP");

  daemon.serve_next(7);
  gpuos_control_block* first = ensure_registered();
  daemon.join();
  ASSERT_NE(first, nullptr);
  ASSERT_EQ(first->tenant_id, 7u) << "registered with the stand-in daemon";
  fill(first);

  // gpuosd dies; a new one comes while a launch that loaded the old block is still under way.
  daemon.drop();
  gpuos_control_block* second = nullptr;
  std::thread monitor;
  {
    ControlBlockUse launch;
    gpuos_control_block* held = g_control.load(std::memory_order_seq_cst);
    ASSERT_EQ(held, first);
    daemon.serve_next(8);
    monitor = std::thread([] { maintain_daemon_connection(); });
    const bool switched = eventually([&] { return g_control.load() != first; });
    EXPECT_TRUE(switched) << "the tenant did not re-register";
    if (switched) {
      second = g_control.load();
      EXPECT_EQ(get(second->busy), 1u) << "busy is seeded before launches see the new block";
      // A runtime that carried over without waiting for this launch would do so now: give it the time to.
      eventually([&] { return get(second->launches) != 0; }, 200);
      EXPECT_EQ(get(second->launches), 0u) << "carried over while a call still used the old block";
      bump(second->launches);  // a launch that came after the switch
    }
    // The launch in flight finishes on the old block, and allocates there too.
    bump(held->launches);
    EXPECT_TRUE(reserve_bytes(held, kMiB));
    commit_alloc(held, AllocKind::kPointer, 0x30000, kMiB, 1);
  }  // it leaves: now the carry-over may run
  monitor.join();
  daemon.join();
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(daemon.previous_id(), 7u) << "the tenant asks for the id it had";
  EXPECT_EQ(g_control.load(), second);
  expect_carried(second);

  // And again (the users count in the other slot this time): nothing is lost, nothing doubled.
  daemon.drop();
  daemon.serve_next(9);
  maintain_daemon_connection();
  daemon.join();
  gpuos_control_block* third = g_control.load();
  ASSERT_NE(third, second);
  EXPECT_EQ(third->tenant_id, 9u);
  expect_carried(third);
}

}  // namespace
}  // namespace gpuos::interpose
