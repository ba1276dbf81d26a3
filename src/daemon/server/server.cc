// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/ipc.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/log.h"
#include "daemon/server/metrics.h"

namespace gpuos::daemon {
namespace {


std::string errstr(int e) { return std::strerror(e); }

// mkdir -p; the last component gets `mode`, missing intermediate ones 0755.
int pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

void block_shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Server::Server(Core& core, ServerOptions opts) : core_(core), opts_(std::move(opts)) {}

Server::~Server() {
  core_.set_claim_sockets(nullptr);
  metrics_.reset();
  for (auto& [fd, c] : conns_) {
    if (c.pidfd >= 0) close(c.pidfd);
    close(fd);
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  for (auto& [fd, l] : claim_listeners_) close(fd);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  if (signal_fd_ >= 0) close(signal_fd_);
}

bool Server::start(std::string* err) {
  const std::string& path = opts_.socket_path;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    *err = "socket path \"" + path + "\" is empty or longer than 107 bytes";
    return false;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);

  std::size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    std::string dir = path.substr(0, slash);
    if (!make_dirs(dir, dir == "/run/gpuos" ? 0755 : 0700, 0755, err)) return false;
  }
  // The clients check the same (check_socket_dir): a directory others can write to, or one of
  // another user's, lets them put their own socket, and so their own daemon, in our place.
  {
    char why[400];
    if (!check_socket_dir(path.c_str(), geteuid(), why, sizeof(why))) {
      *err = why;
      return false;
    }
  }

  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      *err = path + " exists and is not a socket; not touching it";
      return false;
    }
    int probe = connect_control_socket(path.c_str());
    if (probe >= 0) {
      close(probe);
      *err = "another gpuosd is already serving " + path;
      return false;
    }
    if (probe != -ECONNREFUSED) {
      *err = "cannot probe existing socket " + path + ": " + errstr(-probe);
      return false;
    }
    if (::unlink(path.c_str()) != 0) {
      *err = "cannot remove stale socket " + path + ": " + errstr(errno);
      return false;
    }
    log::info("removed stale socket %s", path.c_str());
  }

  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) {
    *err = "socket: " + errstr(errno);
    return false;
  }
  const bool root = geteuid() == 0;
  mode_t old = umask(0177);  // never a moment with a wider mode than intended
  int rc = bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int bind_errno = errno;
  umask(old);
  if (rc != 0) {
    *err = "bind " + path + ": " + errstr(bind_errno);
    return false;
  }
  // Root: any user's tenants may connect (authorisation is per message, by SO_PEERCRED).
  if (::chmod(path.c_str(), root ? 0666 : 0600) != 0) {
    *err = "chmod " + path + ": " + errstr(errno);
    ::unlink(path.c_str());
    return false;
  }
  if (::stat(path.c_str(), &st) == 0) {
    socket_ino_ = st.st_ino;
    socket_dev_ = st.st_dev;
  }
  if (listen(listen_fd_, 128) != 0) {
    *err = "listen: " + errstr(errno);
    ::unlink(path.c_str());
    return false;
  }

  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || stop_fd_ < 0) {
    *err = "epoll/eventfd: " + errstr(errno);
    ::unlink(path.c_str());
    return false;
  }
  auto add = [&](int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    return epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) == 0;
  };
  bool ok = add(listen_fd_) && add(stop_fd_);
  if (ok && opts_.handle_signals) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signal_fd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    ok = signal_fd_ >= 0 && add(signal_fd_);
  }
  if (!ok) {
    *err = "epoll setup: " + errstr(errno);
    ::unlink(path.c_str());
    return false;
  }
  // The claims a previous gpuosd admitted: their tenants come back to the same sockets.
  core_.set_claim_sockets(this);
  for (const auto& [uid, claim] : core_.claims().all()) {
    if (std::string no = open_claim_socket(uid); !no.empty()) log::error("claim %s: %s", uid.c_str(), no.c_str());
  }
  log::info("listening on %s (mode %o), %zu GPU(s), policies \"%s\", \"%s\", \"%s\"", path.c_str(),
            root ? 0666u : 0600u, core_.gpus().size(), core_.time_gate().name(), core_.space_policy().name(),
            core_.memory_policy().name());
  if (!opts_.metrics_listen.empty()) {
    MetricsContext mc;
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    mc.start_time_seconds = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
#ifdef GPUOS_VERSION
    mc.version = GPUOS_VERSION;
#endif
    metrics_ = std::make_unique<MetricsHttp>(core_, mc);
    std::string merr;
    if (metrics_->start(opts_.metrics_listen, epoll_fd_, &merr)) {
      log::info("metrics on http://%s/metrics (port %u)", opts_.metrics_listen.c_str(),
                static_cast<unsigned>(metrics_->port()));
    } else {
      log::error("%s; running without a metrics endpoint", merr.c_str());
      metrics_.reset();
    }
  }
  return true;
}

