// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/mps.h"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/clock.h"
#include "common/log.h"

extern char** environ;

namespace gpuos::daemon {
namespace {


constexpr uint64_t kMs = 1000000ull;
constexpr std::size_t kMaxOutput = 2048;  // of a child's output kept for a reason

std::string errstr(int e) { return std::strerror(e); }

// One line of at most kMaxOutput bytes: newlines and control characters become spaces, runs of
// them one; leading and trailing space trimmed.
std::string one_line(const std::string& s) {
  std::string out;
  for (char ch : s) {
    bool space = static_cast<unsigned char>(ch) < 0x20 || ch == ' ';
    if (space) {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += ch;
    }
    if (out.size() >= kMaxOutput) break;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// mkdir -p: missing components get `mode` (parents 0755); an existing last component must be a
// directory, and with `own` a real one (not a symlink someone planted) owned by gpuosd's uid.
bool make_dir(const std::string& dir, mode_t mode, bool own, std::string* err) {
  struct stat st;
  if ((own ? ::lstat(dir.c_str(), &st) : ::stat(dir.c_str(), &st)) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      *err = dir + " exists and is not a directory";
      return false;
    }
    if (own && st.st_uid != geteuid()) {
      *err = dir + " is owned by uid " + std::to_string(st.st_uid) + ", not gpuosd's uid " +
             std::to_string(geteuid());
      return false;
    }
    return true;
  }
  std::size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    std::string parent = dir.substr(0, slash);
    if (::stat(parent.c_str(), &st) != 0 && !make_dir(parent, 0755, false, err)) return false;
  }
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
    *err = "cannot create " + dir + ": " + errstr(errno);
    return false;
  }
  if (::chmod(dir.c_str(), mode) != 0) {  // not subject to the umask
    *err = "chmod " + dir + ": " + errstr(errno);
    return false;
  }
  return true;
}

bool executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The binary to run: an absolute path as it is, a name looked up in PATH (of gpuosd's environment).
bool resolve_binary(const std::string& name, const std::vector<std::string>& env, std::string* path,
                    std::string* why) {
  if (name.find('/') != std::string::npos) {
    if (executable_file(name)) {
      *path = name;
      return true;
    }
    *why = "mps_control " + name + ": " + (::access(name.c_str(), F_OK) == 0 ? "not an executable file"
                                                                               : errstr(ENOENT));
    return false;
  }
  std::string search = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (const auto& e : env) {
    if (e.rfind("PATH=", 0) == 0) search = e.substr(5);
  }
  std::size_t start = 0;
  while (start <= search.size()) {
    std::size_t colon = search.find(':', start);
    std::string dir = search.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    if (dir[0] == '/' && executable_file(candidate)) {
      *path = candidate;
      return true;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  *why = "mps_control \"" + name + "\" not found in PATH (" + search + ")";
  return false;
}

// A child process: spawned, later waited for. The output (stdout + stderr) goes to a memfd (or a
// file the caller opened) so that neither a chatty child nor a daemonised grandchild still holding
// it can block or SIGPIPE anyone.
struct Child {
  pid_t pid = -1;
  int out_fd = -1;  // owned
  std::string spawn_error;
  bool timed_out = false;
  bool interrupted = false;  // killed because the supervisor stops
  int status = 0;            // waitpid status once reaped
  bool reaped = false;

  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  Child(Child&& o) noexcept { *this = std::move(o); }
  Child& operator=(Child&& o) noexcept {
    std::swap(pid, o.pid);
    std::swap(out_fd, o.out_fd);
    spawn_error = std::move(o.spawn_error);
    timed_out = o.timed_out;
    interrupted = o.interrupted;
    status = o.status;
    reaped = o.reaped;
    return *this;
  }
  ~Child() {
    if (pid > 0 && !reaped) {  // never leave a zombie, whatever path we left by
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    if (out_fd >= 0) ::close(out_fd);
  }

  bool ok() const { return reaped && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  std::string output() const {
    if (out_fd < 0) return "";
    char buf[kMaxOutput];
    ssize_t n = ::pread(out_fd, buf, sizeof(buf), 0);
    return n > 0 ? one_line(std::string(buf, static_cast<std::size_t>(n))) : "";
  }
  // "exited with status 3: <output>", "was killed by signal 9", "did not finish within 5 s", ...
  std::string describe(uint64_t timeout_ms) const {
    std::string s;
    if (!spawn_error.empty()) return "cannot run it: " + spawn_error;
    if (interrupted) return "interrupted (gpuosd stopping)";
    if (timed_out) {
      s = "did not finish within " + std::to_string(timeout_ms) + " ms (killed)";
    } else if (WIFEXITED(status)) {
      s = "exited with status " + std::to_string(WEXITSTATUS(status));
      if (WEXITSTATUS(status) == 127) s += " (could not execute it)";
    } else if (WIFSIGNALED(status)) {
      s = std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
          strsignal(WTERMSIG(status)) + ")";
    } else {
      s = "ended with wait status " + std::to_string(status);
    }
    std::string out = output();
    if (!out.empty()) s += ": " + out;
    return s;
  }
};

// Spawns path args... with env; stdin is `input` (or /dev/null), stdout and stderr go to out_fd
// (taken over; -1: a fresh memfd). In its own process group, signals unblocked and defaulted, cwd /.
Child spawn(const std::string& path, const std::vector<std::string>& args, const std::vector<std::string>& env,
            const std::string& input, int out_fd) {
  Child c;
  c.out_fd = out_fd >= 0 ? out_fd : memfd_create("gpuosd-mps", MFD_CLOEXEC);
  if (c.out_fd < 0) {
    c.spawn_error = "memfd_create: " + errstr(errno);
    return c;
  }
  int in_fd = -1;
  if (input.empty()) {
    in_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  } else {
    // The whole input goes into the pipe before the child exists (it is far below the pipe's
    // capacity), so writing can neither block nor raise SIGPIPE.
    int p[2];
    if (pipe2(p, O_CLOEXEC) == 0) {
      ssize_t n = ::write(p[1], input.data(), input.size());
      ::close(p[1]);
      if (n == static_cast<ssize_t>(input.size())) {
        in_fd = p[0];
      } else {
        ::close(p[0]);
        errno = EIO;
      }
    }
  }
  if (in_fd < 0) {
    c.spawn_error = "stdin: " + errstr(errno);
    return c;
  }

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
  posix_spawn_file_actions_adddup2(&fa, c.out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, c.out_fd, 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 29))
  posix_spawn_file_actions_addchdir_np(&fa, "/");  // do not pin gpuosd's cwd
#endif
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // gpuosd's own descriptors are close-on-exec; this also covers any a library (the driver) opened
  // without it, which a long-lived control daemon would otherwise keep open.
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
  // gpuosd blocks SIGTERM/SIGINT in every thread (they arrive via signalfd); a child must not
  // inherit that mask, or the control daemon could not be stopped by them.
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM}) {
    sigaddset(&defaults, s);
  }
  posix_spawnattr_setsigmask(&at, &empty);
  posix_spawnattr_setsigdefault(&at, &defaults);
  posix_spawnattr_setpgroup(&at, 0);  // own group: a terminal's Ctrl-C to gpuosd does not reach it
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);

  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  pid_t pid = -1;
  int rc = posix_spawn(&pid, path.c_str(), &fa, &at, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  ::close(in_fd);
  if (rc != 0) {
    c.spawn_error = path + ": " + errstr(rc);
    return c;
  }
  c.pid = pid;
  return c;
}

class RealClock final : public MpsClock {
 public:
  uint64_t now_ns() override { return monotonic_ns(); }
  void wait_until(std::unique_lock<std::mutex>& lk, std::condition_variable& cv, uint64_t deadline_ns,
                  uint64_t poll_ns, const std::function<bool()>& done) override {
    if (deadline_ns == UINT64_MAX && poll_ns == 0) {
      cv.wait(lk, done);
      return;
    }
    const uint64_t now = monotonic_ns();
    if (now >= deadline_ns) return;
    uint64_t ns = std::min<uint64_t>(deadline_ns - now, 86400 * 1000 * kMs);  // no chrono overflow
    if (poll_ns > 0) ns = std::min(ns, poll_ns);
    cv.wait_for(lk, std::chrono::nanoseconds(ns), done);
  }
};

// Waits until the child exits, the deadline of `clock` passes (then SIGKILL to its group) or *stop
// is set (same). Always reaps it. The pauses between polls wait on cv, so stopping wakes them.
void wait_child(Child& c, uint64_t deadline_ns, const std::atomic<bool>* stop, MpsClock& clock, std::mutex& mu,
                std::condition_variable& cv) {
  if (c.pid <= 0 || c.reaped) return;
  const auto stopping = [stop] { return stop != nullptr && stop->load(std::memory_order_relaxed); };
  uint64_t poll_ns = 500 * 1000;
  for (;;) {
    pid_t r = ::waitpid(c.pid, &c.status, WNOHANG);
    if (r == c.pid) {
      c.reaped = true;
      return;
    }
    if (r < 0 && errno != EINTR) {  // ECHILD: not ours any more (cannot happen); give up on it
      c.reaped = true;
      c.status = 0xff00;  // "exited with status 255"
      return;
    }
    const bool stopped = stopping();
    if (stopped || clock.now_ns() >= deadline_ns) {
      (stopped ? c.interrupted : c.timed_out) = true;
      ::kill(-c.pid, SIGKILL);
      ::kill(c.pid, SIGKILL);
      while (::waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {
      }
      c.reaped = true;
      return;
    }
    {
      std::unique_lock<std::mutex> lk(mu);
      clock.wait_until(lk, cv, deadline_ns, poll_ns, stopping);
    }
    poll_ns = std::min<uint64_t>(poll_ns * 2, 20 * kMs);
  }
}

// The cheap liveness check: the pid in <pipe>/nvidia-cuda-mps-control.pid (written by the control
// daemon of recent drivers, removed by quit). 1: that process lives and is an MPS control daemon
// (comm "nvidia-cuda-mps"); 0: it is gone (or a zombie); -1: unknown (no or bad pid file, or the
// pid now names another program): only the full probe can tell.
int control_pid_state(const std::string& pipe) {
  char buf[32] = {};
  int fd = ::open((pipe + "/nvidia-cuda-mps-control.pid").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return -1;
  ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return -1;
  char* end = nullptr;
  long pid = std::strtol(buf, &end, 10);
  if (pid <= 0 || pid > 0x3fffffff || end == buf) return -1;
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 0 : -1;
  char st[256];
  n = ::read(fd, st, sizeof(st) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  std::string stat(st, static_cast<std::size_t>(n));
  std::size_t lp = stat.find('('), rp = stat.rfind(')');
  if (lp == std::string::npos || rp == std::string::npos || rp + 2 >= stat.size()) return -1;
  char state = stat[rp + 2];
  if (state == 'Z' || state == 'X') return 0;
  return stat.compare(lp + 1, rp - lp - 1, "nvidia-cuda-mps") == 0 ? 1 : -1;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    std::size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) return out;
    start = p + 1;
  }
}

}  // namespace

struct MpsSupervisor::Dom {
  SpatialDomain cfg;
  std::size_t index = 0;  // in pub_
  std::string pipe, log, status_file;
  std::vector<std::string> env;  // the environment of every command for this domain
  bool fatal = false;            // a problem no retry can mend (config vs. this machine)
  bool up = false;
  bool ever_started = false;     // we started or adopted its control daemon: quit it at shutdown
  bool ever_up = false;          // we started one that answered (later ones count as restarts)
  bool published = false;        // a state was logged (the first one is logged whatever it is)
  std::string reason;
  uint64_t next_ns = 0;          // next probe (up) or start attempt (down)
  uint64_t backoff_ns = 0;       // wait before the next start attempt after a failure
  uint64_t up_since_ns = 0;
  uint32_t restarts = 0;
  uint32_t cheap_checks = 0;     // pid-file checks since the last get_server_list

  std::string label() const { return "spatial domain \"" + cfg.name + "\""; }
};

MpsOptions MpsSupervisor::options_from(const Config& cfg, const std::string& socket_path) {
  MpsOptions o;
  o.mps_control = cfg.spatial.mps_control;
  o.mps_dir = effective_mps_dir(cfg, socket_path);
  o.domains = cfg.spatial.domains;
  return o;
}

MpsSupervisor::MpsSupervisor(MpsOptions opts) : opts_(std::move(opts)) {
  if (!opts_.clock) opts_.clock = std::make_shared<RealClock>();
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env_.emplace_back(*e);
  std::string inherited_cvd;
  bool have_cvd = false;
  for (const auto& e : env_) {
    if (e.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) {
      inherited_cvd = e.substr(21);
      have_cvd = true;
    }
  }
  const bool dir_ok = !opts_.mps_dir.empty() && opts_.mps_dir[0] == '/' &&
                      opts_.mps_dir.size() <= kMaxMpsDirLength;
  for (std::size_t i = 0; i < opts_.domains.size(); ++i) {
    auto d = std::make_unique<Dom>();
    d->cfg = opts_.domains[i];
    d->index = i;
    d->pipe = mps_pipe_dir(opts_.mps_dir, d->cfg.name);
    d->log = mps_log_dir(opts_.mps_dir, d->cfg.name);
    d->status_file = mps_status_file(opts_.mps_dir, d->cfg.name);
    d->reason = "starting";
    if (!dir_ok) {
      d->fatal = true;
      d->reason = "mps_dir \"" + opts_.mps_dir + "\" is not an absolute path of at most " +
                  std::to_string(kMaxMpsDirLength) + " bytes (set [spatial] mps_dir)";
    } else if (!is_valid_domain_name(d->cfg.name)) {
      d->fatal = true;
      d->reason = "invalid domain name";
    }
    // CUDA_VISIBLE_DEVICES of its control daemon (and so of its servers and clients).
    std::string cvd;
    bool set_cvd = false;
    if (!d->fatal && !d->cfg.gpus.empty()) {
      std::vector<std::string> visible = have_cvd ? split(inherited_cvd, ',') : std::vector<std::string>{};
      for (uint32_t g : d->cfg.gpus) {
        std::string id;
        if (!opts_.gpu_uuids.empty()) {
          if (g >= opts_.gpu_uuids.size()) {
            d->fatal = true;
            d->reason = "GPU " + std::to_string(g) + " does not exist (gpuosd found " +
                        std::to_string(opts_.gpu_uuids.size()) + " GPU(s))";
            break;
          }
          id = opts_.gpu_uuids[g];
        }
        if (id.empty() && have_cvd) {
          if (g >= visible.size()) {
            d->fatal = true;
            d->reason = "GPU " + std::to_string(g) + " is not visible to gpuosd (CUDA_VISIBLE_DEVICES=" +
                        inherited_cvd + ")";
            break;
          }
          id = visible[g];
        }
        if (id.empty()) id = std::to_string(g);
        cvd += (cvd.empty() ? "" : ",") + id;
      }
      set_cvd = !d->fatal;
    }
    for (const auto& e : env_) {
      if (e.rfind("CUDA_MPS_PIPE_DIRECTORY=", 0) == 0 || e.rfind("CUDA_MPS_LOG_DIRECTORY=", 0) == 0) continue;
      if (set_cvd && e.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) continue;
      d->env.push_back(e);
    }
    d->env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + d->pipe);
    d->env.push_back("CUDA_MPS_LOG_DIRECTORY=" + d->log);
    if (set_cvd) d->env.push_back("CUDA_VISIBLE_DEVICES=" + cvd);

    SpaceDomainStatus s;
    s.name = d->cfg.name;
    s.pipe_dir = d->pipe;
    s.log_dir = d->log;
    s.reason = d->reason;
    pub_.push_back(s);
    doms_.push_back(std::move(d));
  }
}

MpsSupervisor::~MpsSupervisor() {
  try {
    shutdown();
  } catch (...) {  // a destructor must not throw; shutdown() itself only fails to allocate
  }
}

void MpsSupervisor::start() {
  if (started_ || doms_.empty()) return;
  started_ = true;
  log::info("spatial sharing: %zu domain(s) under %s, control binary %s", doms_.size(), opts_.mps_dir.c_str(),
            opts_.mps_control.c_str());
  for (auto& d : doms_) {
    if (!d->fatal) continue;
    // No control daemon will ever run; still leave the reason where `gpuos run --space` looks.
    std::string err;
    if (d->reason.rfind("mps_dir", 0) != 0) make_dir(opts_.mps_dir + "/" + d->cfg.name, 0755, true, &err);
    set_state(*d, false, d->reason);
  }
  try {
    thread_ = std::thread([this] { loop(); });
  } catch (const std::exception& e) {
    log::error("spatial sharing: cannot start the MPS supervisor thread: %s", e.what());
    for (auto& d : doms_) {
      if (!d->fatal) set_state(*d, false, std::string("supervisor thread: ") + e.what());
    }
  }
}

void MpsSupervisor::check_now() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    poke_ = true;
  }
  cv_.notify_all();
}

