// SPDX-License-Identifier: Apache-2.0
// MpsSupervisor against a fake nvidia-cuda-mps-control: a shell script that implements `-d` (a
// background sleeper whose pid it records in the pipe directory, as fake.pid and, like the real
// control daemon, as nvidia-cuda-mps-control.pid; plus <pipe>/control), `get_server_list` on stdin
// (exit 0 iff the sleeper lives) and `quit` on stdin (kills it). The sleeper is a copy of sleep(1)
// named so that its comm is "nvidia-cuda-mps", as the real daemon's.
//
// The processes are real; time is not. The supervisor runs on a FakeClock that moves only when a
// test advances it, and a test advances it only once the supervisor is parked waiting for it, so
// each test asserts exact deadlines and counts instead of ranges measured on a busy machine.
#include <gtest/gtest.h>
#include <dirent.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/server/mps.h"

namespace gpuos::daemon {
namespace {

constexpr uint64_t kMs = 1000000ull;
// How long a test waits for something that must happen (a process to exit, the supervisor to
// settle). Only a broken supervisor or a wedged machine comes near it; nothing asserts durations.
constexpr auto kPatience = std::chrono::seconds(10);

// Flags are files in the test directory, so a test can change the fake's behaviour midway:
// d_fail: `-d` prints "boom" and exits 3; hang: get_server_list never answers.
const char* kFake = R"SH(#!/bin/sh
p="$CUDA_MPS_PIPE_DIRECTORY"
l="$CUDA_MPS_LOG_DIRECTORY"
[ -n "$p" ] && [ -d "$p" ] || { echo "no pipe directory" >&2; exit 4; }
[ -n "$l" ] && [ -d "$l" ] || { echo "no log directory" >&2; exit 4; }
alive() {
  [ -f "$p/fake.pid" ] || return 1
  st=$(sed -n 's/^[0-9]* ([^)]*) \(.\).*/\1/p' "/proc/$(cat "$p/fake.pid")/stat" 2>/dev/null)
  [ -n "$st" ] && [ "$st" != Z ]
}
if [ "$1" = "-d" ]; then
  echo start >> "$l/fake.starts"
  if [ -e "@DIR@/d_fail" ]; then echo boom >&2; exit 3; fi
  if alive; then echo "An instance of this daemon is already running" >&2; exit 1; fi
  echo "${CUDA_VISIBLE_DEVICES-unset}" > "$l/fake.cvd"
  @SLEEP@ 100000 </dev/null >/dev/null 2>&1 &
  s=$!
  # The real daemon writes its pid file itself, so its comm is right by then; wait for the exec.
  i=0
  until [ "$(cat /proc/$s/comm 2>/dev/null)" = nvidia-cuda-mps ] || [ $i -ge 2000 ]; do sleep 0.01; i=$((i+1)); done
  echo $s > "$p/fake.pid.tmp" && mv "$p/fake.pid.tmp" "$p/fake.pid"
  echo $s > "$p/nvidia-cuda-mps-control.pid"
  : > "$p/control"
  exit 0
fi
read -r cmd
echo "$cmd" >> "$l/fake.commands"
case "$cmd" in
  get_server_list) if [ -e "@DIR@/hang" ]; then sleep 1000; fi; alive ;;
  quit) if alive; then kill "$(cat "$p/fake.pid")"; fi; rm -f "$p/control" "$p/nvidia-cuda-mps-control.pid"; exit 0 ;;
  *) echo "unknown command $cmd" >&2; exit 1 ;;
esac
)SH";

// Time that moves only by advance(). It also tells the test where the supervisor waits: idle()
// returns once it is parked with nothing but this clock to wake it (so everything due up to now
// is done: children reaped, state and status file written), in_command() once it waits for a
// running command. Both only count a wait that has seen the latest advance.
class FakeClock final : public MpsClock {
 public:
  uint64_t now_ns() override {
    std::lock_guard<std::mutex> g(mu_);
    return now_;
  }

