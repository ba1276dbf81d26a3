// SPDX-License-Identifier: Apache-2.0
// window_bench: how long a latency-critical (HP) kernel waits to start while a best-effort (BE)
// kernel holds the GPU (issue #56 item 3, "windows in time"). gpu/window_bench.sh runs it as two
// processes under time-slicing, MPS client priorities and gpuos's gate, and alone. All kernels do
// FIXED work (dependent FMAs, an iteration count calibrated on the device), never wall-clock spins:
// a spinning kernel that is preempted just spins longer and hides the preemption. The HP kernel's
// blocks read %globaltimer as they start (the first block's is the kernel's start) and as they end;
// the host notes CLOCK_REALTIME just before each launch. Host and GPU clocks are aligned per process
// by the minimum of (GPU start - host launch) over launches made while the process is alone on the
// GPU (before its companion starts, and again after it stopped: the drift between the two shows a
// resynchronised %globaltimer). End-to-end latency (launch to cudaStreamSynchronize's return) needs
// no clock alignment, and end-to-end minus the kernel's own GPU time is a clock-free check of the
// wait. Roles:
//   window_bench calibrate --hp-us 30 --be-ms 1,5,28 --out FILE [--be-waves 1]
//       iteration counts for an HP kernel of ~30 us and BE kernels of ~1, 5, 28 ms alone (cudaEvent
//       timing, scaled until within 1%), the alone durations, the device, %globaltimer's step.
//   window_bench hp --iters N --releases R --gap-min-ms A --gap-max-ms B --ready-file F --go-file G
//       --released-file D --quiet-file Q --out FILE [--calib 200] [--blocks SMs] [--seed S] [--wait-s 120]
//       calibrates alone, writes F, waits for G, releases R kernels (one at a time, each after a
//       uniform random gap in [A, B] ms: they land at random phases of the BE kernel), writes D,
//       waits for Q (the companion gone), calibrates again, writes FILE (every launch's raw stamps).
//   window_bench be --kind run|idle|ping --out FILE [--iters N] [--waves 1] [--inflight 2]
//       [--ping-us 1000] [--ready-file F] [--max-s 300]
//       run: BE kernels back to back, `inflight` queued; idle: holds a context, runs nothing; ping:
//       a tiny kernel every ping-us. Until SIGTERM (or max-s); FILE: each kernel's completion time.
//   window_bench version
// BE grid: 2 blocks of 1024 threads per SM (__launch_bounds__(1024, 2): 32 registers a thread), so
// one wave fills every SM's thread slots and registers; no other kernel's block fits beside it until
// the wave ends (--be-waves/--waves N: N such waves, the same total time in N shorter blocks).
// HP grid: one 256-thread block per SM.
#define WINDOW_BENCH_VERSION 1

#include <cuda_runtime.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kHpThreads = 256;
constexpr int kBeThreads = 1024;
constexpr int kWarmup = 20;
constexpr unsigned long long kNoStamp = ~0ull;

// ---- device side ----

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// `iters` rounds of two dependent FMAs; the values converge to 1 (no overflow, no denormals), and
// the result is used, so the loop stays.
__device__ __forceinline__ float fixed_work(long long iters) {
  float a = 1.0f + threadIdx.x * 1e-6f, b = 0.5f;
  for (long long i = 0; i < iters; ++i) {
    a = fmaf(a, 0.9999f, 1e-4f);
    b = fmaf(b, 0.9999f, a * 1e-4f);
  }
  return a + b;
}

__global__ void __launch_bounds__(kBeThreads, 2) be_kernel(long long iters, float* sink) {
  const float r = fixed_work(iters);
  if (r == -1.0f) sink[blockIdx.x] = r;  // never true
}

// slot[0]: the earliest block start (atomicMin), slot[1]: the latest block end (atomicMax).
__global__ void __launch_bounds__(kHpThreads) hp_kernel(long long iters, unsigned long long* slot, float* sink) {
  if (threadIdx.x == 0) atomicMin(&slot[0], globaltimer());
  const float r = fixed_work(iters);
  if (r == -1.0f) sink[blockIdx.x] = r;
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&slot[1], globaltimer());
}

