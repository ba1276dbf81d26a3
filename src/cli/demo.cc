// SPDX-License-Identifier: Apache-2.0
// `gpuos demo`: a private gpuosd and gpuos-synth tenants under `gpuos run`, in four phases: the
// latency-critical "hp" alone (the baseline), the best-effort "be" alone, the two side by side (be
// first, hp once be runs kernels, be stopped when hp ends, so every hp kernel has be beside it), and
// hp alone once more (the machine's own noise on the measurement). A summary table, and a verdict
// that compares hp shared with hp alone (what gpuos bought), be shared with be alone (what it cost
// be), and names the mechanism and the machine's load as measured during the run (machine_load.h).
// A progress line on stderr every second.
//
// How they share: in space (`--sharing auto`, the default, on a GPU with MPS and on the simulated
// device): one spatial domain, hp on 32 SMs of its own (its kernels' 32 blocks, one per SM, as
// alone), be on the other SMs. The driver double runs kernels of disjoint SM partitions (green
// contexts) side by side across processes, as MPS does on a GPU, so there the domain's MPS control
// daemon is a stand-in (kStandInMpsControl). A GPU cannot preempt a running kernel, so in time
// (`--sharing time`, and on a GPU without MPS) hp's kernel waits for be's kernel already running
// when it came: its tail shows be's kernels.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/demo_verdict.h"
#include "cli/machine_load.h"
#include "cli/simulate.h"
#include "client/client.h"
#include "common/ipc.h"
#include "gpuos/driver_api.h"

namespace gpuos::cli {
using namespace ::gpuos::client;  // the gpuosd client library (src/client)
namespace {

using Env = EnvVars;

// The spatial domain of `--sharing space`, and hp's SMs there (whole groups of 8: 4 groups).
constexpr const char* kDemoDomain = "demo";
constexpr unsigned kHpSms = 32;

// The domain's MPS control daemon on the simulated device, where the double models what MPS does
// (kernels of disjoint partitions side by side): gpuosd supervises it as it would the real one.
// `-d` starts a process named like the control daemon (a copy of sleep(1): its comm is
// "nvidia-cuda-mps", which gpuosd checks) and writes its pid file; `get_server_list` succeeds while
// it lives; `quit` stops it. (test/e2e/fake_mps_control.sh, which the e2e tests use, is the same.)
const char* const kStandInMpsControl = R"sh(#!/bin/sh
p="$CUDA_MPS_PIPE_DIRECTORY"
[ -n "$p" ] && [ -d "$p" ] || { echo "no pipe directory" >&2; exit 4; }
alive() { [ -f "$p/nvidia-cuda-mps-control.pid" ] && kill -0 "$(cat "$p/nvidia-cuda-mps-control.pid")" 2>/dev/null; }
if [ "$1" = "-d" ]; then
  if alive; then echo "An instance of this daemon is already running" >&2; exit 1; fi
  cp "$(command -v sleep)" "$p/nvidia-cuda-mps-control"
  "$p/nvidia-cuda-mps-control" 100000 </dev/null >/dev/null 2>&1 &
  echo $! > "$p/nvidia-cuda-mps-control.pid"
  : > "$p/control"
  exit 0
fi
read -r cmd
case "$cmd" in
  get_server_list) alive ;;
  quit) if alive; then kill "$(cat "$p/nvidia-cuda-mps-control.pid")"; fi
        rm -f "$p/control" "$p/nvidia-cuda-mps-control.pid"; exit 0 ;;
  *) echo "unknown command $cmd" >&2; exit 1 ;;
esac
)sh";

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// The executable `program` names: itself when it has a slash, else the first in $PATH; "" if none.
std::string find_in_path(const std::string& program) {
  if (program.find('/') != std::string::npos) return access(program.c_str(), X_OK) == 0 ? program : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string p = (dir.empty() ? "." : dir) + "/" + program;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// Forks and execs argv with extra environment, stdout+stderr to log_path. Returns the pid or -1.
pid_t spawn(const std::vector<std::string>& args, const Env& env, const std::string& log_path) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
  }
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull >= 0) dup2(devnull, STDIN_FILENO);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