  void wait_until(std::unique_lock<std::mutex>& lk, std::condition_variable& cv, uint64_t deadline_ns,
                  uint64_t poll_ns, const std::function<bool()>& done) override {
    {
      std::lock_guard<std::mutex> g(mu_);
      ++calls_;
    }
    const auto real_end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(poll_ns);
    for (;;) {
      if (done()) break;
      {
        std::lock_guard<std::mutex> g(mu_);
        if (now_ >= deadline_ns) break;
        // Registered while lk is still held: advance() takes lk before notifying, so it cannot
        // slip in between this check and the wait below.
        waiter_ = Waiter{&cv, lk.mutex(), deadline_ns, poll_ns > 0, epoch_};
      }
      parked_.notify_all();
      if (poll_ns > 0) {  // a child runs: poll it in real time, whatever this clock says
        cv.wait_until(lk, real_end);
        break;
      }
      cv.wait(lk);  // an advance() or the supervisor's own notify (check_now, shutdown)
    }
    std::lock_guard<std::mutex> g(mu_);
    waiter_.reset();
  }

  void advance(uint64_t ns) {
    std::condition_variable* cv = nullptr;
    std::mutex* m = nullptr;
    {
      std::lock_guard<std::mutex> g(mu_);
      now_ += ns;
      ++epoch_;
      if (waiter_) {
        cv = waiter_->cv;
        m = waiter_->mu;
      }
    }
    if (cv != nullptr) {
      std::lock_guard<std::mutex> g(*m);
      cv->notify_all();
    }
  }
  // The deadline the parked supervisor waits for (UINT64_MAX: none); 0 (and a failure) if it does
  // not park. after: only a wait entered after that many calls (see calls()).
  uint64_t idle(uint64_t after = 0) { return parked(false, after); }
  uint64_t in_command() { return parked(true, 0); }
  // Waits entered so far: after check_now(), idle(calls-before) is the supervisor having acted on it.
  uint64_t calls() {
    std::lock_guard<std::mutex> g(mu_);
    return calls_;
  }

 private:
  struct Waiter {
    std::condition_variable* cv;
    std::mutex* mu;
    uint64_t deadline;
    bool poll;
    uint64_t epoch;
  };
  uint64_t parked(bool poll, uint64_t after) {
    std::unique_lock<std::mutex> g(mu_);
    // After one miss the test has failed: do not wait out the patience again (ctest's timeout).
    if (!parked_.wait_for(g, lost_ ? std::chrono::seconds(0) : kPatience, [&] {
          return waiter_ && waiter_->poll == poll && waiter_->epoch == epoch_ && calls_ > after;
        })) {
      lost_ = true;
      ADD_FAILURE() << "the supervisor did not park " << (poll ? "in a command" : "idle");
      return 0;
    }
    return waiter_->deadline;
  }

  std::mutex mu_;
  std::condition_variable parked_;
  uint64_t now_ = 0;
  uint64_t epoch_ = 0;
  uint64_t calls_ = 0;
  bool lost_ = false;
  std::optional<Waiter> waiter_;
};

