// SPDX-License-Identifier: Apache-2.0
#include "interpose/runtime.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <span>

#include "common/ipc.h"
#include "common/tenant_numbers.h"
#include "interpose/activity.h"
#include "interpose/carry_over.h"
#include "interpose/quiescence.h"
#include "interpose/stream_work.h"
#include "interpose/swap.h"

namespace gpuos::interpose {

std::atomic<gpuos_control_block*> g_control{nullptr};
std::atomic<int> g_active_captures{0};
std::atomic<bool> g_swappable{false};
std::atomic<int64_t> g_device_access{0};

namespace {

// All of these are constant-initialised: no global constructor runs at load time.
std::atomic<int> g_log_level{-1};
std::mutex g_init_mu;  // guards driver loading and registration (slow paths only)
GpuosDriverTable g_driver;
std::atomic<bool> g_driver_loaded{false};
bool g_driver_failed = false;
std::atomic<DlsymFn> g_real_dlsym{nullptr};
std::atomic<bool> g_refused{false};
std::atomic<int> g_socket{-1};       // connection to gpuosd; kept open for the tenant's life
std::atomic<pid_t> g_daemon_pid{0};  // gpuosd's pid as SO_PEERCRED gave it (0: not known here)
LocalBlocks g_local;  // used when running without a daemon (gate always open, no limits)
bool g_atfork_installed = false;
std::atomic<bool> g_told_class_lowered{false};  // the lowered class is said once per process

int log_level() {
  int lvl = g_log_level.load(std::memory_order_relaxed);
  if (lvl >= 0) return lvl;
  lvl = static_cast<int>(LogLevel::kWarn);
  if (const char* s = std::getenv("GPUOS_LOG_LEVEL")) {
    if (!std::strcmp(s, "error")) lvl = 0;
    else if (!std::strcmp(s, "warn")) lvl = 1;
    else if (!std::strcmp(s, "info")) lvl = 2;
    else if (!std::strcmp(s, "debug")) lvl = 3;
  }
  g_log_level.store(lvl, std::memory_order_relaxed);
  return lvl;
}

// Parses a decimal integer in [lo, hi]; returns fallback (and warns) on anything else.
long env_long(const char* name, long fallback, long lo, long hi) {
  const char* s = std::getenv(name);
  if (s == nullptr || *s == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
    log(LogLevel::kWarn, "ignoring %s=%s (want an integer in %ld..%ld)", name, s, lo, hi);
    return fallback;
  }
  return v;
}

void init_local_blocks() {
  std::memset(&g_local, 0, sizeof(g_local));
  g_local.grants.magic = g_local.cb.magic = GPUOS_ABI_MAGIC;
  g_local.grants.abi_version = g_local.cb.abi_version = GPUOS_ABI_VERSION;
  g_local.grants.size = sizeof(g_local.grants);
  g_local.cb.size = sizeof(g_local.cb);
  g_local.grants.gate = GPUOS_GATE_OPEN;
}

// After fork() the child shares the parent's mapping and socket: it must not report into the
// parent's block. It starts unregistered and registers on its own first governed call.
void after_fork_in_child() {
  gpuos_control_block* cb = g_control.load(std::memory_order_relaxed);
  if (cb != nullptr && cb != &g_local.cb) unmap_blocks(cb);
  if (int fd = g_socket.exchange(-1); fd >= 0) close(fd);
  g_control.store(nullptr, std::memory_order_relaxed);
  g_active_captures.store(0, std::memory_order_relaxed);
  g_monitor_running.store(false, std::memory_order_relaxed);  // threads do not survive fork
  g_control_users.reset_after_fork();
  new (&g_init_mu) std::mutex();  // the parent may have held it at fork time
}

void default_name(char* buf, std::size_t len) {
  if (const char* n = std::getenv("GPUOS_TENANT_NAME"); n != nullptr && *n != '\0') {
    copy_name(buf, len, n);
    return;
  }
  char exe[256] = {};
  ssize_t k = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  const char* base = "tenant";
  if (k > 0) {
    exe[k] = '\0';
    const char* slash = std::strrchr(exe, '/');
    base = slash ? slash + 1 : exe;
  }
  copy_name(buf, len, base);
}

// Talks to gpuosd. Returns the mapped control block and the connected socket (*sock_out), or null
// with a reason in why.
gpuos_control_block* register_with_daemon(char* why, std::size_t why_len, int* sock_out,
                                          uint32_t previous_id = 0) {
  char path[108];
  // Checks the socket directory and that the daemon runs as root or as us: registering with another
  // user's daemon would let it gate us and read our swapped memory. A user's own socket first, then
  // the system one (root's gpuosd).
  int sock = connect_default_daemon(path, sizeof(path), why, why_len);
  if (sock < 0) return nullptr;
  gpuos_msg_register req{};
  init_header(&req.hdr, GPUOS_MSG_REGISTER, sizeof(req), 1);
  req.pid = getpid();
  // The numbers `gpuos run` (or gpuos-dra's CDI spec) set, read by the parser they were written for
  // (tenant_numbers.h); one that does not parse is left at its default, and said.
  TenantNumbers asked;
  read_tenant_env(&asked, [](const char* var, const char* value, const char* want) {
    log(LogLevel::kWarn, "ignoring %s=%s (want %s)", var, value, want);
  });
  put_numbers(asked, &req);
  default_name(req.name, sizeof(req.name));
  req.previous_tenant_id = previous_id;
  if (const char* dom = std::getenv("GPUOS_SPACE_DOMAIN"); dom != nullptr) {
    copy_name(req.space_domain, sizeof(req.space_domain), dom);
  }
  // GPUOS_SPACE_ALWAYS_JOIN=1: placed launches never skip their forward join (stream_work.h), for
  // a program suspected of issuing stream work past gpuos.
  if (env_long("GPUOS_SPACE_ALWAYS_JOIN", 0, 0, 1) == 1) g_stream_work_unseen.store(true, std::memory_order_seq_cst);
  int rc = send_message(sock, &req, sizeof(req));
  alignas(8) char buf[GPUOS_MSG_MAX_SIZE + 1];
  int fds[2] = {-1, -1};  // the grant block, the control block
  int nfds = 0;
  auto close_fds = [&] {
    for (int& fd : fds) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  };
  // A daemon that refuses the connection itself (limit reached) replies at once and closes, so the
  // send may fail: its reply is still queued, and says why.
  long n = receive_message_fds(sock, buf, sizeof(buf), fds, 2, &nfds, rc == 0 ? 5000 : 0);
  if (n <= 0) {
    if (rc != 0) {
      std::snprintf(why, why_len, "sending REGISTER to %s: %s", path, std::strerror(-rc));
    } else {
      std::snprintf(why, why_len, "no REGISTER reply from %s: %s", path,
                    n == 0 ? "connection closed" : std::strerror(static_cast<int>(-n)));
    }
    close(sock);
    return nullptr;
  }
  char reason[GPUOS_TEXT_MAX];
  gpuos_msg_register_reply rep{};
  if (validate_message(buf, static_cast<std::size_t>(n), reason, sizeof(reason)) != GPUOS_OK ||
      reinterpret_cast<gpuos_msg_header*>(buf)->type != GPUOS_MSG_REGISTER_REPLY) {
    // The daemon may have answered with a generic REPLY carrying its reason.
    if (validate_message(buf, static_cast<std::size_t>(n), reason, sizeof(reason)) == GPUOS_OK &&
        reinterpret_cast<gpuos_msg_header*>(buf)->type == GPUOS_MSG_REPLY) {
      gpuos_msg_reply r;
      std::memcpy(&r, buf, sizeof(r));
      r.text[sizeof(r.text) - 1] = '\0';
      std::snprintf(why, why_len, "gpuosd refused registration (%s): %s", status_name(r.status), r.text);
    } else {
      std::snprintf(why, why_len, "bad REGISTER reply: %s", reason);
    }
    close_fds();
    close(sock);
    return nullptr;
  }
  std::memcpy(&rep, buf, sizeof(rep));
  rep.text[sizeof(rep.text) - 1] = '\0';
  const bool known_class = rep.tenant_class == GPUOS_CLASS_GUARANTEED || rep.tenant_class == GPUOS_CLASS_BEST_EFFORT;
  if (rep.status != GPUOS_OK || nfds != 2 || rep.control_block_size != sizeof(gpuos_control_block) ||
      rep.grant_block_size != sizeof(gpuos_grant_block) || !known_class) {
    std::snprintf(why, why_len, "gpuosd refused registration (%s): %s", status_name(rep.status),
                  rep.status != GPUOS_OK ? rep.text
                  : !known_class         ? "its reply grants an unknown class"
                                         : "its blocks were not passed, or have other sizes");
    close_fds();
    close(sock);
    return nullptr;
  }
  gpuos_control_block* cb = map_blocks(fds[0], fds[1]);
  const int map_errno = errno;
  close_fds();
  if (cb == nullptr) {
    std::snprintf(why, why_len, "mapping the grant and control blocks: %s", std::strerror(map_errno));
    close(sock);
    return nullptr;
  }
  const gpuos_grant_block* g = grants_of(cb);
  if (g->magic != GPUOS_ABI_MAGIC || g->abi_version != GPUOS_ABI_VERSION || g->size != sizeof(gpuos_grant_block) ||
      cb->magic != GPUOS_ABI_MAGIC || cb->abi_version != GPUOS_ABI_VERSION || cb->size != sizeof(gpuos_control_block)) {
    std::snprintf(why, why_len, "blocks have ABI %u/%u, sizes %u/%u; this library speaks %u, %zu/%zu",
                  g->abi_version, cb->abi_version, g->size, cb->size, GPUOS_ABI_VERSION,
                  sizeof(gpuos_grant_block), sizeof(gpuos_control_block));
    unmap_blocks(cb);
    close(sock);
    return nullptr;
  }
  *sock_out = sock;
  log(LogLevel::kInfo, "registered with gpuosd as tenant %u (%s)", rep.tenant_id, req.name);
  // `gpuos run --class guaranteed` that gpuosd lowered: the user sees it here (gpuos run has exec'd
  // the program), once per process, with gpuosd's reason.
  if (req.tenant_class == GPUOS_CLASS_GUARANTEED && rep.tenant_class != GPUOS_CLASS_GUARANTEED &&
      !g_told_class_lowered.exchange(true, std::memory_order_relaxed)) {
    log(LogLevel::kWarn, "warning: asked for class guaranteed, gpuosd admitted tenant %u as best-effort (%s)",
        rep.tenant_id, rep.text);
  }
  return cb;
}

// The pid of the daemon at the other end of `sock` (SO_PEERCRED; 0 when unknown or outside our pid
// namespace).
pid_t peer_pid(int sock) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  return getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : 0;
}

// Notes gpuosd's pid: whether gpuosd itself is gone is told by its process, never by our
// connection alone.
void note_daemon_pid(int sock) { g_daemon_pid.store(peer_pid(sock), std::memory_order_relaxed); }

// GPUOS_REPORT_AT_EXIT=1: one line of this process's counters on stderr when it exits, handy
// when running without a daemon.
void report_at_exit() {
  gpuos_control_block* cb = g_control.load(std::memory_order_acquire);
  if (cb == nullptr) return;
  auto get = [](uint64_t& v) { return static_cast<unsigned long long>(std::atomic_ref<uint64_t>(v).load()); };
  log(LogLevel::kError,
      "exit report: launches=%llu graph_launches=%llu captured_launches=%llu gate_waits=%llu "
      "alloc_calls=%llu alloc_failures=%llu mem_used_bytes=%llu mem_peak_bytes=%llu "
      "untracked_frees=%llu contexts=%llu streams=%llu",
      get(cb->launches), get(cb->graph_launches), get(cb->captured_launches), get(cb->gate_waits),
      get(cb->alloc_calls), get(cb->alloc_failures), get(cb->mem_used_bytes),
      get(cb->mem_peak_bytes), get(cb->untracked_frees), get(cb->contexts_created),
      get(cb->streams_created));
}

}  // namespace

