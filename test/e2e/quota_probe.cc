// SPDX-License-Identifier: Apache-2.0
// A tenant that tries every allocation path to exceed its memory quota (GPUOS_TENANT_MEM bytes,
// set by `gpuos run --mem`): plain, pitched (with the driver's row padding), managed,
// stream-ordered and pool allocations, VMM handles, CUDA arrays (1D/2D, 3D, mipmapped; charged
// with the driver's padding), graph memory (alloc nodes through both entry points and allocations
// under stream capture, charged per executable graph: the driver's graph pool keeps memory freed
// inside a graph; instantiated and updated through every entry point, the pre-12.0 ones of CUDA 11
// programs included). Each over-quota
// attempt must fail with CUDA_ERROR_OUT_OF_MEMORY and leave nothing allocated, what the driver's
// graph pool holds must always be covered by what the tenant is charged, and the process keeps working;
// cuMemGetInfo must show the tenant its own view, and what succeeds is accounted exactly (what
// the tenant sees in cuMemGetInfo; with --hold-file, gpuosd's count is checked too while it holds
// a known amount). Memory imported from another process (CUDA IPC) must not count against the
// quota: a child tenant (this program again, --ipc-import) maps an allocation of this one in.
// Prints {"held": N} when holding (then waits for the hold file), and one JSON line at the end;
// exits 0 when every expectation held.
#include <dlfcn.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "probe_util.h"

extern char** environ;

namespace {

int g_refused = 0;  // over-quota attempts made (each one an alloc_failures count in gpuosd)

void expect_oom(CUresult r, const char* path) {
  ++g_refused;
  if (r != CUDA_ERROR_OUT_OF_MEMORY) {
    std::fprintf(stderr, "quota_probe: %s over quota returned %d, want CUDA_ERROR_OUT_OF_MEMORY\n", path, r);
    ++probe::g_failures;
  }
}

// The same, and what a wrongly granted attempt got is given back, so that the probe goes on.
// (Pointers to the results: arguments are evaluated in no set order.)
void expect_oom_ptr(CUresult r, const CUdeviceptr* p, const char* path) {
  expect_oom(r, path);
  if (r == CUDA_SUCCESS) cuMemFree_v2(*p);
}
void expect_oom_exec(CUresult r, const CUgraphExec* x, const char* path) {
  expect_oom(r, path);
  if (r == CUDA_SUCCESS) cuGraphExecDestroy(*x);
}
void expect_oom_array(CUresult r, const CUarray* a, const char* path) {
  expect_oom(r, path);
  if (r == CUDA_SUCCESS) cuArrayDestroy(*a);
}
void expect_oom_mipmap(CUresult r, const CUmipmappedArray* m, const char* path) {
  expect_oom(r, path);
  if (r == CUDA_SUCCESS) cuMipmappedArrayDestroy(*m);
}

size_t free_bytes() {
  size_t free_b = 0, total_b = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_b, &total_b));
  return free_b;
}

void expect_free(size_t want, const char* what) {
  const size_t got = free_bytes();
  if (got != want) {
    std::fprintf(stderr, "quota_probe: %s: cuMemGetInfo free is %zu, want %zu\n", what, got, want);
    ++probe::g_failures;
  }
}

CUDA_MEM_ALLOC_NODE_PARAMS graph_alloc(CUdevice dev, size_t bytes) {
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.poolProps.location.id = dev;
  p.bytesize = bytes;
  return p;
}

// What the driver's graph memory pool holds on dev (not governed: the driver's own answer).
size_t pool_reserved(CUdevice dev) {
  cuuint64_t v = 0;
  CHECK_CU(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v));
  return v;
}

// The tenant is charged at least what the graph pool holds on top of `other` (its other memory).
void expect_pool_covered(size_t quota, CUdevice dev, size_t other, const char* what) {
  const size_t charged = quota - free_bytes();  // first: cuMemGetInfo may trim the pool
  const size_t pool = pool_reserved(dev);
  if (charged < other + pool) {
    std::fprintf(stderr, "quota_probe: %s: charged %zu, but %zu held and the graph pool has %zu\n", what, charged,
                 other, pool);
    ++probe::g_failures;
  }
}