void MpsSupervisor::loop() {
  try {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stopping_) {
      bool poked = poke_;
      poke_ = false;
      lk.unlock();
      for (auto& d : doms_) {
        if (stop_.load()) break;
        if (d->fatal) continue;
        if (poked && d->up) d->next_ns = 0;
        if (now() >= d->next_ns) step(*d);
      }
      uint64_t next = UINT64_MAX;
      for (auto& d : doms_) {
        if (!d->fatal) next = std::min(next, d->next_ns);
      }
      lk.lock();
      if (stopping_ || poke_) continue;
      opts_.clock->wait_until(lk, cv_, next, 0, [this] { return stopping_ || poke_; });
    }
  } catch (const std::exception& e) {
    log::error("spatial sharing: MPS supervisor failed: %s; domains stay as they are", e.what());
  } catch (...) {
    log::error("spatial sharing: MPS supervisor failed; domains stay as they are");
  }
}

bool MpsSupervisor::nap(uint64_t ns) {
  const uint64_t until = now() + ns;
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_ && now() < until) opts_.clock->wait_until(lk, cv_, until, 0, [this] { return stopping_; });
  return !stopping_;
}

bool MpsSupervisor::probe(Dom& d, std::string* why) {
  std::string bin;
  if (!resolve_binary(opts_.mps_control, env_, &bin, why)) return false;
  Child c = spawn(bin, {}, d.env, "get_server_list\n", -1);
  if (c.spawn_error.empty()) wait_child(c, now() + opts_.command_timeout_ms * kMs, &stop_, *opts_.clock, mu_, cv_);
  if (c.ok()) return true;
  *why = c.describe(opts_.command_timeout_ms);
  return false;
}

