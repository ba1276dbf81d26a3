// SPDX-License-Identifier: Apache-2.0
// gpuosd server: the control socket and the single-threaded epoll loop around a Core.
//
// One thread calls start() then run(); request_stop() may be called from any thread (eventfd).
// With handle_signals, SIGTERM/SIGINT (which the caller must have blocked in every thread, see
// block_shutdown_signals) arrive through a signalfd and end run() in an orderly way: daemon_alive = 0
// and gates open in every control block, connections closed, socket removed.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "daemon/core/core.h"

namespace gpuos::daemon {

struct ServerOptions {
  std::string socket_path;             // required
  uid_t daemon_uid = 0;                // peers with this uid are admins
  std::optional<gid_t> admin_gid;      // members are admins
  bool handle_signals = false;         // SIGTERM/SIGINT via signalfd
  uint32_t max_connections = 320;      // tenants + clients at once; more are refused (ERR_LIMIT)
  // Lock-out guards: the non-admin connections of one share at most (a uid on gpuosd's socket, a pod
  // on its claims' sockets, a claim where no pod is known; 0 = no cap); slots beyond
  // max_connections that only admins may take, so `gpuos ps`/`gate` as root always get in; a
  // connection without a tenant that sends nothing for idle_timeout_ms is closed (0 = never).
  uint32_t max_connections_per_uid = 64;
  uint32_t admin_connections = 16;
  uint32_t idle_timeout_ms = 10000;
  std::function<uint64_t()> idle_clock;  // the idle timeout's clock (tests); empty = monotonic_ns
  // What a claim socket's peer is (its pod, its namespaces: claims.h); empty = read from /proc, its
  // pod proven by the kubelet's cgroup under pod_cgroups (pod_cgroup.h).
  std::function<ClaimPeer(pid_t, uid_t)> claim_peer_of;
  PodCgroups pod_cgroups;
  int tick_ms = 100;                   // Policy::tick period while a tenant is live (0 = none); the
                                       // policy may ask for earlier ticks (Policy::next_tick_ns)
  // Replies a peer may leave unread (per connection) before it is dropped at its next request.
  std::size_t max_queued_replies = 4096;
  std::string metrics_listen;          // "" = no metrics endpoint; else "HOST:PORT" (see MetricsHttp).
                                       // A failure to listen there is logged; the daemon runs on.
};

class MetricsHttp;

// Blocks SIGTERM and SIGINT in the calling thread (call in main before starting any thread).
void block_shutdown_signals();

class Server final : public ClaimSockets {
 public:
  Server(Core& core, ServerOptions opts);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Creates the socket directory, refuses if another daemon answers on the path, removes a stale
  // socket, binds, listens. False with a reason in *err on failure.
  bool start(std::string* err);
  // Serves until SHUTDOWN, a signal, or request_stop(); then shuts down in order. Returns 0.
  int run();
  void request_stop();
  // The metrics endpoint's TCP port once start() returned, 0 if there is none.
  uint16_t metrics_port() const;

  // ClaimSockets (core.h): a listening socket per Kubernetes claim, <socket dir>/claims/<uid>/.
  std::string open_claim_socket(const std::string& claim_uid) override;
  void close_claim_socket(const std::string& claim_uid) override;

 private:
  struct Conn {
    Connection c;
    int fd = -1;
    int pidfd = -1;
    std::deque<Outgoing> out;
    bool closing = false;
    bool want_out = false;
    uint64_t last_message_ns = 0;  // idle_clock at accept, then at each message received
    std::string share;             // whose max_connections_per_uid it counts against (non-admins)
  };

  void on_accept(int listen_fd);
  void on_readable(int fd);
  void on_writable(int fd);
  void apply(Conn& conn, Outcome&& o);
  void flush(Conn& conn);
  void close_conn(int fd);
  void update_events(Conn& conn);
  void shutdown_all();
  uint64_t idle_now() const;
  // Closes connections without a tenant that sent nothing for idle_timeout_ms; returns the next
  // time one may be due (UINT64_MAX: none).
  uint64_t expire_idle(uint64_t now);
  // Why a new connection of this share ("uid N", "pod UID", "claim UID") is refused ("" = it is
  // accepted).
  std::string refusal(const std::string& share, bool admin) const;
  // Answers a connection it will not serve with why, and closes it (logged at most once a second).
  void refuse_connection(int fd, const ucred& cred, gpuos_status status, const std::string& why);

  Core& core_;
  ServerOptions opts_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;
  int signal_fd_ = -1;
  ino_t socket_ino_ = 0;
  dev_t socket_dev_ = 0;
  bool stopping_ = false;
  bool pidfd_supported_ = true;
  uint64_t next_conn_id_ = 1;
  std::map<int, Conn> conns_;         // by socket fd
  std::map<int, int> pidfd_to_conn_;  // pidfd -> socket fd
  // Open non-admin connections by share (Conn::share): a host user's on gpuosd's socket, a pod's on
  // all of its claims' sockets together.
  std::map<std::string, uint32_t> conns_per_share_;
  uint64_t next_idle_check_ns_ = UINT64_MAX;  // idle_clock time of the next expire_idle
  uint64_t next_refusal_log_ns_ = 0;  // refusals are logged at most once a second
  uint64_t refusals_unlogged_ = 0;  // out of fds: the listening socket is not polled until one closes
  std::unique_ptr<MetricsHttp> metrics_;
  // Claims' sockets. Their directories outlive gpuosd (containers bind-mount them: a restarted
  // gpuosd's new socket must appear where the old one was); only unpreparing removes one.
  struct ClaimListener {
    std::string uid, path;
    ino_t ino = 0;
    dev_t dev = 0;
  };
  std::map<int, ClaimListener> claim_listeners_;  // by listening fd
  std::set<int> paused_listeners_;                // out of fds: not polled until a connection closes
};

}  // namespace gpuos::daemon