std::string Server::open_claim_socket(const std::string& claim_uid) {
  for (const auto& [fd, l] : claim_listeners_) {
    if (l.uid == claim_uid) return "";  // listening already
  }
  const std::string dir = claim_socket_dir(opts_.socket_path, claim_uid);
  const std::string path = dir + "/gpuosd.sock";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return "claim socket path " + path + " is longer than 107 bytes";
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // Containers of any uid reach the path (a claim does not say which uid its containers run as); who
  // may use it is checked at accept, against the claim's pod (claim_peer_refusal).
  std::string err;
  if (!make_dirs(dir, 0755, 0755, &err)) return err;
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {  // a previous gpuosd's: it no longer answers (we own the dir)
    if (!S_ISSOCK(st.st_mode)) return path + " exists and is not a socket; not touching it";
    if (::unlink(path.c_str()) != 0) return "cannot remove stale socket " + path + ": " + errstr(errno);
  }
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return "socket: " + errstr(errno);
  mode_t old = umask(0177);
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int bind_errno = errno;
  umask(old);
  if (rc != 0) {
    close(fd);
    return "bind " + path + ": " + errstr(bind_errno);
  }
  ClaimListener l;
  l.uid = claim_uid;
  l.path = path;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (::chmod(path.c_str(), 0666) != 0 || ::stat(path.c_str(), &st) != 0 || listen(fd, 64) != 0 ||
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    err = "claim socket " + path + ": " + errstr(errno);
    close(fd);
    ::unlink(path.c_str());
    return err;
  }
  l.ino = st.st_ino;
  l.dev = st.st_dev;
  claim_listeners_.emplace(fd, std::move(l));
  log::info("claim %s: listening on %s", claim_uid.c_str(), path.c_str());
  return "";
}

void Server::close_claim_socket(const std::string& claim_uid) {
  for (auto it = claim_listeners_.begin(); it != claim_listeners_.end(); ++it) {
    if (it->second.uid != claim_uid) continue;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->first, nullptr);
    close(it->first);
    paused_listeners_.erase(it->first);
    struct stat st;
    const std::string path = it->second.path;
    if (::lstat(path.c_str(), &st) == 0 && st.st_ino == it->second.ino && st.st_dev == it->second.dev) {
      ::unlink(path.c_str());
    }
    ::rmdir(path.substr(0, path.find_last_of('/')).c_str());  // (only if empty)
    claim_listeners_.erase(it);
    return;
  }
}

uint16_t Server::metrics_port() const { return metrics_ ? metrics_->port() : 0; }

void Server::request_stop() {
  uint64_t one = 1;
  if (stop_fd_ >= 0) {
    ssize_t r = ::write(stop_fd_, &one, sizeof(one));
    (void)r;
  }
}

