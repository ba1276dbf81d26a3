// SPDX-License-Identifier: Apache-2.0
// A tenant that goes around libgpuos.so (issue #22, "trust but verify"). It registers like any
// tenant (its cuInit goes through the interposer when LD_PRELOAD is set) and allocates 1 MiB that
// way, then takes the C library's own dlsym (dlsym(RTLD_NEXT, "dlsym") from inside the interposer
// is libc's) and with it the driver's real entry points, which the interposer never sees: it
// allocates --mib MiB far past its quota, and with --cubin/--spin-s keeps the SMs busy with that
// cubin's gpuos_spin kernel whatever its gate says. Without LD_PRELOAD it is simply a process on
// the GPU that is no tenant. Prints one JSON line, then holds its memory for --hold-ms.
// On the double (no --cubin): --kernel gpuos_fixed_work --iters NS, in batches of --batch launches
// with --sleep-us between them (a low-duty bypass: 2 ms of work every 16 ms stays under 20%).
// With --zero-report FILE it stays on the ordinary path instead (issue #42): once FILE exists, it
// allocates 16 MiB through the interposer again and again, writing 0 over mem_used_bytes in its
// control block (found in /proc/self/maps) after each, and prints how much it got.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <string>

#include "gpuos/abi.h"

namespace {

// The control block libgpuos.so mapped (memfd "gpuos-tenant", shared, writable); null if none.
gpuos_control_block* own_control_block() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:gpuos-tenant") == std::string::npos || line.find(" rw-s ") == std::string::npos) continue;
    return reinterpret_cast<gpuos_control_block*>(std::strtoull(line.c_str(), nullptr, 16));
  }
  return nullptr;
}

// Launches one kernel through the interposer (gpuosd sizes a tenant's contexts only once it has
// launched), waits for the file, then allocates 16 MiB at a time through the interposer, zeroing its
// report after each; prints what it got. (The double loads any image as a module.)
int zero_report(const std::string& go, long hold_ms, CUdeviceptr scratch) {
  gpuos_control_block* cb = own_control_block();
  if (cb == nullptr) {
    std::fprintf(stderr, "bypass_probe: no control block mapped\n");
    return 7;
  }
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  unsigned long long iters = 1000;
  void* params[] = {&iters, &scratch};  // gpuos_fixed_work(u64 iters, u64* done_blocks)
  CUresult r = cuModuleLoadData(&mod, "gpuos-bypass-probe");
  if (r == CUDA_SUCCESS) r = cuModuleGetFunction(&fn, mod, "gpuos_fixed_work");
  if (r == CUDA_SUCCESS) r = cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr);
  if (r == CUDA_SUCCESS) r = cuCtxSynchronize();
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "bypass_probe: the first launch failed (%d)\n", static_cast<int>(r));
    return 8;
  }
  std::printf("{\"pid\": %d, \"ready\": true}\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  struct stat st;
  while (::stat(go.c_str(), &st) != 0) usleep(10000);
  unsigned long long got = 0;
  for (int i = 0; i < 16; ++i) {
    CUdeviceptr p = 0;
    if (cuMemAlloc(&p, 16u << 20) == CUDA_SUCCESS) got += 16;
    std::atomic_ref<uint64_t>(cb->mem_used_bytes).store(0);
  }
  std::printf("{\"pid\": %d, \"zeroed_mib\": %llu, \"result\": 0}\n", static_cast<int>(getpid()), got);
  std::fflush(stdout);
  timespec t{hold_ms / 1000, (hold_ms % 1000) * 1000000};
  nanosleep(&t, nullptr);
  return 0;
}

using DlsymFn = void* (*)(void*, const char*);

template <typename F>
F real(DlsymFn libc_dlsym, void* cuda, const char* name) {
  return reinterpret_cast<F>(libc_dlsym(cuda, name));
}

}  // namespace

