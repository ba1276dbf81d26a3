// SPDX-License-Identifier: Apache-2.0
// The device side of gpuos-dra (#26), pure: the node's GPUs → the one resource.k8s.io/v1
// ResourceSlice that offers their gpuos shares (field names as in k8s.io/api resource/v1 types.go).
//
// One slice per node, named "<node>-<driver>", spec
//   {driver, nodeName: <node>, pool: {name: <node>, generation: G, resourceSliceCount: 1}, devices}
// and per GPU i, `guaranteed` devices "gpu-<i>-guaranteed-<k>" then `best_effort` devices
// "gpu-<i>-best-effort-<k>" (k from 0), each with the attributes (the driver's domain, unqualified)
//   class {string: "guaranteed"|"best-effort"}, index {int: i}, uuid {string: "GPU-<uuid>"},
//   productName {string}, sms {int}, share {int: k}
// (strings cut to the API's 64 bytes at a character boundary, invalid UTF-8 and control characters
// written as '?')
// and the capacity memory {value: "<the GPU's total bytes>"}; an empty uuid or product name leaves
// its attribute out. No GPU: devices [] (nothing new is scheduled on the node while the slice says
// so). A GPU index given twice is offered once.
//
// The API's limit of 128 devices per slice (ResourceSliceMaxDevices): when the configured shares of
// all GPUs do not fit, plan_shares gives every GPU fewer shares, both classes scaled down in
// proportion (a class configured with shares keeps at least one while the budget allows), so every
// GPU stays offered; past 64 GPUs a GPU gets one share (guaranteed if configured), and GPUs past the
// 128th are left out. The plan's note says so; the publisher logs it.
//
// Thread-safety: pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpuos::dra {

inline constexpr std::string_view kResourceApiVersion = "resource.k8s.io/v1";
inline constexpr std::size_t kMaxDevicesPerSlice = 128;     // ResourceSliceMaxDevices
inline constexpr std::size_t kMaxAttributeStringBytes = 64;  // DeviceAttributeMaxValueLength

struct GpuShareInfo {
  uint32_t index = 0;
  std::string uuid;  // bare, 36 characters ("GPU-" is added; a "GPU-" given is kept, not doubled)
  std::string product_name;
  uint32_t sm_count = 0;
  uint64_t total_mem_bytes = 0;
};

struct SliceOptions {
  std::string driver = "gpuos.io", node_name;
  uint32_t guaranteed_shares = 4, best_effort_shares = 8;  // per GPU, before plan_shares' cap
  // The Node's metadata.uid: the slice names its Node as its owner, so that Kubernetes deletes the
  // slice with the node. "" = not known (no owner).
  std::string node_uid;
};

// driver: a lowercase DNS subdomain of at most 63 bytes; node_name: a DNS subdomain (at most 253,
// any case: node names are lowercased by Kubernetes, we lowercase too). False + *why otherwise.
bool check_slice_options(const SliceOptions& options, std::string* why);

// "<node>-<driver>", lowercased. A node name too long for the 253-byte DNS subdomain keeps its start,
// then a hash of the whole name, so that two such nodes still get different slices.
std::string slice_name(const SliceOptions& options);
// The pool: the node name, lowercased.
std::string pool_name(const SliceOptions& options);

// "gpu-<gpu>-<tenant_class>-<share>": a DNS label (at most 37 bytes) for the two classes.
std::string device_name(uint32_t gpu, std::string_view tenant_class, uint32_t share);
// The inverse: true only for the exact form device_name writes (decimal numbers without leading
// zeros, fitting 32 bits, class "guaranteed" or "best-effort"). Outputs may be null.
bool parse_device_name(std::string_view name, uint32_t* gpu, std::string* tenant_class, uint32_t* share);

struct SharePlan {
  uint32_t guaranteed = 0, best_effort = 0;  // shares per GPU
  std::size_t gpus = 0;                      // GPUs offered (the first ones given)
  std::string note;                          // "" when the configuration fits unchanged
};
// How many shares of each class every one of gpu_count GPUs gets within 128 devices (see the top).
SharePlan plan_shares(const SliceOptions& options, std::size_t gpu_count);

// The slice's spec (ResourceSliceSpec), devices as plan_shares allows.
nlohmann::json resource_slice_spec(const SliceOptions& options, const std::vector<GpuShareInfo>& gpus,
                                   int64_t generation);
// The whole object: apiVersion, kind, metadata.name (+ metadata.resourceVersion when not ""), spec.
nlohmann::json resource_slice(const SliceOptions& options, const std::vector<GpuShareInfo>& gpus, int64_t generation,
                              const std::string& resource_version /* "" = new */);

// Whether two ResourceSliceSpecs offer the same devices: driver, nodeName, pool name and slice count,
// and the devices (order, names, attributes, capacities) equal, quantities compared by value (the API
// server rewrites "80000000000" as "80G"); pool.generation is not compared. An absent devices list
// equals []. False for anything malformed.
bool same_offer(const nlohmann::json& spec_a, const nlohmann::json& spec_b);

}  // namespace gpuos::dra