int Server::run() {
  epoll_event evs[64];
  const uint64_t period_ns = opts_.tick_ms > 0 ? static_cast<uint64_t>(opts_.tick_ms) * 1000000ull : 0;
  uint64_t next_periodic = monotonic_ns() + period_ns;
  while (!stopping_) {
    // The next tick: the regular period while a tenant is live (nothing to do without tenants: the
    // loop then sleeps until an event), or earlier if the policy asks (e.g. a time slice ends).
    uint64_t now = monotonic_ns();
    uint64_t deadline = UINT64_MAX;
    if (period_ns != 0 && core_.live_tenants() > 0) deadline = next_periodic;
    if (uint64_t want = core_.next_tick_ns(now); want != 0) deadline = std::min(deadline, want);
    int timeout_ms = -1;
    uint64_t wake = deadline;
    if (metrics_) wake = std::min(wake, metrics_->next_deadline_ns());
    if (wake != UINT64_MAX) {
      uint64_t left = wake > now ? wake - now : 0;
      timeout_ms = static_cast<int>(std::min<uint64_t>((left + 999999) / 1000000, 60000));  // round up
    }
    if (next_idle_check_ns_ != UINT64_MAX) {  // on its own clock (idle_clock)
      const uint64_t inow = idle_now();
      uint64_t left = next_idle_check_ns_ > inow ? next_idle_check_ns_ - inow : 0;
      int idle_ms = static_cast<int>(std::min<uint64_t>((left + 999999) / 1000000, 60000));
      timeout_ms = timeout_ms < 0 ? idle_ms : std::min(timeout_ms, idle_ms);
    }
    int n = epoll_wait(epoll_fd_, evs, 64, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      log::error("epoll_wait: %s", std::strerror(errno));
      break;
    }
    for (int i = 0; i < n && !stopping_; ++i) {
      int fd = evs[i].data.fd;
      uint32_t e = evs[i].events;
      if (fd == listen_fd_ || claim_listeners_.count(fd) != 0) {
        on_accept(fd);
      } else if (fd == stop_fd_) {
        log::info("stop requested");
        stopping_ = true;
      } else if (fd == signal_fd_) {
        signalfd_siginfo si;
        if (::read(signal_fd_, &si, sizeof(si)) == sizeof(si)) {
          log::info("received %s, shutting down", strsignal(static_cast<int>(si.ssi_signo)));
          stopping_ = true;
        }
      } else if (metrics_ && metrics_->owns(fd)) {
        metrics_->on_event(fd, e, monotonic_ns());
      } else if (auto p = pidfd_to_conn_.find(fd); p != pidfd_to_conn_.end()) {
        auto c = conns_.find(p->second);
        if (c != conns_.end()) {
          log::debug("pid %d exited (pidfd)", static_cast<int>(c->second.c.peer.pid));
          close_conn(p->second);
        }
      } else if (conns_.count(fd) != 0) {
        if (e & EPOLLOUT) on_writable(fd);
        if (conns_.count(fd) != 0 && (e & (EPOLLIN | EPOLLHUP | EPOLLERR))) on_readable(fd);
      }
    }
    now = monotonic_ns();
    if (metrics_) metrics_->expire(now);
    if (!stopping_ && next_idle_check_ns_ != UINT64_MAX) {
      const uint64_t inow = idle_now();
      if (inow >= next_idle_check_ns_) next_idle_check_ns_ = expire_idle(inow);
    }
    if (!stopping_ && deadline != UINT64_MAX && now >= deadline) {
      core_.tick(now);
      next_periodic = now + period_ns;
    }
  }
  shutdown_all();
  return 0;
}

uint64_t Server::idle_now() const { return opts_.idle_clock ? opts_.idle_clock() : monotonic_ns(); }

