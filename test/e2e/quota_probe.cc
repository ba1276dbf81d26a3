// A tenant that tries every allocation path to exceed its memory quota (GPUOS_TENANT_MEM bytes,
// set by `gpuos run --mem`): plain, pitched, managed, stream-ordered and pool allocations, VMM
// handles, CUDA arrays (1D/2D, 3D, mipmapped), graph memory nodes (both entry points) and
// allocations under stream capture. Each over-quota attempt must fail with
// CUDA_ERROR_OUT_OF_MEMORY and leave nothing allocated, and the process keeps working;
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

CUDA_ARRAY3D_DESCRIPTOR array3d(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch) {
  CUDA_ARRAY3D_DESCRIPTOR a{};
  a.Width = w, a.Height = h, a.Depth = d, a.Format = f, a.NumChannels = ch;
  return a;
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

  // CUDA arrays over the quota: accounted from the descriptor (width x height x depth x channels
  // x format bytes; a mipmapped array is the sum of its levels).
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

  // Graph memory nodes over the quota, through both entry points.
  CUgraph g = nullptr;
  CHECK_CU(cuGraphCreate(&g, 0));
  CUgraphNode node = nullptr;
  CUDA_MEM_ALLOC_NODE_PARAMS gp = graph_alloc(dev, quota + 1);
  expect_oom(cuGraphAddMemAllocNode(&node, g, nullptr, 0, &gp), "cuGraphAddMemAllocNode");
  CUgraphNodeParams np{};
  np.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  np.alloc.poolProps = gp.poolProps;
  np.alloc.bytesize = quota + 1;
  expect_oom(cuGraphAddNode_v2(&node, g, nullptr, nullptr, 0, &np), "cuGraphAddNode_v2 (alloc)");
  // Reached through cuGetProcAddress, as the CUDA runtime reaches them: gpuos's wrappers as well.
  void* fn = nullptr;
  CHECK_CU(cuGetProcAddress_v2("cuArray3DCreate", &fn, 13000, 0, nullptr));
  expect_oom(reinterpret_cast<decltype(&cuArray3DCreate_v2)>(fn)(&arr, &a3), "cuArray3DCreate (proc address)");
  CHECK_CU(cuGetProcAddress_v2("cuMipmappedArrayCreate", &fn, 13000, 0, nullptr));
  expect_oom(reinterpret_cast<decltype(&cuMipmappedArrayCreate)>(fn)(&mip, &md, 2),
             "cuMipmappedArrayCreate (proc address)");
  CHECK_CU(cuGetProcAddress_v2("cuGraphAddMemAllocNode", &fn, 13000, 0, nullptr));
  expect_oom(reinterpret_cast<decltype(&cuGraphAddMemAllocNode)>(fn)(&node, g, nullptr, 0, &gp),
             "cuGraphAddMemAllocNode (proc address)");
  CHECK_CU(cuGetProcAddress_v2("cuGraphAddNode", &fn, 13000, 0, nullptr));
  expect_oom(reinterpret_cast<decltype(&cuGraphAddNode_v2)>(fn)(&node, g, nullptr, nullptr, 0, &np),
             "cuGraphAddNode (proc address)");

  // What succeeds is accounted exactly, on every one of those paths at once.
  const size_t kArray2d = 1000 * 100 * 4, kArray3d = 64 * 64 * 16 * 4;
  const size_t kMipmap = (1024 * 1024 + 512 * 512 + 256 * 256) * 2, kGraph1 = 3 << 20, kGraph2 = 1 << 20;
  CUarray a2d = nullptr, a3d = nullptr, deferred = nullptr;
  ad.Width = 1000, ad.Height = 100;
  CHECK_CU(cuArrayCreate_v2(&a2d, &ad));
  a3 = array3d(64, 64, 16, CU_AD_FORMAT_UNSIGNED_INT8, 4);
  CHECK_CU(cuArray3DCreate_v2(&a3d, &a3));
  a3.Flags = CUDA_ARRAY3D_DEFERRED_MAPPING;  // owns no memory: it is mapped in from cuMemCreate
  CHECK_CU(cuArray3DCreate_v2(&deferred, &a3));
  md = array3d(1024, 1024, 0, CU_AD_FORMAT_HALF, 1);
  CHECK_CU(cuMipmappedArrayCreate(&mip, &md, 3));
  gp = graph_alloc(dev, kGraph1);
  CHECK_CU(cuGraphAddMemAllocNode(&node, g, nullptr, 0, &gp));
  np.alloc.bytesize = kGraph2;
  CUgraphNode alloc1 = node;
  CHECK_CU(cuGraphAddNode_v2(&node, g, &alloc1, nullptr, 1, &np));
  const size_t held = kArray2d + kArray3d + kMipmap + kGraph1 + kGraph2;
  expect_free(quota - held, "arrays and graph allocations accounted exactly");
  // Over what is left, on each path; exactly what is left fits.
  ad.Width = quota - held + 1, ad.Height = 0, ad.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  expect_oom(cuArrayCreate_v2(&arr, &ad), "1D array after held");
  CUDA_MEM_ALLOC_NODE_PARAMS rest = graph_alloc(dev, quota - held + 1);
  expect_oom(cuGraphAddMemAllocNode(&node, g, nullptr, 0, &rest), "graph alloc after held");
  rest.bytesize = quota - held;
  CUgraphNode rest_node = nullptr;
  CHECK_CU(cuGraphAddMemAllocNode(&rest_node, g, nullptr, 0, &rest));
  expect_free(0, "the rest of the quota in a graph allocation");
  CHECK_CU(cuGraphAddMemFreeNode(&node, g, &rest_node, 1, rest.dptr));
  expect_free(quota - held, "a free node gives it back");
  if (hold_file != nullptr) {  // gpuosd must count the same
    std::printf("{\"held\": %zu}\n", held);
    std::fflush(stdout);
    wait_for_file(hold_file);
  }
  CHECK_CU(cuGraphAddMemFreeNode(&node, g, &alloc1, 1, gp.dptr));
  CUgraphNodeParams fp{};
  fp.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  fp.free.dptr = np.alloc.dptr;
  CHECK_CU(cuGraphAddNode_v2(&node, g, nullptr, nullptr, 0, &fp));
  expect_free(quota - kArray2d - kArray3d - kMipmap, "graph allocations freed by free nodes");
  CHECK_CU(cuGraphDestroy(g));
  CHECK_CU(cuArrayDestroy(a2d));
  CHECK_CU(cuArrayDestroy(a3d));
  CHECK_CU(cuArrayDestroy(deferred));
  CHECK_CU(cuMipmappedArrayDestroy(mip));
  expect_free(quota, "arrays destroyed");

  // Stream capture: a captured cuMemAllocAsync is the graph's alloc node, accounted once (here,
  // not again as a graph node); its free may come from the capture or from another graph.
  CUdeviceptr c1 = 0, c2 = 0;
  CHECK_CU(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  expect_oom(cuMemAllocAsync(&c1, quota + 1, stream), "captured cuMemAllocAsync");
  CHECK_CU(cuMemAllocAsync(&c1, 2 << 20, stream));
  CHECK_CU(cuMemAllocAsync(&c2, 1 << 20, stream));
  expect_free(quota - (3 << 20), "captured allocations accounted once");
  CHECK_CU(cuMemFreeAsync(c1, stream));
  expect_free(quota - (1 << 20), "a captured free");
  CUgraph captured = nullptr;
  CHECK_CU(cuStreamEndCapture(stream, &captured));
  CUgraph frees = nullptr;
  CHECK_CU(cuGraphCreate(&frees, 0));
  CHECK_CU(cuGraphAddMemFreeNode(&node, frees, nullptr, 0, c2));
  expect_free(quota, "a captured allocation freed by another graph's free node");
  CHECK_CU(cuGraphDestroy(captured));
  CHECK_CU(cuGraphDestroy(frees));

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

  std::printf("{\"pid\": %d, \"quota\": %zu, \"refused\": %d, \"failures\": %d}\n", static_cast<int>(getpid()),
              quota, g_refused, probe::g_failures);
  return probe::g_failures == 0 ? 0 : 1;
}
