// SPDX-License-Identifier: Apache-2.0
// `gpuos demo`: a private gpuosd and gpuos-synth tenants under `gpuos run`: first the latency-critical
// "hp" alone (the baseline) and the best-effort "be" alone, then the two side by side; a summary
// table, and a verdict that compares hp shared with hp alone (what gpuos bought) and be shared with
// be alone (what it cost be).
//
// How they share: on a GPU with MPS (`--sharing auto`, the default), in space: one spatial domain,
// hp on 32 SMs of its own (its kernels' 32 blocks, one per SM, as alone), be on the other SMs. A
// GPU cannot preempt a running kernel, so in time (`--sharing time`, and on the simulated device)
// hp's kernel waits for be's kernel already running when it came: its tail shows be's kernels.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/demo_verdict.h"
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
  std::string label;  // the table's: "hp alone", "be alone", "hp shared", "be shared"
  int phase = 0;      // 0, 1: the baselines (hp alone, be alone), 2: shared
  bool space = false; // in the demo's spatial domain
  std::vector<std::string> synth_args;
  pid_t pid = -1;
  int exit_code = -1;
  std::string json_path, log_path;
  nlohmann::json result;
  std::optional<gpuos_msg_tenant_info> daemon_view;
  std::string problem;
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
  double seconds = o.seconds > 0 ? o.seconds : 2.0;
  const bool gpu = real_gpu_present();
  std::string sharing = o.sharing;
  if (sharing == "auto") sharing = gpu && !find_in_path(o.mps_control).empty() ? "space" : "time";
  if (sharing == "space" && (!gpu || find_in_path(o.mps_control).empty())) {
    std::fprintf(stderr, "gpuos demo: --sharing space needs a GPU and MPS (%s): %s\n", o.mps_control.c_str(),
                 gpu ? "the MPS control program was not found" : "no GPU found");
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
  {
    std::ofstream cfg(cfg_path);
    cfg << "[daemon]\nlog_level = \"info\"\nhistory = 16\n[tenants]\non_no_daemon = \"refuse\"\n"
        << "[scheduler]\npolicy = \"" << o.policy << "\"\n"
        << "[metrics]\nlisten = \"\"\n";  // a private daemon: leave the metrics port to the real one
    // A private MPS control daemon for the domain, under the demo's directory (gpuosd starts and
    // stops it).
    if (sharing == "space") {
      cfg << "[spatial]\nmps_dir = \"" << tmp << "/mps\"\nmps_control = \"" << o.mps_control << "\"\n"
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
    if (!sim_shm.empty()) shm_unlink(sim_shm.c_str());
    if (!o.keep) std::filesystem::remove_all(tmp);
    else std::fprintf(stderr, "gpuos demo: logs kept in %s\n", tmp.c_str());
  };

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
  // H100), of many blocks so that fewer SMs cost it in proportion. HP runs alone (the baseline) and
  // beside BE, BE alone (its speed alone) and beside HP. In space, HP's grid is the 32 blocks its
  // partition holds one per SM; in time, one block on every SM of the GPU.
  const bool space = sharing == "space";
  auto count = [&](double per_s) { return std::to_string(std::max(10L, std::lround(per_s * seconds))); };
  std::vector<std::string> hp_args = {"--iters", "200000", "--block", "256", "--gap-us", "2000", "--mem-mib", "256"};
  if (space) {
    hp_args.insert(hp_args.end(), {"--blocks", std::to_string(kHpSms)});
  } else {
    hp_args.insert(hp_args.end(), {"--blocks-per-sm", "1"});
  }
  auto tenant = [](const char* name, const char* label, int phase, const char* klass, std::vector<std::string> args) {
    Tenant t;
    t.name = name;
    t.label = label;
    t.phase = phase;
    t.klass = klass;
    t.synth_args = std::move(args);
    return t;
  };
  auto hp = [&](const std::string& n) {
    std::vector<std::string> a = hp_args;
    a.insert(a.end(), {"--count", n});
    return a;
  };
  auto be = [&](const std::string& n) {
    return std::vector<std::string>{"--iters", "250000", "--blocks-per-sm", "64", "--block", "256", "--count", n,
                                    "--gap-us", "0", "--mem-mib", "1024"};
  };
  std::vector<Tenant> tenants = {tenant("hp", "hp alone", 0, "guaranteed", hp(count(150))),
                                 tenant("be", "be alone", 1, "best-effort", be(count(20))),
                                 tenant("hp", "hp shared", 2, "guaranteed", hp(count(300))),
                                 tenant("be", "be shared", 2, "best-effort", be(count(150)))};
  // Alone means alone: the baselines run outside the domain (no MPS), the shared phase in it.
  tenants[2].space = tenants[3].space = space;
  const double limit = 60.0 + 20.0 * seconds;
  const auto start = std::chrono::steady_clock::now();
  for (int phase : {0, 1, 2}) {
    for (std::size_t i = 0; i < tenants.size(); ++i) {
      Tenant& t = tenants[i];
      if (t.phase != phase) continue;
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
    }
    for (Tenant& t : tenants) {
      if (t.phase != phase) continue;
      double left = limit - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      t.exit_code = wait_for(t.pid, std::max(left, 0.0));
      if (t.exit_code < 0) {
        t.problem = "timed out";
        stop_process(t.pid);
      }
    }
  }

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
  // alone beside the share of the GPU's time hp alone leaves idle.
  const Tenant &hp_alone = tenants[0], &be_alone = tenants[1], &hp_shared = tenants[2], &be_shared = tenants[3];
  DemoNumbers n;
  n.sharing = sharing;
  n.policy = o.policy;
  n.alone_p50_us = num(hp_alone.result, "p50_us");
  n.shared_p50_us = num(hp_shared.result, "p50_us");
  n.alone_p99_us = num(hp_alone.result, "p99_us");
  n.shared_p99_us = num(hp_shared.result, "p99_us");
  n.be_rate = num(be_shared.result, "throughput_per_s");
  const double be_alone_rate = num(be_alone.result, "throughput_per_s");
  if (ok && n.alone_p50_us > 0) {
    n.p50_ratio = n.shared_p50_us / n.alone_p50_us;
    n.p99_ratio = n.alone_p99_us > 0 ? n.shared_p99_us / n.alone_p99_us : 0;
  }
  if (be_alone_rate > 0) n.be_vs_alone = n.be_rate / be_alone_rate;
  // hp alone keeps the GPU busy for a kernel, then sleeps its gap.
  if (n.alone_p50_us > 0) n.hp_idle_share = 2000.0 / (2000.0 + n.alone_p50_us);
  const std::string verdict = demo_verdict(n);
  const double p50_ratio = n.p50_ratio, p99_ratio = n.p99_ratio, be_rate = n.be_rate;
  const double alone_p50 = n.alone_p50_us, shared_p50 = n.shared_p50_us, alone_p99 = n.alone_p99_us,
               shared_p99 = n.shared_p99_us;
  if (o.json) {
    nlohmann::json out;
    out["simulated"] = simulated;
    out["device"] = device;
    out["ok"] = ok;
    out["policy"] = o.policy;
    out["sharing"] = sharing;
    out["hp_alone"] = {{"p50_us", alone_p50}, {"p99_us", alone_p99}};
    out["hp_shared"] = {{"p50_us", shared_p50}, {"p99_us", shared_p99}};
    out["hp_p50_ratio"] = p50_ratio;
    out["hp_p99_ratio"] = p99_ratio;
    out["be_kernels_per_s"] = be_rate;
    out["be_alone_kernels_per_s"] = be_alone_rate;
    out["be_vs_alone"] = n.be_vs_alone;
    out["hp_idle_share"] = n.hp_idle_share;
    out["verdict"] = verdict;
    out["tenants"] = nlohmann::json::array();
    for (const Tenant& t : tenants) {
      out["tenants"].push_back({{"name", t.name},
                                {"phase", t.phase < 2 ? "alone" : "shared"},
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
                  num(t.result, "throughput_per_s"),
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