uint64_t Server::expire_idle(uint64_t now) {
  const uint64_t limit = static_cast<uint64_t>(opts_.idle_timeout_ms) * 1000000ull;
  uint64_t next = UINT64_MAX;
  std::vector<int> idle;
  for (const auto& [fd, c] : conns_) {
    if (c.c.tenant_id != 0) continue;  // a tenant's connection is quiet by design
    const uint64_t due = c.last_message_ns + limit;
    if (due <= now) idle.push_back(fd);
    else next = std::min(next, due);
  }
  for (int fd : idle) {
    auto it = conns_.find(fd);
    log::info("closing connection %llu of pid %d uid %u: nothing received for %u ms",
              static_cast<unsigned long long>(it->second.c.id), static_cast<int>(it->second.c.peer.pid),
              static_cast<unsigned>(it->second.c.peer.uid), opts_.idle_timeout_ms);
    close_conn(fd);
  }
  return next;
}

std::string Server::refusal(const std::string& share, bool admin) const {
  const std::size_t open = conns_.size();
  if (admin) {
    // Admins may also take the reserved slots that nobody else can fill.
    if (open >= static_cast<std::size_t>(opts_.max_connections) + opts_.admin_connections) {
      return "too many connections (" + std::to_string(open) + " open, admin slots included)";
    }
    return "";
  }
  if (opts_.max_connections_per_uid != 0) {
    auto it = conns_per_share_.find(share);
    if (it != conns_per_share_.end() && it->second >= opts_.max_connections_per_uid) {
      return "too many connections from " + share + " (" + std::to_string(it->second) +
             " open; max_connections_per_uid)";
    }
  }
  if (open >= opts_.max_connections) {
    return "too many connections (" + std::to_string(open) + " open; the rest are reserved for admins)";
  }
  return "";
}

void Server::on_accept(int listen_fd) {
  std::string claim_uid;
  if (auto cl = claim_listeners_.find(listen_fd); cl != claim_listeners_.end()) claim_uid = cl->second.uid;
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of fds: the pending connection stays queued and the listening socket readable. Stop
        // polling it (no busy loop) until a connection closes and frees an fd.
        log::warn("accept: %s; not accepting until a connection closes", std::strerror(errno));
        epoll_event ev{};
        ev.data.fd = listen_fd;
        epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd, &ev);
        paused_listeners_.insert(listen_fd);
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        log::warn("accept: %s", std::strerror(errno));
      }
      return;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      log::warn("SO_PEERCRED: %s", std::strerror(errno));
      close(fd);
      continue;
    }
    std::vector<gid_t> groups;
    if (opts_.admin_gid && cred.uid != 0 && cred.uid != opts_.daemon_uid) {
      groups = peer_groups(cred.pid, cred.uid, cred.gid);
    }
    std::string share = "uid " + std::to_string(cred.uid);
    // A claim's socket is the claim's containers' only: any other process (another pod's, or any
    // host user's, root's included) would be governed with the claim's settings.
    if (!claim_uid.empty()) {
      const Claim* claim = core_.claims().find(claim_uid);
      ClaimPeer peer;
      if (claim != nullptr) {
        peer = opts_.claim_peer_of ? opts_.claim_peer_of(cred.pid, cred.uid)
                                   : claim_peer_of(cred.pid, cred.uid, "/proc", opts_.pod_cgroups);
      }
      const std::string why =
          claim == nullptr ? "claim " + claim_uid + " is no longer prepared" : claim_peer_refusal(*claim, peer);
      if (!why.empty()) {
        refuse_connection(fd, cred, GPUOS_ERR_PERMISSION, why);
        continue;
      }
      // A pod's connections count against its pod, on all its claims' sockets together: pods all
      // run as root, and by uid root in one pod took every other pod's share (issue #62).
      share = peer.pod_uid.empty() ? "claim " + claim_uid : "pod " + peer.pod_uid;
    }
    // Nobody is an admin on a claim's socket: a container's root is not the node's.
    const bool admin = claim_uid.empty() && is_admin(cred.uid, opts_.daemon_uid, groups, opts_.admin_gid);
    // Limits per share (a user, a pod) and a reserve for admins: no user or pod can take every slot
    // and lock out the others (or root's `gpuos ps`). The refusal is a reply, so the client can say why.
    if (std::string why = refusal(share, admin); !why.empty()) {
      refuse_connection(fd, cred, GPUOS_ERR_LIMIT, why);
      continue;
    }
    Conn c;
    c.fd = fd;
    c.c.id = next_conn_id_++;
    c.c.peer.pid = cred.pid;
    c.c.peer.uid = cred.uid;
    c.c.peer.gid = cred.gid;
    c.c.peer.admin = admin;
    c.c.claim_uid = claim_uid;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      log::warn("epoll_ctl: %s", std::strerror(errno));
      close(fd);
      continue;
    }
    log::debug("connection %llu from pid %d uid %u%s", static_cast<unsigned long long>(c.c.id),
               static_cast<int>(cred.pid), static_cast<unsigned>(cred.uid), c.c.peer.admin ? " (admin)" : "");
    if (opts_.idle_timeout_ms != 0) {
      c.last_message_ns = idle_now();
      next_idle_check_ns_ =
          std::min<uint64_t>(next_idle_check_ns_, c.last_message_ns + static_cast<uint64_t>(opts_.idle_timeout_ms) * 1000000ull);
    }
    if (!admin) ++conns_per_share_[share];
    c.share = std::move(share);
    conns_.emplace(fd, std::move(c));
  }
}

