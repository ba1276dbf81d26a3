// SPDX-License-Identifier: Apache-2.0
// Green contexts (CUDA 12.4+ driver API): SM resources, their split into groups, descriptors and
// green contexts, whose kernels occupy only their partition's SM slots (device.cc).
//
// A CUdevResource is a value the caller copies around, so what the double needs to know about one
// travels inside it, in the struct's internal padding (as with the real driver): the device, the
// SM slots, and which split produced it (descriptors may only combine outputs of one split).
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "driver_double/internal.h"

namespace dd {
namespace {

constexpr uint32_t kResourceMagic = 0x67726e52;  // "grnR"

enum Role : uint32_t {
  kWhole = 1,      // of a device, context or green context: can be split
  kGroup = 2,      // a group made by a split
  kRemaining = 3,  // what a split left over
};

struct ResourceTag {
  uint32_t magic;
  int32_t dev;
  uint64_t slots;
  uint64_t split;  // the split that made it; 0 for kWhole
  uint32_t role;
  int32_t pid;  // made in this process (a copy from elsewhere names nothing here)
};
static_assert(sizeof(ResourceTag) <= sizeof(CUdevResource::_internal_padding));
static_assert(sizeof(CUdevResource) == 144, "CUDA 13.0 layout: type, 92 bytes, 48-byte union");

std::atomic<uint64_t> g_splits{0};
std::atomic<unsigned long long> g_green_ids{0};

void fill_resource(CUdevResource* r, int dev, uint64_t slots, uint64_t split, Role role) {
  std::memset(r, 0, sizeof(*r));
  r->type = CU_DEV_RESOURCE_TYPE_SM;
  r->sm.smCount = sms_of(slots);
  r->sm.minSmPartitionSize = static_cast<unsigned>(slot_width());
  r->sm.smCoscheduledAlignment = static_cast<unsigned>(slot_width());
  const ResourceTag t{kResourceMagic, dev, slots, split, role, static_cast<int32_t>(getpid())};
  std::memcpy(r->_internal_padding, &t, sizeof t);
}

bool read_tag(const CUdevResource* r, ResourceTag* t) {
  std::memcpy(t, r->_internal_padding, sizeof *t);
  return t->magic == kResourceMagic && t->pid == static_cast<int32_t>(getpid()) && t->dev >= 0 &&
         t->dev < config().devices && (t->slots & ~all_slots()) == 0 &&
         (t->role == kWhole || t->role == kGroup || t->role == kRemaining);
}

// A resource descriptor (CUdevResourceDesc): the SM slots of one device. The driver has no call
// to destroy descriptors, so they live as long as the process.
struct Desc {
  int dev;
  uint64_t slots;
};
Registry<Desc>& descs() {
  static auto* r = new Registry<Desc>();
  return *r;
}
Registry<GreenCtx>& greens() {  // every green context ever made (destroyed ones are flagged)
  static auto* r = new Registry<GreenCtx>();
  return *r;
}

CUresult check_sm_type(CUdevResource* resource, int type) {  // type: a CUdevResourceType
  if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return type == CU_DEV_RESOURCE_TYPE_SM ? CUDA_SUCCESS : CUDA_ERROR_INVALID_RESOURCE_TYPE;
}

CUresult split_by_count(CUdevResource* result, unsigned* nb_groups, const CUdevResource* input,
                        CUdevResource* remaining, unsigned flags, unsigned min_count) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (nb_groups == nullptr || input == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (input->type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  ResourceTag in{};
  if (!read_tag(input, &in)) return CUDA_ERROR_INVALID_VALUE;
  // "The output results cannot be split again without first creating a descriptor and a green
  // context with that descriptor" (cuda.h).
  if (in.role != kWhole) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  const unsigned known = CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING |
                         CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE;
  if ((flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (result != nullptr && *nb_groups == 0) return CUDA_ERROR_INVALID_VALUE;
  if (min_count > sms_of(in.slots)) return CUDA_ERROR_INVALID_VALUE;
  // Groups are whole slots: minCount rounded up to the slot width, at least one slot (on 9.0 the
  // minimum partition and the alignment are both 8 SMs). The flags would allow finer groups on
  // the real driver; the double keeps its slot granularity.
  const unsigned w = static_cast<unsigned>(slot_width());
  const unsigned per_group = std::max(1u, (min_count + w - 1) / w);
  // Only full slots make groups (all groups are alike); a smaller last slot stays in remaining.
  std::vector<int> full;
  for (int i = 0; i < kMaxSlots; ++i)
    if ((in.slots >> i & 1) != 0 && sms_of(1ull << i) == w) full.push_back(i);
  const unsigned possible = static_cast<unsigned>(full.size()) / per_group;
  if (possible == 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;  // not enough SMs
  const unsigned n = result != nullptr ? std::min(*nb_groups, possible) : possible;
  const uint64_t split = g_splits.fetch_add(1) + 1;
  uint64_t used = 0;
  for (unsigned g = 0; g < n; ++g) {
    uint64_t mask = 0;
    for (unsigned k = 0; k < per_group; ++k) mask |= 1ull << full[g * per_group + k];
    used |= mask;
    if (result != nullptr) fill_resource(&result[g], in.dev, mask, split, kGroup);
  }
  if (remaining != nullptr) fill_resource(remaining, in.dev, in.slots & ~used, split, kRemaining);
  *nb_groups = n;
  return CUDA_SUCCESS;
}

CUresult generate_desc(CUdevResourceDesc* out, CUdevResource* resources, unsigned n) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (out == nullptr || resources == nullptr || n == 0) return CUDA_ERROR_INVALID_VALUE;
  ResourceTag first{};
  uint64_t slots = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    ResourceTag t{};
    if (!read_tag(&resources[i], &t)) return CUDA_ERROR_INVALID_VALUE;
    if (i == 0) first = t;
    // Several resources: one device, and all outputs of one split, each SM at most once.
    if (n > 1 && (t.dev != first.dev || t.split == 0 || t.split != first.split ||
                  (slots & t.slots) != 0))
      return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    slots |= t.slots;
  }
  if (slots == 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;  // e.g. an empty remainder
  auto* d = new Desc{first.dev, slots};
  descs().add(d);
  *out = reinterpret_cast<CUdevResourceDesc>(d);
  return CUDA_SUCCESS;
}

CUresult green_create(CUgreenCtx* out, CUdevResourceDesc desc, CUdevice dev, unsigned flags) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= config().devices) return CUDA_ERROR_INVALID_DEVICE;
  auto* d = reinterpret_cast<Desc*>(desc);
  if (!descs().has(d) || d->dev != dev) return CUDA_ERROR_INVALID_VALUE;
  // CU_GREEN_CTX_DEFAULT_STREAM is documented as required; 0 is accepted too (the context has
  // its default stream either way).
  if ((flags & ~unsigned{CU_GREEN_CTX_DEFAULT_STREAM}) != 0) return CUDA_ERROR_INVALID_VALUE;
  CUcontext primary = nullptr;  // retained until cuGreenCtxDestroy, as the driver does
  if (CUresult r = cuDevicePrimaryCtxRetain(&primary, dev); r != CUDA_SUCCESS) return r;
  auto* g = new GreenCtx();
  g->dev = dev;
  g->slots = d->slots;
  g->id = g_green_ids.fetch_add(1) + 1;
  g->primary = reinterpret_cast<Context*>(primary);
  g->ctx = make_green_context(dev, g->primary->flags, g);
  greens().add(g);
  *out = reinterpret_cast<CUgreenCtx>(g);
  return CUDA_SUCCESS;
}

CUresult green_destroy(CUgreenCtx h) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  GreenCtx* g = nullptr;
  if (CUresult r = lookup_green(h, &g); r != CUDA_SUCCESS) return r;
  if (g->destroyed.exchange(true)) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  destroy_green_context(g->ctx);
  return cuDevicePrimaryCtxRelease_v2(g->dev);
}

}  // namespace

CUresult lookup_green(CUgreenCtx h, GreenCtx** out) {
  auto* g = reinterpret_cast<GreenCtx*>(h);
  if (g == nullptr || !greens().has(g)) return CUDA_ERROR_INVALID_CONTEXT;
  if (g->destroyed.load()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = g;
  return CUDA_SUCCESS;
}

}  // namespace dd

using namespace dd;

DD_API cuDeviceGetDevResource(CUdevice device, CUdevResource* resource, CUdevResourceType type) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (device < 0 || device >= config().devices) return CUDA_ERROR_INVALID_DEVICE;
    if (CUresult r = check_sm_type(resource, enum_value(type)); r != CUDA_SUCCESS) return r;
    fill_resource(resource, device, all_slots(), 0, kWhole);
    return CUDA_SUCCESS;
  });
}

