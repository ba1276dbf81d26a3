// SPDX-License-Identifier: Apache-2.0
// e2e probe for one process driving several GPUs on the driver test double (issue #27: a tenant
// whose gate is closed on one of its GPUs only goes on launching on the others).
//
// One thread per device (every device the process sees), each with that device's primary context
// current, its own stream and 16 MiB of device memory (so gpuosd knows the process works there).
// Each runs gpuos_fixed_work kernels of --iters I (ns of simulated work, one wave) back to back,
// synchronizing after each, until --seconds S passed or the file --stop-file names exists. After
// every launch it rewrites --progress PATH (atomically: write, rename) with one line of the launches
// each device has submitted so far, "n0 n1 ...". Prints the same counts as JSON at the end:
// {"launches": [n0, n1, ...]}.
//
// usage: gpuos-devices-probe --progress PATH [--iters I] [--seconds S] [--stop-file PATH]
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "probe_util.h"

namespace {

const char* arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

std::string counts_text(const std::vector<std::atomic<unsigned long long>>& n, const char* sep) {
  std::string s;
  for (std::size_t i = 0; i < n.size(); ++i) s += (i ? sep : "") + std::to_string(n[i].load());
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const char* progress = arg(argc, argv, "--progress", nullptr);
  unsigned long long iters = std::strtoull(arg(argc, argv, "--iters", "1000000"), nullptr, 10);
  const double seconds = std::strtod(arg(argc, argv, "--seconds", "120"), nullptr);
  const char* stop_file = arg(argc, argv, "--stop-file", nullptr);
  if (progress == nullptr) {
    std::fprintf(stderr, "usage: gpuos-devices-probe --progress PATH [--iters I] [--seconds S] [--stop-file PATH]\n");
    return 2;
  }
  CHECK_CU(cuInit(0));
  int count = 0;
  CHECK_CU(cuDeviceGetCount(&count));
  std::vector<std::atomic<unsigned long long>> launches(static_cast<std::size_t>(count));
  std::mutex write_mu;
  auto write_progress = [&] {
    std::lock_guard<std::mutex> lock(write_mu);
    const std::string tmp = std::string(progress) + ".tmp";
    if (FILE* f = std::fopen(tmp.c_str(), "w")) {
      std::fprintf(f, "%s\n", counts_text(launches, " ").c_str());
      std::fclose(f);
      std::rename(tmp.c_str(), progress);
    }
  };
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  auto stop = [&] {
    return std::chrono::steady_clock::now() >= end || (stop_file != nullptr && access(stop_file, F_OK) == 0);
  };
  std::vector<std::thread> threads;
  for (int d = 0; d < count; ++d) {
    threads.emplace_back([&, d] {
      CUdevice dev;
      CHECK_CU(cuDeviceGet(&dev, d));
      CUcontext ctx;
      CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
      CHECK_CU(cuCtxSetCurrent(ctx));
      CUmodule mod;
      CHECK_CU(cuModuleLoadData(&mod, "gpuos-devices-probe"));
      CUfunction work;
      CHECK_CU(cuModuleGetFunction(&work, mod, "gpuos_fixed_work"));
      CUstream st;
      CHECK_CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
      CUdeviceptr mem;
      CHECK_CU(cuMemAlloc_v2(&mem, 16u << 20));
      while (!stop()) {
        void* params[] = {&iters, nullptr};
        unsigned long long* done = nullptr;
        params[1] = &done;
        CHECK_CU(cuLaunchKernel(work, 1, 1, 1, 32, 1, 1, 0, st, params, nullptr));
        launches[static_cast<std::size_t>(d)].fetch_add(1);
        write_progress();
        CHECK_CU(cuStreamSynchronize(st));
      }
      CHECK_CU(cuMemFree_v2(mem));
    });
  }
  for (std::thread& t : threads) t.join();
  std::printf("{\"launches\": [%s]}\n", counts_text(launches, ", ").c_str());
  return 0;
}
