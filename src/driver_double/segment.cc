// SPDX-License-Identifier: Apache-2.0
#include "driver_double/segment.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dd {

std::string segment_name() {
  const char* shm = std::getenv("GPUOS_SIM_SHM");
  if (shm != nullptr && *shm != '\0') return shm[0] == '/' ? shm : std::string("/") + shm;
  return "/gpuos-sim-" + std::to_string(getuid());
}

void lock_robust(pthread_mutex_t* m) {
  int r = pthread_mutex_lock(m);
  if (r == EOWNERDEAD) pthread_mutex_consistent(m);
}

bool pid_dead(int32_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

void sim_uuid(int physical, unsigned char out[16]) {
  static const char kPrefix[] = "gpuos-simgpu-";
  std::memset(out, 0, 16);
  std::memcpy(out, kPrefix, sizeof(kPrefix) - 1);
  out[15] = static_cast<unsigned char>(physical);
}

std::string sim_uuid_text(int physical) {
  unsigned char b[16];
  sim_uuid(physical, b);
  char buf[48];
  std::snprintf(buf, sizeof(buf), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

}  // namespace dd
