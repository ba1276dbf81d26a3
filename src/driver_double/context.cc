// SPDX-License-Identifier: Apache-2.0
// Initialisation, devices, contexts and error strings.
#include <cstdio>
#include <cstring>

#include "driver_double/internal.h"

namespace dd {
namespace {

Registry<Context>& contexts() {
  static auto* r = new Registry<Context>();  // leaked: see internal.h
  return *r;
}
std::mutex& primary_mu() {
  static auto* m = new std::mutex();
  return *m;
}
Context* g_primary[kMaxDevices] = {};
unsigned g_primary_flags[kMaxDevices] = {};  // set before first retain

// Each thread's context stack; top = current context.
std::vector<Context*>& ctx_stack() {
  thread_local std::vector<Context*> s;
  return s;
}

CUresult check_device(CUdevice dev) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || dev >= config().devices) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

Context* make_context(int dev, unsigned flags, bool primary, GreenCtx* green = nullptr) {
  auto* c = new Context();
  c->dev = dev;
  c->flags = flags;
  c->primary = primary;
  c->green = green;
  c->legacy = new_stream(c, Stream::Kind::kLegacy, 0, 0);
  contexts().add(c);
  return c;
}

// Waits for and stops all streams and frees the context's memory. The Context object itself
// stays allocated (a stale handle must stay safe to look up), it just leaves the registry.
void teardown(Context* c) {
  sync_context(c);
  std::vector<StreamPtr> all;
  {
    std::lock_guard<std::mutex> l(c->mu);
    all = c->streams;
    for (auto& [tid, s] : c->per_thread) all.push_back(s);
    c->streams.clear();
    c->per_thread.clear();
    all.push_back(c->legacy);
    if (c->internal) all.push_back(c->internal);
  }
  for (auto& s : all) stop_stream(s);
  free_context_allocations(c);
}

void drop_from_stacks(Context* c) {
  auto& st = ctx_stack();
  for (auto it = st.begin(); it != st.end();) it = (*it == c) ? st.erase(it) : it + 1;
}

CUresult ctx_create(CUcontext* out, unsigned flags, CUdevice dev) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  Context* c = make_context(dev, flags, false);
  ctx_stack().push_back(c);
  *out = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

}  // namespace

bool context_alive(Context* ctx) { return ctx != nullptr && contexts().has(ctx); }

Context* make_green_context(int dev, unsigned flags, GreenCtx* g) {
  Context* c = make_context(dev, flags, false, g);
  std::lock_guard<std::mutex> l(g->primary->mu);
  g->primary->greens.push_back(c);
  return c;
}

void destroy_green_context(Context* c) {
  contexts().remove(c);
  drop_from_stacks(c);
  {
    Context* p = c->green->primary;
    std::lock_guard<std::mutex> l(p->mu);
    auto& v = p->greens;
    for (auto it = v.begin(); it != v.end(); ++it)
      if (*it == c) {
        v.erase(it);
        break;
      }
  }
  sync_context(c);
  std::vector<StreamPtr> user, other;
  {
    std::lock_guard<std::mutex> l(c->mu);
    user.swap(c->streams);
    for (auto& [tid, s] : c->per_thread) other.push_back(s);
    c->per_thread.clear();
    other.push_back(c->legacy);
    if (c->internal) other.push_back(c->internal);
    c->waits.clear();
  }
  // The driver leaves the caller's streams alone: their handles now fail with
  // CUDA_ERROR_CONTEXT_IS_DESTROYED. No memory is freed: it belongs to the primary context.
  for (auto& s : user) stop_stream(s, true);
  for (auto& s : other) stop_stream(s);
}

CUresult context_sticky(Context* ctx) { return static_cast<CUresult>(ctx->sticky.load()); }

CUresult current_context(Context** out, bool check_sticky) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  auto& st = ctx_stack();
  if (st.empty() || !context_alive(st.back())) return CUDA_ERROR_INVALID_CONTEXT;
  Context* c = st.back();
  if (c->primary) {
    std::lock_guard<std::mutex> l(primary_mu());
    if (c->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;  // released primary
  }
  if (check_sticky && c->sticky.load() != CUDA_SUCCESS) return context_sticky(c);
  *out = c;
  return CUDA_SUCCESS;
}

}  // namespace dd

using namespace dd;

// ---- init, version, devices ----
DD_API cuInit(unsigned int flags) {
  return guard([&] { return flags != 0 ? CUDA_ERROR_INVALID_VALUE : init_once(); });
}

DD_API cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

DD_API cuDeviceGetCount(int* count) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = config().devices;
  return CUDA_SUCCESS;
}