DD_API cuCtxGetDevResource(CUcontext hCtx, CUdevResource* resource, CUdevResourceType type) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    auto* c = reinterpret_cast<Context*>(hCtx);
    if (!context_alive(c)) return CUDA_ERROR_INVALID_CONTEXT;
    if (CUresult r = check_sm_type(resource, enum_value(type)); r != CUDA_SUCCESS) return r;
    fill_resource(resource, c->dev, context_slots(c), 0, kWhole);
    return CUDA_SUCCESS;
  });
}

DD_API cuGreenCtxGetDevResource(CUgreenCtx hCtx, CUdevResource* resource,
                                CUdevResourceType type) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    GreenCtx* g = nullptr;
    if (CUresult r = lookup_green(hCtx, &g); r != CUDA_SUCCESS) return r;
    if (CUresult r = check_sm_type(resource, enum_value(type)); r != CUDA_SUCCESS) return r;
    fill_resource(resource, g->dev, g->slots, 0, kWhole);
    return CUDA_SUCCESS;
  });
}

DD_API cuDevSmResourceSplitByCount(CUdevResource* result, unsigned int* nbGroups,
                                   const CUdevResource* input, CUdevResource* remaining,
                                   unsigned int useFlags, unsigned int minCount) {
  return guard(
      [&] { return split_by_count(result, nbGroups, input, remaining, useFlags, minCount); });
}

