// SPDX-License-Identifier: Apache-2.0
// The one boundary between gpuosd and NVML (libnvidia-ml.so.1), as driver_api.h is for the driver.
//
// gpuosd checks what each process really holds and runs on its GPUs through NVML, independently of
// the tenant's own reports (usage_verifier.h). The few NVML types and entry points it needs are
// declared here from NVIDIA's public NVML reference (no NVML header is needed to build); the real
// library and the driver double's stand-in (src/driver_double/nvml.cc) export the same names.
// GPUOS_NVML_FUNCS is the single list: X(return type, name, parameter declarations).
//
// Semantics callers rely on (as documented by NVIDIA): the process queries take an in/out count and
// answer NVML_ERROR_INSUFFICIENT_SIZE, with the count needed, when the array is too small (a null
// array with count 0 asks for the count); usedGpuMemory may be GPUOS_NVML_VALUE_NOT_AVAILABLE;
// nvmlDeviceGetProcessUtilization returns the samples newer than last_seen_us (CPU time in
// microseconds, normally the newest timeStamp seen before) and NVML_ERROR_NOT_FOUND when none is;
// nvmlDeviceGetTotalEnergyConsumption gives the GPU's energy in millijoules since the driver was
// last reloaded (Volta and newer; NVML_ERROR_NOT_SUPPORTED elsewhere); nvmlDeviceGetMemoryInfo the
// device's total, free and used memory now, every process's and the driver's own.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

typedef int nvmlReturn_t;
enum : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_UNKNOWN = 999,
};
typedef struct nvmlDevice_st* nvmlDevice_t;

// usedGpuMemory when the driver cannot say (e.g. without permission, or for MPS clients on some
// drivers).
#define GPUOS_NVML_VALUE_NOT_AVAILABLE (~0ull)

// nvmlProcessInfo_t of the _v3 entry points (NVML 11.x+).
typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes, or GPUOS_NVML_VALUE_NOT_AVAILABLE
  unsigned int gpuInstanceId;        // MIG; 0xFFFFFFFF otherwise
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

// nvmlMemory_t of nvmlDeviceGetMemoryInfo (v1): the device's memory in bytes as the driver counts it
// now (used includes what the driver reserves for itself; free + used = total).
typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp;  // CPU timestamp in microseconds
  unsigned int smUtil;           // percent of the sample period with this process's kernels on SMs
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

}  // extern "C"

// The layouts NVML's ABI fixes (x86-64 and aarch64): a mismatch would misread every entry.
static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t (v2/v3) is 24 bytes");
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "nvmlProcessUtilizationSample_t is 32 bytes");
static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t (v1) is 24 bytes");

#define GPUOS_NVML_FUNCS(X)                                                                        \
  X(nvmlReturn_t, nvmlInit_v2, (void))                                                             \
  X(nvmlReturn_t, nvmlShutdown, (void))                                                            \
  X(const char*, nvmlErrorString, (nvmlReturn_t result))                                           \
  X(nvmlReturn_t, nvmlDeviceGetCount_v2, (unsigned int* count))                                    \
  X(nvmlReturn_t, nvmlDeviceGetHandleByIndex_v2, (unsigned int index, nvmlDevice_t* device))       \
  X(nvmlReturn_t, nvmlDeviceGetUUID, (nvmlDevice_t device, char* uuid, unsigned int length))       \
  X(nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses_v3,                                         \
    (nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos))                          \
  X(nvmlReturn_t, nvmlDeviceGetMPSComputeRunningProcesses_v3,                                      \
    (nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos))                          \
  X(nvmlReturn_t, nvmlDeviceGetProcessUtilization,                                                 \
    (nvmlDevice_t device, nvmlProcessUtilizationSample_t* samples, unsigned int* count,            \
     unsigned long long last_seen_us))                                                             \
  X(nvmlReturn_t, nvmlSystemGetDriverVersion, (char* version, unsigned int length))              \
  X(nvmlReturn_t, nvmlDeviceGetTotalEnergyConsumption, (nvmlDevice_t device, unsigned long long* energy)) \
  X(nvmlReturn_t, nvmlDeviceGetMemoryInfo, (nvmlDevice_t device, nvmlMemory_t* memory))

struct GpuosNvmlTable {
#define GPUOS_NVML_MEMBER(ret, name, params) ret (*name) params;
  GPUOS_NVML_FUNCS(GPUOS_NVML_MEMBER)
#undef GPUOS_NVML_MEMBER
  void* handle;  // dlopen handle of the library the table was resolved from
};

namespace gpuos {

// Loads `library` (null: $GPUOS_NVML_LIBRARY, else "libnvidia-ml.so.1") and fills *table; entry
// points the library lacks are null (callers check). False, with a reason, when it cannot be loaded
// or has no nvmlInit_v2 (then the table is zeroed). dlopen RTLD_LOCAL: NVML's symbols never
// interfere with anything else in the process. Call nvmlInit_v2 through the table afterwards.
bool load_nvml(GpuosNvmlTable* table, const char* library, char* err, std::size_t err_len);

// "NVML_ERROR_NOT_FOUND"-style name of a return code, without calling the library.
const char* nvml_return_name(nvmlReturn_t r);

}  // namespace gpuos
