// SPDX-License-Identifier: Apache-2.0
// libgpuos.so is loaded into other people's containers, whose glibc may be older than the one it
// was built on (Debian 12: 2.36; Ubuntu 22.04, the base of many CUDA images: 2.35; RHEL 9: 2.34).
// The static libstdc++ brings in std::random_device (through its exception-string code; gpuos never
// calls it), which refers to arc4random, new in glibc 2.36. This local definition satisfies that
// reference, so the library asks glibc for nothing newer than 2.34 (checked by the
// interpose.glibc_floor test). libgcc is linked shared for the same reason: the static one's
// unwinder calls _dl_find_object (2.35).
#include <sys/random.h>

#include <cstdint>

extern "C" __attribute__((visibility("hidden"))) uint32_t arc4random(void) {
  uint32_t v = 0;
  while (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) {
  }
  return v;
}