// Waits for pid up to timeout; -1 on timeout (the process is left running), else the exit status
// (128+signal for a signal).
int wait_for(pid_t pid, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return 255;
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void stop_process(pid_t pid) {
  if (wait_for(pid, 0) >= 0) return;
  kill(pid, SIGTERM);
  if (wait_for(pid, 3) >= 0) return;
  kill(pid, SIGKILL);
  wait_for(pid, 3);
}

// True if the real driver (libcuda.so.1) loads, initialises and reports a device. Runs in a child
// so a misbehaving driver cannot take the demo down.
bool real_gpu_present() {
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    alarm(30);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDERR_FILENO);
    GpuosDriverTable t{};
    char err[256];
    if (!load_driver(&t, "libcuda.so.1", nullptr, err, sizeof(err))) _exit(1);
    if (!t.cuInit || !t.cuDeviceGetCount || t.cuInit(0) != CUDA_SUCCESS) _exit(1);
    int n = 0;
    _exit(t.cuDeviceGetCount(&n) == CUDA_SUCCESS && n > 0 ? 0 : 1);
  }
  return wait_for(pid, 40) == 0;
}

std::string tail_of(const std::string& path, std::size_t max = 2000) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > max ? "..." + s.substr(s.size() - max) : s;
}

struct Tenant {
  std::string name, klass;
  std::string label;  // the table's: "hp alone", "be alone", "hp shared", "be shared", "hp alone 2"
  int phase = 0;      // kPhases
  bool space = false; // in the demo's spatial domain
  // Started before the others of its phase, which wait until it runs kernels; stopped (SIGTERM:
  // gpuos-synth then reports the kernels that ran) once they have ended.
  bool companion = false;
  uint64_t launches_total = 0;  // what its progress counts up to (0: open-ended)
  std::vector<std::string> synth_args;
  pid_t pid = -1;
  int exit_code = -1;
  bool stopped = false;  // SIGTERM sent
  std::string json_path, log_path;
  nlohmann::json result;
  std::optional<gpuos_msg_tenant_info> daemon_view;
  std::string problem;
};

constexpr const char* kPhases[] = {"hp alone", "be alone", "hp beside be", "hp alone again"};
constexpr int kPhaseCount = 4;
// A companion has launched its memory fill and warm-up kernels and runs timed ones: more than this.
constexpr uint64_t kCompanionRunning = 3;

// The CPU time of the machine over one phase, for machine_load.h's other_cpus.
struct PhaseLoad {
  CpuTicks cpu;
  double own_ticks = 0;  // the demo's own processes: itself, reaped children, gpuosd
  std::chrono::steady_clock::time_point at;
};

// The progress line on stderr: what the demo is doing, printed when it changes and then every
// second from a thread of its own, so that no wait of the demo (a tenant, gpuosd) silences it.
class Ticker {
 public:
  explicit Ticker(std::chrono::steady_clock::time_point start) : start_(start), thread_([this] { loop(); }) {}
  ~Ticker() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // A new stage (printed now); phase >= 0 also shows the time in it.
  void stage(const std::string& what, int phase = -1) {
    std::lock_guard<std::mutex> lk(mu_);
    what_ = what;
    counts_.clear();
    phase_ = phase;
    stage_start_ = std::chrono::steady_clock::now();
    print_locked();
  }
  // The counts so far (printed with the next line).
  void counts(const std::string& c) {
    std::lock_guard<std::mutex> lk(mu_);
    counts_ = c;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      if (cv_.wait_until(lk, last_ + std::chrono::seconds(1), [&] { return stop_; })) break;
      if (std::chrono::steady_clock::now() >= last_ + std::chrono::seconds(1)) print_locked();
    }
  }
  void print_locked() {
    last_ = std::chrono::steady_clock::now();
    const double t = std::chrono::duration<double>(last_ - start_).count();
    const double in = std::chrono::duration<double>(last_ - stage_start_).count();
    if (phase_ >= 0) {
      std::fprintf(stderr, "gpuos demo: [%.1f s] phase %d/%d, %s, %.1f s%s%s\n", t, phase_ + 1, kPhaseCount,
                   what_.c_str(), in, counts_.empty() ? "" : ": ", counts_.c_str());
    } else {
      std::fprintf(stderr, "gpuos demo: [%.1f s] %s\n", t, what_.c_str());
    }
  }

  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string what_ = "starting", counts_;
  int phase_ = -1;
  std::chrono::steady_clock::time_point stage_start_ = start_, last_ = start_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is set
};

}  // namespace

