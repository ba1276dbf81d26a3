// SPDX-License-Identifier: Apache-2.0
// gpuosd's MPS supervisor: one NVIDIA MPS control daemon per spatial trust domain ([[spatial.domain]]).
//
// Processes run kernels concurrently on disjoint SM partitions only as clients of one MPS server, and
// MPS gives no fault isolation (a GPU fault in one client kills every client of the server). So each
// trust domain gets its own control daemon (`<mps_control> -d` with CUDA_MPS_PIPE_DIRECTORY =
// <mps_dir>/<domain>/pipe, CUDA_MPS_LOG_DIRECTORY = <mps_dir>/<domain>/log, CUDA_VISIBLE_DEVICES
// from the domain's gpus), and only tenants of one domain ever share a server.
//
// The supervisor does all its process handling on one helper thread, so nothing it does can block
// gpuosd's event loop:
//  - start: creates the directories, adopts a control daemon that already answers there (a gpuosd
//    restart), else runs `<mps_control> -d` and waits until `get_server_list` answers;
//  - liveness: `echo get_server_list | <mps_control>` with the domain's environment; exit status 0 =
//    alive. Without a daemon the client prints "Cannot find MPS control daemon process" and exits
//    1; a second -d exits 1 with "An instance of this daemon is already running" (both seen on an
//    H200, driver 580.159.04). Every such query adds four lines to <log>/control.log, which nothing
//    rotates (and /run is memory), so between full probes (every full_probe_every-th check) the
//    check is the pid file the control daemon leaves, <pipe>/nvidia-cuda-mps-control.pid (driver
//    580 writes it; quit removes it): its process gone = dead at once; no usable pid file = every
//    check is a full probe. A hung daemon still has its pid: the full probe finds it;
//  - a daemon that stops answering (or cannot be started) makes the domain unavailable and is
//    (re)started with exponential backoff (backoff_min .. backoff_max; the first restart after a
//    stable run is immediate);
//  - every child runs in its own process group with a reset signal mask, a timeout, and is reaped
//    (waitpid) on every path, killed (SIGKILL to its group) when it overruns;
//  - shutdown(keep): stops the helper and sends `quit` to every control daemon it started or
//    adopted, all at once, bounded by command_timeout, except in the domains gpuosd still has live
//    tenants in: quitting would cut off their MPS server (and a control daemon that is quitting
//    refuses new clients), while a restarted gpuosd adopts the running one.
// Every state change is logged and written to <mps_dir>/<domain>/status (one line: "available",
// "unavailable: REASON" or "stopped"), which `gpuos run --space` reads to warn its user.
// A missing or failing binary only makes its domains unavailable: time sharing goes on.
//
// Thread-safety: start/shutdown from one thread; query/domains/allows/check_now from any thread.
#pragma once

#include <set>

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/config.h"

