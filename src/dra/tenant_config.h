// SPDX-License-Identifier: Apache-2.0
// The claim side of gpuos-dra (#26), pure functions over JSON: a `gpuos.io/v1` TenantConfig (the
// opaque parameters of a DRA claim or DeviceClass) and a resource.k8s.io/v1 ResourceClaim as the API
// server returns it, turned into the tenant spec gpuosd admits. docs/KUBERNETES.md shows the
// config; /work/notes/dra_design.md fixes the rules.
//
// TenantConfig:
//   {"apiVersion": "gpuos.io/v1", "kind": "TenantConfig",          both required, exactly these
//    "class": "guaranteed" | "best-effort",                         must match the allocated share
//    "priority": -1000..1000,  "weight": 1..10000,                   JSON integers
//    "mem": "40Gi", "borrow": "8Gi",                                 sizes (below); borrow needs mem
//    "space": "inference", "sms": 1..4096,                           sms needs space
//    "maxSlowdown": "1.25" or 1.25  (1.001..100, guaranteed only)}
// (The numbers' ranges are common/tenant_numbers.h's, as gpuosd checks them.)
// Every field but apiVersion/kind is optional; an unknown field or a wrong type is refused, naming
// the field. JSON null is a wrong type (leave the field out instead).
//
// Sizes (mem, borrow): a Kubernetes quantity, exactly as Kubernetes reads one — binary suffixes
// Ki Mi Gi Ti Pi Ei, decimal suffixes k M G T P E (1G = 10^9 bytes, as in a pod's memory limit),
// exponents (1e9), plain integers, a fraction when the result is whole bytes (1.5Gi) — or, for text
// that is no Kubernetes quantity, a gpuos size (gpuos::parse_size: "8GiB", "8 GB", binary units:
// 8GB = 8 * 2^30). A JSON integer counts bytes. Refused: negative, zero, a fraction of a byte
// (Kubernetes' "m" is milli: "512m" is half a byte, not 512 MiB), more than 2^64 - 1, anything else.
//
// Thread-safety: every function here is pure (no state); any thread may call them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace gpuos::dra {

inline constexpr std::string_view kTenantConfigApiVersion = "gpuos.io/v1";
inline constexpr std::string_view kTenantConfigKind = "TenantConfig";
inline constexpr std::string_view kClassGuaranteed = "guaranteed";
inline constexpr std::string_view kClassBestEffort = "best-effort";

// What a claim asks of its tenant; an absent field is gpuosd's default for the class.
struct TenantSpec {
  std::optional<std::string> tenant_class;  // "guaranteed" | "best-effort"
  std::optional<int32_t> priority;          // kPriorityRange (common/tenant_numbers.h)
  std::optional<uint32_t> weight;           // kWeightRange
  std::optional<uint64_t> mem_bytes, borrow_bytes;
  std::optional<std::string> space;         // a spatial-sharing domain (gpuos::is_valid_domain_name, < 32 bytes)
  std::optional<uint32_t> sms;              // kSmsRange
  std::optional<uint32_t> max_slowdown_permille;  // kSlowdownRange
};

// A Kubernetes quantity (resource.Quantity's grammar) that is a whole, non-negative number below
// 2^64: "40Gi", "1G", "1.5Gi", "1e9", "0". False + *why for anything else, also for text that is no
// quantity at all.
bool parse_kubernetes_quantity(std::string_view text, uint64_t* value, std::string* why);

// A size as TenantConfig's mem/borrow take it (see the top of this file): a Kubernetes quantity, else
// a gpuos size; never zero. False + *why (the text quoted and what is wrong) otherwise.
bool parse_quantity_bytes(std::string_view text, uint64_t* bytes, std::string* why);

// One opaque TenantConfig object (apiVersion gpuos.io/v1, kind TenantConfig). On success *out holds
// exactly the fields given (others nullopt). False + *why ("TenantConfig: <field>: <what>") on error;
// *out is then unspecified. Never throws.
bool parse_tenant_config(const nlohmann::json& params, TenantSpec* out, std::string* why);

// Field by field: every field `later` sets replaces the one in *into; the others stay.
void merge_tenant_spec(const TenantSpec& later, TenantSpec* into);

// The checks that need the whole merged spec and the allocated device's class ("guaranteed" or
// "best-effort"; device_name only names it in messages): a class given must match the share, borrow
// needs mem and mem + borrow fits 64 bits, sms needs space, maxSlowdown only for guaranteed. Fills tenant_class from device_class
// when absent. False + *why otherwise (*spec then unchanged).
bool finish_tenant_spec(const std::string& device_class, const std::string& device_name, TenantSpec* spec,
                        std::string* why);

struct AllocatedShare {
  std::string request, pool, device;
};
struct PodRef {
  std::string name, uid;  // the pod's namespace is the claim's
};
struct ClaimAllocation {
  std::string claim_namespace, claim_name, claim_uid;
  AllocatedShare share;
  std::optional<PodRef> pod;  // from status.reservedFor; a claim shared by pods names the first
  TenantSpec spec;            // finished: tenant_class always set
};

// A ResourceClaim (resource.k8s.io/v1 JSON text from the API server), prepared by the driver named
// `driver`:
//  - metadata.uid must equal expected_uid (the kubelet's; a claim deleted and re-created has another);
//  - status.allocation must be present, with exactly one result whose driver is `driver` (none: "not
//    allocated a gpuos.io share"; more: "one gpuos share per claim"), its device a gpuos share name;
//  - allocation.devices.config entries are merged field by field, FromClass ones first, then
//    FromClaim, each group in its order, later winning; only entries whose opaque.driver is `driver`
//    and whose requests are empty or name the result's request ("<main>" also covers "<main>/<sub>");
//    entries of other drivers, or without opaque config, are skipped;
//  - the pod is the first status.reservedFor entry with resource "pods" (apiGroup "").
// Then finish_tenant_spec with the class the device name carries. share.pool is returned as the
// claim says: whether it is this node's pool is the caller's check. Never throws; bad input → false +
// *why naming the claim (when known) and what is wrong. *out is unspecified on failure.
bool parse_claim(std::string_view claim_json, std::string_view driver, std::string_view expected_uid,
                 ClaimAllocation* out, std::string* why);

}  // namespace gpuos::dra