__global__ void ping_kernel(float* sink) {
  const float r = fixed_work(16);
  if (r == -1.0f) sink[threadIdx.x] = r;
}

// %globaltimer's step: out[0] the smallest change seen, out[1] changes, out[2] the time spanned.
__global__ void timer_step_kernel(unsigned long long* out, int reads) {
  unsigned long long first = globaltimer(), prev = first, least = kNoStamp, changes = 0;
  for (int i = 0; i < reads; ++i) {
    const unsigned long long t = globaltimer();
    if (t != prev) {
      least = t - prev < least ? t - prev : least;
      ++changes;
      prev = t;
    }
  }
  out[0] = least;
  out[1] = changes;
  out[2] = prev - first;
}

// ---- host side ----

std::atomic<bool> g_stop{false};
void on_stop(int) { g_stop.store(true); }

uint64_t now_ns(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void sleep_until_mono(uint64_t t) {
  timespec ts;
  ts.tv_sec = time_t(t / 1000000000ull);
  ts.tv_nsec = long(t % 1000000000ull);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

bool file_exists(const std::string& p) { return !p.empty() && access(p.c_str(), F_OK) == 0; }

bool touch(const std::string& p) {
  if (p.empty()) return true;
  FILE* f = std::fopen(p.c_str(), "w");
  if (f == nullptr) return false;
  std::fclose(f);
  return true;
}

// Polls for the file every ms; false after wait_s seconds or once a stop signal came.
bool wait_for_file(const std::string& p, double wait_s) {
  const uint64_t end = now_ns(CLOCK_MONOTONIC) + uint64_t(wait_s * 1e9);
  while (!file_exists(p)) {
    if (g_stop.load() || now_ns(CLOCK_MONOTONIC) > end) return false;
    usleep(1000);
  }
  return true;
}

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) o += ' ';
    else o += c;
  }
  return o + "\"";
}

// "--key value" pairs after the role.
struct Args {
  int argc;
  char** argv;
  const char* str(const char* key, const char* fallback) const {
    for (int i = 2; i + 1 < argc; ++i)
      if (std::strcmp(argv[i], key) == 0) return argv[i + 1];
    return fallback;
  }
  double num(const char* key, double fallback) const {
    const char* s = str(key, nullptr);
    return s != nullptr ? std::atof(s) : fallback;
  }
};

// A failed CUDA call: one line on stderr, and the role's JSON says so (`error`).
std::string g_error;
bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  if (g_error.empty()) g_error = std::string(what) + ": " + cudaGetErrorString(e);
  std::fprintf(stderr, "window_bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

int write_error_json(const std::string& path, const char* role) {
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "{\"role\": \"%s\", \"version\": %d, \"error\": %s}\n", role, WINDOW_BENCH_VERSION,
                 json_string(g_error).c_str());
    std::fclose(f);
  }
  return 1;
}

struct Device {
  std::string name;
  int sms = 0, cc_major = 0, cc_minor = 0, driver_api = 0, runtime = 0;
};

