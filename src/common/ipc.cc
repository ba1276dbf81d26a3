// SPDX-License-Identifier: Apache-2.0
#include "common/ipc.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpuos {

bool socket_path(char* buf, std::size_t len, char* why, std::size_t why_len) {
  const char* env = std::getenv("GPUOS_SOCKET");
  int n;
  if (env != nullptr && env[0] != '\0') {
    n = std::snprintf(buf, len, "%s", env);
  } else if (geteuid() == 0) {
    char sys[sizeof(sockaddr_un::sun_path)];
    n = system_socket_path(sys, sizeof(sys)) ? std::snprintf(buf, len, "%s", sys) : -1;
  } else if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && xdg[0] == '/') {
    n = std::snprintf(buf, len, "%s/gpuos/gpuosd.sock", xdg);
  } else {
    // No shared-directory fallback: any name under /tmp can be taken by another user first.
    if (why != nullptr && why_len != 0) {
      std::snprintf(why, why_len,
                    "no control socket path: XDG_RUNTIME_DIR is not set; set XDG_RUNTIME_DIR (your "
                    "login session's runtime directory) or GPUOS_SOCKET (e.g. /run/gpuos/gpuosd.sock)");
    }
    return false;
  }
  if (n > 0 && static_cast<std::size_t>(n) < len && static_cast<std::size_t>(n) < sizeof(sockaddr_un::sun_path)) {
    return true;
  }
  if (why != nullptr && why_len != 0) std::snprintf(why, why_len, "control socket path is longer than 107 bytes");
  return false;
}

bool system_socket_path(char* buf, std::size_t len) {
  const char* env = std::getenv("GPUOS_SYSTEM_SOCKET");
  const int n = std::snprintf(buf, len, "%s", env != nullptr && env[0] != '\0' ? env : "/run/gpuos/gpuosd.sock");
  return n > 0 && static_cast<std::size_t>(n) < len && static_cast<std::size_t>(n) < sizeof(sockaddr_un::sun_path);
}

int connect_default_daemon(char* path, std::size_t path_len, char* why, std::size_t why_len) {
  const bool have = socket_path(path, path_len, why, why_len);
  int fd = -EINVAL;
  if (have) {
    fd = connect_to_daemon(path, why, why_len);
    const char* env = std::getenv("GPUOS_SOCKET");
    if (fd >= 0 || (env != nullptr && env[0] != '\0') || geteuid() == 0) return fd;
  }
  // The user's own socket answered nothing: the system gpuosd, root's, serves every user.
  char sys[sizeof(sockaddr_un::sun_path)];
  if (!system_socket_path(sys, sizeof(sys)) || (have && std::strcmp(sys, path) == 0)) return fd;
  char sys_why[320];
  const int sfd = connect_to_daemon(sys, sys_why, sizeof(sys_why));
  if (sfd >= 0) {
    std::snprintf(path, path_len, "%s", sys);
    return sfd;
  }
  char first[320];
  std::snprintf(first, sizeof(first), "%s", why);
  std::snprintf(why, why_len, "%s; %s", first, sys_why);
  if (!have) std::snprintf(path, path_len, "%s", sys);
  return have ? fd : sfd;
}

bool check_socket_dir(const char* socket_path, uid_t uid, char* why, std::size_t why_len) {
  char dir[sizeof(sockaddr_un::sun_path) + 1];
  const char* slash = std::strrchr(socket_path, '/');
  if (slash == nullptr) {
    std::snprintf(dir, sizeof(dir), ".");
  } else if (slash == socket_path) {
    std::snprintf(dir, sizeof(dir), "/");
  } else {
    std::size_t n = static_cast<std::size_t>(slash - socket_path);
    if (n >= sizeof(dir)) {
      std::snprintf(why, why_len, "socket path %s is too long", socket_path);
      return false;
    }
    std::memcpy(dir, socket_path, n);
    dir[n] = '\0';
  }
  struct stat st;
  if (lstat(dir, &st) != 0) {
    std::snprintf(why, why_len, "socket directory %s: %s", dir, std::strerror(errno));
    return false;
  }
  if (S_ISLNK(st.st_mode)) {
    std::snprintf(why, why_len, "socket directory %s is a symlink; refusing it (use the real directory)", dir);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    std::snprintf(why, why_len, "socket directory %s is not a directory", dir);
    return false;
  }
  if (st.st_uid != 0 && st.st_uid != uid) {
    std::snprintf(why, why_len, "socket directory %s is owned by uid %u, not by root or uid %u; refusing it",
                  dir, static_cast<unsigned>(st.st_uid), static_cast<unsigned>(uid));
    return false;
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    std::snprintf(why, why_len,
                  "socket directory %s is writable by %s (mode %04o); refusing it: others could replace the "
                  "socket (make it 0755 or 0700)",
                  dir, (st.st_mode & S_IWOTH) ? "others" : "its group", static_cast<unsigned>(st.st_mode & 07777));
    return false;
  }
  return true;
}

