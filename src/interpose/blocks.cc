// SPDX-License-Identifier: Apache-2.0
#include "interpose/blocks.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace gpuos::interpose {

namespace {

std::size_t mapped_bytes() {
  const long page = sysconf(_SC_PAGESIZE);
  const std::size_t p = page > 0 ? static_cast<std::size_t>(page) : 4096u;
  return kGrantSpan + (sizeof(gpuos_control_block) + p - 1) / p * p;
}

}  // namespace

gpuos_control_block* map_blocks(int grant_fd, int control_fd) {
  const std::size_t total = mapped_bytes();
  // Reserve the whole range first, then map each block over its part of it (MAP_FIXED replaces
  // only our own reservation): the two can never land apart.
  void* base = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  char* b = static_cast<char*>(base);
  if (mmap(b, sizeof(gpuos_grant_block), PROT_READ, MAP_SHARED | MAP_FIXED, grant_fd, 0) == MAP_FAILED ||
      mmap(b + kGrantSpan, sizeof(gpuos_control_block), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
           control_fd, 0) == MAP_FAILED) {
    const int e = errno;
    munmap(base, total);
    errno = e;
    return nullptr;
  }
  return reinterpret_cast<gpuos_control_block*>(b + kGrantSpan);
}

void unmap_blocks(gpuos_control_block* cb) {
  munmap(reinterpret_cast<char*>(cb) - kGrantSpan, mapped_bytes());
}

}  // namespace gpuos::interpose