// A graph that allocates `bytes` on dev and frees them again (the review's case of issue #22).
CUgraph alloc_free_graph(CUdevice dev, size_t bytes) {
  CUgraph g = nullptr;
  CHECK_CU(cuGraphCreate(&g, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS p = graph_alloc(dev, bytes);
  CUgraphNode a = nullptr, f = nullptr;
  // Never refused: an alloc node takes no memory, only an address.
  if (cuGraphAddMemAllocNode(&a, g, nullptr, 0, &p) != CUDA_SUCCESS ||
      cuGraphAddMemFreeNode(&f, g, &a, 1, p.dptr) != CUDA_SUCCESS) {
    std::fprintf(stderr, "quota_probe: adding graph memory nodes of %zu bytes failed\n", bytes);
    ++probe::g_failures;
  }
  return g;
}

CUDA_ARRAY3D_DESCRIPTOR array3d(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch) {
  CUDA_ARRAY3D_DESCRIPTOR a{};
  a.Width = w, a.Height = h, a.Depth = d, a.Format = f, a.NumChannels = ch;
  return a;
}

// What the driver takes for an array (levels 0) or mipmapped array of `desc`, in its own words:
// the size it reports for a deferred-mapping array of that descriptor (it tells no other kind's).
// The double pads rows to 512 bytes and the whole to 64 KiB and takes exactly that.
size_t driver_array_bytes(CUDA_ARRAY3D_DESCRIPTOR desc, unsigned levels) {
  desc.Flags |= CUDA_ARRAY3D_DEFERRED_MAPPING;
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  CUdevice dev;
  CHECK_CU(cuCtxGetDevice(&dev));
  if (levels == 0) {
    CUarray a = nullptr;
    CHECK_CU(cuArray3DCreate_v2(&a, &desc));
    CHECK_CU(cuArrayGetMemoryRequirements(&req, a, dev));
    CHECK_CU(cuArrayDestroy(a));
  } else {
    CUmipmappedArray m = nullptr;
    CHECK_CU(cuMipmappedArrayCreate(&m, &desc, levels));
    CHECK_CU(cuMipmappedArrayGetMemoryRequirements(&req, m, dev));
    CHECK_CU(cuMipmappedArrayDestroy(m));
  }
  return req.size;
}

// Bytes of a mipmapped array's levels as its descriptor says (2D, one channel of `elem` bytes).
size_t mipmap_estimate(size_t w, size_t h, unsigned levels, size_t elem) {
  size_t total = 0;
  for (unsigned i = 0; i < levels; ++i) {
    total += (w >> i ? w >> i : 1) * (h >> i ? h >> i : 1) * elem;
  }
  return total;
}

void context(CUdevice* dev) {
  CHECK_CU(cuInit(0));
  CHECK_CU(cuDeviceGet(dev, 0));
  CUcontext ctx;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, *dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
}

// The child tenant of the IPC check: maps the parent's allocation in (twice: the driver counts
// references and hands back the same pointer), reads it, and checks that none of it is charged to
// its own quota: all of the quota can still be allocated while the import is open.
int ipc_import(const char* hex, size_t quota) {
  CUdevice dev;
  context(&dev);
  CUipcMemHandle h{};
  for (size_t i = 0; i < sizeof h.reserved && hex[2 * i] != '\0' && hex[2 * i + 1] != '\0'; ++i) {
    const char byte[3] = {hex[2 * i], hex[2 * i + 1], '\0'};
    h.reserved[i] = static_cast<char>(std::strtoul(byte, nullptr, 16));
  }
  CUdeviceptr p = 0, again = 0;
  CHECK_CU(cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  CHECK_CU(cuIpcOpenMemHandle(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  probe::expect(again == p, "a handle opened twice maps the same pointer");
  expect_free(quota, "imported memory is not charged to the importer");
  unsigned int word = 0;
  CHECK_CU(cuMemcpyDtoH_v2(&word, p, sizeof word));
  probe::expect(word == 0xc0ffee00u, "the importer reads the exporter's data");
  CUdeviceptr all = 0;
  CHECK_CU(cuMemAlloc_v2(&all, quota));  // the whole quota, with the import still open
  CHECK_CU(cuMemFree_v2(all));
  CHECK_CU(cuIpcCloseMemHandle(p));
  CHECK_CU(cuIpcCloseMemHandle(p));
  expect_free(quota, "nothing charged after the import is closed");
  std::printf("{\"pid\": %d, \"imported\": true, \"failures\": %d}\n", static_cast<int>(getpid()),
              probe::g_failures);
  return probe::g_failures == 0 ? 0 : 1;
}

// Runs this program as `--ipc-import HANDLE`: a tenant of its own (it inherits gpuos's LD_PRELOAD
// and settings). Returns its exit status.
int run_importer(const CUipcMemHandle& h) {
  std::string hex;
  for (char c : h.reserved) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    hex += b;
  }
  char self[] = "/proc/self/exe";
  char flag[] = "--ipc-import";
  char* argv[] = {self, flag, hex.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, self, nullptr, nullptr, argv, environ) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void wait_for_file(const char* path) {
  struct stat st;
  for (int i = 0; i < 3000 && stat(path, &st) != 0; ++i) usleep(10000);
}

}  // namespace

int main(int argc, char** argv) {
  const char* q = std::getenv("GPUOS_TENANT_MEM");
  if (q == nullptr) {
    std::fprintf(stderr, "quota_probe: run me with gpuos run --mem SIZE\n");
    return 2;
  }
  const size_t quota = std::strtoull(q, nullptr, 10);
  const char* hold_file = nullptr;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--ipc-import")) return ipc_import(argv[i + 1], quota);
    if (!std::strcmp(argv[i], "--hold-file")) hold_file = argv[i + 1];
  }
  CUdevice dev;
  context(&dev);
  CUstream stream;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  // Every path, asked for one byte more than the whole quota.
  CUdeviceptr p = 0;
  size_t pitch = 0;
  expect_oom(cuMemAlloc_v2(&p, quota + 1), "cuMemAlloc_v2");
  expect_oom(cuMemAllocPitch_v2(&p, &pitch, quota / 16 + 1, 16, 4), "cuMemAllocPitch_v2");
  // Rows padded to 512 bytes: 128-byte rows worth exactly the quota take 4 times the quota.
  expect_oom_ptr(cuMemAllocPitch_v2(&p, &pitch, 128, quota / 128, 4), &p, "cuMemAllocPitch_v2 (row padding)");
  expect_oom(cuMemAllocManaged(&p, quota + 1, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
  expect_oom(cuMemAllocAsync(&p, quota + 1, stream), "cuMemAllocAsync");
  expect_oom(cuMemAllocAsync_ptsz(&p, quota + 1, stream), "cuMemAllocAsync_ptsz");
  // Optional in the driver test double: looked up, not linked.
  auto get_pool = reinterpret_cast<CUresult (*)(CUmemoryPool*, CUdevice)>(
      dlsym(RTLD_DEFAULT, "cuDeviceGetDefaultMemPool"));
  CUmemoryPool pool = nullptr;
  if (get_pool != nullptr && get_pool(&pool, dev) == CUDA_SUCCESS) {
    expect_oom(cuMemAllocFromPoolAsync(&p, quota + 1, pool, stream), "cuMemAllocFromPoolAsync");
  }
  size_t gran = 0;
  CUmemAllocationProp prop = probe::device_prop(dev, &gran);
  CUmemGenericAllocationHandle h;
  expect_oom(cuMemCreate(&h, (quota / gran + 1) * gran, &prop, 0), "cuMemCreate");

  // The tenant's view, then the quota as a running total across paths.
  size_t free_b = 0, total_b = 0;
  CHECK_CU(cuMemGetInfo_v2(&free_b, &total_b));
  probe::expect(total_b == quota, "cuMemGetInfo total is the quota");
  probe::expect(free_b == quota, "cuMemGetInfo free is the whole quota before any allocation");
  CUdeviceptr half;
  CHECK_CU(cuMemAlloc_v2(&half, quota / 2));
  CHECK_CU(cuMemGetInfo_v2(&free_b, &total_b));
  probe::expect(free_b == quota - quota / 2, "cuMemGetInfo free drops by what was allocated");
  expect_oom(cuMemAllocManaged(&p, quota / 2 + quota / 10, CU_MEM_ATTACH_GLOBAL), "managed after half");
  expect_oom(cuMemCreate(&h, ((quota / 2) / gran + 1) * gran, &prop, 0), "cuMemCreate after half");
  CHECK_CU(cuMemFree_v2(half));
  CUdeviceptr big;
  CHECK_CU(cuMemAllocAsync(&big, quota - quota / 10, stream));  // fits again once freed
  CHECK_CU(cuMemFreeAsync(big, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuMemGetInfo_v2(&free_b, &total_b));
  probe::expect(free_b == quota, "everything freed: the whole quota is free again");

  // CUDA arrays over the quota: accounted with what the driver takes (rows and the whole padded;
  // at least width x height x depth x channels x format bytes; a mipmapped array is the sum of its
  // levels).
  CUarray arr = nullptr;
  CUmipmappedArray mip = nullptr;
  CUDA_ARRAY_DESCRIPTOR ad{};
  ad.Width = 4096, ad.Height = quota / (4096 * 4) + 1, ad.Format = CU_AD_FORMAT_FLOAT, ad.NumChannels = 1;
  expect_oom(cuArrayCreate_v2(&arr, &ad), "cuArrayCreate_v2");
  CUDA_ARRAY3D_DESCRIPTOR a3 = array3d(256, 256, quota / (256 * 256 * 4) + 1, CU_AD_FORMAT_UNSIGNED_INT8, 4);
  expect_oom(cuArray3DCreate_v2(&arr, &a3), "cuArray3DCreate_v2");
  // One level of 2048 x 2048 x 16 bytes is the whole quota; a second level is over it.
  CUDA_ARRAY3D_DESCRIPTOR md = array3d(2048, 2048, 0, CU_AD_FORMAT_FLOAT, 4);
  expect_oom(cuMipmappedArrayCreate(&mip, &md, 2), "cuMipmappedArrayCreate");
  CHECK_CU(cuMipmappedArrayCreate(&mip, &md, 1));
  expect_free(0, "a mipmapped array of exactly the quota");
  CHECK_CU(cuMipmappedArrayDestroy(mip));
  expect_free(quota, "the mipmapped array destroyed");
  // Reached through cuGetProcAddress, as the CUDA runtime reaches them: gpuos's wrappers as well.
  void* fn = nullptr;
  CHECK_CU(cuGetProcAddress_v2("cuArray3DCreate", &fn, 13000, 0, nullptr));
  expect_oom(reinterpret_cast<decltype(&cuArray3DCreate_v2)>(fn)(&arr, &a3), "cuArray3DCreate (proc address)");
  CHECK_CU(cuGetProcAddress_v2("cuMipmappedArrayCreate", &fn, 13000, 0, nullptr));
  expect_oom(reinterpret_cast<decltype(&cuMipmappedArrayCreate)>(fn)(&mip, &md, 2),
             "cuMipmappedArrayCreate (proc address)");

  // The driver pads an array's rows (512 bytes in the double), so an array of narrow rows takes
  // many times what its descriptor says: charged, and refused, with what the driver takes. Each
  // of these fits the quota by its descriptor and exceeds it padded.
  {
    CUDA_ARRAY_DESCRIPTOR narrow{};
    narrow.Width = 64, narrow.Height = quota / 256, narrow.Format = CU_AD_FORMAT_UNSIGNED_INT8, narrow.NumChannels = 1;
    const CUDA_ARRAY3D_DESCRIPTOR narrow3 = array3d(64, quota / 256, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1);
    probe::expect(64 * (quota / 256) <= quota && driver_array_bytes(narrow3, 0) > quota,
                  "a 2D array of 64-byte rows fits by its descriptor, not padded");
    expect_oom_array(cuArrayCreate_v2(&arr, &narrow), &arr, "cuArrayCreate_v2 (row padding)");
    CUDA_ARRAY3D_DESCRIPTOR thin = array3d(16, 256, quota / 8192, CU_AD_FORMAT_UNSIGNED_INT8, 1);
    probe::expect(16 * 256 * (quota / 8192) <= quota && driver_array_bytes(thin, 0) > quota,
                  "a 3D array of 16-byte rows fits by its descriptor, not padded");
    expect_oom_array(cuArray3DCreate_v2(&arr, &thin), &arr, "cuArray3DCreate_v2 (row padding)");
    CUDA_ARRAY3D_DESCRIPTOR tall = array3d(64, quota / 512, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1);
    probe::expect(mipmap_estimate(64, quota / 512, 2, 1) <= quota && driver_array_bytes(tall, 2) > quota,
                  "a mipmapped array of 64-byte rows fits by its descriptor, not padded");
    expect_oom_mipmap(cuMipmappedArrayCreate(&mip, &tall, 2), &mip, "cuMipmappedArrayCreate (row padding)");
    expect_free(quota, "refused arrays hold nothing");
    // What fits is charged padded, on every path: rows of 64 bytes take 8 times their bytes, rows
    // of 16 bytes 32 times.
    narrow.Height = quota / 4096;
    const size_t padded = driver_array_bytes(array3d(64, quota / 4096, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1), 0);
    probe::expect(padded >= 512 * (quota / 4096), "the double pads rows to 512 bytes");
    CHECK_CU(cuArrayCreate_v2(&arr, &narrow));
    expect_free(quota - padded, "a 2D array charged with its padded rows");
    CHECK_CU(cuArrayDestroy(arr));
    expect_free(quota, "the padded 2D array destroyed");
    thin.Depth = quota / (2 * 512 * 256);  // half the quota padded, a 64th of it described
    const size_t padded3 = driver_array_bytes(thin, 0);
    CHECK_CU(cuArray3DCreate_v2(&arr, &thin));
    expect_free(quota - padded3, "a 3D array charged with its padded rows");
    CHECK_CU(cuArrayDestroy(arr));
    tall.Height = quota / 4096;
    const size_t padded_mip = driver_array_bytes(tall, 2);
    CHECK_CU(cuMipmappedArrayCreate(&mip, &tall, 2));
    expect_free(quota - padded_mip, "a mipmapped array charged with its padded rows");
    CHECK_CU(cuMipmappedArrayDestroy(mip));
    expect_free(quota, "the padded arrays destroyed");
  }

  // Pitched: charged with the padding the driver adds (a quarter of the quota's rows of 128 bytes
  // take all of it), so nothing else fits beside it.
  CHECK_CU(cuMemAllocPitch_v2(&p, &pitch, 128, quota / 512, 4));
  probe::expect(pitch == 512, "cuMemAllocPitch pads 128-byte rows to 512");
  expect_free(0, "a pitched allocation charged with its padding");
  expect_oom_ptr(cuMemAlloc_v2(&half, 1 << 20), &half, "cuMemAlloc_v2 beside a padded pitched allocation");
  CHECK_CU(cuMemFree_v2(p));
  expect_free(quota, "the pitched allocation freed");

  // Graph memory: an alloc node is only an address; the driver's graph pool backs it when an exec
  // is launched, in 32 MiB chunks, and keeps it (also memory freed inside the graph) after the
  // exec is gone. An exec is charged that from its instantiation; over the quota, instantiation
  // fails, on every instantiation path.
  constexpr size_t kChunk = 32 << 20;
  CUgraph g = alloc_free_graph(dev, quota + 1);
  CUgraphNode node = nullptr;
  CUDA_MEM_ALLOC_NODE_PARAMS gp = graph_alloc(dev, quota + 1);
  CUgraphNodeParams np{};
  np.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  np.alloc.poolProps = gp.poolProps;
  np.alloc.bytesize = quota + 1;
  probe::expect(cuGraphAddNode_v2(&node, g, nullptr, nullptr, 0, &np) == CUDA_SUCCESS,
                "an alloc node over the quota is added (it is only an address)");
  expect_free(quota, "alloc nodes are addresses only");
  CUgraphExec x = nullptr, x2 = nullptr;
  expect_oom_exec(cuGraphInstantiateWithFlags(&x, g, 0), &x, "cuGraphInstantiateWithFlags");
  CUDA_GRAPH_INSTANTIATE_PARAMS ip{};
  expect_oom_exec(cuGraphInstantiateWithParams(&x, g, &ip), &x, "cuGraphInstantiateWithParams");
  CHECK_CU(cuGetProcAddress_v2("cuGraphInstantiateWithFlags", &fn, 13000, 0, nullptr));
  expect_oom_exec(reinterpret_cast<decltype(&cuGraphInstantiateWithFlags)>(fn)(&x, g, 0), &x,
                  "cuGraphInstantiateWithFlags (proc address)");
  // "cuGraphInstantiate" is the five-argument cuGraphInstantiate_v2 at every version from 11.0 on,
  // 13.0 included (measured on the H200), though cuda.h maps the name to WithFlags from 12.0 on.
  CHECK_CU(cuGetProcAddress_v2("cuGraphInstantiate", &fn, 13000, 0, nullptr));
  expect_oom_exec(reinterpret_cast<decltype(&cuGraphInstantiate_v2)>(fn)(&x, g, nullptr, nullptr, 0), &x,
                  "cuGraphInstantiate (proc address 13000)");
  CHECK_CU(cuGetProcAddress_v2("cuGraphInstantiateWithParams", &fn, 13000,
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr));
  expect_oom_exec(reinterpret_cast<decltype(&cuGraphInstantiateWithParams)>(fn)(&x, g, &ip), &x,
                  "cuGraphInstantiateWithParams_ptsz (proc address)");
  CHECK_CU(cuGraphDestroy(g));
  expect_free(quota, "refused instantiations hold nothing");

  // The review's attack: 20 MiB allocated and freed inside a graph. Its exec is charged the
  // pool's chunk from instantiation on, so the pool's memory never comes on top of the quota.
  g = alloc_free_graph(dev, 20 << 20);
  CHECK_CU(cuGraphInstantiateWithFlags(&x, g, 0));
  expect_free(quota - kChunk, "an exec charged its graph pool chunk from instantiation");
  CHECK_CU(cuGraphLaunch(x, stream));
  CHECK_CU(cuGraphLaunch(x, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  probe::expect(pool_reserved(dev) == kChunk, "the launched exec's memory is in the driver's graph pool");
  expect_pool_covered(quota, dev, 0, "after launches");
  expect_oom_ptr(cuMemAlloc_v2(&half, quota - kChunk + 1), &half, "cuMemAlloc_v2 beside a launched graph");
  CUgraph g2 = alloc_free_graph(dev, 20 << 20), g3 = alloc_free_graph(dev, 1);
  CHECK_CU(cuGraphInstantiateWithFlags(&x2, g2, 0));  // exactly the quota now
  expect_free(0, "two execs of a chunk each");
  CUgraphExec x3 = nullptr;
  expect_oom_exec(cuGraphInstantiateWithFlags(&x3, g3, 0), &x3, "a third exec (1 byte takes a chunk)");
  CHECK_CU(cuGraphLaunch(x2, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  expect_pool_covered(quota, dev, 0, "two execs launched");
  // Destroyed, the execs' memory stays in the pool: still charged until a trim gives it back,
  // which gpuos does when the tenant needs the room (or asks cuMemGetInfo).
  CHECK_CU(cuGraphExecDestroy(x));
  CHECK_CU(cuGraphExecDestroy(x2));
  probe::expect(pool_reserved(dev) == 2 * kChunk, "the pool keeps destroyed execs' memory");
  CHECK_CU(cuMemAlloc_v2(&half, quota));  // fits once the pool is trimmed
  probe::expect(pool_reserved(dev) == 0, "trimmed to make room");
  CHECK_CU(cuMemFree_v2(half));
  for (CUgraph e : {g, g2, g3}) CHECK_CU(cuGraphDestroy(e));
  expect_free(quota, "graphs destroyed and their pool trimmed");

  // Child graphs hold alloc nodes too (moved into their node: a graph with memory nodes cannot be
  // cloned); the pool takes a chunk more for a child graph that allocates (measured on the H200).
  g = nullptr;
  CHECK_CU(cuGraphCreate(&g, 0));
  CUgraphNodeParams cp{};
  cp.type = CU_GRAPH_NODE_TYPE_GRAPH;
  cp.graph.graph = alloc_free_graph(dev, 1);
  cp.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
  CHECK_CU(cuGraphAddNode_v2(&node, g, nullptr, nullptr, 0, &cp));
  CHECK_CU(cuGraphInstantiateWithFlags(&x, g, 0));
  expect_free(quota - 2 * kChunk, "a child graph's allocation: its chunk and one more");
  CHECK_CU(cuGraphLaunch(x, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  expect_pool_covered(quota, dev, 0, "a child graph launched");
  CHECK_CU(cuGraphExecDestroy(x));
  CHECK_CU(cuGraphDestroy(g));
  expect_free(quota, "the child graph's exec gone");

  // An update in place can give an exec other (larger) allocations: charged before the driver
  // takes them, over the quota refused. (The exec's old charge stays until it is destroyed.)
  g = alloc_free_graph(dev, 1 << 20);
  g2 = alloc_free_graph(dev, quota + 1);
  g3 = alloc_free_graph(dev, 20 << 20);
  CHECK_CU(cuGraphInstantiateWithFlags(&x, g, 0));
  CUgraphExecUpdateResultInfo info{};
  expect_oom(cuGraphExecUpdate_v2(x, g2, &info), "cuGraphExecUpdate_v2 (to a larger graph)");
  CHECK_CU(cuGraphExecUpdate_v2(x, g3, &info));
  CHECK_CU(cuGraphLaunch(x, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  expect_pool_covered(quota, dev, 0, "an updated exec launched");
  CHECK_CU(cuGraphExecDestroy(x));
  for (CUgraph e : {g, g2, g3}) CHECK_CU(cuGraphDestroy(e));
  expect_free(quota, "the updated exec gone");

  // The pre-12.0 entry points, which programs built against CUDA 11 headers call and which
  // cuGetProcAddress hands out (cuGraphInstantiate: 10000, _v2: 11000 and on; cuGraphExecUpdate:
  // 10020 to 11080), exported or looked up: the same charge, the same refusals.
  {
    using Instantiate5 = decltype(&cuGraphInstantiate);
    using UpdateV1 = decltype(&cuGraphExecUpdate);
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    probe::expect(cuda != nullptr, "libcuda.so.1 is loaded");
    struct Path {
      const char* name;
      void* fn;
    };
    void* v1 = nullptr;
    void* v2 = nullptr;
    CHECK_CU(cuGetProcAddress_v2("cuGraphInstantiate", &v1, 10000, 0, nullptr));
    CHECK_CU(cuGetProcAddress_v2("cuGraphInstantiate", &v2, 11000, 0, nullptr));
    const Path instantiates[] = {
        {"cuGraphInstantiate", reinterpret_cast<void*>(&cuGraphInstantiate)},
        {"cuGraphInstantiate_v2", reinterpret_cast<void*>(&cuGraphInstantiate_v2)},
        {"cuGraphInstantiate (proc address 10000)", v1},
        {"cuGraphInstantiate (proc address 11000)", v2},
        {"cuGraphInstantiate (dlsym)", dlsym(RTLD_DEFAULT, "cuGraphInstantiate")},
        {"cuGraphInstantiate_v2 (dlsym)", dlsym(RTLD_DEFAULT, "cuGraphInstantiate_v2")},
        {"cuGraphInstantiate (dlsym on libcuda)", cuda ? dlsym(cuda, "cuGraphInstantiate") : nullptr},
        {"cuGraphInstantiate_v2 (dlsym on libcuda)", cuda ? dlsym(cuda, "cuGraphInstantiate_v2") : nullptr},
    };
    g = alloc_free_graph(dev, quota + 1);
    g2 = alloc_free_graph(dev, 20 << 20);
    for (const Path& path : instantiates) {
      if (path.fn == nullptr) {
        std::fprintf(stderr, "quota_probe: %s not found\n", path.name);
        ++probe::g_failures;
        continue;
      }
      auto instantiate = reinterpret_cast<Instantiate5>(path.fn);
      CUgraphNode err = reinterpret_cast<CUgraphNode>(&err);  // garbage the call must overwrite
      char log[128];
      std::memset(log, 'x', sizeof log);
      expect_oom_exec(instantiate(&x, g, &err, log, sizeof log), &x, path.name);
      probe::expect(err == nullptr && std::memchr(log, '\0', sizeof log) != nullptr,
                    "a refused pre-12.0 instantiation names no node and leaves a terminated log");
      CHECK_CU(instantiate(&x, g2, &err, log, sizeof log));
      expect_free(quota - kChunk, path.name);  // its graph pool chunk from instantiation on
      CHECK_CU(cuGraphLaunch(x, stream));
      CHECK_CU(cuStreamSynchronize(stream));
      expect_pool_covered(quota, dev, 0, path.name);
      CHECK_CU(cuGraphExecDestroy(x));
      expect_free(quota, "a pre-12.0 exec gone");
    }
    CHECK_CU(cuGraphDestroy(g));
    CHECK_CU(cuGraphDestroy(g2));

    // cuGraphExecUpdate v1: an exec of 1 MiB (a chunk) updated to 40 MiB of graph memory (two
    // chunks more: over the quota beside its own) is refused; to 20 MiB (one chunk) it fits.
    void* u1 = nullptr;
    void* u11 = nullptr;
    CHECK_CU(cuGetProcAddress_v2("cuGraphExecUpdate", &u1, 10020, 0, nullptr));
    CHECK_CU(cuGetProcAddress_v2("cuGraphExecUpdate", &u11, 11080, 0, nullptr));
    const Path updates[] = {
        {"cuGraphExecUpdate", reinterpret_cast<void*>(&cuGraphExecUpdate)},
        {"cuGraphExecUpdate (proc address 10020)", u1},
        {"cuGraphExecUpdate (proc address 11080)", u11},
        {"cuGraphExecUpdate (dlsym)", dlsym(RTLD_DEFAULT, "cuGraphExecUpdate")},
        {"cuGraphExecUpdate (dlsym on libcuda)", cuda ? dlsym(cuda, "cuGraphExecUpdate") : nullptr},
    };
    g = alloc_free_graph(dev, 1 << 20);
    g2 = alloc_free_graph(dev, 40 << 20);
    g3 = alloc_free_graph(dev, 20 << 20);
    CHECK_CU(cuGraphInstantiateWithFlags(&x, g, 0));
    for (const Path& path : updates) {
      if (path.fn == nullptr) {
        std::fprintf(stderr, "quota_probe: %s not found\n", path.name);
        ++probe::g_failures;
        continue;
      }
      CUgraphNode err = reinterpret_cast<CUgraphNode>(&err);
      CUgraphExecUpdateResult result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
      expect_oom(reinterpret_cast<UpdateV1>(path.fn)(x, g2, &err, &result), path.name);
      probe::expect(result == CU_GRAPH_EXEC_UPDATE_ERROR && err == nullptr,
                    "a refused cuGraphExecUpdate reports CU_GRAPH_EXEC_UPDATE_ERROR and no node");
      expect_free(quota - kChunk, "a refused update charges nothing");
    }
    CUgraphNode err = nullptr;
    CUgraphExecUpdateResult result = CU_GRAPH_EXEC_UPDATE_ERROR;
    CHECK_CU(cuGraphExecUpdate(x, g3, &err, &result));
    probe::expect(result == CU_GRAPH_EXEC_UPDATE_SUCCESS, "cuGraphExecUpdate v1 within the quota succeeds");
    // Its old chunk is retained until a trim shows the pool holds none of it (never launched).
    expect_free(quota - kChunk, "the updated exec charged its new chunk");
    CHECK_CU(cuGraphLaunch(x, stream));
    CHECK_CU(cuStreamSynchronize(stream));
    expect_pool_covered(quota, dev, 0, "an exec updated through v1 launched");
    CHECK_CU(cuGraphExecDestroy(x));
    for (CUgraph e : {g, g2, g3}) CHECK_CU(cuGraphDestroy(e));
    expect_free(quota, "the v1-updated exec gone");
    if (cuda != nullptr) dlclose(cuda);
  }

  // What succeeds is accounted exactly, on every one of those paths at once.
  // Arrays as the driver takes them (rows padded to 512 bytes, the whole to 64 KiB in the double):
  // 1000 x 100 floats 458752 bytes (400000 described), 64 x 64 x 16 of 4 bytes 524288 (262144),
  // 3 levels from 1024 x 1024 halves 2752512 (the same: rows of 512 bytes and more).
  const size_t kGraph1 = 3 << 20, kGraph2 = 1 << 20;
  CUarray a2d = nullptr, a3d = nullptr, deferred = nullptr;
  ad.Width = 1000, ad.Height = 100;
  const size_t kArray2d = driver_array_bytes(array3d(1000, 100, 0, CU_AD_FORMAT_FLOAT, 1), 0);
  CHECK_CU(cuArrayCreate_v2(&a2d, &ad));
  a3 = array3d(64, 64, 16, CU_AD_FORMAT_UNSIGNED_INT8, 4);
  const size_t kArray3d = driver_array_bytes(a3, 0);
  CHECK_CU(cuArray3DCreate_v2(&a3d, &a3));
  a3.Flags = CUDA_ARRAY3D_DEFERRED_MAPPING;  // owns no memory: it is mapped in from cuMemCreate
  CHECK_CU(cuArray3DCreate_v2(&deferred, &a3));
  md = array3d(1024, 1024, 0, CU_AD_FORMAT_HALF, 1);
  const size_t kMipmap = driver_array_bytes(md, 3);
  CHECK_CU(cuMipmappedArrayCreate(&mip, &md, 3));
  probe::expect(kArray2d == 458752 && kArray3d == 524288 && kMipmap == 2752512,
                "the double takes arrays with their rows padded to 512 bytes, the whole to 64 KiB");
  const size_t arrays = kArray2d + kArray3d + kMipmap;
  // A graph of two allocations: 3 MiB freed in it, 1 MiB left allocated by its launch (added
  // through cuGraphAddNode_v2); 4 + 2 MiB of pages, one chunk.
  CHECK_CU(cuGraphCreate(&g, 0));
  gp = graph_alloc(dev, kGraph1);
  CHECK_CU(cuGraphAddMemAllocNode(&node, g, nullptr, 0, &gp));
  CUgraphNode alloc1 = node;
  np.alloc.bytesize = kGraph2;
  CHECK_CU(cuGraphAddNode_v2(&node, g, &alloc1, nullptr, 1, &np));
  CHECK_CU(cuGraphAddMemFreeNode(&node, g, &alloc1, 1, gp.dptr));
  CHECK_CU(cuGraphInstantiateWithFlags(&x, g, 0));
  const size_t held = arrays + kChunk;
  expect_free(quota - held, "arrays and an exec's graph memory accounted exactly");
  CHECK_CU(cuGraphLaunch(x, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  expect_pool_covered(quota, dev, arrays, "with arrays");
  // Over what is left, on each path; exactly what is left fits.
  ad.Width = quota - held + 1, ad.Height = 0, ad.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  expect_oom(cuArrayCreate_v2(&arr, &ad), "1D array after held");
  g2 = alloc_free_graph(dev, 1);
  expect_oom_exec(cuGraphInstantiateWithFlags(&x2, g2, 0), &x2, "an exec after held");
  CHECK_CU(cuGraphDestroy(g2));
  ad.Width = quota - held;
  CUarray rest = nullptr;
  CHECK_CU(cuArrayCreate_v2(&rest, &ad));
  expect_free(0, "the rest of the quota in a 1D array");
  CHECK_CU(cuArrayDestroy(rest));
  expect_free(quota - held, "and back");
  if (hold_file != nullptr) {  // gpuosd must count the same
    std::printf("{\"held\": %zu}\n", held);
    std::fflush(stdout);
    wait_for_file(hold_file);
  }
  // The 1 MiB allocation outlives the exec and the graph: its pages keep a chunk of the pool.
  CHECK_CU(cuGraphExecDestroy(x));
  CHECK_CU(cuGraphDestroy(g));
  expect_pool_covered(quota, dev, arrays, "a graph allocation outlives its exec");
  probe::expect(pool_reserved(dev) == kChunk, "the live allocation's chunk stays in the pool");
  CHECK_CU(cuMemFree_v2(np.alloc.dptr));
  CHECK_CU(cuArrayDestroy(a2d));
  CHECK_CU(cuArrayDestroy(a3d));
  CHECK_CU(cuArrayDestroy(deferred));
  CHECK_CU(cuMipmappedArrayDestroy(mip));
  expect_free(quota, "arrays destroyed, the graph allocation freed");
  probe::expect(pool_reserved(dev) == 0, "the pool trimmed once nothing uses it");

  // Stream capture: a captured cuMemAllocAsync is an alloc node of the captured graph, charged
  // with it at instantiation (refused up front when it cannot fit at all); its free may come from
  // the capture or from another graph.
  CUdeviceptr c1 = 0, c2 = 0;
  CHECK_CU(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  expect_oom(cuMemAllocAsync(&c1, quota + 1, stream), "captured cuMemAllocAsync");
  CHECK_CU(cuMemAllocAsync(&c1, 2 << 20, stream));
  CHECK_CU(cuMemAllocAsync(&c2, 1 << 20, stream));
  expect_free(quota, "captured allocations are addresses only");
  CHECK_CU(cuMemFreeAsync(c1, stream));
  CUgraph captured = nullptr;
  CHECK_CU(cuStreamEndCapture(stream, &captured));
  CHECK_CU(cuGraphInstantiateWithFlags(&x, captured, 0));
  expect_free(quota - kChunk, "the captured graph's memory from its instantiation");
  CHECK_CU(cuGraphLaunch(x, stream));
  CUgraph frees = nullptr;
  CHECK_CU(cuGraphCreate(&frees, 0));
  CHECK_CU(cuGraphAddMemFreeNode(&node, frees, nullptr, 0, c2));
  CHECK_CU(cuGraphInstantiateWithFlags(&x2, frees, 0));  // no allocations: nothing to charge
  expect_free(quota - kChunk, "a graph that only frees is charged nothing");
  CHECK_CU(cuGraphLaunch(x2, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  expect_pool_covered(quota, dev, 0, "captured graph launched");
  CHECK_CU(cuGraphExecDestroy(x));
  CHECK_CU(cuGraphExecDestroy(x2));
  CHECK_CU(cuGraphDestroy(captured));
  CHECK_CU(cuGraphDestroy(frees));
  expect_free(quota, "captured graph's memory back once its exec is gone");

  // CUDA IPC: another tenant maps 3 MiB of ours in; it is charged here only.
  CUdeviceptr shared = 0;
  CHECK_CU(cuMemAlloc_v2(&shared, 3 << 20));
  const unsigned int word = 0xc0ffee00u;
  CHECK_CU(cuMemcpyHtoD_v2(shared, &word, sizeof word));
  CUipcMemHandle ipc{};
  CHECK_CU(cuIpcGetMemHandle(&ipc, shared));
  probe::expect(run_importer(ipc) == 0, "the importing tenant's expectations held");
  expect_free(quota - (3 << 20), "the exporter is charged for what it shares");
  CHECK_CU(cuMemFree_v2(shared));

  // Still working after all the refusals.
  CHECK_CU(cuMemAlloc_v2(&half, quota / 2));
  CHECK_CU(cuMemFree_v2(half));
  expect_free(quota, "everything freed at the end");

  // The device malloc heap (cuCtxSetLimit) is device memory of the context: charged against the
  // quota, refused beyond it (issue #42), given back when made smaller.
  expect_oom(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, quota + 1), "cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE)");
  size_t heap = 0;
  CHECK_CU(cuCtxGetLimit(&heap, CU_LIMIT_MALLOC_HEAP_SIZE));
  probe::expect(heap == (8u << 20), "a refused heap size leaves the driver's default");
  CHECK_CU(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, quota / 2));
  CHECK_CU(cuCtxGetLimit(&heap, CU_LIMIT_MALLOC_HEAP_SIZE));
  probe::expect(heap == quota / 2, "the heap has the size set");
  expect_free(quota - quota / 2, "the malloc heap counts against the quota");
  expect_oom(cuMemAlloc_v2(&half, quota - quota / 2 + 1), "cuMemAlloc_v2 beside the malloc heap");
  CHECK_CU(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, quota / 4));
  expect_free(quota - quota / 4, "a smaller heap gives memory back");
  CHECK_CU(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096));  // other limits pass through
  CHECK_CU(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 0));
  expect_free(quota, "a heap of 0 holds nothing");

  std::printf("{\"pid\": %d, \"quota\": %zu, \"refused\": %d, \"failures\": %d}\n", static_cast<int>(getpid()),
              quota, g_refused, probe::g_failures);
  return probe::g_failures == 0 ? 0 : 1;
}