bool trusted_daemon_uid(uid_t peer_uid) { return peer_uid == 0 || peer_uid == geteuid(); }

int connect_to_daemon(const char* path, char* why, std::size_t why_len) {
  if (!check_socket_dir(path, geteuid(), why, why_len)) return -EACCES;
  int fd = connect_control_socket(path);
  if (fd < 0) {
    std::snprintf(why, why_len, "no gpuosd at %s (%s)", path, std::strerror(-fd));
    return fd;
  }
  // The uid the listening process had at listen(): a daemon of another user would see (and could
  // gate, or read the swapped memory of) whatever we register with it.
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    int e = errno;
    std::snprintf(why, why_len, "cannot check the gpuosd at %s: SO_PEERCRED: %s", path, std::strerror(e));
    close(fd);
    return -e;
  }
  if (!trusted_daemon_uid(cred.uid)) {
    std::snprintf(why, why_len,
                  "refusing the gpuosd at %s: it runs as uid %u (pid %d), not as root or as uid %u (you)", path,
                  static_cast<unsigned>(cred.uid), static_cast<int>(cred.pid), static_cast<unsigned>(geteuid()));
    close(fd);
    return -EPERM;
  }
  return fd;
}

const char* status_name(int32_t status) {
  switch (status) {
    case GPUOS_OK: return "ok";
    case GPUOS_ERR_BAD_MESSAGE: return "bad message";
    case GPUOS_ERR_VERSION: return "version mismatch";
    case GPUOS_ERR_PERMISSION: return "permission denied";
    case GPUOS_ERR_NOT_FOUND: return "not found";
    case GPUOS_ERR_LIMIT: return "limit reached";
    case GPUOS_ERR_INTERNAL: return "internal error";
    case GPUOS_ERR_REFUSED: return "refused";
    default: return "error";
  }
}

void init_header(gpuos_msg_header* hdr, gpuos_msg_type type, uint32_t size, uint32_t seq) {
  hdr->magic = GPUOS_ABI_MAGIC;
  hdr->abi_version = GPUOS_ABI_VERSION;
  hdr->type = static_cast<uint16_t>(type);
  hdr->size = size;
  hdr->seq = seq;
}

std::size_t message_size(uint32_t type) {
  switch (type) {
    case GPUOS_MSG_REGISTER: return sizeof(gpuos_msg_register);
    case GPUOS_MSG_REGISTER_REPLY: return sizeof(gpuos_msg_register_reply);
    case GPUOS_MSG_LIST: return sizeof(gpuos_msg_list);
    case GPUOS_MSG_GPU_INFO: return sizeof(gpuos_msg_gpu_info);
    case GPUOS_MSG_TENANT_INFO: return sizeof(gpuos_msg_tenant_info);
    case GPUOS_MSG_LIST_END: return sizeof(gpuos_msg_reply);
    case GPUOS_MSG_SET_GATE: return sizeof(gpuos_msg_set_gate);
    case GPUOS_MSG_REPLY: return sizeof(gpuos_msg_reply);
    case GPUOS_MSG_SHUTDOWN: return sizeof(gpuos_msg_header);
    case GPUOS_MSG_ACTIVITY: return sizeof(gpuos_msg_activity);
    case GPUOS_MSG_SWAP_POOL: return sizeof(gpuos_msg_header);
    case GPUOS_MSG_SWAP_POOL_REPLY: return sizeof(gpuos_msg_swap_pool_reply);
    case GPUOS_MSG_SPACE_QUERY: return sizeof(gpuos_msg_space_query);
    case GPUOS_MSG_SPACE_INFO: return sizeof(gpuos_msg_space_info);
    case GPUOS_MSG_CLAIM_PREPARE: return sizeof(gpuos_msg_claim_prepare);
    case GPUOS_MSG_CLAIM_UNPREPARE: return sizeof(gpuos_msg_claim_unprepare);
    case GPUOS_MSG_TENANT_GPU: return sizeof(gpuos_msg_tenant_gpu);
    default: return 0;
  }
}

