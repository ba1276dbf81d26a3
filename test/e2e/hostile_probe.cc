// SPDX-License-Identifier: Apache-2.0
// A hostile tenant of issue #62 (the third pass). It registers like any tenant (its cuInit goes
// through libgpuos.so), launches one kernel, prints {"ready": true}, waits for --go FILE, then:
//
//   --escape        "leaving for good": points GPUOS_SOCKET at a path that does not exist and shuts
//                   down its connection to gpuosd (found among its fds: the SOCK_SEQPACKET socket
//                   whose peer is the gpuosd socket it registered on), so that re-registration
//                   fails; prints {"escaped": true}, then makes --launches launches (each waited
//                   for), printing {"launched": i} after each, and {"result": 0} at the end.
//   --forge-room M  "no room by words alone": writes a request for room for M MiB into its control
//                   block as the interposer would after an allocation failed (the allocation
//                   reserved in mem_used_bytes, the GPU full by its per-device word), though no
//                   allocation of its failed, and waits for gpuosd's answer in its grant block;
//                   prints {"answer": "retry"|"refused"|"none"}.
//
// Then it holds for --hold-ms. Exit codes: 2 a driver call failed, 3 nothing to attack with.
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "gpuos/abi.h"
#include "probe_util.h"

namespace {

long arg_long(int argc, char** argv, const char* flag, long fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return std::strtol(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

const char* arg_str(int argc, char** argv, const char* flag) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  }
  return nullptr;
}

bool has_flag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return true;
  }
  return false;
}

void say(const char* line) {
  std::printf("%s\n", line);
  std::fflush(stdout);
}

// The control block libgpuos.so mapped (memfd "gpuos-tenant", shared, writable); null if none. Its
// grant block is mapped 64 KiB below it (interpose/blocks.h, kGrantSpan).
gpuos_control_block* own_control_block() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:gpuos-tenant") == std::string::npos || line.find(" rw-s ") == std::string::npos) continue;
    return reinterpret_cast<gpuos_control_block*>(std::strtoull(line.c_str(), nullptr, 16));
  }
  return nullptr;
}

const gpuos_grant_block* grants_of(gpuos_control_block* cb) {
  return reinterpret_cast<const gpuos_grant_block*>(reinterpret_cast<const char*>(cb) - 64 * 1024);
}

template <typename T>
void put(T& word, T v) {
  std::atomic_ref<T>(word).store(v);
}

template <typename T>
T get(const T& word) {
  return std::atomic_ref<T>(const_cast<T&>(word)).load();
}

// Shuts down this process's connection to gpuosd: the seqpacket socket connected to `path`.
int shut_down_daemon_socket(const char* path) {
  int done = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    struct stat st;
    if (fd <= 2 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int type = 0;
    socklen_t tl = sizeof(type);
    sockaddr_un peer{};
    socklen_t pl = sizeof(peer);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_SEQPACKET ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0 || peer.sun_family != AF_UNIX ||
        std::strncmp(peer.sun_path, path, sizeof(peer.sun_path)) != 0) {
      continue;
    }
    if (shutdown(fd, SHUT_RDWR) == 0) ++done;
  }
  closedir(d);
  return done;
}

}  // namespace

int main(int argc, char** argv) {
  const char* go = arg_str(argc, argv, "--go");
  const long launches = arg_long(argc, argv, "--launches", 100);
  const long forge_mib = arg_long(argc, argv, "--forge-room", 0);
  const long hold_ms = arg_long(argc, argv, "--hold-ms", 0);
  const bool escape = has_flag(argc, argv, "--escape");
  const char* socket_path = std::getenv("GPUOS_SOCKET");

  CHECK_CU(cuInit(0));
  CUmodule mod = probe::primary_context_module("gpuos-hostile-probe");
  CUfunction work;
  CHECK_CU(cuModuleGetFunction(&work, mod, "gpuos_fixed_work"));
  CUdeviceptr scratch = 0;
  CHECK_CU(cuMemAlloc_v2(&scratch, 1 << 20));
  unsigned long long iters = 1000;
  void* params[] = {&iters, &scratch};  // gpuos_fixed_work(u64 iters, u64* done_blocks)
  CHECK_CU(cuLaunchKernel(work, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
  CHECK_CU(cuCtxSynchronize());
  say("{\"ready\": true}");
  if (go != nullptr) {
    while (access(go, F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  if (escape) {
    if (socket_path == nullptr) {
      std::fprintf(stderr, "hostile_probe: no GPUOS_SOCKET to escape from\n");
      return 3;
    }
    const std::string was = socket_path;
    setenv("GPUOS_SOCKET", "/nonexistent/gpuos/gpuosd.sock", 1);  // re-registration fails
    if (shut_down_daemon_socket(was.c_str()) == 0) {
      std::fprintf(stderr, "hostile_probe: no connection to %s found\n", was.c_str());
      return 3;
    }
    say("{\"escaped\": true}");
    for (long i = 1; i <= launches; ++i) {
      CHECK_CU(cuLaunchKernel(work, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
      CHECK_CU(cuCtxSynchronize());
      std::printf("{\"launched\": %ld}\n", i);
      std::fflush(stdout);
    }
  }

  if (forge_mib > 0) {
    gpuos_control_block* cb = own_control_block();
    if (cb == nullptr) {
      std::fprintf(stderr, "hostile_probe: no control block mapped\n");
      return 3;
    }
    const gpuos_grant_block* g = grants_of(cb);
    const uint64_t wanted = static_cast<uint64_t>(forge_mib) << 20;
    // As the interposer writes it when an allocation fails: the allocation reserved in the report
    // first; here the GPU also looks full by the per-device word (bounded by gpuosd to the GPU).
    put(cb->mem_used_bytes, ~uint64_t{0} >> 1);
    put(cb->mem_used_per_device[0], ~uint64_t{0} >> 1);
    put(cb->mem_wanted_bytes, wanted);
    put(cb->mem_wanted_device, int32_t{0});
    const uint32_t seq = get(cb->mem_request_seq) + 1;
    put(cb->mem_request_seq, seq);
    const char* answer = "none";
    for (int i = 0; i < 6000; ++i) {  // 60 s at most; gpuosd screens requests at each tick
      if (static_cast<int32_t>(get(g->mem_answer_seq) - seq) >= 0) {
        answer = get(g->mem_answer) == GPUOS_MEM_RETRY ? "retry" : "refused";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::printf("{\"answer\": \"%s\"}\n", answer);
    std::fflush(stdout);
  }

  if (hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  say("{\"result\": 0}");
  return 0;
}
