// SPDX-License-Identifier: Apache-2.0
// Control-socket plumbing shared by libgpuos.so, gpuosd and the CLI: where the socket lives, how a
// message is framed and validated, and sending/receiving one datagram with an optional fd.
// No exceptions, no allocation: the interposer calls these from inside tenant processes.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "gpuos/abi.h"

namespace gpuos {

// Resolves the control-socket path into buf: $GPUOS_SOCKET if set; else the system socket
// (system_socket_path) for root; else $XDG_RUNTIME_DIR/gpuos/gpuosd.sock. There is no fallback under
// /tmp: another user could create /tmp/gpuos-<uid> first and serve a daemon of their own there.
// Returns false, with the reason in why (when given), if XDG_RUNTIME_DIR is needed and unset or the
// path does not fit (sun_path is 108 bytes).
bool socket_path(char* buf, std::size_t len, char* why = nullptr, std::size_t why_len = 0);

// The system gpuosd's socket, root's: $GPUOS_SYSTEM_SOCKET if set (tests point it at a private
// daemon), else /run/gpuos/gpuosd.sock. False if it does not fit.
bool system_socket_path(char* buf, std::size_t len);

// connect_to_daemon on the default socket, as every client finds gpuosd: socket_path(); for a user
// other than root without $GPUOS_SOCKET, when no daemon answers there (or XDG_RUNTIME_DIR is unset),
// the system socket next, with the same checks (its directory, a daemon running as root or as us):
// one root gpuosd serves every user. *path gets the socket connected to, else the first tried.
// Returns the fd, or -errno with the reasons for both in why.
int connect_default_daemon(char* path, std::size_t path_len, char* why, std::size_t why_len);

// Whether the directory holding socket_path may hold a control socket that `uid` trusts: a
// directory itself (lstat: not a symlink), owned by root or by uid, not writable by group or
// others (anyone who can write there can replace the socket). False with a reason otherwise.
bool check_socket_dir(const char* socket_path, uid_t uid, char* why, std::size_t why_len);

// Whether a daemon whose process runs as peer_uid is trusted by this process: root or its own
// effective uid.
bool trusted_daemon_uid(uid_t peer_uid);

// What every client (interposer, CLI) uses to reach gpuosd: checks the socket directory
// (check_socket_dir for our euid), connects, then checks the uid of the process listening on the
// other end (SO_PEERCRED): root or our own, else it is refused. Returns the fd, or -errno with a
// one-line reason in why: -EACCES untrusted directory, -EPERM untrusted daemon, else connect's.
int connect_to_daemon(const char* path, char* why, std::size_t why_len);

// "limit reached", "permission denied", ... for a gpuos_status; "error" for unknown values.
const char* status_name(int32_t status);

// Fills a header for a message of `type` whose whole size is `size`.
void init_header(gpuos_msg_header* hdr, gpuos_msg_type type, uint32_t size, uint32_t seq);

// The exact size a message of `type` must have; 0 for unknown types.
std::size_t message_size(uint32_t type);

// Checks magic, ABI version, known type and exact size of a received datagram of `len` bytes.
// On failure returns the status to reply with and writes a human-readable reason into why.
gpuos_status validate_message(const void* buf, std::size_t len, char* why, std::size_t why_len);

// Copies src into a fixed char array, truncating, always NUL-terminating.
void copy_name(char* dst, std::size_t dst_len, const char* src);
// True if the array holds a NUL within its bounds.
bool has_nul(const char* s, std::size_t len);

// Connects a SOCK_SEQPACKET|SOCK_CLOEXEC socket to path. Returns the fd or -errno.
int connect_control_socket(const char* path);

// Sends one message; passes fd_to_send with SCM_RIGHTS when >= 0. Returns 0 or -errno.
int send_message(int sock, const void* msg, std::size_t len, int fd_to_send = -1);
// Sends one message passing nfds (0..kMaxPassedFds) fds with SCM_RIGHTS, in order.
constexpr int kMaxPassedFds = 2;
int send_message_fds(int sock, const void* msg, std::size_t len, const int* fds, int nfds);

// Receives one datagram into buf (cap bytes). Waits up to timeout_ms (-1: forever).
// Returns its length; 0 on orderly close; -ETIMEDOUT; -EMSGSIZE if it did not fit; other -errno.
// A passed fd, if any, is stored in *received_fd (else -1); it is closed if received_fd is null.
// A message the peer sent before closing is returned even if its close reset the connection.
long receive_message(int sock, void* buf, std::size_t cap, int* received_fd, int timeout_ms);
// As receive_message, keeping up to max_fds passed fds in fds[0..*nfds) (in the order sent; the
// rest are closed; all are closed on -EMSGSIZE). Unused entries of fds are -1.
long receive_message_fds(int sock, void* buf, std::size_t cap, int* fds, int max_fds, int* nfds,
                         int timeout_ms);

}  // namespace gpuos