DD_API cuDeviceGet(CUdevice* dev, int ordinal) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= config().devices) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

DD_API cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "gpuos simulated GPU (driver double)");
  return CUDA_SUCCESS;
}

DD_API cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int v = 0;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = config().sms; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 48 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = 228 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 6144; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: v = dev; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: v = CU_COMPUTEMODE_DEFAULT; break;
    // As the H200 reports them; cuMemAllocPitch pads rows to TEXTURE_ALIGNMENT (512), not to
    // TEXTURE_PITCH_ALIGNMENT (32, what pitch-linear textures need).
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
    default:
      if (attrib < 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
      v = 0;
  }
  *pi = v;
  return CUDA_SUCCESS;
}

DD_API cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t used = 0, total = 0;
  mem_info(dev, &used, &total);
  *bytes = total;
  return CUDA_SUCCESS;
}

DD_API cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Stable per simulated GPU, so `gpuos ps` shows the same UUID across runs and processes that see
  // the GPUs in another order (CUDA_VISIBLE_DEVICES) can tell which one they have.
  unsigned char b[16];
  dd::sim_uuid(dd::physical_device(dev), b);
  std::memcpy(uuid->bytes, b, sizeof(b));
  return CUDA_SUCCESS;
}

DD_API cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

// ---- primary contexts ----
DD_API cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  return guard([&] {
    if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
    if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> l(primary_mu());
    Context*& p = g_primary[dev];
    if (p == nullptr) {
      p = make_context(dev, g_primary_flags[dev], true);
    } else if (p->primary_refs == 0 && !contexts().has(p)) {
      // Re-activated after a full release/reset: fresh streams, same handle (as the driver does).
      p->legacy = new_stream(p, Stream::Kind::kLegacy, 0, 0);
      p->sticky.store(CUDA_SUCCESS);
      contexts().add(p);
    }
    ++p->primary_refs;
    *ctx = reinterpret_cast<CUcontext>(p);
    return CUDA_SUCCESS;
  });
}

static CUresult primary_release(CUdevice dev, bool reset) {
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  Context* p = nullptr;
  {
    std::lock_guard<std::mutex> l(primary_mu());
    p = g_primary[dev];
    if (p == nullptr || (!reset && p->primary_refs == 0)) {
      return reset ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    }
    p->primary_refs = reset ? 0 : p->primary_refs - 1;
    if (p->primary_refs > 0) return CUDA_SUCCESS;
  }
  if (contexts().remove(p)) teardown(p);
  return CUDA_SUCCESS;
}

DD_API cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return guard([&] { return primary_release(dev, false); });
}
DD_API cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
DD_API cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return guard([&] { return primary_release(dev, true); });
}
DD_API cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

DD_API cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(primary_mu());
  Context* p = g_primary[dev];
  *flags = p ? p->flags : 0;
  *active = (p != nullptr && p->primary_refs > 0) ? 1 : 0;
  return CUDA_SUCCESS;
}

DD_API cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return guard([&] {
    if (CUresult r = check_device(dev); r != CUDA_SUCCESS) return r;
    std::lock_guard<std::mutex> l(primary_mu());
    g_primary_flags[dev] = flags;
    if (g_primary[dev] != nullptr) g_primary[dev]->flags = flags;
    return CUDA_SUCCESS;
  });
}
DD_API cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

// ---- contexts ----
DD_API cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice dev) {
  return guard([&] { return ctx_create(ctx, flags, dev); });
}
DD_API cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* params, int numParams,
                      unsigned int flags, CUdevice dev) {
  return guard([&] { return ctx_create(ctx, flags, dev); });  // affinity is not modelled
}
DD_API cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params, unsigned int flags,
                      CUdevice dev) {
  return guard([&] { return ctx_create(ctx, flags, dev); });
}

DD_API cuCtxDestroy_v2(CUcontext ctx) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto* c = reinterpret_cast<Context*>(ctx);
    // Primary contexts are released, green contexts' contexts go with cuGreenCtxDestroy.
    if (c == nullptr || c->primary || c->green != nullptr || !contexts().remove(c))
      return CUDA_ERROR_INVALID_CONTEXT;
    drop_from_stacks(c);
    teardown(c);
    return CUDA_SUCCESS;
  });
}

DD_API cuCtxSetCurrent(CUcontext ctx) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto* c = reinterpret_cast<Context*>(ctx);
    auto& st = ctx_stack();
    if (c == nullptr) {
      if (!st.empty()) st.pop_back();
      return CUDA_SUCCESS;
    }
    if (!context_alive(c)) return CUDA_ERROR_INVALID_CONTEXT;
    if (st.empty()) st.push_back(c); else st.back() = c;
    return CUDA_SUCCESS;
  });
}

