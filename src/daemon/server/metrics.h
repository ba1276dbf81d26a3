// SPDX-License-Identifier: Apache-2.0
// gpuosd metrics: the Prometheus text exposition (format 0.0.4) of the core's state, and a minimal
// HTTP/1.x endpoint serving it from the daemon's epoll loop.
//
// render_metrics is a pure function of the core (plus the daemon's start time): tests call it
// directly. MetricsHttp owns a non-blocking TCP listener and its client connections; the server
// adds their fds to its epoll set and hands every event on them to MetricsHttp::on_event. Nothing a
// client sends or fails to send can block or crash the daemon:
//  - requests are read into a bounded buffer (kMaxRequestBytes); larger: 431 and close;
//  - a client has kRequestTimeoutMs to send its request head and to read the reply; then it is closed;
//  - at most kMaxClients connections at once; a new one beyond that closes the oldest;
//  - only "GET /metrics" (or HEAD; a query string is ignored) gets 200; other paths get 404, other
//    methods 405, a malformed request line 400. Every response closes the connection.
//
// Thread-safety: none; the event-loop thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "daemon/core/core.h"

namespace gpuos::daemon {

struct MetricsContext {
  double start_time_seconds = 0;  // daemon start, seconds since the Unix epoch
  std::string version;            // gpuos version for gpuos_daemon_info
  uint64_t scrapes = 0;           // GET /metrics answered so far (MetricsHttp keeps it)
};

// The whole exposition (HELP and TYPE for every family; families of live tenants only).
std::string render_metrics(Core& core, const MetricsContext& ctx, uint64_t now_mono_ns);

// A label value for the text format: valid UTF-8 whatever the bytes (a tenant chose its name), its
// controls, bidi overrides and invalid bytes shown as `gpuos ps` shows them (common/text.h:
// \x1b, \u202e, a backslash as \\), then backslash and double quote escaped for the format.
std::string escape_label_value(const std::string& v);

class MetricsHttp {
 public:
  static constexpr std::size_t kMaxRequestBytes = 8192;
  static constexpr std::size_t kMaxClients = 32;
  static constexpr int kRequestTimeoutMs = 5000;

  MetricsHttp(Core& core, MetricsContext ctx);
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  // Binds and listens on addr ("HOST:PORT" as in [metrics] listen) and adds the listener to
  // epoll_fd. False with a reason in *err.
  bool start(const std::string& addr, int epoll_fd, std::string* err);
  // The bound port (useful with port 0), 0 if not listening.
  uint16_t port() const { return port_; }
  // True if fd is the listener or one of its clients.
  bool owns(int fd) const { return fd == listen_fd_ || clients_.count(fd) != 0; }
  void on_event(int fd, uint32_t events, uint64_t now_mono_ns);
  // Earliest client deadline (CLOCK_MONOTONIC ns), UINT64_MAX if none.
  uint64_t next_deadline_ns() const;
  // Closes clients past their deadline.
  void expire(uint64_t now_mono_ns);
  void close_all();

  uint64_t requests() const { return requests_; }

 private:
  struct Client {
    int fd = -1;
    std::string in;
    std::string out;
    std::size_t sent = 0;
    bool responding = false;
    uint64_t deadline_ns = 0;
    uint64_t seq = 0;  // accept order (the oldest goes first when full)
  };
  void on_accept(uint64_t now_mono_ns);
  void on_readable(Client& c, uint64_t now_mono_ns);
  void respond(Client& c, int status, const char* reason, const std::string& content_type,
               const std::string& body, bool head_only, uint64_t now_mono_ns);
  void on_writable(Client& c);
  void close_client(int fd);

  Core& core_;
  MetricsContext ctx_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  uint16_t port_ = 0;
  uint64_t requests_ = 0;
  uint64_t accepted_ = 0;
  std::map<int, Client> clients_;
};

}  // namespace gpuos::daemon
