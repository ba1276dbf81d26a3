// SPDX-License-Identifier: Apache-2.0
#include "interpose/stream_work.h"

#include <cstring>

namespace gpuos::interpose {

std::atomic<uint64_t> g_stream_work{1};
std::atomic<bool> g_stream_work_unseen{false};
std::atomic<bool> g_stream_work_counted{false};

namespace {

bool starts_with(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }

}  // namespace

bool may_issue_stream_work(const char* name) {
  if (name == nullptr || !starts_with(name, "cu")) return false;
  // Stream management, queries and markers: nothing queued after them waits for them.
  static const char* const kQuiet[] = {"cuStreamCreate", "cuStreamDestroy", "cuStreamQuery",
                                       "cuStreamSynchronize", "cuStreamGet", "cuStreamSetAttribute",
                                       "cuStreamCopyAttributes", "cuStreamIsCapturing",
                                       "cuStreamUpdateCaptureDependencies", "cuEventRecord"};
  for (const char* q : kQuiet) {
    if (starts_with(name, q)) return false;
  }
  static const char* const kWork[] = {"cuStream", "cuLaunch", "cuMemcpy", "cuMemset", "cuGraphLaunch",
                                      "cuGraphUpload", "cuGraphicsMapResources", "cuGraphicsUnmapResources",
                                      "cuSignalExternalSemaphores", "cuWaitExternalSemaphores"};
  for (const char* w : kWork) {
    if (starts_with(name, w)) return true;
  }
  // Stream-ordered operations end in Async, before any version suffix (cuMemcpyAsync_v2_ptsz).
  for (const char* a = std::strstr(name, "Async"); a != nullptr; a = std::strstr(a + 1, "Async")) {
    if (a[5] == '\0' || a[5] == '_') return true;
  }
  return false;
}

}  // namespace gpuos::interpose
