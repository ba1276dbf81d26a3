// SPDX-License-Identifier: Apache-2.0
// Modules: any image loads; the only functions are the built-in fixed-work kernels shared with
// the real GPU programs, and gpuos_sm_mask and gpuos_collective, which only the double has
// (docs/CONTRACTS.md, "Fixed-work kernels").
#include <cstring>

#include "driver_double/internal.h"
#include "driver_double/segment.h"  // kCollRanks

namespace dd {
namespace {

Registry<Module>& modules() {
  static auto* r = new Registry<Module>();
  return *r;
}
Registry<Function>& functions() {
  static auto* r = new Registry<Function>();
  return *r;
}

struct Builtin {
  const char* name;
  KernelKind kind;
};
constexpr Builtin kBuiltins[] = {
    {"gpuos_fixed_work", KernelKind::kFixedWork},
    {"gpuos_fill_u32", KernelKind::kFillU32},
    {"gpuos_sm_mask", KernelKind::kSmMask},  // tests see which SM slots a kernel ran on
    {"gpuos_collective", KernelKind::kCollective},  // an NCCL-like collective (collective.cc)
};

CUresult load_module(CUmodule* out) {
  Context* c = nullptr;
  if (CUresult r = current_context(&c); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* m = new Module();
  for (const auto& b : kBuiltins) {
    m->functions.push_back(std::make_unique<Function>(Function{b.kind, b.name, m}));
    functions().add(m->functions.back().get());
  }
  modules().add(m);
  *out = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult get_function(CUfunction* out, Module* m, const char* name) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!modules().has(m)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& f : m->functions) {
    if (std::strcmp(f->name, name) == 0) {
      *out = reinterpret_cast<CUfunction>(f.get());
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult unload(Module* m) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!modules().remove(m)) return CUDA_ERROR_INVALID_HANDLE;
  // Functions leave the registry (new launches fail) but stay allocated: work already queued
  // or captured may still refer to them. Kept, not lost (a leak checker sees them reachable).
  for (auto& f : m->functions) functions().remove(f.get());
  static auto* unloaded = new std::vector<std::unique_ptr<Module>>();
  static std::mutex unloaded_mu;
  std::lock_guard<std::mutex> l(unloaded_mu);
  unloaded->emplace_back(m);
  return CUDA_SUCCESS;
}

// Parameter layout of the built-ins: (offset, size) of each parameter in the packed buffer.
struct ParamLayout {
  size_t count;
  size_t offset[kMaxKernelArgs];
  size_t size[kMaxKernelArgs];
};
ParamLayout layout_of(KernelKind k) {
  switch (k) {
    case KernelKind::kFixedWork: return {2, {0, 8, 0}, {8, 8, 0}};  // (u64 iters, u64* done)
    case KernelKind::kFillU32: return {3, {0, 8, 16}, {8, 4, 8}};   // (u32* dst, u32 v, u64 n)
    case KernelKind::kSmMask: return {2, {0, 8, 0}, {8, 8, 0}};     // (u64* out, u64 iters)
    // (u64 group, u32 ranks, u64 iters, u64* out): naturally aligned, 32 bytes
    case KernelKind::kCollective: return {4, {0, 8, 16, 24}, {8, 4, 8, 8}};
  }
  return {0, {}, {}};
}

// What the launch itself refuses (the rest fails when the kernel runs, as on a GPU).
CUresult check_args(const KernelLaunch& k) {
  if (k.fn->kind == KernelKind::kCollective && (k.args[1] == 0 || k.args[1] > kCollRanks))
    return CUDA_ERROR_INVALID_VALUE;  // ranks
  return CUDA_SUCCESS;
}

}  // namespace

Function* lookup_function(CUfunction f) {
  auto* fn = reinterpret_cast<Function*>(f);
  return (fn != nullptr && functions().has(fn)) ? fn : nullptr;
}

CUresult decode_launch(Function* fn, void** params, void** extra, KernelLaunch* out) {
  const ParamLayout lay = layout_of(fn->kind);
  out->fn = fn;
  if (params != nullptr) {  // one pointer per parameter
    for (size_t i = 0; i < lay.count; ++i) {
      if (params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      uint64_t v = 0;
      std::memcpy(&v, params[i], lay.size[i]);
      out->args[i] = v;
    }
    return check_args(*out);
  }
  if (extra == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* buf = nullptr;
  size_t size = 0;
  for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buf = static_cast<const char*>(extra[i + 1]);
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      if (extra[i + 1] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      size = *static_cast<const size_t*>(extra[i + 1]);
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  const size_t need = lay.offset[lay.count - 1] + lay.size[lay.count - 1];
  if (buf == nullptr || size < need) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < lay.count; ++i) {
    uint64_t v = 0;
    std::memcpy(&v, buf + lay.offset[i], lay.size[i]);
    out->args[i] = v;
  }
  return check_args(*out);
}

}  // namespace dd

using namespace dd;

DD_API cuModuleLoad(CUmodule* module, const char* fname) {
  return guard([&] {
    if (fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return load_module(module);
  });
}
DD_API cuModuleLoadData(CUmodule* module, const void* image) {
  return guard([&] { return image == nullptr ? CUDA_ERROR_INVALID_VALUE : load_module(module); });
}
DD_API cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                          CUjit_option* options, void** optionValues) {
  return guard([&] { return image == nullptr ? CUDA_ERROR_INVALID_VALUE : load_module(module); });
}
DD_API cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return guard(
      [&] { return fatCubin == nullptr ? CUDA_ERROR_INVALID_VALUE : load_module(module); });
}
DD_API cuModuleUnload(CUmodule module) {
  return guard([&] { return unload(reinterpret_cast<Module*>(module)); });
}
DD_API cuModuleGetFunction(CUfunction* f, CUmodule module, const char* name) {
  return guard([&] { return get_function(f, reinterpret_cast<Module*>(module), name); });
}

// Libraries are modules; a CUkernel is the same object as its CUfunction (the real driver also
// accepts a CUkernel wherever a CUfunction is expected).
DD_API cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                         void** jitOptionsValues, unsigned int numJitOptions,
                         CUlibraryOption* libraryOptions, void** libraryOptionValues,
                         unsigned int numLibraryOptions) {
  return guard([&] {
    if (code == nullptr || library == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUmodule m = nullptr;
    CUresult r = load_module(&m);
    if (r == CUDA_SUCCESS) *library = reinterpret_cast<CUlibrary>(m);
    return r;
  });
}
DD_API cuLibraryUnload(CUlibrary library) {
  return guard([&] { return unload(reinterpret_cast<Module*>(library)); });
}
DD_API cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  return guard([&] {
    return get_function(reinterpret_cast<CUfunction*>(kernel),
                        reinterpret_cast<Module*>(library), name);
  });
}
DD_API cuKernelGetFunction(CUfunction* f, CUkernel kernel) {
  return guard([&] {
    if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
    if (f == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Function* fn = lookup_function(reinterpret_cast<CUfunction>(kernel));
    if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *f = reinterpret_cast<CUfunction>(fn);
    return CUDA_SUCCESS;
  });
}