namespace gpuos::daemon {

// What the rest of the daemon needs to know about a domain.
struct SpaceDomainStatus {
  std::string name;
  bool available = false;  // its control daemon answers: tenants of the domain may share in space
  std::string pipe_dir;    // CUDA_MPS_PIPE_DIRECTORY for its tenants
  std::string log_dir;     // CUDA_MPS_LOG_DIRECTORY
  std::string reason;      // why it is unavailable ("" while available)
  uint32_t restarts = 0;   // control daemons started after the first one came up
};

// Where the supervisor's deadlines (probe interval, backoff, stable run, start and command
// timeouts) come from and how it waits for them. The default is CLOCK_MONOTONIC with real
// condition-variable waits; tests inject a clock they advance by hand, so nothing they check
// depends on how fast a loaded machine runs.
class MpsClock {
 public:
  virtual ~MpsClock() = default;
  virtual uint64_t now_ns() = 0;
  // Called with lk locked on cv's mutex (lk is unlocked while blocked). Returns once done() holds,
  // now_ns() >= deadline_ns (UINT64_MAX: no deadline) or, with poll_ns > 0, after about poll_ns of
  // real time: waiting for a child, whose exit notifies no one. May return early; callers recheck.
  virtual void wait_until(std::unique_lock<std::mutex>& lk, std::condition_variable& cv, uint64_t deadline_ns,
                          uint64_t poll_ns, const std::function<bool()>& done) = 0;
};

struct MpsOptions {
  std::string mps_control = kDefaultMpsControl;  // PATH lookup without a slash
  std::string mps_dir;                           // effective (effective_mps_dir)
  std::vector<SpatialDomain> domains;
  // GPU UUIDs by gpuosd's index (from discovery); a domain's gpus are passed as these UUIDs, so the
  // control daemon sees the same GPUs whatever CUDA's enumeration order. Empty: unknown, indices are
  // passed as they are (through an inherited CUDA_VISIBLE_DEVICES list if gpuosd has one).
  std::vector<std::string> gpu_uuids;
  uint32_t probe_interval_ms = 1000;    // one liveness check
  uint32_t full_probe_every = 30;       // a get_server_list every this many checks (pid file between)
  uint32_t backoff_min_ms = 1000;
  uint32_t backoff_max_ms = 60000;
  uint32_t stable_ms = 60000;           // up this long: the next restart is immediate again
  uint32_t start_timeout_ms = 10000;    // `-d` to return and the new daemon to answer
  uint32_t command_timeout_ms = 5000;   // one get_server_list / quit
  std::shared_ptr<MpsClock> clock;      // null: the real one
};

class MpsSupervisor {
 public:
  explicit MpsSupervisor(MpsOptions opts);
  ~MpsSupervisor();  // shutdown()
  MpsSupervisor(const MpsSupervisor&) = delete;
  MpsSupervisor& operator=(const MpsSupervisor&) = delete;

  // The options gpuosd derives from its config and control socket.
  static MpsOptions options_from(const Config& cfg, const std::string& socket_path);

  // Starts the helper thread (no domains: does nothing). Returns at once; the domains become
  // available as their control daemons answer. Never throws.
  void start();
  // Stops the helper thread (killing a command it waits for) and sends `quit` to each control
  // daemon it started or adopted, except those of the domains in `keep`: tenants still use them
  // (they outlive gpuosd), so those are left running for the next gpuosd to adopt. Returns within
  // about command_timeout. Idempotent.
  void shutdown(const std::set<std::string>& keep = {});
  // Asks the helper to probe now instead of at the next interval (backoff still applies).
  void check_now();

  // Domain name -> its state; nullopt for an unknown name.
  std::optional<SpaceDomainStatus> query(std::string_view name) const;
  std::vector<SpaceDomainStatus> domains() const;
  // May a peer with this uid join the domain? Admins always; others if listed in its users (names
  // are looked up now). False for an unknown domain.
  bool allows(std::string_view domain, uid_t uid, bool admin) const;

 private:
  struct Dom;
  void loop();
  void step(Dom& d);
  void try_start(Dom& d);
  bool probe(Dom& d, std::string* why);
  bool nap(uint64_t ns);  // false: stopping
  uint64_t now() const { return opts_.clock->now_ns(); }
  void set_state(Dom& d, bool up, const std::string& reason, bool quiet = false);
  void write_status(const Dom& d, const std::string& line);

  MpsOptions opts_;
  std::vector<std::string> env_;  // gpuosd's environment at construction
  std::vector<std::unique_ptr<Dom>> doms_;  // helper-thread state

  mutable std::mutex mu_;  // guards pub_, poke_, stopping_; every wait of the helper is on cv_
  std::condition_variable cv_;
  std::vector<SpaceDomainStatus> pub_;
  bool poke_ = false;
  bool stopping_ = false;
  std::atomic<bool> stop_{false};  // read by the wait loops of children
  std::thread thread_;
  bool started_ = false;
  bool shut_down_ = false;
};

}  // namespace gpuos::daemon