bool device_info(Device* d) {
  cudaDeviceProp p;
  if (!ok(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties")) return false;
  d->name = p.name;
  d->sms = p.multiProcessorCount;
  d->cc_major = p.major;
  d->cc_minor = p.minor;
  cudaDriverGetVersion(&d->driver_api);
  cudaRuntimeGetVersion(&d->runtime);
  return true;
}

void print_device(FILE* f, const Device& d) {
  std::fprintf(f, "\"device\": %s, \"sm_count\": %d, \"cc\": \"%d.%d\", \"cuda_driver_api\": %d, \"cuda_runtime\": %d",
               json_string(d.name).c_str(), d.sms, d.cc_major, d.cc_minor, d.driver_api, d.runtime);
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

// ---- calibrate ----

// One kernel timed with events, `reps` times: the durations in ms, sorted.
template <typename Launch>
bool time_kernel(cudaStream_t s, Launch launch, int reps, std::vector<double>* ms) {
  cudaEvent_t e0, e1;
  if (!ok(cudaEventCreate(&e0), "cudaEventCreate") || !ok(cudaEventCreate(&e1), "cudaEventCreate")) return false;
  ms->clear();
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(e0, s);
    launch();
    cudaEventRecord(e1, s);
    if (!ok(cudaGetLastError(), "launch") || !ok(cudaEventSynchronize(e1), "kernel")) return false;
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    ms->push_back(t);
  }
  std::sort(ms->begin(), ms->end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return true;
}

struct Fit {
  double target_ms = 0;
  long long iters = 0;
  double ms = 0, ms_min = 0, ms_max = 0;
  int rounds = 0;
};

// Scales the iteration count until the median duration is within 1% of the target.
template <typename LaunchIters>
bool fit_iters(cudaStream_t s, LaunchIters launch, double target_ms, long long start, int reps, Fit* out) {
  long long it = start;
  std::vector<double> ms;
  out->target_ms = target_ms;
  for (int round = 1; round <= 10; ++round) {
    if (!time_kernel(s, [&] { launch(it); }, reps, &ms)) return false;
    const double med = ms[ms.size() / 2];
    out->rounds = round;
    const double ratio = target_ms / std::max(med, 1e-4);
    if (std::fabs(ratio - 1.0) < 0.01 && round > 1) break;
    it = std::clamp<long long>(std::llround(double(it) * std::clamp(ratio, 0.001, 1000.0)), 1, 1ll << 40);
  }
  if (!time_kernel(s, [&] { launch(it); }, reps * 2 + 1, &ms)) return false;
  out->iters = it;
  out->ms = ms[ms.size() / 2];
  out->ms_min = ms.front();
  out->ms_max = ms.back();
  return true;
}

int run_calibrate(const Args& a) {
  const std::string out = a.str("--out", "");
  const double hp_us = a.num("--hp-us", 30);
  const int waves = std::max(1, static_cast<int>(a.num("--be-waves", 1)));
  std::vector<double> be_ms;
  for (std::string list = a.str("--be-ms", "1,5,28"); !list.empty();) {
    const size_t comma = list.find(',');
    be_ms.push_back(std::atof(list.substr(0, comma).c_str()));
    list = comma == std::string::npos ? "" : list.substr(comma + 1);
  }
  if (out.empty() || hp_us <= 0 || be_ms.empty()) {
    std::fprintf(stderr, "usage: window_bench calibrate --out FILE [--hp-us 30] [--be-ms 1,5,28] [--be-waves 1]\n");
    return 2;
  }
  Device d;
  cudaStream_t s;
  float* sink = nullptr;
  unsigned long long* scratch = nullptr;
  if (!device_info(&d) || !ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream") ||
      !ok(cudaMalloc(&sink, sizeof(float) * 8 * d.sms), "cudaMalloc") ||
      !ok(cudaMalloc(&scratch, 4 * sizeof(unsigned long long)), "cudaMalloc"))
    return write_error_json(out, "calibrate");
  const int be_blocks = 2 * d.sms * waves, hp_blocks = d.sms;
  auto be = [&](long long it) { be_kernel<<<be_blocks, kBeThreads, 0, s>>>(it, sink); };
  auto hp = [&](long long it) { hp_kernel<<<hp_blocks, kHpThreads, 0, s>>>(it, scratch, sink); };

  // Warm-up: about half a second of BE work (clocks up, the modules loaded).
  std::vector<double> ms;
  Fit warm;
  if (!fit_iters(s, be, 50.0, 20000, 3, &warm)) return write_error_json(out, "calibrate");
  for (int i = 0; i < 10; ++i) be(warm.iters);
  if (!ok(cudaStreamSynchronize(s), "warm-up")) return write_error_json(out, "calibrate");

  Fit hp_fit;
  if (!fit_iters(s, hp, hp_us / 1000.0, 1000, 21, &hp_fit)) return write_error_json(out, "calibrate");
  std::vector<Fit> be_fits(be_ms.size());
  for (size_t i = 0; i < be_ms.size(); ++i)
    if (!fit_iters(s, be, be_ms[i], warm.iters, be_ms[i] > 10 ? 3 : 5, &be_fits[i]))
      return write_error_json(out, "calibrate");

  unsigned long long step[3] = {0, 0, 0};
  timer_step_kernel<<<1, 1, 0, s>>>(scratch, 200000);
  if (!ok(cudaGetLastError(), "timer_step_kernel") ||
      !ok(cudaMemcpy(step, scratch, sizeof(step), cudaMemcpyDeviceToHost), "timer step"))
    return write_error_json(out, "calibrate");

  FILE* f = std::fopen(out.c_str(), "w");
  if (f == nullptr) return 1;
  std::fprintf(f, "{\"role\": \"calibrate\", \"version\": %d, ", WINDOW_BENCH_VERSION);
  print_device(f, d);
  std::fprintf(f, ",\n \"globaltimer\": {\"min_step_ns\": %llu, \"changes\": %llu, \"span_ns\": %llu},\n", step[0],
               step[1], step[2]);
  std::fprintf(f,
               " \"hp\": {\"target_us\": %.3f, \"iters\": %lld, \"us\": %.3f, \"us_min\": %.3f, \"us_max\": %.3f, "
               "\"blocks\": %d, \"threads\": %d},\n \"be\": [",
               hp_us, hp_fit.iters, hp_fit.ms * 1e3, hp_fit.ms_min * 1e3, hp_fit.ms_max * 1e3, hp_blocks, kHpThreads);
  for (size_t i = 0; i < be_fits.size(); ++i) {
    const Fit& b = be_fits[i];
    std::fprintf(f,
                 "%s\n  {\"target_ms\": %g, \"iters\": %lld, \"ms\": %.4f, \"ms_min\": %.4f, \"ms_max\": %.4f, "
                 "\"rounds\": %d, \"blocks\": %d, \"threads\": %d, \"waves\": %d}",
                 i ? "," : "", b.target_ms, b.iters, b.ms, b.ms_min, b.ms_max, b.rounds, be_blocks, kBeThreads, waves);
  }
  std::fprintf(f, "],\n \"error\": null}\n");
  std::fclose(f);
  std::printf("calibrate: %s, %d SMs; HP %lld iters = %.1f us;", d.name.c_str(), d.sms, hp_fit.iters, hp_fit.ms * 1e3);
  for (const Fit& b : be_fits) std::printf(" BE %g ms: %lld iters = %.3f ms;", b.target_ms, b.iters, b.ms);
  std::printf(" globaltimer step %llu ns\n", step[0]);
  return 0;
}

// ---- hp ----

struct Launch {
  uint64_t host_rt = 0;  // CLOCK_REALTIME just before the launch call
  uint64_t e2e = 0;      // launch call to cudaStreamSynchronize's return (CLOCK_MONOTONIC)
};

int run_hp(const Args& a) {
  const std::string out = a.str("--out", ""), ready = a.str("--ready-file", ""), go = a.str("--go-file", ""),
                    released = a.str("--released-file", ""), quiet = a.str("--quiet-file", "");
  const long long iters = static_cast<long long>(a.num("--iters", 0));
  const int releases = static_cast<int>(a.num("--releases", 300)), calib = static_cast<int>(a.num("--calib", 200));
  const double gap_min = a.num("--gap-min-ms", 2), gap_max = a.num("--gap-max-ms", 20), wait_s = a.num("--wait-s", 120);
  const uint64_t seed = static_cast<uint64_t>(a.num("--seed", 1));
  if (out.empty() || go.empty() || iters <= 0 || releases <= 0 || calib <= 0 || gap_min < 0 || gap_max < gap_min) {
    std::fprintf(stderr,
                 "usage: window_bench hp --iters N --out FILE --go-file G [--releases R] [--calib C] [--gap-min-ms A] "
                 "[--gap-max-ms B] [--ready-file F] [--released-file D] [--quiet-file Q] [--blocks N] [--seed S] "
                 "[--wait-s 120]\n");
    return 2;
  }
  install_stop_handlers();
  // Spin while waiting: the end-to-end latency is the GPU's, not a thread's wake-up.
  if (!ok(cudaSetDeviceFlags(cudaDeviceScheduleSpin), "cudaSetDeviceFlags")) return write_error_json(out, "hp");
  Device d;
  if (!ok(cudaFree(nullptr), "context") || !device_info(&d)) return write_error_json(out, "hp");
  const int blocks = a.num("--blocks", 0) > 0 ? static_cast<int>(a.num("--blocks", 0)) : d.sms;
  const int total = kWarmup + calib + releases + calib;
  cudaStream_t s;
  unsigned long long* slots = nullptr;
  float* sink = nullptr;
  std::vector<unsigned long long> stamps(2 * size_t(total));
  for (int i = 0; i < total; ++i) stamps[2 * i] = kNoStamp, stamps[2 * i + 1] = 0;
  if (!ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream") ||
      !ok(cudaMalloc(&slots, stamps.size() * sizeof(unsigned long long)), "cudaMalloc") ||
      !ok(cudaMalloc(&sink, sizeof(float) * blocks), "cudaMalloc") ||
      !ok(cudaMemcpy(slots, stamps.data(), stamps.size() * sizeof(unsigned long long), cudaMemcpyHostToDevice),
          "stamps"))
    return write_error_json(out, "hp");

  std::vector<Launch> launches(total);
  std::mt19937_64 rng(seed);
  auto release = [&](int i) {
    Launch& l = launches[i];
    l.host_rt = now_ns(CLOCK_REALTIME);
    const uint64_t m0 = now_ns(CLOCK_MONOTONIC);
    hp_kernel<<<blocks, kHpThreads, 0, s>>>(iters, slots + 2 * size_t(i), sink);
    if (!ok(cudaGetLastError(), "hp launch") || !ok(cudaStreamSynchronize(s), "hp kernel")) return false;
    l.e2e = now_ns(CLOCK_MONOTONIC) - m0;
    return true;
  };
  // Launches [from, to) each after a uniform random gap in [lo, hi] ms.
  auto phase = [&](int from, int to, double lo, double hi) {
    std::uniform_real_distribution<double> gap(lo, hi);
    for (int i = from; i < to; ++i) {
      sleep_until_mono(now_ns(CLOCK_MONOTONIC) + uint64_t(gap(rng) * 1e6));
      if (g_stop.load()) {
        if (g_error.empty()) g_error = "stopped by a signal";
        return false;
      }
      if (!release(i)) return false;
    }
    return true;
  };

  const int pre = kWarmup, rel = pre + calib, post = rel + releases;
  std::string note;
  uint64_t go_rt = 0, released_rt = 0;
  bool quiet_seen = false, done = phase(0, pre, 0.05, 0.2) && phase(pre, rel, 0.2, 1.0);  // warm-up, alone
  if (done) {
    touch(ready);
    if (!wait_for_file(go, wait_s)) {
      g_error = "no go file within " + std::to_string(wait_s) + " s";
      done = false;
    }
  }
  if (done) {
    go_rt = now_ns(CLOCK_REALTIME);
    done = phase(rel, post, gap_min, gap_max);
    released_rt = now_ns(CLOCK_REALTIME);
  }
  if (done) {
    touch(released);
    quiet_seen = quiet.empty() || wait_for_file(quiet, wait_s);
    if (!quiet_seen) note = "no quiet file: the post calibration ran beside the companion";
    done = phase(post, total, 0.2, 1.0);  // alone again: the clock alignment's drift
  }
  cudaMemcpy(stamps.data(), slots, stamps.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost);

  FILE* f = std::fopen(out.c_str(), "w");
  if (f == nullptr) return 1;
  std::fprintf(f, "{\"role\": \"hp\", \"version\": %d, \"pid\": %d, ", WINDOW_BENCH_VERSION, int(getpid()));
  print_device(f, d);
  const char* mps_pipe = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const char* mps_prio = std::getenv("CUDA_MPS_CLIENT_PRIORITY");
  const char* preload = std::getenv("LD_PRELOAD");
  std::fprintf(f,
               ",\n \"iters\": %lld, \"blocks\": %d, \"threads\": %d, \"releases_planned\": %d, \"calib\": %d, "
               "\"gap_min_ms\": %g, \"gap_max_ms\": %g, \"seed\": %llu,\n \"mps_pipe\": %s, \"mps_priority\": %s, "
               "\"ld_preload\": %s, \"go_rt_ns\": %llu, \"released_rt_ns\": %llu, \"quiet_seen\": %s, \"note\": %s,\n",
               iters, blocks, kHpThreads, releases, calib, gap_min, gap_max, (unsigned long long)seed,
               mps_pipe ? json_string(mps_pipe).c_str() : "null", mps_prio ? json_string(mps_prio).c_str() : "null",
               preload ? json_string(preload).c_str() : "null", (unsigned long long)go_rt,
               (unsigned long long)released_rt, quiet_seen ? "true" : "false", json_string(note).c_str());
  // Each launch: [host_rt_ns, gpu_start_ns, gpu_end_ns, e2e_ns]; a launch not made has e2e 0.
  auto dump = [&](const char* key, int from, int to) {
    std::fprintf(f, " \"%s\": [", key);
    for (int i = from; i < to; ++i)
      std::fprintf(f, "%s[%llu, %llu, %llu, %llu]", i > from ? (((i - from) % 4) ? ", " : ",\n  ") : "",
                   (unsigned long long)launches[i].host_rt, stamps[2 * i], stamps[2 * i + 1],
                   (unsigned long long)launches[i].e2e);
    std::fprintf(f, "],\n");
  };
  dump("calib_pre", pre, rel);
  dump("releases", rel, post);
  dump("calib_post", post, total);
  std::fprintf(f, " \"error\": %s}\n", g_error.empty() ? "null" : json_string(g_error).c_str());
  std::fclose(f);
  return done ? 0 : 1;
}

// ---- be ----

int run_be(const Args& a) {
  const std::string out = a.str("--out", ""), ready = a.str("--ready-file", ""), kind = a.str("--kind", "run");
  const long long iters = static_cast<long long>(a.num("--iters", 0));
  const int inflight = std::max(1, static_cast<int>(a.num("--inflight", 2)));
  const double ping_us = a.num("--ping-us", 1000), max_s = a.num("--max-s", 300);
  if (out.empty() || (kind != "run" && kind != "idle" && kind != "ping") || (kind == "run" && iters <= 0)) {
    std::fprintf(stderr,
                 "usage: window_bench be --kind run|idle|ping --out FILE [--iters N] [--waves 1] [--inflight 2] "
                 "[--ping-us 1000] [--ready-file F] [--max-s 300]\n");
    return 2;
  }
  install_stop_handlers();
  // Block while waiting: a BE process should not take a core from the HP's spinning thread.
  if (!ok(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync), "cudaSetDeviceFlags")) return write_error_json(out, "be");
  Device d;
  if (!ok(cudaFree(nullptr), "context") || !device_info(&d)) return write_error_json(out, "be");
  const int blocks = 2 * d.sms * std::max(1, static_cast<int>(a.num("--waves", 1)));
  cudaStream_t s;
  float* sink = nullptr;
  std::vector<cudaEvent_t> ev(inflight);
  if (!ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream") ||
      !ok(cudaMalloc(&sink, sizeof(float) * std::max(blocks, 32)), "cudaMalloc"))
    return write_error_json(out, "be");
  for (auto& e : ev)
    if (!ok(cudaEventCreateWithFlags(&e, cudaEventBlockingSync | cudaEventDisableTiming), "event"))
      return write_error_json(out, "be");

  std::vector<uint64_t> done_rt;
  done_rt.reserve(1 << 16);
  const uint64_t start_rt = now_ns(CLOCK_REALTIME), end_mono = now_ns(CLOCK_MONOTONIC) + uint64_t(max_s * 1e9);
  auto time_up = [&] { return g_stop.load() || now_ns(CLOCK_MONOTONIC) > end_mono; };
  bool good = true;
  if (kind == "run") {
    auto launch = [&](int k) {
      be_kernel<<<blocks, kBeThreads, 0, s>>>(iters, sink);
      return ok(cudaGetLastError(), "be launch") && ok(cudaEventRecord(ev[k], s), "event record");
    };
    for (int k = 0; k < inflight && good; ++k) good = launch(k);
    for (uint64_t i = 0; good; ++i) {
      const int k = static_cast<int>(i % inflight);
      if (!(good = ok(cudaEventSynchronize(ev[k]), "be kernel"))) break;
      done_rt.push_back(now_ns(CLOCK_REALTIME));
      if (done_rt.size() == 2) touch(ready);  // two ended: the queue is in its steady state
      if (time_up()) break;
      good = launch(k);
    }
  } else if (kind == "ping") {
    const uint64_t period = uint64_t(ping_us * 1e3);
    for (uint64_t next = now_ns(CLOCK_MONOTONIC); good && !time_up(); next += period) {
      ping_kernel<<<1, 32, 0, s>>>(sink);
      if (!(good = ok(cudaGetLastError(), "ping launch") && ok(cudaStreamSynchronize(s), "ping kernel"))) break;
      done_rt.push_back(now_ns(CLOCK_REALTIME));
      if (done_rt.size() == 1) touch(ready);
      sleep_until_mono(std::max(next + period, now_ns(CLOCK_MONOTONIC)));
    }
  } else {  // idle: a context with memory, one kernel run, then nothing
    ping_kernel<<<1, 32, 0, s>>>(sink);
    good = ok(cudaStreamSynchronize(s), "first kernel");
    if (good) touch(ready);
    while (good && !time_up()) usleep(10000);
  }
  const bool by_signal = g_stop.load();
  if (good) good = ok(cudaStreamSynchronize(s), "drain");
  const uint64_t stop_rt = now_ns(CLOCK_REALTIME);

  FILE* f = std::fopen(out.c_str(), "w");
  if (f == nullptr) return 1;
  std::fprintf(f, "{\"role\": \"be\", \"version\": %d, \"pid\": %d, \"kind\": \"%s\", ", WINDOW_BENCH_VERSION,
               int(getpid()), kind.c_str());
  print_device(f, d);
  const char* mps_pipe = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const char* mps_prio = std::getenv("CUDA_MPS_CLIENT_PRIORITY");
  std::fprintf(f,
               ",\n \"iters\": %lld, \"blocks\": %d, \"threads\": %d, \"inflight\": %d, \"kernels\": %zu, "
               "\"start_rt_ns\": %llu, \"stop_rt_ns\": %llu, \"stopped_by_signal\": %s, \"mps_pipe\": %s, "
               "\"mps_priority\": %s,\n \"completions_rt_ns\": [",
               kind == "run" ? iters : 0, kind == "run" ? blocks : (kind == "ping" ? 1 : 0),
               kind == "run" ? kBeThreads : 32, inflight, done_rt.size(), (unsigned long long)start_rt,
               (unsigned long long)stop_rt, by_signal ? "true" : "false",
               mps_pipe ? json_string(mps_pipe).c_str() : "null", mps_prio ? json_string(mps_prio).c_str() : "null");
  for (size_t i = 0; i < done_rt.size(); ++i)
    std::fprintf(f, "%s%llu", i ? ((i % 8) ? ", " : ",\n  ") : "", (unsigned long long)done_rt[i]);
  std::fprintf(f, "],\n \"error\": %s}\n", g_error.empty() ? "null" : json_string(g_error).c_str());
  std::fclose(f);
  return good ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string role = argc > 1 ? argv[1] : "";
  const Args a{argc, argv};
  if (role == "calibrate") return run_calibrate(a);
  if (role == "hp") return run_hp(a);
  if (role == "be") return run_be(a);
  if (role == "version") {
    std::printf("window_bench %d\n", WINDOW_BENCH_VERSION);
    return 0;
  }
  std::fprintf(stderr, "usage: window_bench calibrate|hp|be|version [--key value]... (see the top of window_bench.cu)\n");
  return 2;
}
