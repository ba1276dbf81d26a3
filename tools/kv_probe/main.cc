// SPDX-License-Identifier: Apache-2.0
// gpuos-kv-probe: a tenant that grows a KV pool (include/gpuos/kv.h), fills every page with its
// number, answers (or ignores) gpuosd's targets, and checks at the end that every page it still
// maps holds its number: what a paged-KV engine does with its pool, without the model. Used by the
// end-to-end tests on the driver test double and by the GPU suite on the H200. It calls the public
// ABI of libgpuos_kv.so, as an engine would.
//
//   gpuos-kv-probe --grow-mib N [--max-mib M] [--page-kib P] [--chunk-mib C] [--device D]
//                  [--on-pressure obey|ignore] [--hold-until FILE] [--queue N] [--slots A/C]
//                  [--then-grow-mib N2] [--after FILE2]
//   gpuos-kv-probe --misuse      every misuse of the API an engine could make, and what it got back
// Prints JSON lines: {"event": "grown" | "target" | "shrunk" | "done", ...}. Exit status 0 when
// every step asked for succeeded and every mapped page held its number, 1 otherwise, 2 for usage.
#include <cuda.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpuos/kv.h"

namespace {

struct Args {
  uint64_t grow_mib = 0, max_mib = 0, page_kib = 0, chunk_mib = 0, then_grow_mib = 0;
  int device = 0;
  bool obey = true;
  std::string hold_until, after;
  long queue = -1;
  long slots_active = -1, slots_capacity = -1;  // --slots A/C: its batch slots, A of C in use
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "gpuos-kv-probe: %s\n", why);
  std::exit(2);
}

uint64_t number(const char* flag, const char* v) {
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0') usage((std::string(flag) + " needs a number").c_str());
  return x;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + f).c_str());
    const char* v = argv[++i];
    if (f == "--grow-mib") a.grow_mib = number(argv[i - 1], v);
    else if (f == "--max-mib") a.max_mib = number(argv[i - 1], v);
    else if (f == "--page-kib") a.page_kib = number(argv[i - 1], v);
    else if (f == "--chunk-mib") a.chunk_mib = number(argv[i - 1], v);
    else if (f == "--then-grow-mib") a.then_grow_mib = number(argv[i - 1], v);
    else if (f == "--device") a.device = static_cast<int>(number(argv[i - 1], v));
    else if (f == "--queue") a.queue = static_cast<long>(number(argv[i - 1], v));
    else if (f == "--hold-until") a.hold_until = v;
    else if (f == "--slots") {
      const char* slash = std::strchr(v, '/');
      if (slash == nullptr) usage("--slots is ACTIVE/CAPACITY");
      a.slots_active = static_cast<long>(number("--slots", std::string(v, slash).c_str()));
      a.slots_capacity = static_cast<long>(number("--slots", slash + 1));
    }
    else if (f == "--after") a.after = v;
    else if (f == "--on-pressure") {
      if (std::strcmp(v, "obey") != 0 && std::strcmp(v, "ignore") != 0) usage("--on-pressure is obey or ignore");
      a.obey = std::strcmp(v, "obey") == 0;
    } else {
      usage(("unknown flag " + f).c_str());
    }
  }
  if (a.max_mib == 0) a.max_mib = a.grow_mib + a.then_grow_mib;
  if (a.max_mib == 0) usage("--grow-mib or --max-mib is needed");
  return a;
}