int demo_command(const DemoOptions& o) {
  const std::string dir = exe_dir();
  const std::string self = self_exe();
  const std::string gpuosd = dir + "/gpuosd";
  const std::string synth = dir + "/gpuos-synth";
  for (const auto& p : {gpuosd, synth}) {
    if (!exists(p)) {
      std::fprintf(stderr, "gpuos demo: %s not found (it is built next to gpuos in bin/)\n", p.c_str());
      return 2;
    }
  }
  const char* pre = std::getenv("GPUOS_PRELOAD");
  std::string preload = pre && pre[0] ? pre : dir + "/../lib/libgpuos.so";
  if (!exists(preload)) {
    std::fprintf(stderr, "gpuos demo: the interposer %s is missing (build it or set $GPUOS_PRELOAD)\n",
                 preload.c_str());
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  double seconds = o.seconds > 0 ? o.seconds : 2.0;
  auto ticker = std::make_unique<Ticker>(start);
  ticker->stage("looking for a GPU");
  const bool gpu = real_gpu_present();
  const bool have_mps = gpu && !find_in_path(o.mps_control).empty();
  std::string sharing = o.sharing;
  if (sharing == "auto") sharing = !gpu || have_mps ? "space" : "time";
  if (sharing == "space" && gpu && !have_mps) {
    std::fprintf(stderr, "gpuos demo: --sharing space needs MPS on a GPU (%s): the MPS control program was not found\n",
                 o.mps_control.c_str());
    return 2;
  }

  char tmpl[] = "/tmp/gpuos-demo-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("gpuos demo: mkdtemp");
    return 2;
  }
  const std::string tmp = tmpl;
  const std::string sock = tmp + "/gpuosd.sock";
  const std::string cfg_path = tmp + "/gpuos.toml";
  const std::string mps_pid_file = tmp + "/mps/" + kDemoDomain + "/pipe/nvidia-cuda-mps-control.pid";
  {
    std::ofstream cfg(cfg_path);
    cfg << "[daemon]\nlog_level = \"info\"\nhistory = 16\n[tenants]\non_no_daemon = \"refuse\"\n"
        << "[scheduler]\npolicy = \"" << o.policy << "\"\n"
        << "[metrics]\nlisten = \"\"\n";  // a private daemon: leave the metrics port to the real one
    // A private MPS control daemon for the domain, under the demo's directory (gpuosd starts and
    // stops it): MPS's own on a GPU, the stand-in on the simulated device.
    if (sharing == "space") {
      std::string control = o.mps_control;
      if (!gpu) {
        control = tmp + "/mps-control";
        std::ofstream f(control);
        f << kStandInMpsControl;
        f.close();
        chmod(control.c_str(), 0755);
      }
      cfg << "[spatial]\nmps_dir = \"" << tmp << "/mps\"\nmps_control = \"" << control << "\"\n"
          << "[[spatial.domain]]\nname = \"" << kDemoDomain << "\"\n";
    }
  }

  Env env = {{"GPUOS_CONFIG", cfg_path}, {"GPUOS_SOCKET", sock}};
  bool simulated = false;
  std::string sim_shm;
  if (!gpu) {
    simulated = true;
    std::string why;
    const std::string dd = find_driver_double(&why);
    if (dd.empty()) {
      std::fprintf(stderr, "gpuos demo: no GPU found, and %s\n", why.c_str());
      std::filesystem::remove_all(tmp);
      return 2;
    }
    const EnvVars sim = simulated_device_env(dd, 0);
    env.insert(env.end(), sim.begin(), sim.end());
    sim_shm = "/gpuos-sim-demo-" + std::to_string(getpid());
    env.emplace_back("GPUOS_SIM_SHM", sim_shm);
    if (!o.json) std::printf("no GPU found: running on the simulated device (driver test double)\n");
  }
  std::fflush(stdout);

  auto cleanup = [&]() {
    // gpuosd quits the domain's control daemon when it stops; should it not have, the stand-in's
    // process (named nvidia-cuda-mps, a copy of sleep) must not outlive the demo.
    if (!gpu) {
      const long long mps_pid = std::atoll(read_text(mps_pid_file).c_str());
      if (mps_pid > 0 && read_text("/proc/" + std::to_string(mps_pid) + "/comm").rfind("nvidia-cuda-mps", 0) == 0) {
        kill(static_cast<pid_t>(mps_pid), SIGTERM);
      }
    }
    if (!sim_shm.empty()) shm_unlink(sim_shm.c_str());
    if (!o.keep) std::filesystem::remove_all(tmp);
    else std::fprintf(stderr, "gpuos demo: logs kept in %s\n", tmp.c_str());
  };

  ticker->stage(std::string("starting gpuosd (") + (simulated ? "simulated device" : "GPU") + ", sharing: " + sharing +
                ")");
  const std::string daemon_log = tmp + "/gpuosd.log";
  pid_t dpid = spawn({gpuosd, "--socket", sock, "--config", cfg_path}, env, daemon_log);
  bool up = false;
  for (int i = 0; i < 250 && !up; ++i) {
    int fd = connect_control_socket(sock.c_str());
    if (fd >= 0) {
      close(fd);
      up = true;
      break;
    }
    if (wait_for(dpid, 0) >= 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!up) {
    std::fprintf(stderr, "gpuos demo: gpuosd did not start:\n%s\n", tail_of(daemon_log).c_str());
    stop_process(dpid);
    cleanup();
    return 1;
  }

  // HP: short kernels with gaps (latency-critical); BE: long kernels back to back (22 ms each on an
  // H100), of many blocks so that fewer SMs cost it in proportion. In space, HP's grid is the 32
  // blocks its partition holds one per SM; in time, one block on every SM of the GPU. The three hp
  // runs have the same count, so that their percentiles rest on as many kernels.
  // On the simulated device memory is host memory: filling and checking 1 GiB there takes seconds
  // of the CPU the double's timings need, so its buffers are small (they only show in PEAK-MEM).
  const bool space = sharing == "space";
  auto count = [&](double per_s) { return static_cast<uint64_t>(std::max(10L, std::lround(per_s * seconds))); };
  // The simulated device's kernels are longer than the GPU's iterations give (1 ns each): its
  // timings carry the host's thread wake-ups, whose tail on a small machine is hundreds of us, and a
  // spatial launch has one wake-up more than one alone (its join back to the app's stream). Against
  // hp's 200 us kernel that alone read as 1.1-1.3x at the median, against 1 ms still ~1.1x at p99
  // on an idle 2-core machine; against 4 ms it is within a few percent. hp's gaps there are short, so
  // that a phase holds 400 kernels in about 2 s; be's kernels are 20 ms alone, as on an H100 (each
  // of its launches costs CPU that hp's wake-ups share on a small machine).
  const std::string hp_mem = simulated ? "16" : "256", be_mem = simulated ? "64" : "1024";
  const char* hp_iters = simulated ? "4000000" : "200000";
  const char* hp_gap = simulated ? "1000" : "2000";
  const char* be_iters = simulated ? "2500000" : "250000";
  const double hp_gap_us = std::atof(hp_gap);
  std::vector<std::string> hp_args = {"--iters", hp_iters, "--block", "256", "--gap-us", hp_gap, "--mem-mib", hp_mem};
  if (space) {
    hp_args.insert(hp_args.end(), {"--blocks", std::to_string(kHpSms)});
  } else {
    hp_args.insert(hp_args.end(), {"--blocks-per-sm", "1"});
  }
  auto tenant = [](const char* name, const char* label, int phase, const char* klass, std::vector<std::string> args,
                   uint64_t launches_total) {
    Tenant t;
    t.name = name;
    t.label = label;
    t.phase = phase;
    t.klass = klass;
    t.synth_args = std::move(args);
    t.launches_total = launches_total;
    return t;
  };
  auto hp = [&](uint64_t n) {
    std::vector<std::string> a = hp_args;
    a.insert(a.end(), {"--count", std::to_string(n)});
    return a;
  };
  auto be = [&](uint64_t n) {
    return std::vector<std::string>{"--iters", be_iters, "--blocks-per-sm", "64", "--block", "256", "--count",
                                    std::to_string(n), "--gap-us", "0", "--mem-mib", be_mem};
  };
  const uint64_t hp_n = count(200), be_alone_n = count(20);
  // be beside hp runs until hp has ended (then it is stopped); its count only bounds it.
  const uint64_t be_shared_n = std::max<uint64_t>(count(2000), 1000);
  // Progress counts up to the launches a synth makes: the fill of its memory, two warm-up kernels
  // and the timed ones.
  std::vector<Tenant> tenants = {tenant("hp", "hp alone", 0, "guaranteed", hp(hp_n), hp_n + 3),
                                 tenant("be", "be alone", 1, "best-effort", be(be_alone_n), be_alone_n + 3),
                                 tenant("hp", "hp shared", 2, "guaranteed", hp(hp_n), hp_n + 3),
                                 tenant("be", "be shared", 2, "best-effort", be(be_shared_n), 0),
                                 tenant("hp", "hp alone 2", 3, "guaranteed", hp(hp_n), hp_n + 3)};
  Tenant &hp_alone = tenants[0], &be_alone = tenants[1], &hp_shared = tenants[2], &be_shared = tenants[3],
         &hp_again = tenants[4];
  be_shared.companion = true;
  // Alone means alone: the baselines run outside the domain (no MPS), the shared phase in it.
  hp_shared.space = be_shared.space = space;

  const double ticks_per_s = static_cast<double>(sysconf(_SC_CLK_TCK));
  // The CPUs the demo and its tenants may run on (they inherit its affinity): other work there is
  // what can delay them.
  const std::vector<int> cpu_set = affinity_cpus();
  const double cpus = cpu_set.empty() ? static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN))
                                      : static_cast<double>(cpu_set.size());
  auto sample_load = [&] {
    PhaseLoad l;
    l.cpu = read_cpu_ticks(cpu_set);
    const long long d = read_pid_ticks(dpid);
    l.own_ticks = own_and_reaped_ticks(ticks_per_s) + static_cast<double>(std::max(d, 0LL));
    l.at = std::chrono::steady_clock::now();
    return l;
  };
  double other_by_phase[kPhaseCount], own_by_phase[kPhaseCount];
  std::fill(std::begin(other_by_phase), std::end(other_by_phase), -1.0);
  std::fill(std::begin(own_by_phase), std::end(own_by_phase), -1.0);
  const double loadavg_start = read_loadavg();

  // Where each tenant is, by gpuosd's count of its launches (-1: not registered yet).
  auto launches_of = [&](const Listing& l, const Tenant& t) -> long long {
    for (const auto& i : l.tenants) {
      if (i.pid == t.pid) return static_cast<long long>(i.launches);
    }
    return -1;
  };
  auto show_counts = [&](int phase, const Listing* l) {
    std::string counts;
    for (const Tenant& t : tenants) {
      if (t.phase != phase || t.pid < 0) continue;
      const long long n = l != nullptr ? launches_of(*l, t) : -1;
      char b[96];
      if (t.exit_code >= 0) {
        std::snprintf(b, sizeof b, "%s done", t.name.c_str());
      } else if (n < 0) {
        std::snprintf(b, sizeof b, "%s starting", t.name.c_str());
      } else if (t.launches_total > 0) {
        std::snprintf(b, sizeof b, "%s %lld/%llu launches", t.name.c_str(), n,
                      static_cast<unsigned long long>(t.launches_total));
      } else {
        std::snprintf(b, sizeof b, "%s %lld launches", t.name.c_str(), n);
      }
      counts += (counts.empty() ? "" : ", ") + std::string(b);
    }
    ticker->counts(counts);
  };

  // be's rate beside hp: gpuosd's count of its launches over hp's run (its own result also covers
  // the time before hp came, when it had the whole GPU).
  long long be_l0 = -1, be_l1 = -1;
  std::chrono::steady_clock::time_point be_t0, be_t1;

  const double limit = 60.0 + 30.0 * seconds;
  auto spawn_tenant = [&](std::size_t i) {
    Tenant& t = tenants[i];
    t.json_path = tmp + "/" + t.name + "-" + std::to_string(i) + ".json";
    t.log_path = tmp + "/" + t.name + "-" + std::to_string(i) + ".log";
    std::vector<std::string> args = {self, "run", "--socket", sock, "--config", cfg_path, "--class", t.klass,
                                     "--name", t.name};
    if (t.space) {
      args.insert(args.end(), {"--space", kDemoDomain});
      if (t.klass == std::string("guaranteed")) args.insert(args.end(), {"--sms", std::to_string(kHpSms)});
    }
    args.insert(args.end(), {"--", synth, "--name", t.name});
    args.insert(args.end(), t.synth_args.begin(), t.synth_args.end());
    args.insert(args.end(), {"--json", t.json_path});
    t.pid = spawn(args, env, t.log_path);
  };
  for (int phase = 0; phase < kPhaseCount; ++phase) {
    const PhaseLoad before = sample_load();
    ticker->stage(kPhases[phase], phase);
    // gpuosd's counts every 200 ms (the ticker prints them every second).
    auto next_count = std::chrono::steady_clock::now();
    auto reap = [&](Tenant& t) {
      if (t.pid < 0 || t.exit_code >= 0) return;
      const int rc = wait_for(t.pid, 0);
      if (rc >= 0) t.exit_code = rc;
    };
    auto late = [&] { return elapsed() > limit; };
    // Companions first, until they run timed kernels (or end, or time runs out).
    bool companions = false;
    for (std::size_t i = 0; i < tenants.size(); ++i) {
      if (tenants[i].phase == phase && tenants[i].companion) {
        spawn_tenant(i);
        companions = true;
      }
    }
    while (companions && !late()) {
      Listing l;
      std::string err;
      const bool listed = list_tenants(sock, false, &l, &err);
      bool all_running = true;
      for (Tenant& t : tenants) {
        if (t.phase != phase || !t.companion) continue;
        reap(t);
        if (t.exit_code < 0 && (!listed || launches_of(l, t) <= static_cast<long long>(kCompanionRunning))) {
          all_running = false;
        }
      }
      show_counts(phase, listed ? &l : nullptr);
      if (all_running) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (std::size_t i = 0; i < tenants.size(); ++i) {
      if (tenants[i].phase == phase && !tenants[i].companion) spawn_tenant(i);
    }
    for (;;) {
      bool mains_done = true, all_done = true;
      for (Tenant& t : tenants) {
        if (t.phase != phase) continue;
        reap(t);
        if (t.exit_code < 0) {
          all_done = false;
          if (!t.companion) mains_done = false;
        }
      }
      const bool count_due = std::chrono::steady_clock::now() >= next_count;
      const bool watch_be = phase == hp_shared.phase && be_shared.exit_code < 0 && (be_l0 < 0 || mains_done);
      if (count_due || watch_be) {
        Listing l;
        std::string err;
        const bool listed = list_tenants(sock, false, &l, &err);
        if (listed && watch_be) {
          const long long b = launches_of(l, be_shared);
          if (be_l0 < 0 && launches_of(l, hp_shared) > 0 && b >= 0) {
            be_l0 = b;
            be_t0 = std::chrono::steady_clock::now();
          } else if (mains_done && be_l0 >= 0 && be_l1 < 0 && b >= 0) {
            be_l1 = b;
            be_t1 = std::chrono::steady_clock::now();
          }
        }
        if (count_due) {
          show_counts(phase, listed ? &l : nullptr);
          next_count = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
        }
      }
      if (mains_done) {
        for (Tenant& t : tenants) {
          if (t.phase == phase && t.companion && t.exit_code < 0 && !t.stopped) {
            kill(t.pid, SIGTERM);
            t.stopped = true;
          }
        }
      }
      if (all_done) break;
      if (late()) {
        for (Tenant& t : tenants) {
          if (t.phase == phase && t.exit_code < 0) {
            t.problem = "timed out";
            stop_process(t.pid);
            t.exit_code = 128 + SIGKILL;
          }
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const PhaseLoad after = sample_load();
    const double wall_s = std::chrono::duration<double>(after.at - before.at).count();
    other_by_phase[phase] = other_cpus(before.cpu, after.cpu, after.own_ticks - before.own_ticks, ticks_per_s, wall_s);
    if (wall_s > 0) own_by_phase[phase] = (after.own_ticks - before.own_ticks) / ticks_per_s / wall_s;
  }
  const double loadavg_end = read_loadavg();
  ticker->stage("stopping gpuosd");

  Listing l;
  std::string err;
  if (!list_tenants(sock, true, &l, &err)) std::fprintf(stderr, "gpuos demo: ps: %s\n", err.c_str());
  if (!shutdown_daemon(sock, &err)) std::fprintf(stderr, "gpuos demo: stopping gpuosd: %s\n", err.c_str());
  if (wait_for(dpid, 5) < 0) stop_process(dpid);

  bool ok = true;
  std::string device;
  for (Tenant& t : tenants) {
    for (const auto& i : l.tenants) {
      if (i.pid == t.pid) t.daemon_view = i;
    }
    try {
      std::ifstream in(t.json_path);
      if (!in) throw std::runtime_error("no result file");
      t.result = nlohmann::json::parse(in);
      if (device.empty() && t.result.contains("device")) device = t.result["device"].get<std::string>();
    } catch (const std::exception& e) {
      if (t.problem.empty()) t.problem = std::string("result: ") + e.what();
    }
    bool verified = t.result.is_object() && t.result.value("verified", false);
    if (t.exit_code != 0 && t.problem.empty()) t.problem = "exit code " + std::to_string(t.exit_code);
    if (t.problem.empty() && !verified) t.problem = "not verified";
    if (t.problem.empty() && !t.daemon_view) t.problem = "not seen by gpuosd";
    if (!t.problem.empty()) ok = false;
  }

  auto num = [](const nlohmann::json& j, const char* k) {
    return j.is_object() && j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0;
  };
  // The verdict: hp shared against hp alone, at the median and the tail, and be shared against be
  // alone beside the share of the GPU's time hp alone leaves idle; hp alone the second time against
  // the first, and the other processes' CPU while hp ran, say whether the machine could tell.
  DemoNumbers n;
  n.sharing = sharing;
  n.policy = o.policy;
  n.simulated = simulated;
  n.hp_sms = space ? kHpSms : 0;
  n.device_sms = static_cast<unsigned>(num(hp_alone.result, "sms"));
  n.alone_p50_us = num(hp_alone.result, "p50_us");
  n.shared_p50_us = num(hp_shared.result, "p50_us");
  n.alone_p99_us = num(hp_alone.result, "p99_us");
  n.shared_p99_us = num(hp_shared.result, "p99_us");
  const double be_window_s = std::chrono::duration<double>(be_t1 - be_t0).count();
  n.be_rate = be_l0 >= 0 && be_l1 > be_l0 && be_window_s > 0 ? static_cast<double>(be_l1 - be_l0) / be_window_s
                                                                : num(be_shared.result, "throughput_per_s");
  const double be_alone_rate = num(be_alone.result, "throughput_per_s");
  if (ok && n.alone_p50_us > 0) {
    n.p50_ratio = n.shared_p50_us / n.alone_p50_us;
    n.p99_ratio = n.alone_p99_us > 0 ? n.shared_p99_us / n.alone_p99_us : 0;
  }
  if (ok && n.alone_p50_us > 0 && n.alone_p99_us > 0) {
    n.again_p50_ratio = num(hp_again.result, "p50_us") / n.alone_p50_us;
    n.again_p99_ratio = num(hp_again.result, "p99_us") / n.alone_p99_us;
  }
  if (be_alone_rate > 0) n.be_vs_alone = n.be_rate / be_alone_rate;
  // hp alone keeps the GPU busy for a kernel, then sleeps its gap.
  if (n.alone_p50_us > 0) n.hp_idle_share = hp_gap_us / (hp_gap_us + n.alone_p50_us);
  n.cpus = cpus;
  for (int phase : {hp_alone.phase, hp_shared.phase, hp_again.phase}) n.other_cpus = std::max(n.other_cpus, other_by_phase[phase]);
  n.loadavg = loadavg_end;
  const std::string verdict = demo_verdict(n);
  ticker.reset();  // its last line before the results
  if (o.json) {
    nlohmann::json out;
    out["simulated"] = simulated;
    out["device"] = device;
    out["ok"] = ok;
    out["policy"] = o.policy;
    out["sharing"] = sharing;
    out["mechanism"] = demo_mechanism(n);
    out["hp_alone"] = {{"p50_us", n.alone_p50_us}, {"p99_us", n.alone_p99_us}};
    out["hp_shared"] = {{"p50_us", n.shared_p50_us}, {"p99_us", n.shared_p99_us}};
    out["hp_alone_again"] = {{"p50_us", num(hp_again.result, "p50_us")}, {"p99_us", num(hp_again.result, "p99_us")}};
    out["hp_p50_ratio"] = n.p50_ratio;
    out["hp_p99_ratio"] = n.p99_ratio;
    out["hp_again_p50_ratio"] = n.again_p50_ratio;
    out["hp_again_p99_ratio"] = n.again_p99_ratio;
    out["be_kernels_per_s"] = n.be_rate;
    out["be_alone_kernels_per_s"] = be_alone_rate;
    out["be_vs_alone"] = n.be_vs_alone;
    out["hp_idle_share"] = n.hp_idle_share;
    nlohmann::json by_phase = nlohmann::json::object(), own = nlohmann::json::object();
    for (int p = 0; p < kPhaseCount; ++p) {
      by_phase[kPhases[p]] = other_by_phase[p];
      own[kPhases[p]] = own_by_phase[p];
    }
    out["machine"] = {{"cpus", cpus},
                      {"other_cpus", n.other_cpus},
                      {"other_cpus_by_phase", by_phase},
                      {"own_cpus_by_phase", own},  // the demo, gpuosd and the tenants
                      {"loadavg_start", loadavg_start},
                      {"loadavg_end", loadavg_end},
                      {"busy", demo_machine_busy(n)},
                      {"noisy", demo_machine_noisy(n)}};
    out["seconds"] = elapsed();
    out["verdict"] = verdict;
    out["tenants"] = nlohmann::json::array();
    for (const Tenant& t : tenants) {
      out["tenants"].push_back({{"name", t.name},
                                {"label", t.label},
                                {"phase", kPhases[t.phase]},
                                {"space", t.space},
                                {"class", t.klass},
                                {"exit_code", t.exit_code},
                                {"result", t.result},
                                {"daemon_launches", t.daemon_view ? t.daemon_view->launches : 0},
                                {"daemon_mem_peak_bytes", t.daemon_view ? t.daemon_view->mem_peak_bytes : 0},
                                {"daemon_gate_wait_ns", t.daemon_view ? t.daemon_view->gate_wait_ns : 0},
                                {"problem", t.problem}});
    }
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("device: %s%s, policy: %s, sharing: %s\n", device.empty() ? "?" : device.c_str(),
                simulated ? " (simulated)" : "", o.policy.c_str(), sharing.c_str());
    std::printf("%-10s %-12s %8s %10s %10s %12s %10s %10s %12s %9s\n", "TENANT", "CLASS", "KERNELS", "P50(us)",
                "P99(us)", "KERNELS/S", "LAUNCHES", "PEAK-MEM", "GATE-WAIT", "VERIFIED");
    for (const Tenant& t : tenants) {
      char gate_wait[32];
      std::snprintf(gate_wait, sizeof gate_wait, "%.1f ms",
                    t.daemon_view ? static_cast<double>(t.daemon_view->gate_wait_ns) / 1e6 : 0.0);
      std::printf("%-10s %-12s %8.0f %10.1f %10.1f %12.1f %10llu %10s %12s %9s\n", t.label.c_str(), t.klass.c_str(),
                  num(t.result, "kernels"), num(t.result, "p50_us"), num(t.result, "p99_us"),
                  &t == &be_shared ? n.be_rate : num(t.result, "throughput_per_s"),
                  static_cast<unsigned long long>(t.daemon_view ? t.daemon_view->launches : 0),
                  human_bytes(t.daemon_view ? t.daemon_view->mem_peak_bytes : 0).c_str(), gate_wait,
                  t.result.is_object() && t.result.value("verified", false) ? "yes" : "NO");
    }
    std::printf("verdict: %s\n", verdict.c_str());
  }
  for (const Tenant& t : tenants) {
    if (!t.problem.empty()) {
      std::fprintf(stderr, "gpuos demo: tenant %s failed: %s\n%s\n", t.name.c_str(), t.problem.c_str(),
                   tail_of(t.log_path).c_str());
    }
  }
  cleanup();
  return ok ? 0 : 1;
}

}  // namespace gpuos::cli