bool futex_wait(const uint32_t* word, uint32_t expected, long timeout_ms) {
  return futex_wait_ns(word, expected, static_cast<uint64_t>(timeout_ms) * 1000000u);
}

bool futex_wait_ns(const uint32_t* word, uint32_t expected, uint64_t timeout_ns) {
  timespec t{static_cast<time_t>(timeout_ns / 1000000000u), static_cast<long>(timeout_ns % 1000000000u)};
  const int saved = errno;
  const bool interrupted = syscall(SYS_futex, word, FUTEX_WAIT, expected, &t, nullptr, 0) != 0 && errno == EINTR;
  errno = saved;  // inside the application's CUDA call: leave its errno as it was
  return interrupted;
}

void note_signalled(gpuos_control_block* cb) {
  if (std::atomic_ref<uint32_t>(cb->signalled).exchange(1, std::memory_order_relaxed) == 0) notify_activity(cb);
}

bool daemon_connection_lost() {
  int fd = g_socket.load(std::memory_order_relaxed);
  if (fd < 0) return true;
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLHUP | POLLERR)) != 0;
}

void log(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) > log_level()) return;
  char line[512];
  int n = std::snprintf(line, sizeof(line), "gpuos[%d]: ", static_cast<int>(getpid()));
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
  va_end(ap);
  std::size_t len = std::strlen(line);
  line[len++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, len);
  (void)ignored;
}