// read(2), not an ifstream: reading /proc/PID/stat of a process that is just exiting fails with
// ESRCH, which libstdc++'s filebuf turns into an exception. "" when it cannot be read.
std::string slurp(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

int count_lines(const std::string& path) {
  std::string s = slurp(path);
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

bool pid_alive(pid_t pid) {
  std::string st = slurp("/proc/" + std::to_string(pid) + "/stat");
  std::size_t rp = st.rfind(')');
  return rp != std::string::npos && rp + 2 < st.size() && st[rp + 2] != 'Z';
}

// For real events only (a process exiting, a child writing its file), never to measure time.
bool eventually(const std::function<bool()>& pred) {
  const auto end = std::chrono::steady_clock::now() + kPatience;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

// `quit` and kill(2) end a process asynchronously: it is gone soon after, not at once.
bool exits_soon(pid_t pid) {
  return eventually([&] { return !pid_alive(pid); });
}

// Processes whose parent is this process (any state, zombies included).
std::vector<pid_t> our_children() {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string st = slurp(std::string("/proc/") + e->d_name + "/stat");
    std::size_t rp = st.rfind(')');
    if (rp == std::string::npos) continue;
    std::istringstream rest(st.substr(rp + 2));
    char state;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == getpid()) out.push_back(static_cast<pid_t>(std::atol(e->d_name)));
  }
  closedir(d);
  return out;
}

int open_fds() {
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

class Mps : public ::testing::Test {
 protected:
  std::string dir, mps_dir;
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();

  void SetUp() override {
    char tmpl[] = "/tmp/gpuos-mps-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
    mps_dir = dir + "/mps";
  }
  void TearDown() override {
    // Whatever a failed test left running.
    std::error_code ec;
    for (auto& e : std::filesystem::directory_iterator(mps_dir, ec)) {
      std::string pidfile = e.path().string() + "/pipe/fake.pid";
      pid_t pid = static_cast<pid_t>(std::atol(slurp(pidfile).c_str()));
      if (pid > 0 && pid_alive(pid)) kill(pid, SIGKILL);
    }
    std::filesystem::remove_all(dir, ec);
  }
  std::string fake(bool d_fail = false, bool hang = false) {
    if (d_fail) std::ofstream(dir + "/d_fail");
    if (hang) set_hang();
    std::string text = kFake;
    for (std::size_t at; (at = text.find("@DIR@")) != std::string::npos;) text.replace(at, 5, dir);
    std::string sleeper = dir + "/nvidia-cuda-mps-sleep";
    std::filesystem::copy_file("/bin/sleep", sleeper, std::filesystem::copy_options::overwrite_existing);
    chmod(sleeper.c_str(), 0755);
    text.replace(text.find("@SLEEP@"), 7, sleeper);
    std::string path = dir + "/fake-mps-control";
    std::ofstream(path) << text;
    chmod(path.c_str(), 0755);
    return path;
  }
  void set_hang() { std::ofstream(dir + "/hang"); }
  MpsOptions options(const std::string& control, std::vector<SpatialDomain> domains) {
    MpsOptions o;
    o.mps_control = control;
    o.mps_dir = mps_dir;
    o.domains = std::move(domains);
    o.probe_interval_ms = 50;
    o.full_probe_every = 1;  // every check asks get_server_list (tests of the pid file set more)
    o.backoff_min_ms = 100;
    o.backoff_max_ms = 400;
    o.start_timeout_ms = 5000;
    o.command_timeout_ms = 5000;
    o.clock = clock;
    return o;
  }
  static SpatialDomain domain(const std::string& name, std::vector<uint32_t> gpus = {}) {
    SpatialDomain d;
    d.name = name;
    d.gpus = std::move(gpus);
    return d;
  }
  std::string pipe(const std::string& name) { return mps_dir + "/" + name + "/pipe"; }
  std::string logd(const std::string& name) { return mps_dir + "/" + name + "/log"; }
  std::string status(const std::string& name) { return slurp(mps_dir + "/" + name + "/status"); }
  int starts(const std::string& name) { return count_lines(logd(name) + "/fake.starts"); }
  std::string commands(const std::string& name) { return slurp(logd(name) + "/fake.commands"); }
  pid_t sleeper(const std::string& name) {
    return static_cast<pid_t>(std::atol(slurp(pipe(name) + "/fake.pid").c_str()));
  }
  uint64_t now_ms() { return clock->now_ns() / kMs; }
  // Moves the clock by ms once the supervisor is parked on it, and returns the deadline (in ms) it
  // parks on after acting on the new time.
  uint64_t advance_ms(uint64_t ms) {
    clock->idle();
    clock->advance(ms * kMs);
    return idle_ms();
  }
  uint64_t idle_ms(uint64_t after = 0) {
    uint64_t d = clock->idle(after);
    return d == UINT64_MAX ? UINT64_MAX : d / kMs;
  }
  // Kills the domain's control daemon and waits until it is really gone (SIGKILL is asynchronous).
  void kill_daemon(const std::string& name) {
    pid_t pid = sleeper(name);
    ASSERT_GT(pid, 0);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    ASSERT_TRUE(exits_soon(pid));
  }
  static std::string get_server_lists(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += "get_server_list\n";
    return s;
  }
};

TEST_F(Mps, StartsOneControlDaemonPerDomain) {
  MpsOptions o = options(fake(), {domain("a"), domain("b.2", {1})});
  o.gpu_uuids = {"GPU-zero", "GPU-one"};
  MpsSupervisor s(std::move(o));
  ASSERT_EQ(s.domains().size(), 2u);
  EXPECT_FALSE(s.query("a")->available);  // nothing started before start()
  EXPECT_EQ(s.query("a")->reason, "starting");
  EXPECT_FALSE(s.query("nosuch"));
  s.start();
  EXPECT_EQ(idle_ms(), 50u);  // both up at once, first check one interval later
  ASSERT_TRUE(s.query("a")->available) << s.query("a")->reason;
  ASSERT_TRUE(s.query("b.2")->available) << s.query("b.2")->reason;

  auto a = *s.query("a");
  EXPECT_EQ(a.pipe_dir, pipe("a"));
  EXPECT_EQ(a.log_dir, logd("a"));
  EXPECT_EQ(a.reason, "");
  EXPECT_EQ(a.restarts, 0u);
  for (const std::string& d : {mps_dir + "/a", pipe("a"), logd("a"), pipe("b.2")}) {
    struct stat st;
    ASSERT_EQ(::lstat(d.c_str(), &st), 0) << d;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << d;
    EXPECT_EQ(st.st_mode & 07777, 0755u) << d;
  }
  EXPECT_EQ(status("a"), "available\n");
  EXPECT_EQ(starts("a"), 1);
  EXPECT_TRUE(pid_alive(sleeper("a")));
  EXPECT_TRUE(pid_alive(sleeper("b.2")));
  // gpus = [1] -> CUDA_VISIBLE_DEVICES of that GPU's UUID; no gpus -> gpuosd's own setting.
  EXPECT_EQ(slurp(logd("b.2") + "/fake.cvd"), "GPU-one\n");
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(slurp(logd("a") + "/fake.cvd"), std::string(cvd ? cvd : "unset") + "\n");
  // One check per interval, each a get_server_list here; none before the interval is over.
  EXPECT_EQ(commands("a"), get_server_lists(1));
  EXPECT_EQ(advance_ms(49), 50u);
  EXPECT_EQ(commands("a"), get_server_lists(1));
  EXPECT_EQ(advance_ms(1), 100u);
  EXPECT_EQ(commands("a"), get_server_lists(2));
  EXPECT_EQ(commands("b.2"), get_server_lists(2));
  EXPECT_EQ(advance_ms(50), 150u);
  EXPECT_EQ(commands("a"), get_server_lists(3));
  EXPECT_EQ(starts("a"), 1);
  s.shutdown();
}

// Dies within stable_ms of every start: the waits before the restarts are backoff_min, doubling
// each time, capped at backoff_max.
TEST_F(Mps, RestartsADeadControlDaemonAfterTheBackoff) {
  MpsOptions o = options(fake(), {domain("a")});
  o.full_probe_every = 1000;  // the death must be seen through the pid file
  MpsSupervisor s(std::move(o));
  s.start();
  ASSERT_EQ(idle_ms(), 50u);
  ASSERT_TRUE(s.query("a")->available) << s.query("a")->reason;

  int n = 1;
  for (uint64_t backoff : {100, 200, 400, 400}) {
    SCOPED_TRACE("backoff " + std::to_string(backoff));
    pid_t old = sleeper("a");
    kill_daemon("a");
    const uint64_t death = now_ms() + 50;  // seen at the next check
    EXPECT_EQ(advance_ms(50), death + backoff);
    EXPECT_FALSE(s.query("a")->available);
    EXPECT_EQ(s.query("a")->reason, "the MPS control daemon stopped answering (its process (pid file " + pipe("a") +
                                        "/nvidia-cuda-mps-control.pid) is gone)");
    EXPECT_EQ(status("a"), "unavailable: " + s.query("a")->reason + "\n");
    EXPECT_EQ(advance_ms(backoff - 1), death + backoff);  // not a moment early
    EXPECT_EQ(starts("a"), n);
    EXPECT_EQ(advance_ms(1), death + backoff + 50);  // restarted, next check in an interval
    ++n;
    EXPECT_EQ(starts("a"), n);
    EXPECT_TRUE(s.query("a")->available) << s.query("a")->reason;
    EXPECT_EQ(s.query("a")->restarts, static_cast<uint32_t>(n - 1));
    EXPECT_EQ(status("a"), "available\n");
    EXPECT_NE(sleeper("a"), old);
    EXPECT_TRUE(pid_alive(sleeper("a")));
  }
  // Only the get_server_list of each start: the checks in between read the pid file.
  EXPECT_EQ(commands("a"), get_server_lists(n));
  pid_t last = sleeper("a");
  s.shutdown();
  EXPECT_TRUE(exits_soon(last));
}

TEST_F(Mps, FirstRestartAfterAStableRunIsImmediate) {
  MpsOptions o = options(fake(), {domain("a")});
  o.full_probe_every = 1000;
  o.stable_ms = 200;
  MpsSupervisor s(std::move(o));
  s.start();
  ASSERT_EQ(idle_ms(), 50u);
  for (int i = 0; i < 4; ++i) advance_ms(50);  // checked at 50..200: up stable_ms at the last
  ASSERT_EQ(now_ms(), 200u);
  kill_daemon("a");
  EXPECT_EQ(advance_ms(50), 300u);  // died at 250 and restarted at once: up, next check at 300
  EXPECT_TRUE(s.query("a")->available) << s.query("a")->reason;
  EXPECT_EQ(s.query("a")->restarts, 1u);
  EXPECT_EQ(starts("a"), 2);
  // That restart's run was short: the next one waits backoff_min again.
  kill_daemon("a");
  EXPECT_EQ(advance_ms(50), 400u);
  EXPECT_FALSE(s.query("a")->available);
  EXPECT_EQ(starts("a"), 2);
  s.shutdown();
}

TEST_F(Mps, FullProbeEveryNthCheckAndEveryCheckWithoutAPidFile) {
  MpsOptions o = options(fake(), {domain("a")});
  o.full_probe_every = 5;
  MpsSupervisor s(std::move(o));
  s.start();
  ASSERT_EQ(idle_ms(), 50u);
  // The start's get_server_list, then one at every fifth check.
  for (int check = 1; check <= 12; ++check) {
    advance_ms(50);
    EXPECT_EQ(commands("a"), get_server_lists(1 + check / 5)) << "check " << check;
  }
  // No pid file: the pid file cannot tell, so every check asks.
  ASSERT_EQ(::unlink((pipe("a") + "/nvidia-cuda-mps-control.pid").c_str()), 0);
  for (int check = 1; check <= 3; ++check) {
    advance_ms(50);
    EXPECT_EQ(commands("a"), get_server_lists(3 + check)) << "check " << check;
  }
  EXPECT_TRUE(s.query("a")->available);
  s.shutdown();
}

// A hung daemon keeps its pid: the full probe finds it, and its get_server_list is killed at exactly
// command_timeout.
TEST_F(Mps, AHungDaemonIsFoundByTheFullProbe) {
  MpsOptions o = options(fake(), {domain("a")});
  o.full_probe_every = 3;
  o.command_timeout_ms = 300;
  MpsSupervisor s(std::move(o));
  s.start();
  ASSERT_EQ(idle_ms(), 50u);
  set_hang();
  EXPECT_EQ(advance_ms(50), 100u);  // pid-file checks: still fine
  EXPECT_EQ(advance_ms(50), 150u);
  clock->advance(50 * kMs);  // the third check asks, and hangs
  EXPECT_EQ(clock->in_command(), 450 * kMs);
  ASSERT_TRUE(eventually([&] { return commands("a") == get_server_lists(2); }));
  clock->advance(299 * kMs);
  EXPECT_EQ(clock->in_command(), 450 * kMs);
  EXPECT_TRUE(s.query("a")->available);
  clock->advance(1 * kMs);
  EXPECT_EQ(idle_ms(), 550u);  // killed at 450; a restart after backoff_min
  EXPECT_FALSE(s.query("a")->available);
  EXPECT_EQ(s.query("a")->reason,
            "the MPS control daemon stopped answering (get_server_list did not finish within 300 ms (killed))");
  s.shutdown();  // quit still answers
  EXPECT_NE(commands("a").find("quit\n"), std::string::npos);
  EXPECT_TRUE(our_children().empty());
}

TEST_F(Mps, CheckNowProbesAtOnce) {
  MpsSupervisor s(options(fake(), {domain("a")}));
  s.start();
  ASSERT_EQ(idle_ms(), 50u);
  EXPECT_EQ(advance_ms(20), 50u);
  const uint64_t calls = clock->calls();
  s.check_now();
  EXPECT_EQ(idle_ms(calls), 70u);  // checked at 20, the next check an interval after that
  EXPECT_EQ(commands("a"), get_server_lists(2));
  s.shutdown();
}

TEST_F(Mps, MissingBinaryMakesTheDomainUnavailable) {
  MpsSupervisor s(options(dir + "/no-such-mps-control", {domain("a")}));
  s.start();
  EXPECT_EQ(idle_ms(), 100u);  // retried after backoff_min
  auto q = *s.query("a");
  EXPECT_FALSE(q.available);
  EXPECT_EQ(q.reason, "mps_control " + dir + "/no-such-mps-control: No such file or directory");
  EXPECT_EQ(status("a"), "unavailable: " + q.reason + "\n");
  s.shutdown();
  EXPECT_EQ(status("a"), "stopped\n");
  EXPECT_TRUE(our_children().empty());

  // A name is looked up in PATH.
  MpsSupervisor p(options("gpuos-no-such-mps-control", {domain("b")}));
  p.start();
  idle_ms();
  EXPECT_NE(p.query("b")->reason.find("\"gpuos-no-such-mps-control\" not found in PATH"), std::string::npos)
      << p.query("b")->reason;
}

// Attempts at 0, 100, 300, 700, 1100, 1500: the wait doubles from backoff_min up to backoff_max.
TEST_F(Mps, FailingStartIsRetriedWithBackoff) {
  MpsSupervisor s(options(fake(/*d_fail=*/true), {domain("a")}));
  s.start();
  ASSERT_EQ(idle_ms(), 100u);
  EXPECT_EQ(starts("a"), 1);
  EXPECT_EQ(s.query("a")->reason, "`" + dir + "/fake-mps-control -d` exited with status 3: boom");
  // check_now does not skip the backoff.
  const uint64_t calls = clock->calls();
  s.check_now();
  EXPECT_EQ(idle_ms(calls), 100u);
  EXPECT_EQ(starts("a"), 1);
  int n = 1;
  for (uint64_t wait : {100, 200, 400, 400, 400}) {
    const uint64_t due = now_ms() + wait;
    EXPECT_EQ(advance_ms(wait - 1), due);
    EXPECT_EQ(starts("a"), n) << "before " << due;
    advance_ms(1);
    EXPECT_EQ(starts("a"), ++n) << "at " << due;
  }
  EXPECT_EQ(now_ms(), 1500u);
  EXPECT_FALSE(s.query("a")->available);
  s.shutdown();
  EXPECT_TRUE(our_children().empty());
}

TEST_F(Mps, ShutdownSendsQuitAndLeavesNoZombies) {
  const int fds = open_fds();
  MpsSupervisor s(options(fake(), {domain("a"), domain("b")}));
  s.start();
  ASSERT_EQ(idle_ms(), 50u);
  ASSERT_TRUE(s.query("a")->available && s.query("b")->available);
  pid_t a = sleeper("a"), b = sleeper("b");
  s.shutdown();
  EXPECT_EQ(commands("a"), "get_server_list\nquit\n");
  EXPECT_EQ(commands("b"), "get_server_list\nquit\n");
  EXPECT_TRUE(exits_soon(a));
  EXPECT_TRUE(exits_soon(b));
  EXPECT_EQ(status("a"), "stopped\n");
  EXPECT_FALSE(s.query("a")->available);
  EXPECT_TRUE(our_children().empty());
  EXPECT_EQ(open_fds(), fds);  // every pipe, memfd and log descriptor closed
  s.shutdown();  // idempotent
  EXPECT_EQ(count_lines(logd("a") + "/fake.commands"), 2);
}

TEST_F(Mps, ShutdownLeavesRunningTheDomainsTenantsStillUse) {
  const std::string ctl = fake();
  MpsSupervisor s(options(ctl, {domain("a"), domain("b")}));
  s.start();
  ASSERT_EQ(idle_ms(), 50u);
  pid_t a = sleeper("a"), b = sleeper("b");
  s.shutdown({"a"});
  EXPECT_EQ(commands("a").find("quit\n"), std::string::npos);
  EXPECT_NE(commands("b").find("quit\n"), std::string::npos);
  EXPECT_TRUE(pid_alive(a)) << "a's tenants keep their MPS server";
  EXPECT_TRUE(exits_soon(b));
  EXPECT_EQ(status("a"), "available\n");
  EXPECT_EQ(status("b"), "stopped\n");
  // The next gpuosd adopts it (and, with no tenant left, quits it).
  MpsSupervisor next(options(ctl, {domain("a")}));
  next.start();
  EXPECT_EQ(idle_ms(), 50u);
  EXPECT_TRUE(next.query("a")->available) << next.query("a")->reason;
  EXPECT_EQ(sleeper("a"), a);
  EXPECT_EQ(starts("a"), 1);
  next.shutdown();
  EXPECT_TRUE(exits_soon(a));
  EXPECT_TRUE(our_children().empty());
}

// `-d` returns but the daemon never answers: each get_server_list is killed at command_timeout,
// retried after 100 ms until start_timeout has passed.
TEST_F(Mps, AHungStartIsKilledAtItsTimeout) {
  MpsOptions o = options(fake(false, /*hang=*/true), {domain("a")});
  o.command_timeout_ms = 300;
  o.start_timeout_ms = 500;
  MpsSupervisor s(std::move(o));
  s.start();
  // The probe runs (not `-d` any more, which has a command deadline too).
  ASSERT_TRUE(eventually([&] { return commands("a") == get_server_lists(1); }));
  EXPECT_EQ(clock->in_command(), 300 * kMs);
  clock->advance(299 * kMs);
  EXPECT_EQ(clock->in_command(), 300 * kMs);
  EXPECT_EQ(s.query("a")->reason, "starting");
  clock->advance(1 * kMs);
  EXPECT_EQ(idle_ms(), 400u);  // killed; asks again 100 ms later
  clock->advance(100 * kMs);
  EXPECT_EQ(clock->in_command(), 700 * kMs);
  ASSERT_TRUE(eventually([&] { return commands("a") == get_server_lists(2); }));
  clock->advance(300 * kMs);
  EXPECT_EQ(idle_ms(), 800u);  // past start_timeout: failed, retried after backoff_min
  EXPECT_EQ(s.query("a")->reason, "`" + dir +
                                      "/fake-mps-control -d` returned, but the control daemon does not answer "
                                      "get_server_list (did not finish within 300 ms (killed))");
  EXPECT_EQ(starts("a"), 1);
  pid_t daemon = sleeper("a");
  s.shutdown();  // quits the daemon it started, though it never answered
  EXPECT_TRUE(exits_soon(daemon));
  EXPECT_TRUE(our_children().empty());
}

TEST_F(Mps, ShutdownInterruptsAWaitingCommand) {
  MpsOptions o = options(fake(false, /*hang=*/true), {domain("a")});
  o.command_timeout_ms = 300;
  MpsSupervisor s(std::move(o));
  s.start();
  ASSERT_TRUE(eventually([&] { return commands("a") == get_server_lists(1); }));
  EXPECT_EQ(clock->in_command(), 300 * kMs);
  auto done = std::async(std::launch::async, [&] { s.shutdown(); });
  const bool interrupted = done.wait_for(kPatience) == std::future_status::ready;
  if (!interrupted) clock->advance(3600 * 1000 * kMs);  // free it by its timeout so the test ends
  done.get();
  EXPECT_TRUE(interrupted) << "shutdown waited for the command's timeout";
  EXPECT_EQ(now_ms(), 0u);
  EXPECT_EQ(status("a"), "stopped\n");
  EXPECT_TRUE(our_children().empty());
}

TEST_F(Mps, AdoptsARunningControlDaemon) {
  std::string ctl = fake();
  ASSERT_EQ(std::system(("mkdir -p " + pipe("a") + " " + logd("a") + " && CUDA_MPS_PIPE_DIRECTORY=" + pipe("a") +
                         " CUDA_MPS_LOG_DIRECTORY=" + logd("a") + " " + ctl + " -d")
                            .c_str()),
            0);
  pid_t running = sleeper("a");
  ASSERT_TRUE(pid_alive(running));
  MpsSupervisor s(options(ctl, {domain("a")}));
  s.start();
  EXPECT_EQ(idle_ms(), 50u);
  EXPECT_TRUE(s.query("a")->available) << s.query("a")->reason;
  EXPECT_EQ(starts("a"), 1);  // not started twice
  EXPECT_EQ(sleeper("a"), running);
  s.shutdown();
  EXPECT_TRUE(exits_soon(running));
}

TEST_F(Mps, GpuThatDoesNotExistIsReportedOnce) {
  MpsOptions o = options(fake(), {domain("a", {5})});
  o.gpu_uuids = {"GPU-zero", "GPU-one"};
  MpsSupervisor s(std::move(o));
  s.start();
  EXPECT_EQ(idle_ms(), UINT64_MAX);  // nothing left to do, ever
  EXPECT_EQ(s.query("a")->reason, "GPU 5 does not exist (gpuosd found 2 GPU(s))");
  EXPECT_EQ(status("a"), "unavailable: GPU 5 does not exist (gpuosd found 2 GPU(s))\n");
  struct stat st;
  EXPECT_NE(::stat((logd("a") + "/fake.starts").c_str(), &st), 0);  // never tried
  s.shutdown();
}

// The default clock is the real one (what gpuosd runs on).
TEST_F(Mps, RunsOnTheRealClockByDefault) {
  MpsOptions o = options(fake(), {domain("a")});
  o.clock = nullptr;
  MpsSupervisor s(std::move(o));
  s.start();
  EXPECT_TRUE(eventually([&] { return s.query("a")->available && count_lines(logd("a") + "/fake.commands") >= 2; }))
      << s.query("a")->reason;
  s.shutdown();
  EXPECT_TRUE(our_children().empty());
}

TEST_F(Mps, NoDomainsDoesNothing) {
  MpsSupervisor s(options(fake(), {}));
  s.start();
  EXPECT_TRUE(s.domains().empty());
  s.shutdown();
  struct stat st;
  EXPECT_NE(::stat(mps_dir.c_str(), &st), 0);
}

TEST_F(Mps, AllowsAdminsAndListedUsers) {
  SpatialDomain d = domain("a");
  passwd* me = getpwuid(getuid());
  ASSERT_NE(me, nullptr);
  d.users = {"4242", me->pw_name};
  SpatialDomain closed = domain("admins-only");
  MpsSupervisor s(options(fake(), {d, closed}));
  EXPECT_TRUE(s.allows("a", 4242, false));
  EXPECT_TRUE(s.allows("a", getuid(), false));
  EXPECT_FALSE(s.allows("a", 4243, false));
  EXPECT_TRUE(s.allows("a", 4243, true));
  EXPECT_FALSE(s.allows("admins-only", getuid() == 4242 ? 4243 : 4242, false));
  EXPECT_TRUE(s.allows("admins-only", 4242, true));
  EXPECT_FALSE(s.allows("nosuch", 0, true));
}

TEST_F(Mps, OptionsFromConfigDeriveTheDirectoryFromTheSocket) {
  Config c;
  c.spatial.domains.push_back(domain("a"));
  MpsOptions o = MpsSupervisor::options_from(c, "/run/gpuos/gpuosd.sock");
  EXPECT_EQ(o.mps_dir, "/run/gpuos/mps");
  EXPECT_EQ(o.mps_control, "nvidia-cuda-mps-control");
  ASSERT_EQ(o.domains.size(), 1u);
  c.spatial.mps_dir = "/srv/mps";
  EXPECT_EQ(MpsSupervisor::options_from(c, "/run/gpuos/gpuosd.sock").mps_dir, "/srv/mps");
  EXPECT_EQ(mps_pipe_dir("/srv/mps", "a"), "/srv/mps/a/pipe");
  EXPECT_EQ(mps_log_dir("/srv/mps", "a"), "/srv/mps/a/log");
}

}  // namespace
}  // namespace gpuos::daemon