int main(int argc, char** argv) {
  unsigned long long mib = 2048;
  long hold_ms = 60000;
  unsigned spin_s = 0;
  std::string cubin, zero_go, kernel = "gpuos_spin";
  unsigned long long iters64 = 200000;
  int batch = 20;
  long sleep_us = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--zero-report")) zero_go = argv[i + 1];
    if (!std::strcmp(argv[i], "--mib")) mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--hold-ms")) hold_ms = std::strtol(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--spin-s")) spin_s = static_cast<unsigned>(std::strtoul(argv[i + 1], nullptr, 10));
    else if (!std::strcmp(argv[i], "--cubin")) cubin = argv[i + 1];
    else if (!std::strcmp(argv[i], "--kernel")) kernel = argv[i + 1];
    else if (!std::strcmp(argv[i], "--iters")) iters64 = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--batch")) batch = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--sleep-us")) sleep_us = std::strtol(argv[i + 1], nullptr, 10);
  }
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUdeviceptr small = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
      cuMemAlloc(&small, 1 << 20) != CUDA_SUCCESS) {
    std::fprintf(stderr, "bypass_probe: the ordinary CUDA path failed\n");
    return 2;
  }
  if (!zero_go.empty()) return zero_report(zero_go, hold_ms, small);
  auto libc_dlsym = reinterpret_cast<DlsymFn>(dlsym(RTLD_NEXT, "dlsym"));
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto mem_alloc = libc_dlsym && cuda ? real<CUresult (*)(CUdeviceptr*, size_t)>(libc_dlsym, cuda, "cuMemAlloc_v2") : nullptr;
  if (mem_alloc == nullptr) {
    std::fprintf(stderr, "bypass_probe: no way around the interposer (%s)\n", dlerror());
    return 3;
  }
  CUdeviceptr big = 0;
  const CUresult r = mem_alloc(&big, static_cast<size_t>(mib) << 20);
  std::printf("{\"pid\": %d, \"bypassed_mib\": %llu, \"result\": %d}\n", static_cast<int>(getpid()),
              r == CUDA_SUCCESS ? mib : 0ull, static_cast<int>(r));
  std::fflush(stdout);
  if (r != CUDA_SUCCESS) return 4;
  if (spin_s != 0) {
    std::ifstream f(cubin, std::ios::binary);
    std::string image((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cubin.empty()) image = "gpuos-bypass-probe";  // the double loads any image
    auto load = real<CUresult (*)(CUmodule*, const void*)>(libc_dlsym, cuda, "cuModuleLoadData");
    auto get = real<CUresult (*)(CUfunction*, CUmodule, const char*)>(libc_dlsym, cuda, "cuModuleGetFunction");
    auto launch = real<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void**, void**)>(libc_dlsym, cuda, "cuLaunchKernel");
    auto sync = real<CUresult (*)()>(libc_dlsym, cuda, "cuCtxSynchronize");
    CUmodule mod = nullptr;
    CUfunction fn = nullptr;
    if (image.empty() || load(&mod, image.data()) != CUDA_SUCCESS || get(&fn, mod, kernel.c_str()) != CUDA_SUCCESS) {
      std::fprintf(stderr, "bypass_probe: cannot load %s from %s\n", kernel.c_str(), cubin.c_str());
      return 5;
    }
    int iters = static_cast<int>(iters64);
    void* spin_params[] = {&big, &iters};
    void* work_params[] = {&iters64, &big};  // gpuos_fixed_work(u64 iters, u64* done_blocks)
    void** params = kernel == "gpuos_spin" ? spin_params : work_params;
    const time_t end = std::time(nullptr) + spin_s;
    while (std::time(nullptr) < end) {
      for (int k = 0; k < batch; ++k) launch(fn, 132 * 4, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr);
      if (sync() != CUDA_SUCCESS) return 6;
      if (sleep_us > 0) {
        timespec gap{sleep_us / 1000000, (sleep_us % 1000000) * 1000};
        nanosleep(&gap, nullptr);
      }
    }
  }
  timespec t{hold_ms / 1000, (hold_ms % 1000) * 1000000};
  nanosleep(&t, nullptr);
  return 0;
}