bool exists(const std::string& path) { return !path.empty() && access(path.c_str(), F_OK) == 0; }

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The public functions, as a table (the probe's code reads like the interface it exercises).
const gpuos_kv_interface kPublic{
    GPUOS_KV_ABI_VERSION, sizeof(gpuos_kv_interface), &gpuos_kv_result_text, &gpuos_kv_pool_create,
    &gpuos_kv_pool_destroy, &gpuos_kv_map, &gpuos_kv_unmap, &gpuos_kv_is_mapped, &gpuos_kv_stats_get,
    &gpuos_kv_target, &gpuos_kv_set_pressure_callback, &gpuos_kv_report_queue, &gpuos_kv_report_slots,
    &gpuos_kv_report_phase,
};

std::atomic<uint32_t> g_pressure_seq{0};
void on_pressure(void*, uint64_t, uint32_t) { g_pressure_seq.fetch_add(1); }

struct Probe {
  const gpuos_kv_interface* kv = nullptr;
  gpuos_kv_pool* pool = nullptr;
  uint64_t base = 0, page = 0, per_chunk = 0, pages = 0;
  std::vector<uint64_t> mapped;  // in the order mapped (lowest first)

  gpuos_kv_stats stats() const {
    gpuos_kv_stats s{};
    s.size = sizeof(s);
    kv->stats_get(pool, &s);
    return s;
  }

  // Maps the next `bytes` of pages in one call and writes each page's number into it.
  int grow(uint64_t bytes, double* ms) {
    std::vector<uint64_t> add;
    const uint64_t from = mapped.empty() ? 0 : mapped.back() + 1;
    for (uint64_t p = from; p < from + bytes / page && p < pages; ++p) add.push_back(p);
    const double t0 = now_ms();
    const int r = kv->map(pool, add.data(), add.size());
    *ms = now_ms() - t0;
    if (r != GPUOS_KV_OK) return r;
    for (uint64_t p : add) {
      if (cuMemsetD32(base + p * page, static_cast<unsigned>(p), page / 4) != CUDA_SUCCESS) return GPUOS_KV_ERR_DRIVER;
      mapped.push_back(p);
    }
    return cuCtxSynchronize() == CUDA_SUCCESS ? GPUOS_KV_OK : GPUOS_KV_ERR_DRIVER;
  }

  // Unmaps whole chunks from the top until the pool holds at most `target` bytes, in one call (as
  // an engine frees its blocks, then unmaps their pages in one batch).
  int shrink_to(uint64_t target) {
    const uint64_t chunk_bytes = per_chunk * page;
    uint64_t resident = stats().resident_bytes;
    std::vector<uint64_t> drop;
    while (!mapped.empty() && resident > target) {
      const uint64_t chunk = mapped.back() / per_chunk;
      while (!mapped.empty() && mapped.back() / per_chunk == chunk) {
        drop.push_back(mapped.back());
        mapped.pop_back();
      }
      resident = resident > chunk_bytes ? resident - chunk_bytes : 0;
    }
    return drop.empty() ? GPUOS_KV_OK : kv->unmap(pool, drop.data(), drop.size());
  }

  bool verify() const {
    for (uint64_t p : mapped) {
      unsigned word = 0;
      const uint64_t at = base + p * page + page - 4;  // the page's last word
      if (cuMemcpyDtoH(&word, at, 4) != CUDA_SUCCESS || word != p) {
        std::fprintf(stderr, "gpuos-kv-probe: page %llu holds %u\n", static_cast<unsigned long long>(p), word);
        return false;
      }
    }
    return true;
  }
};

void print_stats(const char* event, const gpuos_kv_stats& s, const char* extra) {
  static const double start = now_ms();
  std::printf("{\"event\": \"%s\", \"t_ms\": %.1f, \"resident_bytes\": %llu, \"mapped_pages\": %llu, \"swapped_bytes\": %llu, "
              "\"chunks_created\": %llu, \"chunks_released\": %llu, \"grow_ns\": %llu, \"grown_bytes\": %llu, "
              "\"room_waits\": %llu%s}\n",
              event, now_ms() - start, static_cast<unsigned long long>(s.resident_bytes),
              static_cast<unsigned long long>(s.mapped_pages),
              static_cast<unsigned long long>(s.swapped_bytes), static_cast<unsigned long long>(s.chunks_created),
              static_cast<unsigned long long>(s.chunks_released), static_cast<unsigned long long>(s.grow_ns),
              static_cast<unsigned long long>(s.grown_bytes), static_cast<unsigned long long>(s.room_waits), extra);
  std::fflush(stdout);
}

// Every kind of misuse gets its error and changes nothing: one JSON object, result text by case.
int misuse(const gpuos_kv_interface* kv, int device) {
  std::string out = "{\"event\": \"misuse\"";
  auto note = [&](const char* what, int r) { out += std::string(", \"") + what + "\": \"" + kv->result_text(r) + "\""; };
  gpuos_kv_pool_options o{};
  o.abi_version = GPUOS_KV_ABI_VERSION;
  o.size = sizeof(o);
  o.device = device;
  o.max_bytes = 64ull << 20;
  gpuos_kv_pool* pool = nullptr;
  gpuos_kv_pool_options bad = o;
  bad.abi_version = 99;
  note("wrong_version", kv->pool_create(&bad, &pool, nullptr));
  bad = o;
  bad.size = 8;
  note("short_options", kv->pool_create(&bad, &pool, nullptr));
  bad = o;
  bad.page_bytes = 4096;
  note("page_below_granularity", kv->pool_create(&bad, &pool, nullptr));
  bad = o;
  bad.chunk_bytes = 3ull << 20;
  note("chunk_not_whole_pages", kv->pool_create(&bad, &pool, nullptr));
  bad = o;
  bad.device = 999;
  note("no_such_device", kv->pool_create(&bad, &pool, nullptr));
  note("null_options", kv->pool_create(nullptr, &pool, nullptr));
  if (int r = kv->pool_create(&o, &pool, nullptr); r != GPUOS_KV_OK) return 1;
  const uint64_t first[] = {0, 1};
  note("map", kv->map(pool, first, 2));
  const uint64_t beyond[] = {2, 32};  // 64 MiB = pages 0..31
  note("map_beyond_range", kv->map(pool, beyond, 2));
  const uint64_t twice[] = {1, 1};
  note("unmap_twice_in_one_batch", kv->unmap(pool, twice, 2));
  const uint64_t unmapped[] = {0, 5};
  note("unmap_not_mapped", kv->unmap(pool, unmapped, 2));
  note("map_null_pages", kv->map(pool, nullptr, 3));
  note("unknown_pool", kv->map(reinterpret_cast<gpuos_kv_pool*>(&o), first, 1));
  gpuos_kv_stats s{};
  s.size = 4;
  note("stats_size_too_small", kv->stats_get(pool, &s));
  s.size = sizeof(s);
  kv->stats_get(pool, &s);
  out += ", \"mapped_pages_after\": " + std::to_string(s.mapped_pages);  // still the 2 of "map"
  note("destroy", kv->pool_destroy(pool));
  note("destroy_again", kv->pool_destroy(pool));
  out += "}";
  std::printf("%s\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--misuse") == 0) {
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
      return 1;
    }
    return misuse(&kPublic, 0);
  }
  const Args a = parse(argc, argv);
  CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, a.device) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    std::fprintf(stderr, "gpuos-kv-probe: no CUDA device %d\n", a.device);
    return 1;
  }
  Probe p;
  p.kv = &kPublic;
  gpuos_kv_pool_options o{};
  o.abi_version = GPUOS_KV_ABI_VERSION;
  o.size = sizeof(o);
  o.device = a.device;
  o.max_bytes = a.max_mib << 20;
  o.page_bytes = a.page_kib << 10;
  o.chunk_bytes = a.chunk_mib << 20;
  if (int r = p.kv->pool_create(&o, &p.pool, &p.base); r != GPUOS_KV_OK) {  // e.g. not under gpuos
    std::fprintf(stderr, "gpuos-kv-probe: pool: %s\n", p.kv->result_text(r));
    return 1;
  }
  {
    const gpuos_kv_stats s = p.stats();
    p.page = s.page_bytes;
    p.per_chunk = s.chunk_bytes / s.page_bytes;
    p.pages = s.pages;
  }
  p.kv->set_pressure_callback(&on_pressure, nullptr);
  if (a.queue >= 0) p.kv->report_queue(static_cast<uint32_t>(a.queue));
  if (a.slots_capacity >= 0) {
    if (int r = p.kv->report_slots(static_cast<uint32_t>(a.slots_active), static_cast<uint32_t>(a.slots_capacity));
        r != GPUOS_KV_OK) {
      std::fprintf(stderr, "gpuos-kv-probe: slots: %s\n", p.kv->result_text(r));
      return 1;
    }
  }
  bool ok = true;
  char extra[160];
  double ms = 0;
  if (a.grow_mib != 0) {
    const int r = p.grow(a.grow_mib << 20, &ms);
    std::snprintf(extra, sizeof(extra), ", \"ok\": %s, \"ms\": %.3f, \"result\": \"%s\"", r == GPUOS_KV_OK ? "true" : "false",
                  ms, p.kv->result_text(r));
    print_stats("grown", p.stats(), extra);
    ok = ok && r == GPUOS_KV_OK;
  }
  // Holding: answer targets as an engine would (free blocks, unmap their pages), or not at all.
  uint32_t seen = 0;
  while (ok && !a.hold_until.empty() && !exists(a.hold_until)) {
    if (const uint32_t seq = g_pressure_seq.load(); seq != seen) {
      seen = seq;
      uint64_t target = 0;
      uint32_t deadline = 0;
      p.kv->target(&target, &deadline);
      std::snprintf(extra, sizeof(extra), ", \"target_bytes\": %lld, \"deadline_ms\": %u",
                    target == GPUOS_KV_NO_TARGET ? -1LL : static_cast<long long>(target), deadline);
      print_stats("target", p.stats(), extra);
      if (a.obey && target != GPUOS_KV_NO_TARGET) {
        const double t0 = now_ms();
        const int r = p.shrink_to(target);
        std::snprintf(extra, sizeof(extra), ", \"ok\": %s, \"ms\": %.3f", r == GPUOS_KV_OK ? "true" : "false",
                      now_ms() - t0);
        print_stats("shrunk", p.stats(), extra);
        ok = ok && r == GPUOS_KV_OK;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  while (!a.after.empty() && !exists(a.after)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (ok && a.then_grow_mib != 0) {
    const int r = p.grow(a.then_grow_mib << 20, &ms);
    std::snprintf(extra, sizeof(extra), ", \"ok\": %s, \"ms\": %.3f, \"result\": \"%s\"", r == GPUOS_KV_OK ? "true" : "false",
                  ms, p.kv->result_text(r));
    print_stats("grown", p.stats(), extra);
    ok = ok && r == GPUOS_KV_OK;
  }
  const bool verified = p.verify();
  std::snprintf(extra, sizeof(extra), ", \"verified\": %s, \"ok\": %s", verified ? "true" : "false", ok ? "true" : "false");
  print_stats("done", p.stats(), extra);
  const int destroyed = p.kv->pool_destroy(p.pool);
  return ok && verified && destroyed == GPUOS_KV_OK ? 0 : 1;
}