DlsymFn real_dlsym() {
  DlsymFn fn = g_real_dlsym.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  // dlsym moved into libc proper in glibc 2.34; older ones only have the 2.2.5 version.
  void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  fn = p != nullptr ? reinterpret_cast<DlsymFn>(p) : &::dlsym;
  g_real_dlsym.store(fn, std::memory_order_release);
  return fn;
}

const GpuosDriverTable* real_driver() {
  if (g_driver_loaded.load(std::memory_order_acquire)) return &g_driver;
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_driver_loaded.load(std::memory_order_relaxed)) return &g_driver;
  if (g_driver_failed) return nullptr;
  char err[256];
  if (!load_driver(&g_driver, nullptr, real_dlsym(), err, sizeof(err))) {
    g_driver_failed = true;
    log(LogLevel::kError, "%s", err);
    return nullptr;
  }
  g_driver_loaded.store(true, std::memory_order_release);
  return &g_driver;
}

gpuos_control_block* ensure_registered() {
  gpuos_control_block* cb = g_control.load(std::memory_order_acquire);
  if (cb != nullptr) return cb;
  if (g_refused.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(g_init_mu);
  cb = g_control.load(std::memory_order_relaxed);
  if (cb != nullptr) return cb;
  if (!g_atfork_installed) {
    pthread_atfork(nullptr, nullptr, &after_fork_in_child);
    g_atfork_installed = true;
  }
  char why[400];
  int sock = -1;
  cb = register_with_daemon(why, sizeof(why), &sock);
  if (cb == nullptr) {
    // A claim's container was sent to gpuosd by the claim (gpuos-dra's CDI spec): ungoverned, it
    // would run outside every limit the claim set. It fails closed whatever GPUOS_ON_NO_DAEMON says.
    const char* claim = std::getenv("GPUOS_CLAIM_UID");
    const char* mode = std::getenv("GPUOS_ON_NO_DAEMON");
    const bool claimed = claim != nullptr && *claim != '\0';
    if (claimed || (mode != nullptr && !std::strcmp(mode, "refuse"))) {
      if (claimed) {
        log(LogLevel::kError, "%s; refusing CUDA: claim %.64s runs governed or not at all (GPUOS_CLAIM_UID)", why, claim);
      } else {
        log(LogLevel::kError, "%s; refusing CUDA (GPUOS_ON_NO_DAEMON=refuse)", why);
      }
      g_refused.store(true, std::memory_order_relaxed);
      return nullptr;
    }
    log(LogLevel::kWarn, "%s; running ungoverned (pass-through)", why);
    init_local_blocks();
    cb = &g_local.cb;
    g_control.store(cb, std::memory_order_release);
  } else {
    note_daemon_pid(sock);
    g_socket.store(sock, std::memory_order_relaxed);
    g_control.store(cb, std::memory_order_release);
    start_activity_monitor(cb);  // after publishing: the monitor follows g_control
  }
  if (const char* r = std::getenv("GPUOS_REPORT_AT_EXIT"); r != nullptr && !std::strcmp(r, "1")) {
    std::atexit(&report_at_exit);
  }
  return cb;
}

bool refused() { return g_refused.load(std::memory_order_relaxed); }

int daemon_socket() { return g_socket.load(std::memory_order_relaxed); }

namespace {

bool g_lost_reported = false;  // monitor thread only
bool g_other_daemon_reported = false;  // monitor thread only

// How long a re-registration waits for calls that still use the old control block.
constexpr uint64_t kCarryOverWaitNs = 5000000000ull;

}  // namespace

void maintain_daemon_connection() {
  gpuos_control_block* old = g_control.load(std::memory_order_acquire);
  if (old == nullptr || old == &g_local.cb || !daemon_connection_lost()) return;
  const bool governed = gate_binds(old);
  if (!g_lost_reported) {
    log(LogLevel::kWarn, governed ? "lost the connection to gpuosd, which still runs and renews this tenant's grant: "
                                    "its gate binds as gpuosd sets it; re-registering every second"
                                  : "lost gpuosd; running on the last grant and re-registering every second");
    g_lost_reported = true;
  }
  if (governed) {
    // Only the connection is gone (issue #62: a tenant held by an admin shut it down, pointed
    // GPUOS_SOCKET at nothing, and ran unheld): gpuosd still governs this process through its blocks
    // and renews its lease, so its gate, pacing and swap commands bind as they did. Memory it swapped
    // out comes back when gpuosd says (SWAP_IN), never locally; re-registering waits until then.
    if (std::atomic_ref<uint32_t>(old->swap_state).load(std::memory_order_acquire) != GPUOS_SWAP_RESIDENT) return;
  } else {
    // gpuosd is gone (it said so, or its process is, or it stopped renewing the lease): keep running
    // on the last grant, never hang: a closed gate no longer binds (gate_binds), once swapped-out
    // memory is back on the GPU (until then the tenant waits: its data is in the pool it mapped).
    // Waiters notice within their futex timeout; the wake makes it at once.
    if (!swap_in_locally(old)) return;
    syscall(SYS_futex, &grants_of(old)->gate, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
    syscall(SYS_futex, &grants_of(old)->gate_closed_devices, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
  }
  char why[400];
  int sock = -1;
  // Ask for the id it had, so that `gpuos ps`, metrics and admins see the same tenant.
  gpuos_control_block* cb = register_with_daemon(why, sizeof(why), &sock, grants_of(old)->tenant_id);
  if (cb == nullptr) return;  // still no daemon: try again later
  if (governed) {
    // The gpuosd that governs this tenant still runs: only it may take the tenant back (another
    // daemon, one of this user's own, would hand it an open gate while its grant here is held).
    const pid_t was = g_daemon_pid.load(std::memory_order_relaxed);
    if (was > 0 && peer_pid(sock) != was) {
      if (!g_other_daemon_reported) {
        log(LogLevel::kWarn, "the gpuosd at GPUOS_SOCKET is not the one that governs this tenant (pid %d), which "
            "still runs: staying with its grant", static_cast<int>(was));
        g_other_daemon_reported = true;
      }
      unmap_blocks(cb);
      close(sock);
      return;
    }
  }
  // Each feature carries its own state over (carry_over.h): what calls act on at once before the
  // switch, the rest once no call uses the old block any more. The old mapping stays: a thread may
  // still hold a pointer into it.
  const std::span<const CarryOver* const> hooks = carry_over_hooks();
  for (const CarryOver* h : hooks) {
    if (h->seed != nullptr) h->seed(old, cb);
  }
  note_daemon_pid(sock);
  g_control.store(cb, std::memory_order_seq_cst);  // seq_cst: see quiescence.h
  if (int stale = g_socket.exchange(sock); stale >= 0) close(stale);
  const unsigned retired = g_control_users.retire();
  if (!g_control_users.wait_quiet(retired, kCarryOverWaitNs)) {
    // Bounded: a call can be blocked in the driver for long. What it adds to the old block after
    // this is not carried over.
    log(LogLevel::kWarn, "re-registration: %u calls still use the old control block after %llu ms; carrying over without them",
        g_control_users.users(retired), static_cast<unsigned long long>(kCarryOverWaitNs / 1000000));
  }
  for (const CarryOver* h : hooks) {
    if (h->carry != nullptr) h->carry(old, cb);
  }
  g_lost_reported = false;
  log(LogLevel::kWarn, "re-registered with gpuosd; counters carried over");
  notify_activity(cb);
}

void publish_devices(gpuos_control_block* cb) {
  const GpuosDriverTable* d = real_driver();
  if (cb == nullptr || d == nullptr || d->cuDeviceGetCount == nullptr || d->cuDeviceGet == nullptr ||
      d->cuDeviceGetUuid_v2 == nullptr) {
    return;
  }
  int count = 0;
  if (d->cuDeviceGetCount(&count) != CUDA_SUCCESS || count <= 0) return;
  if (count > GPUOS_MAX_DEVICES) count = GPUOS_MAX_DEVICES;
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    CUuuid u{};
    if (d->cuDeviceGet(&dev, i) != CUDA_SUCCESS || d->cuDeviceGetUuid_v2(&u, dev) != CUDA_SUCCESS) return;
    for (int b = 0; b < 16; ++b) {
      std::atomic_ref<uint8_t>(cb->device_uuid[i][b]).store(static_cast<uint8_t>(u.bytes[b]), std::memory_order_relaxed);
    }
  }
  std::atomic_ref<uint32_t>(cb->device_count).store(static_cast<uint32_t>(count), std::memory_order_release);
}

bool daemon_gone() {
  if (!daemon_connection_lost()) return false;
  const pid_t pid = g_daemon_pid.load(std::memory_order_relaxed);
  if (pid <= 0) return false;  // not visible from here: the lease alone tells
  const int saved = errno;
  const bool gone = kill(pid, 0) != 0 && errno == ESRCH;
  errno = saved;  // inside the application's CUDA call: leave its errno as it was
  return gone;
}

bool gate_binds(const gpuos_control_block* cb) {
  // A block a re-registration replaced: gpuosd's word is the current block's. A thread that still
  // waits at the old gate goes on once the current gate lets everything through, or binds no more.
  if (const gpuos_control_block* now = g_control.load(std::memory_order_acquire);
      now != nullptr && now != cb && now != &g_local.cb) {
    return gate_binds(now) && grant_load(grants_of(now)->gate) != GPUOS_GATE_OPEN;
  }
  const gpuos_grant_block* g = grants_of(cb);
  // A closed gate is a lease: a gpuosd that stopped looking (SIGSTOP, hung) for longer than
  // GPUOS_GATE_LEASE_NS no longer holds this tenant (0: no lease). Whether the connection is open is
  // the tenant's own doing (it can shut it down): not a release (issue #62); gpuosd's exit is
  // (daemon_alive, written at an orderly exit, or its process gone).
  const uint64_t hb = grant_load(g->daemon_heartbeat_ns);
  const bool lapsed = hb != 0 && monotonic_ns() > hb + GPUOS_GATE_LEASE_NS;
  return grant_load(g->daemon_alive, std::memory_order_relaxed) != 0 && !lapsed && !daemon_gone();
}

int LaunchDevice::ordinal() {
  if (ordinal_ != -2) return ordinal_;
  ordinal_ = -1;
  const GpuosDriverTable* d = real_driver();
  CUdevice current = 0;
  int count = 0;
  if (d == nullptr || d->cuCtxGetDevice == nullptr || d->cuDeviceGet == nullptr || d->cuDeviceGetCount == nullptr ||
      d->cuCtxGetDevice(&current) != CUDA_SUCCESS || d->cuDeviceGetCount(&count) != CUDA_SUCCESS) {
    return ordinal_;
  }
  // The ordinals as publish_devices numbered them (cuDeviceGet(i)).
  for (int i = 0; i < count && i < GPUOS_MAX_DEVICES; ++i) {
    CUdevice dev = 0;
    if (d->cuDeviceGet(&dev, i) == CUDA_SUCCESS && dev == current) return ordinal_ = i;
  }
  return ordinal_;
}

bool gate_lets_through(const gpuos_grant_block* g, uint32_t gate, LaunchDevice* device) {
  if (gate == GPUOS_GATE_OPEN) return true;
  if (gate != GPUOS_GATE_PARTIAL || device == nullptr) return false;
  const int o = device->ordinal();
  return o >= 0 && (grant_load(g->gate_closed_devices) >> o & 1u) == 0;
}

bool wait_at_gate(gpuos_control_block* cb, LaunchDevice* device) {
  const gpuos_grant_block* g = grants_of(cb);
  if (gate_lets_through(g, grant_load(g->gate), device)) return false;  // open on its device: no wait
  // Released (gpuosd gone or its lease lapsed) with the memory back: run on, no wait to count.
  if (!gate_binds(cb) && swap_in_locally(cb)) return true;
  const uint64_t t0 = monotonic_ns();
  std::atomic_ref<uint64_t>(cb->gate_waits).fetch_add(1, std::memory_order_relaxed);
  std::atomic_ref<uint32_t> waiting(cb->waiting);
  waiting.store(1, std::memory_order_relaxed);
  notify_activity(cb);  // a waiting tenant is runnable: the policy may grant it time
  bool released = false;
  for (uint32_t word = grant_load(g->gate); !gate_lets_through(g, word, device); word = grant_load(g->gate)) {
    // Swapped-out memory comes back first; if there is no room for it yet, keep waiting.
    if (!gate_binds(cb) && swap_in_locally(cb)) {
      // (A block a re-registration replaced goes by the current one's gate: no warning.)
      if (g_control.load(std::memory_order_acquire) == cb) {
        log(LogLevel::kWarn, "gpuosd is gone or has not renewed this tenant's closed gate for %.0f s; continuing",
            GPUOS_GATE_LEASE_NS / 1e9);
      }
      released = true;
      break;
    }
    // Partial: its device's bit of gate_closed_devices clears when it may go (gpuosd keeps that
    // word in step with the gate: all bits while closed, none while open); otherwise the gate word.
    const int o = word == GPUOS_GATE_PARTIAL && device != nullptr ? device->ordinal() : -1;
    const uint32_t closed = o >= 0 ? grant_load(g->gate_closed_devices) : 0;
    bool interrupted = false;
    if (o >= 0 && (closed >> o & 1u) != 0) {
      interrupted = futex_wait(&g->gate_closed_devices, closed, 50);
    } else if (o < 0 && word != GPUOS_GATE_OPEN) {
      interrupted = futex_wait(&g->gate, word, 50);
    }
    if (interrupted) note_signalled(cb);
  }
  std::atomic_ref<uint32_t>(cb->signalled).store(0, std::memory_order_relaxed);
  waiting.store(0, std::memory_order_relaxed);
  notify_activity(cb);
  const uint64_t ns = monotonic_ns() - t0;
  std::atomic_ref<uint64_t>(cb->gate_wait_ns).fetch_add(ns, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(cb->gate_wait_hist[gpuos_gate_wait_bucket(ns)]).fetch_add(1, std::memory_order_relaxed);
  return released;
}

namespace {

// Re-registration: the gate's wait counters (wait_at_gate).
void carry_gate_waits(gpuos_control_block* from, gpuos_control_block* to) {
  carry_add(from->gate_waits, to->gate_waits);
  carry_add(from->gate_wait_ns, to->gate_wait_ns);
  for (int i = 0; i < GPUOS_GATE_WAIT_BUCKETS; ++i) carry_add(from->gate_wait_hist[i], to->gate_wait_hist[i]);
}

// Re-registration: the device map (publish_devices). A daemon restart does not change which GPU
// each of this process's ordinals is, so it is copied, as publish_devices writes it: the UUIDs,
// then the count (release).
void carry_device_map(gpuos_control_block* from, gpuos_control_block* to) {
  uint32_t count = std::atomic_ref<uint32_t>(from->device_count).load(std::memory_order_acquire);
  if (count == 0) return;
  if (count > GPUOS_MAX_DEVICES) count = GPUOS_MAX_DEVICES;
  for (uint32_t i = 0; i < count; ++i) {
    for (int b = 0; b < 16; ++b) {
      const uint8_t v = std::atomic_ref<uint8_t>(from->device_uuid[i][b]).load(std::memory_order_relaxed);
      std::atomic_ref<uint8_t>(to->device_uuid[i][b]).store(v, std::memory_order_relaxed);
    }
  }
  std::atomic_ref<uint32_t>(to->device_count).store(count, std::memory_order_release);
}

}  // namespace

constinit const CarryOver kGateCarryOver{"gate", nullptr, &carry_gate_waits};
constinit const CarryOver kDeviceMapCarryOver{"device map", nullptr, &carry_device_map};

}  // namespace gpuos::interpose
