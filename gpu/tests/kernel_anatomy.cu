// SPDX-License-Identifier: Apache-2.0
// Where a fixed-work kernel's time goes, seen from the GPU itself (issue #5: why a partitioned HP's
// kernels are a few percent slower in some conditions). An unmodified CUDA program, run alone or as
// a tenant under `gpuos run`: it launches gpuos-synth's fixed-work kernel (a dependent FMA chain per
// thread) at Poisson arrivals, and every block records, with no host involvement:
//   %globaltimer and clock64 at its start and end  -> its duration and the SM clock it ran at;
//   %smid                                          -> how many of the kernel's blocks shared an SM.
// Per kernel: duration (first block start to last block end), gap to the previous kernel's end,
// most blocks on one SM, median SM clock over its blocks.
//
//   kernel_anatomy --rate R --count N [--blocks B] [--block T] [--iters I] [--seed S]
//                  [--events 1|2] [--atomic 1] [--driver 1] [--name X] [--json PATH]
//   (writes PATH, and PATH's stem + .anatomy.csv: one line per kernel)
//
// --events 1 observes completions as gpuos-synth's open loop does: the launcher sleeps until each
// arrival and records an event after each kernel; a waiter thread synchronizes the events in order.
// The host-observed latency (completion seen - arrival) then goes to PATH's stem + .trace.csv in
// gpuos-synth's --trace format, beside the device's view of the same kernels. --events 2: the
// waiter sleeps on a condition variable the launcher notifies, as gpuos-synth's does.
// --driver 1 launches through the driver API (cuLaunchKernel with the CUfunction of the primary
// context's module, as gpuos-synth does) instead of the runtime's <<<>>> (a context-free CUkernel).
//
// Prints (and writes to --json) one JSON line: p50_us/p99_us (device duration), queued_c2c_us_p50
// (completion to completion of kernels that started within 30 us of the previous end),
// gap_us_p50 of those, mhz_p50 / mhz_p10, packed_share (kernels with two or more blocks on one SM),
// and the same per 0.25 s window.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "probe.cuh"