void MpsSupervisor::step(Dom& d) {
  if (!d.up) {
    try_start(d);
    return;
  }
  const uint64_t checked_ns = now();
  // Every probe_interval the pid file (no process, no line in control.log); every
  // full_probe_every-th time, or when the pid file cannot tell, the real question (a hung daemon
  // still has a pid). get_server_list adds four lines to control.log, which nothing rotates.
  int pid_state = control_pid_state(d.pipe);
  bool full = pid_state < 0 || ++d.cheap_checks >= std::max<uint32_t>(opts_.full_probe_every, 1);
  std::string why;
  bool alive;
  if (pid_state == 0) {
    alive = false;
    why = "its process (pid file " + d.pipe + "/nvidia-cuda-mps-control.pid) is gone";
  } else if (full) {
    d.cheap_checks = 0;
    alive = probe(d, &why);
    if (!alive) why = "get_server_list " + why;
  } else {
    alive = true;
  }
  if (alive) {
    if (checked_ns - d.up_since_ns >= opts_.stable_ms * kMs) d.backoff_ns = 0;  // a stable run: forgive
    d.next_ns = now() + opts_.probe_interval_ms * kMs;
    return;
  }
  if (stop_.load()) return;  // interrupted, not dead
  set_state(d, false, "the MPS control daemon stopped answering (" + why + ")");
  d.next_ns = now() + d.backoff_ns;  // 0 after a stable run: restart at once
}