DD_API cuDevResourceGenerateDesc(CUdevResourceDesc* phDesc, CUdevResource* resources,
                                 unsigned int nbResources) {
  return guard([&] { return generate_desc(phDesc, resources, nbResources); });
}

DD_API cuGreenCtxCreate(CUgreenCtx* phCtx, CUdevResourceDesc desc, CUdevice dev,
                        unsigned int flags) {
  return guard([&] { return green_create(phCtx, desc, dev, flags); });
}

DD_API cuGreenCtxDestroy(CUgreenCtx hCtx) {
  return guard([&] { return green_destroy(hCtx); });
}

DD_API cuCtxFromGreenCtx(CUcontext* pContext, CUgreenCtx hCtx) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (pContext == nullptr) return CUDA_ERROR_INVALID_VALUE;
    GreenCtx* g = nullptr;
    if (CUresult r = lookup_green(hCtx, &g); r != CUDA_SUCCESS) return r;
    *pContext = reinterpret_cast<CUcontext>(g->ctx);
    return CUDA_SUCCESS;
  });
}

DD_API cuGreenCtxGetId(CUgreenCtx greenCtx, unsigned long long* greenCtxId) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (greenCtxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
    GreenCtx* g = nullptr;
    if (greenCtx == nullptr) {  // the current context's green context
      Context* c = nullptr;
      if (CUresult r = current_context(&c, false); r != CUDA_SUCCESS) return r;
      if (c->green == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
      g = c->green;
    } else if (CUresult r = lookup_green(greenCtx, &g); r != CUDA_SUCCESS) {
      return r;
    }
    *greenCtxId = g->id;
    return CUDA_SUCCESS;
  });
}

DD_API cuGreenCtxStreamCreate(CUstream* phStream, CUgreenCtx greenCtx, unsigned int flags,
                              int priority) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    GreenCtx* g = nullptr;
    if (lookup_green(greenCtx, &g) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
    if (phStream == nullptr || flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
    return create_stream(g->ctx, flags, priority, phStream);  // whatever context is current
  });
}