void Server::refuse_connection(int fd, const ucred& cred, gpuos_status status, const std::string& why) {
  Outgoing o = Core::make_reply(GPUOS_MSG_REPLY, 0, status, 0, why.c_str());
  send_message(fd, o.bytes.data(), o.bytes.size());
  close(fd);
  // At most one line a second: a client retrying in a loop must not flood the journal.
  const uint64_t now = monotonic_ns();
  if (now >= next_refusal_log_ns_) {
    log::warn("refused a connection from pid %d uid %u: %s%s", static_cast<int>(cred.pid),
              static_cast<unsigned>(cred.uid), why.c_str(),
              refusals_unlogged_ ? (" (and " + std::to_string(refusals_unlogged_) + " more not logged)").c_str() : "");
    refusals_unlogged_ = 0;
    next_refusal_log_ns_ = now + 1000000000ull;
  } else {
    ++refusals_unlogged_;
  }
}

void Server::on_readable(int fd) {
  alignas(8) unsigned char buf[GPUOS_MSG_MAX_SIZE + 1];
  for (int budget = 64; budget > 0; --budget) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    Conn& conn = it->second;
    if (conn.closing) return;
    long n = receive_message(fd, buf, sizeof(buf), nullptr, -1);
    if (n == -EAGAIN || n == -EWOULDBLOCK) return;
    if (n == 0) {
      close_conn(fd);
      return;
    }
    if (n == -EMSGSIZE) {
      apply(conn, core_.handle_receive_error(conn.c, n));
      continue;
    }
    if (n < 0) {
      log::debug("connection %llu: receive: %s", static_cast<unsigned long long>(conn.c.id),
                 std::strerror(static_cast<int>(-n)));
      close_conn(fd);
      return;
    }
    if (opts_.idle_timeout_ms != 0) conn.last_message_ns = idle_now();
    apply(conn, core_.handle_message(conn.c, buf, static_cast<std::size_t>(n)));
    if (stopping_) return;
  }
}