void MpsSupervisor::try_start(Dom& d) {
  // Each attempt makes the next wait longer, until a stable run resets it (step()).
  const uint64_t lo = opts_.backoff_min_ms * kMs, hi = std::max(opts_.backoff_max_ms * kMs, lo);
  d.backoff_ns = d.backoff_ns == 0 ? lo : std::min(d.backoff_ns * 2, hi);
  auto fail = [&](const std::string& reason) {
    if (stop_.load()) return;
    set_state(d, false, reason);
    d.next_ns = now() + d.backoff_ns;
  };

  // Directories, all 0755 and owned by gpuosd's uid (root for the system daemon). Tenants of any
  // uid must traverse the pipe directory and connect to the control daemon's pipes in it (the
  // control daemon creates those with its own modes); who may join a domain is gpuos's decision
  // ([[spatial.domain]] users, checked at registration), not the filesystem's. A 0750 directory of
  // a per-domain group would close the side door of setting CUDA_MPS_PIPE_DIRECTORY by hand, but
  // needs a group per domain: not done yet. The log directory is written by the control daemon and
  // read by operators.
  std::string err;
  const std::string dom_dir = opts_.mps_dir + "/" + d.cfg.name;
  if (!make_dir(opts_.mps_dir, 0755, false, &err) || !make_dir(dom_dir, 0755, true, &err) ||
      !make_dir(d.pipe, 0755, true, &err) || !make_dir(d.log, 0755, true, &err)) {
    return fail(err);
  }
  std::string bin;
  if (!resolve_binary(opts_.mps_control, env_, &bin, &err)) return fail(err);

  // A control daemon already answering there (gpuosd restarted, or an operator started it): adopt it.
  // (Not worth asking when its pid file names a dead process: a socket left by a killed daemon.)
  struct stat st;
  if (::lstat((d.pipe + "/control").c_str(), &st) == 0 && control_pid_state(d.pipe) != 0) {
    std::string why;
    if (probe(d, &why)) {
      log::info("%s: adopting the MPS control daemon already running at %s", d.label().c_str(), d.pipe.c_str());
      d.ever_started = true;
      d.ever_up = true;
      d.up_since_ns = now();
      d.next_ns = d.up_since_ns + opts_.probe_interval_ms * kMs;
      set_state(d, true, "");
      return;
    }
    if (stop_.load()) return;
  }

  // `<mps_control> -d` forks the control daemon and returns. Its output goes to a file in the log
  // directory: the daemonised child may keep the descriptor, and a file never blocks it.
  const std::string start_log = d.log + "/gpuosd-start.log";
  int out = ::open(start_log.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (out < 0) return fail("cannot open " + start_log + ": " + errstr(errno));
  const uint64_t deadline = now() + opts_.start_timeout_ms * kMs;
  Child c = spawn(bin, {"-d"}, d.env, "", out);
  if (c.spawn_error.empty()) wait_child(c, deadline, &stop_, *opts_.clock, mu_, cv_);
  if (stop_.load()) return;
  if (!c.ok()) return fail("`" + bin + " -d` " + c.describe(opts_.start_timeout_ms));
  d.ever_started = true;
  std::string why;
  while (!probe(d, &why)) {
    if (stop_.load()) return;
    if (now() >= deadline) {
      return fail("`" + bin + " -d` returned, but the control daemon does not answer get_server_list (" + why + ")");
    }
    if (!nap(100 * kMs)) return;
  }
  if (d.ever_up) ++d.restarts;
  d.ever_up = true;
  d.up_since_ns = now();
  d.next_ns = d.up_since_ns + opts_.probe_interval_ms * kMs;
  set_state(d, true, "");
}

void MpsSupervisor::set_state(Dom& d, bool up, const std::string& reason, bool quiet) {
  bool changed = !d.published || d.up != up || d.reason != reason;
  d.up = up;
  d.reason = up ? "" : reason;
  d.published = true;
  {
    std::lock_guard<std::mutex> lk(mu_);
    SpaceDomainStatus& s = pub_[d.index];
    s.available = up;
    s.reason = d.reason;
    s.restarts = d.restarts;
  }
  if (!changed) return;
  if (!quiet) {
    if (up) {
      std::string again = d.restarts ? "restarted (restart " + std::to_string(d.restarts) + ")" : "up";
      log::info("%s: MPS control daemon %s (CUDA_MPS_PIPE_DIRECTORY=%s)", d.label().c_str(), again.c_str(),
                d.pipe.c_str());
    } else {
      log::warn("%s: unavailable: %s; its tenants are time-shared", d.label().c_str(), reason.c_str());
    }
  }
  write_status(d, up ? "available" : reason == "stopped" ? "stopped" : "unavailable: " + reason);
}

void MpsSupervisor::write_status(const Dom& d, const std::string& line) {
  if (d.fatal && d.reason.rfind("mps_dir", 0) == 0) return;  // no usable directory to write into
  std::string dir = opts_.mps_dir + "/" + d.cfg.name;
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;  // not created (yet)
  std::string tmp = d.status_file + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return;
  std::string text = line + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::fchmod(fd, 0644);
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), d.status_file.c_str()) != 0) ::unlink(tmp.c_str());
}