DD_API cuCtxGetCurrent(CUcontext* ctx) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& st = ctx_stack();
  *ctx = st.empty() ? nullptr : reinterpret_cast<CUcontext>(st.back());
  return CUDA_SUCCESS;
}

DD_API cuCtxPushCurrent_v2(CUcontext ctx) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto* c = reinterpret_cast<Context*>(ctx);
    if (!context_alive(c)) return CUDA_ERROR_INVALID_CONTEXT;
    ctx_stack().push_back(c);
    return CUDA_SUCCESS;
  });
}

DD_API cuCtxPopCurrent_v2(CUcontext* ctx) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto& st = ctx_stack();
    if (st.empty()) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx != nullptr) *ctx = reinterpret_cast<CUcontext>(st.back());
    st.pop_back();
    return CUDA_SUCCESS;
  });
}

DD_API cuCtxGetDevice(CUdevice* dev) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c, false); r != CUDA_SUCCESS) return r;
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *dev = c->dev;
  return CUDA_SUCCESS;
}

namespace {
// What the H200 (driver 580) reports before any cuCtxSetLimit, by CUlimit; 0 where the double has
// no figure (those are accepted and reported back as set).
constexpr size_t kDefaultLimits[CU_LIMIT_MAX] = {
    1024,        // CU_LIMIT_STACK_SIZE
    1 << 20,     // CU_LIMIT_PRINTF_FIFO_SIZE
    8 << 20,     // CU_LIMIT_MALLOC_HEAP_SIZE
    2,           // CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH
    2048,        // CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT
    32,          // CU_LIMIT_MAX_L2_FETCH_GRANULARITY
};
}  // namespace

DD_API cuCtxSetLimit(CUlimit limit, size_t value) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c, false); r != CUDA_SUCCESS) return r;
  if (limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
  // The malloc heap is device memory the context reserves: no more than the device has.
  if (limit == CU_LIMIT_MALLOC_HEAP_SIZE) {
    uint64_t used = 0, total = 0;
    mem_info(c->dev, &used, &total);
    if (value > total) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  c->limits[limit].store(value);
  return CUDA_SUCCESS;
}

DD_API cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c, false); r != CUDA_SUCCESS) return r;
  if (pvalue == nullptr || limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
  const size_t v = c->limits[limit].load();
  *pvalue = v != 0 ? v : kDefaultLimits[limit];
  return CUDA_SUCCESS;
}

DD_API cuCtxGetFlags(unsigned int* flags) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c, false); r != CUDA_SUCCESS) return r;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = c->flags;
  return CUDA_SUCCESS;
}

DD_API cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c, false); r != CUDA_SUCCESS) return r;
  if (leastPriority) *leastPriority = 0;  // H200 range
  if (greatestPriority) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

DD_API cuCtxSynchronize() {
  return guard([&] {
    Context* c = nullptr;
    if (CUresult r = current_context(&c, false); r != CUDA_SUCCESS) return r;
    sync_context(c);
    return context_sticky(c);
  });
}

// ---- errors ----
namespace {
struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
#define DD_ERR(code, text) {code, #code, text},
constexpr ErrorText kErrors[] = {
    DD_ERR(CUDA_SUCCESS, "no error")
    DD_ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument")
    DD_ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")
    DD_ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error")
    DD_ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down")
    DD_ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")
    DD_ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")
    DD_ERR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")
    DD_ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")
    DD_ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")
    DD_ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")
    DD_ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found")
    DD_ERR(CUDA_ERROR_NOT_READY, "device not ready")
    DD_ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")
    DD_ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")
    DD_ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")
    DD_ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")
    DD_ERR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")
    DD_ERR(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS")
    DD_ERR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing")
    DD_ERR(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture")
    DD_ERR(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not initiated in this stream")
    DD_ERR(CUDA_ERROR_INVALID_RESOURCE_TYPE, "invalid resource type")
    DD_ERR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "invalid resource configuration")
    DD_ERR(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread")
    DD_ERR(CUDA_ERROR_UNKNOWN, "unknown error")
};
#undef DD_ERR
const ErrorText* find_error(CUresult e) {
  for (const auto& t : kErrors)
    if (t.code == e) return &t;
  return nullptr;
}
}  // namespace

DD_API cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* t = find_error(error);
  *str = t ? t->name : nullptr;
  return t ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

DD_API cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* t = find_error(error);
  *str = t ? t->text : nullptr;
  return t ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
