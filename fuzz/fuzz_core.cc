// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: gpuosd's pure message handler (Core::handle_message) fed arbitrary bytes.
//
// Input format (so that REGISTER-then-ACTIVITY/LIST/SET_GATE sequences are reachable):
//   byte 0      setup: bits 0-1 max_tenants-1, bits 2-3 history, bit 4 priority policy (else open),
//               bit 5 the pre-registered tenant is guaranteed (else best-effort), bit 6 a 64 MiB
//               swap pool (memory oversubscription on), bit 7 the budget policy (guaranteed
//               tenants get a latency budget of 1.25; their timing rings are read)
//   then events, each starting with an op byte: bits 0-1 = connection, bits 2-4 = kind
//     kind 0-3  a datagram: 2 bytes little-endian length (clamped to what is left, at most 600),
//               then that many bytes, handed to handle_message as one received datagram
//     kind 4    the connection closes (connection_closed; the next event on it is a new connection)
//     kind 5    a policy tick (the fake clock advances by the next byte * 1 ms)
//     kind 6    a receive error (-EMSGSIZE or -ECONNRESET, by bit 7 of the op)
//     kind 7    the connection's tenant writes its words (next byte): bit 0 busy, bit 1 waiting;
//               bit 2 it is swappable with (next byte) MiB of movable memory; bit 3 it asks for
//               room; bit 4 it carries out the pending swap command (bit 5: and fails it); bits
//               6 the GPU of its memory; bits 6-7 the waiting allocation's GPU 0-3; bit 7 also: a
//               hostile write (2 bytes offset, 1 byte length 0..32, the bytes) anywhere in its
//               block, then a tick: every word gpuosd owns must be back
// Connections: 0 an ordinary local user (pid 100, uid 1000), 1 a tenant registered before the
// input starts (pid 200), 2 an unregistered process that may register (pid 300, uid 1001), 3 an
// admin (pid 1, uid 0). The outcome is applied as the server would: close -> connection_closed,
// shutdown -> Core::shutdown and stop.
//
// Checked on every input beyond "no crash, no leak, no UB" (ASan/UBSan/LSan): every reply is a
// message that validate_message accepts, of a type the daemon may send; a passed fd is open; the
// tenant table respects max_tenants and the history its size; a connection's tenant is live; every
// message except an accepted ACTIVITY gets a reply; words gpuosd owns that a tenant overwrote are
// back after a tick; and no file descriptor outlives the Core.
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "common/config.h"
#include "common/ipc.h"
#include "common/log.h"
#include "daemon/core/core.h"
#include "policies/budget/budget.h"
#include "policies/partition/partition.h"
#include "policies/priority/priority.h"
#include "policies/swap/swap.h"

using namespace gpuos;
using namespace gpuos::daemon;

namespace {

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "fuzz_core: invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

int lowest_free_fd() {
  int fd = dup(2);
  if (fd >= 0) close(fd);
  return fd;
}

bool valid_reply_type(uint32_t t) {
  return t == GPUOS_MSG_REGISTER_REPLY || t == GPUOS_MSG_GPU_INFO || t == GPUOS_MSG_TENANT_INFO ||
         t == GPUOS_MSG_LIST_END || t == GPUOS_MSG_REPLY || t == GPUOS_MSG_SWAP_POOL_REPLY ||
         t == GPUOS_MSG_SPACE_INFO;
}

struct Harness {
  Core& core;
  Connection conns[4];
  uint64_t next_conn_id = 10;
  uint32_t max_tenants;
  uint32_t history;
  bool stopped = false;
  std::set<uint32_t> hostile;  // tenants that wrote arbitrary bytes into their block

  void fresh(int i) {
    static const Peer peers[4] = {{100, 1000, 1000, false}, {200, 1000, 1000, false},
                                  {300, 1001, 1001, false}, {1, 0, 0, true}};
    conns[i] = Connection{};
    conns[i].id = next_conn_id++;
    conns[i].peer = peers[i];
  }

  void check_state() {
    FUZZ_CHECK(core.live_tenants() <= max_tenants);
    FUZZ_CHECK(core.history().size() <= history);
    for (const Connection& c : conns) {
      if (c.tenant_id != 0) FUZZ_CHECK(core.control_block(c.tenant_id) != nullptr);
    }
  }

  void apply(int i, Outcome&& o, bool may_be_silent) {
    if (!may_be_silent) FUZZ_CHECK(!o.replies.empty());
    for (const Outgoing& out : o.replies) {
      char why[GPUOS_TEXT_MAX];
      FUZZ_CHECK(validate_message(out.bytes.data(), out.bytes.size(), why, sizeof(why)) == GPUOS_OK);
      gpuos_msg_header h;
      std::memcpy(&h, out.bytes.data(), sizeof(h));
      FUZZ_CHECK(valid_reply_type(h.type));
      for (int fd : out.fds) {
        if (fd >= 0) FUZZ_CHECK(fcntl(fd, F_GETFD) != -1);
      }
    }
    if (o.registered != 0) FUZZ_CHECK(conns[i].tenant_id == o.registered);
    if (o.shutdown) {
      core.shutdown();
      stopped = true;
      return;
    }
    if (o.close) {
      core.connection_closed(conns[i]);
      fresh(i);
    }
  }