void MpsSupervisor::shutdown(const std::set<std::string>& keep) {
  if (shut_down_) return;
  shut_down_ = true;
  {
    std::lock_guard<std::mutex> lk(mu_);  // stop_ too: a child wait checks it under mu_
    stopping_ = true;
    stop_.store(true);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();

  // `quit` to every control daemon we started or adopted, all at once, one deadline for all.
  std::vector<std::pair<Dom*, Child>> quits;
  std::string bin, why;
  bool have_bin = resolve_binary(opts_.mps_control, env_, &bin, &why);
  for (auto& d : doms_) {
    if (!d->ever_started) continue;
    if (keep.count(d->cfg.name) != 0) {
      log::info("%s: MPS control daemon left running: tenants still use it (the next gpuosd adopts it)",
                d->label().c_str());
      continue;
    }
    if (!have_bin) {
      log::warn("%s: cannot send quit: %s", d->label().c_str(), why.c_str());
      continue;
    }
    quits.emplace_back(d.get(), spawn(bin, {}, d->env, "quit\n", -1));
  }
  const uint64_t deadline = now() + opts_.command_timeout_ms * kMs;
  for (auto& [d, c] : quits) {
    if (c.spawn_error.empty()) wait_child(c, deadline, nullptr, *opts_.clock, mu_, cv_);
    if (c.ok()) {
      log::info("%s: MPS control daemon told to quit", d->label().c_str());
    } else {
      log::warn("%s: quit: %s", d->label().c_str(), c.describe(opts_.command_timeout_ms).c_str());
    }
  }
  for (auto& d : doms_) {
    if (started_ && !d->fatal && (keep.count(d->cfg.name) == 0 || !d->ever_started)) set_state(*d, false, "stopped", true);
  }
}

std::optional<SpaceDomainStatus> MpsSupervisor::query(std::string_view name) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& s : pub_) {
    if (s.name == name) return s;
  }
  return std::nullopt;
}

std::vector<SpaceDomainStatus> MpsSupervisor::domains() const {
  std::lock_guard<std::mutex> lk(mu_);
  return pub_;
}

bool MpsSupervisor::allows(std::string_view domain, uid_t uid, bool admin) const {
  const SpatialDomain* d = nullptr;
  for (const auto& x : opts_.domains) {
    if (x.name == domain) d = &x;
  }
  if (d == nullptr) return false;
  if (admin) return true;
  for (const std::string& u : d->users) {
    if (!u.empty() && u.find_first_not_of("0123456789") == std::string::npos) {
      if (std::to_string(uid) == u) return true;
      continue;
    }
    passwd pw;
    passwd* res = nullptr;
    char buf[16384];
    if (getpwnam_r(u.c_str(), &pw, buf, sizeof(buf), &res) == 0 && res != nullptr && res->pw_uid == uid) {
      return true;
    }
  }
  return false;
}

}  // namespace gpuos::daemon
