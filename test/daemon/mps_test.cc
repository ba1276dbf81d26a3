// MpsSupervisor against a fake nvidia-cuda-mps-control: a shell script that implements `-d` (a
// background sleeper whose pid it records in the pipe directory, as fake.pid and, like the real
// control daemon, as nvidia-cuda-mps-control.pid; plus <pipe>/control), `get_server_list` on stdin
// (exit 0 iff the sleeper lives) and `quit` on stdin (kills it). The sleeper is a copy of sleep(1)
// named so that its comm is "nvidia-cuda-mps", as the real daemon's.
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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/mps.h"

namespace gpuos::daemon {
namespace {

// D_FAIL=1: `-d` prints "boom" and exits 3. HANG=1: get_server_list never answers.
const char* kFake = R"SH(#!/bin/sh
D_FAIL=@D_FAIL@
HANG=@HANG@
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
  if [ "$D_FAIL" = 1 ]; then echo boom >&2; exit 3; fi
  if alive; then echo "An instance of this daemon is already running" >&2; exit 1; fi
  echo "${CUDA_VISIBLE_DEVICES-unset}" > "$l/fake.cvd"
  @SLEEP@ 100000 </dev/null >/dev/null 2>&1 &
  echo $! > "$p/fake.pid.tmp" && mv "$p/fake.pid.tmp" "$p/fake.pid"
  echo $! > "$p/nvidia-cuda-mps-control.pid"
  : > "$p/control"
  exit 0
fi
read -r cmd
echo "$cmd" >> "$l/fake.commands"
case "$cmd" in
  get_server_list) if [ "$HANG" = 1 ]; then sleep 1000; fi; alive ;;
  quit) if alive; then kill "$(cat "$p/fake.pid")"; fi; rm -f "$p/control" "$p/nvidia-cuda-mps-control.pid"; exit 0 ;;
  *) echo "unknown command $cmd" >&2; exit 1 ;;
esac
)SH";

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