namespace {

struct BlockRecord {
  unsigned long long t0, t1, c0, c1;
  unsigned smid, pad;
};

// Same work as gpuos_fixed_work (tools/synth): `iters` dependent FMAs per thread.
__global__ void fixed_work(unsigned long long iters, BlockRecord* rec, float* sink, unsigned long long* done_blocks) {
  __syncthreads();
  unsigned long long t0 = 0, c0 = 0;
  if (threadIdx.x == 0) {
    t0 = globaltimer();
    c0 = clock64();
  }
  float a = static_cast<float>(threadIdx.x) * (1.0f / 1024.0f);
  const float b = 0.9999999f;
  const float c = 1.0e-7f;
  for (unsigned long long i = 0; i < iters; ++i) a = fmaf(a, b, c);
  if (a < 0.0f) sink[0] = a;
  __syncthreads();
  if (threadIdx.x == 0) {
    if (done_blocks != nullptr) atomicAdd(done_blocks, 1ULL);  // --atomic 1: gpuos-synth's block count
    BlockRecord& r = rec[blockIdx.x];
    r.c1 = clock64();
    r.t1 = globaltimer();
    r.t0 = t0;
    r.c0 = c0;
    r.smid = smid();
  }
}

struct Kernel {
  double start_us = 0, end_us = 0, dur_us = 0, gap_us = -1, mhz_med = 0, mhz_min = 0;
  int max_per_sm = 0;
};

double pct(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  const double rate = arg(argc, argv, "--rate", 2000);
  const int count = static_cast<int>(arg(argc, argv, "--count", 10000));
  const int blocks = static_cast<int>(arg(argc, argv, "--blocks", 64));
  const int threads = static_cast<int>(arg(argc, argv, "--block", 256));
  const auto iters = static_cast<unsigned long long>(arg(argc, argv, "--iters", 125000));
  const auto seed = static_cast<unsigned long long>(arg(argc, argv, "--seed", 7));
  const char* json = sarg(argc, argv, "--json", nullptr);
  const int events_mode = static_cast<int>(arg(argc, argv, "--events", 0));
  const bool events = events_mode != 0;
  const bool driver = arg(argc, argv, "--driver", 0) != 0;
  const int warmup = 200;
  const int total = count + warmup;

  BlockRecord* rec = nullptr;
  float* sink = nullptr;
  unsigned long long* done_blocks = nullptr;
  if (arg(argc, argv, "--atomic", 0) != 0) CK(cudaMalloc(&done_blocks, sizeof(unsigned long long)));
  CK(cudaMalloc(&rec, sizeof(BlockRecord) * blocks * static_cast<size_t>(total)));
  CK(cudaMalloc(&sink, sizeof(float)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaFunction_t fn = nullptr;
  if (driver) CK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(fixed_work)));

  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<cudaEvent_t> done(events ? count : 0);
  for (cudaEvent_t& e : done) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  std::vector<std::chrono::steady_clock::time_point> arrival(count), seen(count);
  std::vector<double> launch_us(count);
  std::atomic<int> issued{0};
  std::mutex mu;  // --events 2: the waiter sleeps on a condition variable, as gpuos-synth's does
  std::condition_variable cv;
  std::thread waiter;
  if (events) {
    waiter = std::thread([&] {
      for (int k = 0; k < count; ++k) {
        if (events_mode == 2) {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return issued.load(std::memory_order_acquire) > k; });
        }
        while (issued.load(std::memory_order_acquire) <= k) std::this_thread::yield();
        CK(cudaEventSynchronize(done[k]));
        seen[k] = std::chrono::steady_clock::now();
      }
    });
  }
  auto next = std::chrono::steady_clock::now();
  for (int k = 0; k < total; ++k) {
    const int i = k - warmup;
    if (i >= 0) {
      next += std::chrono::nanoseconds(static_cast<long long>(gap(rng) * 1e9));
      arrival[i] = next;
      if (events) {
        std::this_thread::sleep_until(next);
      } else {
        while (std::chrono::steady_clock::now() < next) {
        }
      }
    }
    const auto call = std::chrono::steady_clock::now();
    BlockRecord* at = rec + static_cast<size_t>(k) * blocks;
    if (driver) {
      unsigned long long it = iters;
      void* params[] = {&it, &at, &sink, &done_blocks};
      const CUresult r = cuLaunchKernel(reinterpret_cast<CUfunction>(fn), blocks, 1, 1, threads, 1, 1, 0,
                                        reinterpret_cast<CUstream>(s), params, nullptr);
      if (r != CUDA_SUCCESS) {
        std::printf("{\"error\": \"cuLaunchKernel: %d\"}\n", static_cast<int>(r));
        return 2;
      }
    } else {
      fixed_work<<<blocks, threads, 0, s>>>(iters, at, sink, done_blocks);
    }
    CK(cudaGetLastError());
    if (i >= 0 && events) {
      CK(cudaEventRecord(done[i], s));
      launch_us[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - call).count();
      if (events_mode == 2) {
        std::lock_guard<std::mutex> lock(mu);
        issued.store(i + 1, std::memory_order_release);
        cv.notify_all();
      } else {
        issued.store(i + 1, std::memory_order_release);
      }
    }
    if (i < 0) {
      CK(cudaStreamSynchronize(s));
      next = std::chrono::steady_clock::now();
    }
  }
  if (waiter.joinable()) waiter.join();
  CK(cudaStreamSynchronize(s));
  std::vector<BlockRecord> host(static_cast<size_t>(blocks) * total);
  CK(cudaMemcpy(host.data(), rec, sizeof(BlockRecord) * host.size(), cudaMemcpyDeviceToHost));

  std::vector<Kernel> ks(count);
  const unsigned long long origin = host[static_cast<size_t>(warmup) * blocks].t0;
  std::vector<unsigned> per_sm(4096);
  for (int k = 0; k < count; ++k) {
    const BlockRecord* r = &host[static_cast<size_t>(k + warmup) * blocks];
    unsigned long long lo = ~0ull, hi = 0;
    std::vector<double> mhz;
    std::fill(per_sm.begin(), per_sm.end(), 0u);
    int most = 0;
    for (int b = 0; b < blocks; ++b) {
      lo = std::min(lo, r[b].t0);
      hi = std::max(hi, r[b].t1);
      if (r[b].t1 > r[b].t0) mhz.push_back(1e3 * static_cast<double>(r[b].c1 - r[b].c0) / static_cast<double>(r[b].t1 - r[b].t0));
      most = std::max(most, static_cast<int>(++per_sm[r[b].smid % per_sm.size()]));
    }
    Kernel& x = ks[k];
    x.start_us = static_cast<double>(lo - origin) / 1e3;
    x.end_us = static_cast<double>(hi - origin) / 1e3;
    x.dur_us = static_cast<double>(hi - lo) / 1e3;
    x.max_per_sm = most;
    x.mhz_med = pct(mhz, 0.5);
    x.mhz_min = pct(mhz, 0.0);
    if (k > 0) x.gap_us = x.start_us - ks[k - 1].end_us;
  }

  std::string csv_path = json ? std::string(json) : std::string();
  if (!csv_path.empty()) {
    const size_t dot = csv_path.rfind(".json");
    csv_path = (dot == std::string::npos ? csv_path : csv_path.substr(0, dot)) + ".anatomy.csv";
    if (FILE* f = std::fopen(csv_path.c_str(), "w")) {
      std::fprintf(f, "start_us,dur_us,gap_us,max_per_sm,mhz_med,mhz_min\n");
      for (const Kernel& x : ks) {
        std::fprintf(f, "%.3f,%.3f,%.3f,%d,%.1f,%.1f\n", x.start_us, x.dur_us, x.gap_us, x.max_per_sm, x.mhz_med, x.mhz_min);
      }
      std::fclose(f);
    }
    if (events) {
      const std::string trace = csv_path.substr(0, csv_path.size() - std::strlen(".anatomy.csv")) + ".trace.csv";
      if (FILE* f = std::fopen(trace.c_str(), "w")) {
        std::fprintf(f, "start_ns,latency_us,launch_us\n");
        for (int k = 0; k < count; ++k) {
          std::fprintf(f, "%lld,%.3f,%.3f\n",
                       static_cast<long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(arrival[k].time_since_epoch()).count()),
                       std::chrono::duration<double, std::micro>(seen[k] - arrival[k]).count(), launch_us[k]);
        }
        std::fclose(f);
      }
    }
  }

  // Summaries: all kernels, and per window of 0.25 s of device time.
  auto summary = [&](int from, int to) {
    std::vector<double> dur, c2c, gaps, mhz;
    int packed = 0;
    for (int k = from; k < to; ++k) {
      dur.push_back(ks[k].dur_us);
      mhz.push_back(ks[k].mhz_med);
      packed += ks[k].max_per_sm > 1;
      // (%globaltimer is resynchronised to the host clock now and then: a jump is no kernel's time.)
      if (k > 0 && ks[k].gap_us >= 0 && ks[k].gap_us < 30 && ks[k].end_us - ks[k - 1].end_us < 1e4) {
        c2c.push_back(ks[k].end_us - ks[k - 1].end_us);
        gaps.push_back(ks[k].gap_us);
      }
    }
    double c2c_sum = 0;
    for (double v : c2c) c2c_sum += v;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "\"p50_us\": %.2f, \"p99_us\": %.2f, \"queued_c2c_us_p50\": %.2f, \"queued_c2c_us_mean\": %.2f, "
                  "\"gap_us_p50\": %.2f, \"queued\": %zu, \"mhz_p50\": %.0f, \"mhz_p10\": %.0f, \"packed_share\": %.4f",
                  pct(dur, 0.5), pct(dur, 0.99), pct(c2c, 0.5), c2c.empty() ? -1.0 : c2c_sum / c2c.size(), pct(gaps, 0.5),
                  c2c.size(), pct(mhz, 0.5),
                  pct(mhz, 0.1), to > from ? static_cast<double>(packed) / (to - from) : 0.0);
    return std::string(buf);
  };
  std::string host_view;  // --events: the host-observed latency, as gpuos-synth measures it
  if (events) {
    std::vector<double> lat(count);
    for (int k = 0; k < count; ++k) lat[k] = std::chrono::duration<double, std::micro>(seen[k] - arrival[k]).count();
    host_view = ", \"host_p50_us\": " + std::to_string(pct(lat, 0.5)) + ", \"host_p99_us\": " + std::to_string(pct(lat, 0.99));
  }
  std::string out = "{\"name\": \"" + std::string(sarg(argc, argv, "--name", "anatomy")) + "\", \"kernels\": " +
                    std::to_string(count) + ", \"blocks\": " + std::to_string(blocks) + ", " + summary(0, count) + host_view +
                    ", \"windows\": [";
  int from = 0;
  for (int k = 1; k <= count; ++k) {
    if (k == count || ks[k].start_us - ks[from].start_us >= 2.5e5) {
      out += (from ? ", {" : "{") + summary(from, k) + "}";
      from = k;
    }
  }
  out += "]}";
  std::printf("%s\n", out.c_str());
  if (json) {
    if (FILE* f = std::fopen(json, "w")) {
      std::fprintf(f, "%s\n", out.c_str());
      std::fclose(f);
    }
  }
  return 0;
}