void Server::apply(Conn& conn, Outcome&& o) {
  int fd = conn.fd;
  // What the peer left unread from earlier requests: one answer may be long (a LIST of many
  // tenants on many GPUs), a peer that does not read is one whose backlog grows.
  const std::size_t backlog = conn.out.size();
  for (Outgoing& out : o.replies) conn.out.push_back(std::move(out));
  if (o.close) conn.closing = true;
  if (o.registered != 0 && pidfd_supported_) {
    int pfd = pidfd_open(conn.c.peer.pid);
    if (pfd >= 0) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = pfd;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, pfd, &ev) == 0) {
        conn.pidfd = pfd;
        pidfd_to_conn_[pfd] = fd;
      } else {
        close(pfd);
      }
    } else if (errno == ENOSYS) {
      pidfd_supported_ = false;
      log::info("pidfd_open unsupported: noticing tenant exits by socket close only");
    } else if (errno == ESRCH) {
      conn.closing = true;  // already gone
    }
  }
  if (o.shutdown) stopping_ = true;
  if (backlog > opts_.max_queued_replies) {
    log::warn("connection %llu: peer does not read its replies; dropping it",
              static_cast<unsigned long long>(conn.c.id));
    close_conn(fd);
    return;
  }
  flush(conn);
}

void Server::flush(Conn& conn) {
  int fd = conn.fd;
  while (!conn.out.empty()) {
    const Outgoing& m = conn.out.front();
    const int nfds = m.fds[1] >= 0 ? 2 : m.fds[0] >= 0 ? 1 : 0;
    int r = send_message_fds(fd, m.bytes.data(), m.bytes.size(), m.fds.data(), nfds);
    if (r == -EAGAIN || r == -EWOULDBLOCK) {
      if (!conn.want_out) {
        conn.want_out = true;
        update_events(conn);
      }
      return;
    }
    if (r != 0) {
      log::debug("connection %llu: send: %s", static_cast<unsigned long long>(conn.c.id), std::strerror(-r));
      close_conn(fd);
      return;
    }
    conn.out.pop_front();
  }
  if (conn.closing) {
    close_conn(fd);
    return;
  }
  if (conn.want_out) {
    conn.want_out = false;
    update_events(conn);
  }
}

void Server::on_writable(int fd) {
  auto it = conns_.find(fd);
  if (it != conns_.end()) flush(it->second);
}

void Server::update_events(Conn& conn) {
  epoll_event ev{};
  ev.events = EPOLLIN | (conn.want_out ? EPOLLOUT : 0u);
  ev.data.fd = conn.fd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn.fd, &ev);
}

void Server::close_conn(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Connection c = it->second.c;
  int pfd = it->second.pidfd;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  if (pfd >= 0) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, pfd, nullptr);
    pidfd_to_conn_.erase(pfd);
    close(pfd);
  }
  if (!c.peer.admin) {
    auto u = conns_per_share_.find(it->second.share);
    if (u != conns_per_share_.end() && --u->second == 0) conns_per_share_.erase(u);
  }
  conns_.erase(it);  // drops queued replies (they may borrow the tenant's memfd) before it closes
  close(fd);
  for (int lfd : paused_listeners_) {  // an fd is free again
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = lfd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, lfd, &ev);
  }
  paused_listeners_.clear();
  core_.connection_closed(c);
}

void Server::shutdown_all() {
  if (metrics_) metrics_->close_all();
  core_.shutdown();
  while (!conns_.empty()) close_conn(conns_.begin()->first);
  struct stat st;
  if (::lstat(opts_.socket_path.c_str(), &st) == 0 && st.st_ino == socket_ino_ && st.st_dev == socket_dev_) {
    ::unlink(opts_.socket_path.c_str());
  }
  if (listen_fd_ >= 0) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
    close(listen_fd_);
    listen_fd_ = -1;
  }
  // Claims stay prepared (the file keeps them) and their directories stay for the containers that
  // bind-mount them; only the sockets go, as the main one does.
  for (auto& [fd, l] : claim_listeners_) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    if (::lstat(l.path.c_str(), &st) == 0 && st.st_ino == l.ino && st.st_dev == l.dev) ::unlink(l.path.c_str());
  }
  claim_listeners_.clear();
  core_.set_claim_sockets(nullptr);
  log::info("stopped");
}

}  // namespace gpuos::daemon