gpuos_status validate_message(const void* buf, std::size_t len, char* why, std::size_t why_len) {
  if (len < sizeof(gpuos_msg_header)) {
    std::snprintf(why, why_len, "message of %zu bytes is shorter than a header", len);
    return GPUOS_ERR_BAD_MESSAGE;
  }
  gpuos_msg_header hdr;
  std::memcpy(&hdr, buf, sizeof(hdr));
  if (hdr.magic != GPUOS_ABI_MAGIC) {
    std::snprintf(why, why_len, "bad magic 0x%08x", hdr.magic);
    return GPUOS_ERR_VERSION;
  }
  if (hdr.abi_version != GPUOS_ABI_VERSION) {
    std::snprintf(why, why_len, "ABI version %u not supported (this side speaks %u)",
                  static_cast<unsigned>(hdr.abi_version), GPUOS_ABI_VERSION);
    return GPUOS_ERR_VERSION;
  }
  std::size_t want = message_size(hdr.type);
  if (want == 0) {
    std::snprintf(why, why_len, "unknown message type %u", static_cast<unsigned>(hdr.type));
    return GPUOS_ERR_BAD_MESSAGE;
  }
  if (hdr.size != len || len != want) {
    std::snprintf(why, why_len, "message type %u: header says %u bytes, got %zu, expected %zu",
                  static_cast<unsigned>(hdr.type), hdr.size, len, want);
    return GPUOS_ERR_BAD_MESSAGE;
  }
  return GPUOS_OK;
}

void copy_name(char* dst, std::size_t dst_len, const char* src) {
  if (dst_len == 0) return;
  std::size_t n = src ? strnlen(src, dst_len - 1) : 0;
  if (n) std::memcpy(dst, src, n);
  std::memset(dst + n, 0, dst_len - n);
}

bool has_nul(const char* s, std::size_t len) { return std::memchr(s, '\0', len) != nullptr; }

int connect_control_socket(const char* path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (std::strlen(path) >= sizeof(addr.sun_path)) return -ENAMETOOLONG;
  std::strcpy(addr.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

int send_message(int sock, const void* msg, std::size_t len, int fd_to_send) {
  return send_message_fds(sock, msg, len, &fd_to_send, fd_to_send >= 0 ? 1 : 0);
}

int send_message_fds(int sock, const void* msg, std::size_t len, const int* fds, int nfds) {
  if (nfds < 0 || nfds > kMaxPassedFds) return -EINVAL;
  iovec iov{const_cast<void*>(msg), len};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
  if (nfds > 0) {
    std::memset(ctrl, 0, sizeof(ctrl));
    mh.msg_control = ctrl;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  for (;;) {
    ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (n >= 0) return static_cast<std::size_t>(n) == len ? 0 : -EIO;
    if (errno != EINTR) return -errno;
  }
}

long receive_message(int sock, void* buf, std::size_t cap, int* received_fd, int timeout_ms) {
  int count = 0;
  return receive_message_fds(sock, buf, cap, received_fd, received_fd != nullptr ? 1 : 0, &count, timeout_ms);
}

long receive_message_fds(int sock, void* buf, std::size_t cap, int* fds, int max_fds, int* nfds,
                         int timeout_ms) {
  *nfds = 0;
  for (int i = 0; i < max_fds; ++i) fds[i] = -1;
  auto close_kept = [&] {
    for (int i = 0; i < *nfds; ++i) {
      close(fds[i]);
      fds[i] = -1;
    }
    *nfds = 0;
  };
  if (timeout_ms >= 0) {
    pollfd p{sock, POLLIN, 0};
    for (;;) {
      int r = poll(&p, 1, timeout_ms);
      if (r > 0) break;
      if (r == 0) return -ETIMEDOUT;
      if (errno != EINTR) return -errno;
    }
  }
  iovec iov{buf, cap};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int) * 4)];
  mh.msg_control = ctrl;
  mh.msg_controllen = sizeof(ctrl);
  ssize_t n;
  do {
    n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno == ECONNRESET) {
    // The peer closed while something we sent was unread: that error is reported first, but what
    // the peer sent before closing (e.g. the reason it refused us) is still queued. Read it.
    mh.msg_controllen = sizeof(ctrl);
    mh.msg_flags = 0;
    do {
      n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return -ECONNRESET;
  }
  if (n < 0) return -errno;
  // Take every passed fd so none leaks; keep the first max_fds, in order, if the caller wants them.
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (*nfds < max_fds) {
        fds[(*nfds)++] = fd;
      } else {
        close(fd);
      }
    }
  }
  if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    close_kept();
    return -EMSGSIZE;
  }
  return n;
}

}  // namespace gpuos
