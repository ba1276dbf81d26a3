// `gpuos demo`: a private gpuosd and gpuos-synth tenants under `gpuos run`: first the latency-critical
// "hp" alone (the baseline), then "hp" beside the best-effort "be"; a summary table, and a verdict
// that compares hp shared with hp alone (what gpuos bought).
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

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/simulate.h"
#include "common/ipc.h"
#include "gpuos/driver_api.h"

namespace gpuos::cli {
namespace {

using Env = EnvVars;

// hp shared within this factor of hp alone counts as kept near alone in the verdict.
constexpr double kKeptLatencyRatio = 1.5;

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
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
  std::string label;  // the table's: "hp alone", "hp shared", "be shared"
  int phase = 0;      // 0: the baseline (hp alone), 1: shared
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
  }

  Env env = {{"GPUOS_CONFIG", cfg_path}, {"GPUOS_SOCKET", sock}};
  bool simulated = false;
  std::string sim_shm;
  if (!real_gpu_present()) {
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

  // HP: small kernels with gaps (latency-critical); BE: big kernels back to back. HP runs twice: alone
  // (the baseline, half as many kernels: enough for its percentiles) and beside BE.
  auto count = [&](double per_s) { return std::to_string(std::max(10L, std::lround(per_s * seconds))); };
  const std::vector<std::string> hp_args = {"--iters", "200000", "--blocks-per-sm", "1", "--block", "256",
                                            "--gap-us", "2000", "--mem-mib", "256"};
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
  std::vector<Tenant> tenants = {
      tenant("hp", "hp alone", 0, "guaranteed", hp(count(150))),
      tenant("hp", "hp shared", 1, "guaranteed", hp(count(300))),
      tenant("be", "be shared", 1, "best-effort",
             {"--iters", "2000000", "--blocks-per-sm", "8", "--block", "256", "--count", count(150), "--gap-us", "0",
              "--mem-mib", "1024"})};
  const double limit = 60.0 + 20.0 * seconds;
  const auto start = std::chrono::steady_clock::now();
  for (int phase : {0, 1}) {
    for (std::size_t i = 0; i < tenants.size(); ++i) {
      Tenant& t = tenants[i];
      if (t.phase != phase) continue;
      t.json_path = tmp + "/" + t.name + "-" + std::to_string(i) + ".json";
      t.log_path = tmp + "/" + t.name + "-" + std::to_string(i) + ".log";
      std::vector<std::string> args = {self, "run", "--socket", sock, "--config", cfg_path, "--class", t.klass,
                                       "--name", t.name, "--", synth, "--name", t.name};
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
  // The verdict: hp shared against hp alone, at the median and the tail, and what be got done beside it.
  const double alone_p50 = num(tenants[0].result, "p50_us"), shared_p50 = num(tenants[1].result, "p50_us");
  const double alone_p99 = num(tenants[0].result, "p99_us"), shared_p99 = num(tenants[1].result, "p99_us");
  const double be_rate = num(tenants[2].result, "throughput_per_s");
  const double p50_ratio = alone_p50 > 0 ? shared_p50 / alone_p50 : 0;
  const double p99_ratio = alone_p99 > 0 ? shared_p99 / alone_p99 : 0;
  std::string verdict;
  if (!ok || p50_ratio <= 0 || p99_ratio <= 0) {
    verdict = "no verdict: a run failed (see below)";
  } else {
    const bool median_kept = p50_ratio <= kKeptLatencyRatio, tail_kept = p99_ratio <= kKeptLatencyRatio;
    const char* meaning =
        median_kept && tail_kept ? "gpuos kept hp as fast as it runs alone"
        : o.policy == "open"     ? "policy open gates nothing; the default, priority, holds be back while hp works"
        : median_kept            ? "gpuos kept hp's typical latency near alone; its tail is be's kernels already "
                                   "running when hp's came (a GPU finishes their time slice first)"
                                 : "hp was slowed more than gpuos should allow: is the machine busy with other work?";
    char line[640];
    std::snprintf(line, sizeof line,
                  "beside be (%.1f kernels/s) hp's latency was %.2fx its latency alone at the median (%.1f vs %.1f "
                  "us) and %.2fx at p99 (%.1f vs %.1f us): %s",
                  be_rate, p50_ratio, shared_p50, alone_p50, p99_ratio, shared_p99, alone_p99, meaning);
    verdict = line;
  }
  if (o.json) {
    nlohmann::json out;
    out["simulated"] = simulated;
    out["device"] = device;
    out["ok"] = ok;
    out["policy"] = o.policy;
    out["hp_alone"] = {{"p50_us", alone_p50}, {"p99_us", alone_p99}};
    out["hp_shared"] = {{"p50_us", shared_p50}, {"p99_us", shared_p99}};
    out["hp_p50_ratio"] = p50_ratio;
    out["hp_p99_ratio"] = p99_ratio;
    out["be_kernels_per_s"] = be_rate;
    out["verdict"] = verdict;
    out["tenants"] = nlohmann::json::array();
    for (const Tenant& t : tenants) {
      out["tenants"].push_back({{"name", t.name},
                                {"phase", t.phase == 0 ? "alone" : "shared"},
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
    std::printf("device: %s%s, policy: %s\n", device.empty() ? "?" : device.c_str(),
                simulated ? " (simulated)" : "", o.policy.c_str());
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
