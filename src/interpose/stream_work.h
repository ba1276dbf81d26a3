// SPDX-License-Identifier: Apache-2.0
// Which driver calls put work on a stream, and a count of those issued. Spatial placement
// (spatial.h) joins a placed launch to its application stream with events both ways; the forward
// join may be skipped when no stream work at all was issued in the process since the previous
// launch on the same partition stream, because then that launch's join back is the last thing on
// the application stream: between two placed launches queued back to back the forward join would
// only wait for the back join (a round trip between two streams in the gap, and two driver calls).
//
// That needs every call that issues stream work to be seen. gpuos wraps every such entry point of
// cuda.h: the launches, copies, memsets, prefetches, stream-ordered allocations, captures and
// GPUOS_STREAM_WORK_FUNCS (test/interpose/stream_work_test.cc checks that against the toolkit's
// header). An entry point it does not wrap that may issue stream work, handed out by
// cuGetProcAddress or dlsym (a newer driver's), turns skipping off for the process.
#pragma once

#include <atomic>
#include <cstdint>

namespace gpuos::interpose {

extern std::atomic<uint64_t> g_stream_work;       // calls that issued stream work, counted twice
extern std::atomic<bool> g_stream_work_unseen;    // such a call may bypass gpuos: never skip
// Set for good when the process makes its first partition stream (spatial.cc), before any launch
// can be placed there: until then nothing reads the count, so a tenant outside a spatial domain
// pays one load per call instead of two atomic increments of a shared counter.
extern std::atomic<bool> g_stream_work_counted;

inline void note_stream_work() {
  if (g_stream_work_counted.load(std::memory_order_seq_cst)) g_stream_work.fetch_add(1, std::memory_order_seq_cst);
}

// Brackets a call that issues stream work, counting it before and after: a placed launch that
// starts while the call is on its way into the driver then sees the count move once it returns
// (spatial.cc, place_launch).
class StreamWorkCall {
 public:
  StreamWorkCall() { note_stream_work(); }
  ~StreamWorkCall() { note_stream_work(); }
  StreamWorkCall(const StreamWorkCall&) = delete;
  StreamWorkCall& operator=(const StreamWorkCall&) = delete;
};

// Whether driver entry point `name` (a symbol with or without its version suffix) may put work on
// a stream, judged by its name, erring towards yes for names it does not know: every entry point
// that takes a stream or copies or sets memory, except those that only create, query, synchronise
// or configure streams, or record events (a marker: nothing later on the stream waits for it).
bool may_issue_stream_work(const char* name);

}  // namespace gpuos::interpose
