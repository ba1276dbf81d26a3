// A tenant that bypasses libgpuos.so (issue #22, "trust but verify"): it registers like any tenant
// (its own cuInit goes through the interposer when LD_PRELOAD is set) and allocates 1 MiB there,
// then loads bypass_lib with dlmopen(LM_ID_NEWLM), which LD_PRELOAD does not reach, and allocates
// --mib MiB through that second copy of the driver: far over its quota, unseen by the interposer.
// With --spin-s it then keeps the SMs busy through that copy (the lib must export
// gpuos_bypass_spin: gpu/tests/bypass_gate.cu), whatever its gate says. Without LD_PRELOAD it is
// simply a process on the GPU that is no tenant. Prints one JSON line, then holds its memory for
// --hold-ms (or until killed).
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

int main(int argc, char** argv) {
  unsigned long long mib = 2048;
  long hold_ms = 60000;
  unsigned spin_s = 0;  // then also keep the SMs busy this long through the hidden driver
  std::string lib = "libgpuos-bypass.so";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mib")) mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--hold-ms")) hold_ms = std::strtol(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--lib")) lib = argv[i + 1];
    else if (!std::strcmp(argv[i], "--spin-s")) spin_s = static_cast<unsigned>(std::strtoul(argv[i + 1], nullptr, 10));
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
  void* h = dlmopen(LM_ID_NEWLM, lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "bypass_probe: dlmopen %s: %s\n", lib.c_str(), dlerror());
    return 3;
  }
  auto fn = reinterpret_cast<int (*)(unsigned long long)>(dlsym(h, "gpuos_bypass_alloc"));
  const int r = fn != nullptr ? fn(mib) : -1;
  std::printf("{\"pid\": %d, \"bypassed_mib\": %llu, \"result\": %d}\n", static_cast<int>(getpid()), r == 0 ? mib : 0ull, r);
  std::fflush(stdout);
  if (r != 0) return 4;
  if (spin_s != 0) {
    auto spin = reinterpret_cast<int (*)(unsigned)>(dlsym(h, "gpuos_bypass_spin"));
    if (spin == nullptr || spin(spin_s) != 0) {
      std::fprintf(stderr, "bypass_probe: %s cannot spin\n", lib.c_str());
      return 5;
    }
  }
  timespec t{hold_ms / 1000, (hold_ms % 1000) * 1000000};
  nanosleep(&t, nullptr);
  return 0;
}