  void datagram(int i, const uint8_t* p, std::size_t n) {
    // Silence is allowed only for a well-formed ACTIVITY from a connection with a tenant.
    bool may_be_silent = false;
    if (n == sizeof(gpuos_msg_activity) && conns[i].tenant_id != 0) {
      gpuos_msg_header h;
      std::memcpy(&h, p, sizeof(h));
      may_be_silent = h.type == GPUOS_MSG_ACTIVITY;
    }
    // The server reads into an aligned stack buffer; copy so ASan sees the exact extent.
    uint8_t* buf = static_cast<uint8_t*>(std::malloc(n ? n : 1));
    if (n) std::memcpy(buf, p, n);
    Outcome o = core.handle_message(conns[i], buf, n);
    std::free(buf);
    apply(i, std::move(o), may_be_silent);
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  log::init("fuzz_core", log::Level::kError, 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const int fd_baseline = lowest_free_fd();
  const uint8_t setup = data[0];
  const uint8_t* p = data + 1;
  std::size_t left = size - 1;

  uint64_t mono = 1'000'000'000;
  CoreOptions o;
  o.max_tenants = 1 + (setup & 3u);
  o.history = (setup >> 2) & 3u;
  o.gpus.push_back(GpuInfo{0, "Sim", "GPU-00000000-0000-0000-0000-000000000000", 132, 1ull << 34, {}, 0});
  o.gpus.push_back(GpuInfo{1, "Sim1", "", 8, 1ull << 30, {}, 0});
  o.unix_ms = [] { return uint64_t{1700000000000}; };
  o.mono_ns = [&mono] { return mono; };
  if (setup & 0x80) {  // latency budgets: guaranteed tenants get one, the timing ring is read
    o.time_gate = std::make_unique<policies::budget::BudgetPolicy>(policies::budget::BudgetParams{});
    o.default_max_slowdown_permille = 1250;
  } else if (setup & 0x10) {
    o.time_gate = std::make_unique<policies::PriorityPolicy>(policies::PriorityParams{2, 200, 5});
  }
  o.space_policy = std::make_unique<policies::PartitionPolicy>(policies::PartitionParams{});
  o.memory_policy = std::make_unique<policies::SwapPolicy>();
  // Spatial domains: "serve" admits everybody, "admins" only admins, anything else is unknown.
  o.space_admit = [](const std::string& d, const Peer& peer) -> std::string {
    if (d == "serve" || (d == "admins" && peer.admin)) return "";
    return "not allowed";
  };
  if (setup & 0x40) {
    o.swap.pool_bytes = 64ull << 20;
    o.swap.quantum_ns = 2'000'000;
    o.swap.headroom_bytes = 1ull << 20;
    o.swap.prefault = false;  // no helper thread: its dup'd fd would race the fd-leak check
  }
  {
    const uint32_t max_tenants = o.max_tenants, history = o.history;
    Core core(std::move(o));
    Harness h{core, {}, 10, max_tenants, history, false, {}};
    for (int i = 0; i < 4; ++i) h.fresh(i);

    // Connection 1 registers before the input starts.
    gpuos_msg_register reg{};
    init_header(&reg.hdr, GPUOS_MSG_REGISTER, sizeof(reg), 1);
    reg.pid = h.conns[1].peer.pid;
    reg.tenant_class = (setup & 0x20) ? GPUOS_CLASS_GUARANTEED : GPUOS_CLASS_BEST_EFFORT;
    reg.weight = 100;
    copy_name(reg.name, sizeof(reg.name), "fuzz-tenant");
    h.apply(1, core.handle_message(h.conns[1], &reg, sizeof(reg)), false);
    FUZZ_CHECK(h.conns[1].tenant_id != 0);

    while (left > 0 && !h.stopped) {
      const uint8_t op = *p++;
      --left;
      const int ci = op & 3;
      const unsigned kind = (op >> 2) & 7u;
      mono += 10'000;  // 10 us between events
      if (kind <= 3) {
        std::size_t n = 0;
        if (left >= 2) {
          n = static_cast<std::size_t>(p[0]) | (static_cast<std::size_t>(p[1]) << 8);
          p += 2;
          left -= 2;
        } else {
          p += left;
          left = 0;
        }
        if (n > 600) n = 600;
        if (n > left) n = left;
        h.datagram(ci, p, n);
        p += n;
        left -= n;
      } else if (kind == 4) {
        core.connection_closed(h.conns[ci]);
        h.fresh(ci);
      } else if (kind == 5) {
        if (left > 0) {
          mono += static_cast<uint64_t>(*p++) * 1'000'000;
          --left;
        }
        core.tick(mono);
      } else if (kind == 6) {
        h.apply(ci, core.handle_receive_error(h.conns[ci], (op & 0x80) ? -ECONNRESET : -EMSGSIZE), false);
      } else {  // kind 7: the tenant side writes its activity words, then says so
        uint8_t v = 0;
        if (left > 0) {
          v = *p++;
          --left;
        }
        uint8_t mib = 0;
        if ((v & 4u) && left > 0) {
          mib = *p++;
          --left;
        }
        if (h.conns[ci].tenant_id != 0) {
          auto* cb = const_cast<gpuos_control_block*>(core.control_block(h.conns[ci].tenant_id));
          // The tenant reads its grant block only (sealed: core_security_test proves it cannot write it).
          auto* g = const_cast<gpuos_grant_block*>(core.grant_block(h.conns[ci].tenant_id));
          auto u32 = [](uint32_t& w) { return std::atomic_ref<uint32_t>(w); };
          auto u64 = [](uint64_t& w) { return std::atomic_ref<uint64_t>(w); };
          u32(cb->busy).store(v & 1u);
          u32(cb->waiting).store((v >> 1) & 1u);
          if (v & 4u) {  // as the arena would: swappable, that much allocated
            u32(cb->swappable).store(1);
            u64(cb->swappable_bytes).store(uint64_t{mib} << 20);
            u64(cb->mem_used_bytes).store((uint64_t{mib} << 20) + (1u << 20));
            u64(cb->mem_used_per_device[(v >> 6) & 1u]).store((uint64_t{mib} << 20) + (1u << 20));
          }
          if (v & 8u) {
            // GPUs 0 and 1 exist in this Core; 2 and 3 do not (no capacity there).
            std::atomic_ref<int32_t>(cb->mem_wanted_device).store(static_cast<int32_t>((v >> 6) & 3u));
            u64(cb->mem_wanted_bytes).store(uint64_t{mib + 1u} << 20);
            u32(cb->mem_request_seq).fetch_add(1);
          }
          if ((v & 16u) && u32(cb->swap_done_seq).load() != u32(g->swap_command_seq).load()) {
            const bool fail = (v & 32u) != 0;
            const uint32_t cmd = u32(g->swap_command).load();
            uint64_t swapped = u64(cb->swapped_bytes).load();
            const uint64_t movable = u64(cb->swappable_bytes).load();
            if (cmd == GPUOS_SWAP_OUT && !fail) {
              swapped = std::min(movable, swapped + std::min(u64(g->swap_slice_bytes).load(),
                                                             u64(g->swap_want_bytes).load()));
              u32(cb->swap_state).store(GPUOS_SWAP_SWAPPED_OUT);
            } else if (cmd == GPUOS_SWAP_IN && !fail) {
              swapped = 0;
              u32(cb->swap_state).store(GPUOS_SWAP_RESIDENT);
            }
            u64(cb->swapped_bytes).store(swapped);
            u32(cb->swap_done_seq).store(u32(g->swap_command_seq).load());
          }
          if (v & 128u) {
            h.hostile.insert(h.conns[ci].tenant_id);
            // A hostile tenant writes anything anywhere in its control block (up to 32 bytes at an
            // offset), then gpuosd looks (a tick).
            std::size_t off = 0, n = 0;
            if (left >= 3) {
              off = (static_cast<std::size_t>(p[0]) | static_cast<std::size_t>(p[1]) << 8) % sizeof(gpuos_control_block);
              n = std::min<std::size_t>({p[2] % 33u, sizeof(gpuos_control_block) - off, left - 3});
              p += 3;
              left -= 3;
            }
            std::memcpy(reinterpret_cast<uint8_t*>(cb) + off, p, n);
            p += n;
            left -= n;
            core.tick(mono);
            // Nothing it wrote moved a grant: the gate and the quota are what gpuosd reports.
            for (const TenantStat& st : core.tenant_stats(mono)) {
              const gpuos_grant_block* b = core.grant_block(st.info.tenant_id);
              FUZZ_CHECK(b->mem_quota_bytes == st.info.mem_quota_bytes);
              FUZZ_CHECK((b->gate == GPUOS_GATE_OPEN) == (st.info.state == GPUOS_TENANT_RUNNING));
              FUZZ_CHECK(b->tenant_id == st.info.tenant_id);
            }
          } else if (h.hostile.count(h.conns[ci].tenant_id) == 0 &&
                     u32(cb->swap_state).load() != GPUOS_SWAP_RESIDENT) {
            // The daemon never opens a held gate: an honest tenant whose memory is not all back is
            // gated (a hostile one may have written any swap state itself).
            FUZZ_CHECK(u32(g->gate).load() == GPUOS_GATE_CLOSED);
          }
        }
      }
      if (!h.stopped) {
        uint64_t next = core.next_tick_ns(mono);
        if (next != 0 && next <= mono) core.tick(mono);
      }
      h.check_state();
    }
    for (Connection& c : h.conns) core.connection_closed(c);
    FUZZ_CHECK(core.live_tenants() == 0);
  }
  FUZZ_CHECK(lowest_free_fd() == fd_baseline);
  return 0;
}