// `quit` ends a control daemon asynchronously (the supervisor waits for the quit command, not for
// the daemon): it must be gone soon after, not at once (a loaded machine schedules it late).
bool exits_soon(pid_t pid) {
  for (int i = 0; i < 500 && pid_alive(pid); ++i) usleep(10'000);
  return !pid_alive(pid);
}

// A domain's status file is written just after its state is published (query): a script that
// waits for the file then finds gpuosd agreeing. So the file may lag the state by a moment.
bool status_becomes(const std::string& path, const std::string& want) {
  for (int i = 0; i < 500 && slurp(path) != want; ++i) usleep(10'000);
  return slurp(path) == want;
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

bool wait_for(const std::function<bool()>& pred, int ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

class Mps : public ::testing::Test {
 protected:
  std::string dir, mps_dir;
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
    std::string text = kFake;
    text.replace(text.find("@D_FAIL@"), 8, d_fail ? "1" : "0");
    text.replace(text.find("@HANG@"), 6, hang ? "1" : "0");
    std::string sleeper = dir + "/nvidia-cuda-mps-sleep";
    std::filesystem::copy_file("/bin/sleep", sleeper, std::filesystem::copy_options::overwrite_existing);
    chmod(sleeper.c_str(), 0755);
    text.replace(text.find("@SLEEP@"), 7, sleeper);
    std::string path = dir + "/fake-mps-control";
    std::ofstream(path) << text;
    chmod(path.c_str(), 0755);
    return path;
  }
  MpsOptions options(const std::string& control, std::vector<SpatialDomain> domains) {
    MpsOptions o;
    o.mps_control = control;
    o.mps_dir = mps_dir;
    o.domains = std::move(domains);
    o.probe_interval_ms = 50;
    o.full_probe_every = 1;  // every check asks get_server_list (tests of the pid file set more)
    o.backoff_min_ms = 50;
    o.backoff_max_ms = 400;
    o.start_timeout_ms = 5000;
    o.command_timeout_ms = 5000;
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
  pid_t sleeper(const std::string& name) {
    return static_cast<pid_t>(std::atol(slurp(pipe(name) + "/fake.pid").c_str()));
  }
  static bool available(const MpsSupervisor& s, const std::string& name) {
    auto q = s.query(name);
    return q && q->available;
  }
  // Settled as unavailable with a reason other than the initial one.
  static bool failed(const MpsSupervisor& s, const std::string& name) {
    auto q = s.query(name);
    return q && !q->available && !q->reason.empty() && q->reason != "starting";
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
  ASSERT_TRUE(wait_for([&] { return available(s, "a") && available(s, "b.2"); }, 10000))
      << s.query("a")->reason << " / " << s.query("b.2")->reason;

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
  EXPECT_TRUE(status_becomes(mps_dir + "/a/status", "available\n")) << slurp(mps_dir + "/a/status");
  EXPECT_EQ(count_lines(logd("a") + "/fake.starts"), 1);
  EXPECT_TRUE(pid_alive(sleeper("a")));
  EXPECT_TRUE(pid_alive(sleeper("b.2")));
  // gpus = [1] -> CUDA_VISIBLE_DEVICES of that GPU's UUID; no gpus -> gpuosd's own setting.
  EXPECT_EQ(slurp(logd("b.2") + "/fake.cvd"), "GPU-one\n");
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(slurp(logd("a") + "/fake.cvd"), std::string(cvd ? cvd : "unset") + "\n");
  // Probes keep coming.
  EXPECT_TRUE(wait_for([&] { return count_lines(logd("a") + "/fake.commands") >= 3; }, 5000));
  s.shutdown();
}

TEST_F(Mps, RestartsADeadControlDaemon) {
  MpsOptions o = options(fake(), {domain("a")});
  o.full_probe_every = 1000;  // the death must be seen through the pid file
  MpsSupervisor s(std::move(o));
  s.start();
  ASSERT_TRUE(wait_for([&] { return available(s, "a"); }, 10000)) << s.query("a")->reason;
  pid_t first = sleeper("a");
  ASSERT_GT(first, 0);
  ASSERT_EQ(kill(first, SIGKILL), 0);
  // Noticed at the next probe (50 ms), restarted after at most the backoff.
  ASSERT_TRUE(wait_for([&] { return available(s, "a") && s.query("a")->restarts == 1; }, 5000))
      << s.query("a")->reason;
  pid_t second = sleeper("a");
  EXPECT_NE(second, first);
  EXPECT_TRUE(pid_alive(second));
  EXPECT_EQ(count_lines(logd("a") + "/fake.starts"), 2);
  EXPECT_TRUE(status_becomes(mps_dir + "/a/status", "available\n")) << slurp(mps_dir + "/a/status");
  // Only the get_server_list of each start: the checks in between read the pid file.
  EXPECT_EQ(slurp(logd("a") + "/fake.commands"), "get_server_list\nget_server_list\n");
  s.shutdown();
  EXPECT_TRUE(exits_soon(second));
}

TEST_F(Mps, FullProbesBetweenPidFileChecks) {
  MpsOptions o = options(fake(), {domain("a")});
  o.probe_interval_ms = 20;
  o.full_probe_every = 5;
  MpsSupervisor s(std::move(o));
  s.start();
  ASSERT_TRUE(wait_for([&] { return available(s, "a"); }, 10000)) << s.query("a")->reason;
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  // About 50 checks in that second, every fifth a get_server_list (plus the one of the start).
  int probes = count_lines(logd("a") + "/fake.commands");
  EXPECT_GE(probes, 3);
  EXPECT_LE(probes, 25);
  EXPECT_TRUE(available(s, "a"));
  s.shutdown();
}

TEST_F(Mps, MissingBinaryMakesTheDomainUnavailable) {
  MpsSupervisor s(options(dir + "/no-such-mps-control", {domain("a")}));
  s.start();
  ASSERT_TRUE(wait_for([&] { return failed(s, "a"); }, 5000));
  auto q = *s.query("a");
  EXPECT_FALSE(q.available);
  EXPECT_NE(q.reason.find(dir + "/no-such-mps-control: No such file or directory"), std::string::npos) << q.reason;
  EXPECT_TRUE(status_becomes(mps_dir + "/a/status", "unavailable: " + q.reason + "\n"))
      << slurp(mps_dir + "/a/status");
  s.shutdown();
  EXPECT_EQ(slurp(mps_dir + "/a/status"), "stopped\n");
  EXPECT_TRUE(our_children().empty());

  // A name is looked up in PATH.
  MpsSupervisor p(options("gpuos-no-such-mps-control", {domain("b")}));
  p.start();
  ASSERT_TRUE(wait_for([&] { return failed(p, "b"); }, 5000));
  EXPECT_NE(p.query("b")->reason.find("\"gpuos-no-such-mps-control\" not found in PATH"), std::string::npos)
      << p.query("b")->reason;
}

TEST_F(Mps, FailingStartIsRetriedWithBackoff) {
  MpsOptions o = options(fake(/*d_fail=*/true), {domain("a")});
  o.backoff_min_ms = 100;
  o.backoff_max_ms = 400;
  MpsSupervisor s(std::move(o));
  s.start();
  ASSERT_TRUE(wait_for([&] { return failed(s, "a"); }, 5000));
  EXPECT_NE(s.query("a")->reason.find(" -d` exited with status 3: boom"), std::string::npos) << s.query("a")->reason;
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // Attempts at 0, 0.1, 0.3, 0.7, 1.1, 1.5 s: without backoff there would be hundreds.
  int attempts = count_lines(logd("a") + "/fake.starts");
  EXPECT_GE(attempts, 3);
  EXPECT_LE(attempts, 7);
  s.shutdown();
  EXPECT_TRUE(our_children().empty());
}

int open_fds() {
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++n;
  }
  return n;
}

TEST_F(Mps, ShutdownSendsQuitAndLeavesNoZombies) {
  const int fds = open_fds();
  MpsSupervisor s(options(fake(), {domain("a"), domain("b")}));
  s.start();
  ASSERT_TRUE(wait_for([&] { return available(s, "a") && available(s, "b"); }, 10000));
  pid_t a = sleeper("a"), b = sleeper("b");
  s.shutdown();
  EXPECT_NE(slurp(logd("a") + "/fake.commands").find("quit\n"), std::string::npos);
  EXPECT_NE(slurp(logd("b") + "/fake.commands").find("quit\n"), std::string::npos);
  EXPECT_TRUE(exits_soon(a));
  EXPECT_TRUE(exits_soon(b));
  EXPECT_EQ(slurp(mps_dir + "/a/status"), "stopped\n");
  EXPECT_FALSE(s.query("a")->available);
  EXPECT_TRUE(our_children().empty());
  EXPECT_EQ(open_fds(), fds);  // every pipe, memfd and log descriptor closed
  s.shutdown();  // idempotent
}

TEST_F(Mps, ShutdownLeavesRunningTheDomainsTenantsStillUse) {
  const std::string ctl = fake();
  MpsSupervisor s(options(ctl, {domain("a"), domain("b")}));
  s.start();
  ASSERT_TRUE(wait_for([&] { return available(s, "a") && available(s, "b"); }, 10000));
  pid_t a = sleeper("a"), b = sleeper("b");
  s.shutdown({"a"});
  EXPECT_EQ(slurp(logd("a") + "/fake.commands").find("quit\n"), std::string::npos);
  EXPECT_NE(slurp(logd("b") + "/fake.commands").find("quit\n"), std::string::npos);
  EXPECT_TRUE(pid_alive(a)) << "a's tenants keep their MPS server";
  EXPECT_TRUE(exits_soon(b));
  EXPECT_TRUE(status_becomes(mps_dir + "/a/status", "available\n")) << slurp(mps_dir + "/a/status");
  EXPECT_EQ(slurp(mps_dir + "/b/status"), "stopped\n");
  // The next gpuosd adopts it (and, with no tenant left, quits it).
  MpsSupervisor next(options(ctl, {domain("a")}));
  next.start();
  ASSERT_TRUE(wait_for([&] { return available(next, "a"); }, 10000));
  EXPECT_EQ(sleeper("a"), a);
  next.shutdown();
  EXPECT_TRUE(exits_soon(a));
  EXPECT_TRUE(our_children().empty());
}

TEST_F(Mps, AHungCommandIsKilledAtItsTimeout) {
  MpsOptions o = options(fake(false, /*hang=*/true), {domain("a")});
  o.command_timeout_ms = 300;
  o.start_timeout_ms = 1000;
  MpsSupervisor s(std::move(o));
  s.start();
  std::string reason;  // the first failure (later attempts find the half-started daemon)
  ASSERT_TRUE(wait_for([&] { return failed(s, "a") && !(reason = s.query("a")->reason).empty(); }, 10000));
  EXPECT_NE(reason.find("does not answer get_server_list (did not finish within 300 ms (killed))"),
            std::string::npos)
      << reason;
  auto t0 = std::chrono::steady_clock::now();
  s.shutdown();  // interrupts a waiting probe, then quit (which answers)
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
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
  ASSERT_TRUE(wait_for([&] { return available(s, "a"); }, 10000)) << s.query("a")->reason;
  EXPECT_EQ(count_lines(logd("a") + "/fake.starts"), 1);  // not started twice
  EXPECT_EQ(sleeper("a"), running);
  s.shutdown();
  EXPECT_TRUE(exits_soon(running));
}

TEST_F(Mps, GpuThatDoesNotExistIsReportedOnce) {
  MpsOptions o = options(fake(), {domain("a", {5})});
  o.gpu_uuids = {"GPU-zero", "GPU-one"};
  MpsSupervisor s(std::move(o));
  s.start();
  ASSERT_TRUE(wait_for([&] { return failed(s, "a"); }, 5000));
  EXPECT_EQ(s.query("a")->reason, "GPU 5 does not exist (gpuosd found 2 GPU(s))");
  EXPECT_TRUE(status_becomes(mps_dir + "/a/status", "unavailable: GPU 5 does not exist (gpuosd found 2 GPU(s))\n"))
      << slurp(mps_dir + "/a/status");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  struct stat st;
  EXPECT_NE(::stat((logd("a") + "/fake.starts").c_str(), &st), 0);  // never tried
  s.shutdown();
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
