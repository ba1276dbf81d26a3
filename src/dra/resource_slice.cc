// SPDX-License-Identifier: Apache-2.0
#include "dra/resource_slice.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>

#include "common/kube_names.h"
#include "dra/tenant_config.h"

namespace gpuos::dra {
namespace {

using json = nlohmann::json;

constexpr std::size_t kMaxSubdomain = 253;  // validation.DNS1123SubdomainMaxLength
constexpr std::size_t kMaxDriverName = 63;  // DriverNameMaxLength

bool fail(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
  return false;
}

bool is_lower_alnum(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'); }

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// A decimal uint32 without sign or leading zeros ("0" itself is fine).
bool parse_u32(std::string_view text, uint32_t* out) {
  if (text.empty() || text.size() > 10 || (text.size() > 1 && text[0] == '0')) return false;
  uint64_t n = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return false;
    n = n * 10 + static_cast<uint64_t>(ch - '0');
  }
  if (n > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(n);
  return true;
}

// Length of the valid UTF-8 sequence at text[i] (1..4), 0 if there is none.
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const unsigned char c = static_cast<unsigned char>(text[i]);
  std::size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const unsigned char cc = static_cast<unsigned char>(text[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
  if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n;
}

// An attribute string: valid UTF-8 (a byte that is not, or a control character, becomes '?', so the
// slice can be written as JSON and compares equal to what the server gives back), at most max bytes
// without cutting a character.
std::string attribute_string(std::string_view text, std::size_t max) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence(text, i);
    const bool control = n == 1 && (static_cast<unsigned char>(text[i]) < 0x20 || text[i] == 0x7f);
    const std::size_t take = n == 0 || control ? 1 : n;
    if (out.size() + take > max) break;
    if (n == 0 || control) {
      out += '?';
    } else {
      out.append(text.substr(i, n));
    }
    i += take;
  }
  return out;
}

json device_json(const GpuShareInfo& gpu, std::string_view tenant_class, uint32_t share) {
  json attributes = json::object();
  attributes["class"] = {{"string", std::string(tenant_class)}};
  attributes["index"] = {{"int", static_cast<int64_t>(gpu.index)}};
  if (!gpu.uuid.empty()) {
    const std::string uuid = gpu.uuid.starts_with("GPU-") ? gpu.uuid : "GPU-" + gpu.uuid;
    attributes["uuid"] = {{"string", attribute_string(uuid, kMaxAttributeStringBytes)}};
  }
  if (!gpu.product_name.empty()) {
    attributes["productName"] = {{"string", attribute_string(gpu.product_name, kMaxAttributeStringBytes)}};
  }
  attributes["sms"] = {{"int", static_cast<int64_t>(gpu.sm_count)}};
  attributes["share"] = {{"int", static_cast<int64_t>(share)}};
  json capacity = json::object();
  capacity["memory"] = {{"value", std::to_string(gpu.total_mem_bytes)}};
  return {{"name", device_name(gpu.index, tenant_class, share)}, {"attributes", attributes}, {"capacity", capacity}};
}

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (char ch : text) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  return h;
}

const json* member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

bool same_member(const json& a, const json& b, const char* key) {
  const json* x = member(a, key);
  const json* y = member(b, key);
  if (x == nullptr || y == nullptr) return x == y;
  return *x == *y;
}

bool same_quantity(const json& a, const json& b) {
  if (!a.is_string() || !b.is_string()) return a == b;
  uint64_t x = 0, y = 0;
  if (parse_kubernetes_quantity(a.get_ref<const std::string&>(), &x, nullptr) &&
      parse_kubernetes_quantity(b.get_ref<const std::string&>(), &y, nullptr)) {
    return x == y;
  }
  return a == b;
}

bool same_capacity(const json* a, const json* b) {
  const json empty = json::object();
  const json& x = a == nullptr || a->is_null() ? empty : *a;
  const json& y = b == nullptr || b->is_null() ? empty : *b;
  if (!x.is_object() || !y.is_object() || x.size() != y.size()) return false;
  for (const auto& [name, cx] : x.items()) {
    auto cy = y.find(name);
    if (cy == y.end() || !cx.is_object() || !cy->is_object() || cx.size() != cy->size()) return false;
    for (const auto& [key, vx] : cx.items()) {
      auto vy = cy->find(key);
      if (vy == cy->end()) return false;
      if (key == "value" ? !same_quantity(vx, *vy) : vx != *vy) return false;
    }
  }
  return true;
}

bool same_device(const json& a, const json& b) {
  if (!a.is_object() || !b.is_object() || !same_member(a, b, "name")) return false;
  const json empty = json::object();
  const json* ax = member(a, "attributes");
  const json* bx = member(b, "attributes");
  if ((ax == nullptr || ax->is_null() ? empty : *ax) != (bx == nullptr || bx->is_null() ? empty : *bx)) return false;
  return same_capacity(member(a, "capacity"), member(b, "capacity"));
}

}  // namespace

bool check_slice_options(const SliceOptions& options, std::string* why) {
  if (!dns_subdomain(options.driver, kMaxDriverName)) {
    return fail(why, "driver name \"" + options.driver + "\" is not a lowercase DNS subdomain of at most 63 bytes");
  }
  if (options.node_name.empty()) return fail(why, "the node name is empty (--node-name)");
  if (!dns_subdomain(lowercase(options.node_name), kMaxSubdomain)) {
    return fail(why, "node name \"" + options.node_name + "\" is not a DNS subdomain (at most 253 of a-z 0-9 - .)");
  }
  if (options.guaranteed_shares == 0 && options.best_effort_shares == 0) {
    return fail(why, "no shares to offer: guaranteed and best-effort shares per GPU are both 0");
  }
  return true;
}

std::string slice_name(const SliceOptions& options) {
  const std::string node = lowercase(options.node_name);
  const std::string driver = lowercase(options.driver);
  std::string name = node + "-" + driver;
  if (name.size() <= kMaxSubdomain) return name;
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%08llx", static_cast<unsigned long long>(fnv1a(node) & 0xffffffffull));
  const std::string tail = std::string("-") + hash + "-" + driver;
  std::string head = node.substr(0, kMaxSubdomain > tail.size() ? kMaxSubdomain - tail.size() : 0);
  while (!head.empty() && !is_lower_alnum(head.back())) head.pop_back();
  return head + tail;
}

std::string pool_name(const SliceOptions& options) { return lowercase(options.node_name); }

std::string device_name(uint32_t gpu, std::string_view tenant_class, uint32_t share) {
  return "gpu-" + std::to_string(gpu) + "-" + std::string(tenant_class) + "-" + std::to_string(share);
}

bool parse_device_name(std::string_view name, uint32_t* gpu, std::string* tenant_class, uint32_t* share) {
  if (!name.starts_with("gpu-")) return false;
  name.remove_prefix(4);
  const std::size_t dash = name.find('-');
  if (dash == std::string_view::npos) return false;
  uint32_t g = 0, s = 0;
  if (!parse_u32(name.substr(0, dash), &g)) return false;
  name.remove_prefix(dash + 1);
  std::string_view klass;
  for (std::string_view c : {kClassGuaranteed, kClassBestEffort}) {
    if (name.size() > c.size() && name.starts_with(c) && name[c.size()] == '-') klass = c;
  }
  if (klass.empty() || !parse_u32(name.substr(klass.size() + 1), &s)) return false;
  if (gpu != nullptr) *gpu = g;
  if (tenant_class != nullptr) *tenant_class = std::string(klass);
  if (share != nullptr) *share = s;
  return true;
}

SharePlan plan_shares(const SliceOptions& options, std::size_t gpu_count) {
  SharePlan plan;
  plan.guaranteed = options.guaranteed_shares;
  plan.best_effort = options.best_effort_shares;
  plan.gpus = gpu_count;
  const uint64_t per_gpu = static_cast<uint64_t>(plan.guaranteed) + plan.best_effort;
  if (gpu_count == 0 || per_gpu * gpu_count <= kMaxDevicesPerSlice) return plan;

  plan.gpus = std::min(gpu_count, kMaxDevicesPerSlice);
  const uint64_t budget = kMaxDevicesPerSlice / plan.gpus;  // devices per GPU, >= 1
  uint64_t g = 0, b = 0;
  if (budget == 1) {
    (options.guaranteed_shares > 0 ? g : b) = 1;
  } else {
    // In proportion, each configured class keeping at least one share.
    if (options.guaranteed_shares > 0) g = std::max<uint64_t>(1, options.guaranteed_shares * budget / per_gpu);
    if (options.best_effort_shares > 0) b = std::min<uint64_t>(options.best_effort_shares, budget - std::min(g, budget - 1));
    g = std::min<uint64_t>({g, options.guaranteed_shares, budget - b});
  }
  plan.guaranteed = static_cast<uint32_t>(g);
  plan.best_effort = static_cast<uint32_t>(b);
  plan.note = std::to_string(gpu_count) + " GPUs with " + std::to_string(options.guaranteed_shares) +
              " guaranteed + " + std::to_string(options.best_effort_shares) + " best-effort shares each make " +
              std::to_string(per_gpu * gpu_count) + " devices, more than the " + std::to_string(kMaxDevicesPerSlice) +
              " a ResourceSlice holds: offering " + std::to_string(g) + " guaranteed + " + std::to_string(b) +
              " best-effort shares per GPU";
  if (plan.gpus < gpu_count) {
    plan.note += ", and only the first " + std::to_string(plan.gpus) + " GPUs";
  }
  return plan;
}

json resource_slice_spec(const SliceOptions& options, const std::vector<GpuShareInfo>& gpus, int64_t generation) {
  // A GPU index given twice is offered once (the first), so device names stay unique.
  std::vector<const GpuShareInfo*> unique;
  std::set<uint32_t> seen;
  for (const GpuShareInfo& gpu : gpus) {
    if (seen.insert(gpu.index).second) unique.push_back(&gpu);
  }
  const SharePlan plan = plan_shares(options, unique.size());
  json devices = json::array();
  for (std::size_t i = 0; i < plan.gpus; ++i) {
    for (uint32_t k = 0; k < plan.guaranteed; ++k) devices.push_back(device_json(*unique[i], kClassGuaranteed, k));
    for (uint32_t k = 0; k < plan.best_effort; ++k) devices.push_back(device_json(*unique[i], kClassBestEffort, k));
  }
  return {{"driver", options.driver},
          {"nodeName", lowercase(options.node_name)},
          {"pool", {{"name", pool_name(options)}, {"generation", generation}, {"resourceSliceCount", 1}}},
          {"devices", devices}};
}

json resource_slice(const SliceOptions& options, const std::vector<GpuShareInfo>& gpus, int64_t generation,
                    const std::string& resource_version) {
  json metadata = {{"name", slice_name(options)}};
  if (!resource_version.empty()) metadata["resourceVersion"] = resource_version;
  if (!options.node_uid.empty()) {
    metadata["ownerReferences"] = json::array({{{"apiVersion", "v1"},
                                                {"kind", "Node"},
                                                {"name", lowercase(options.node_name)},
                                                {"uid", options.node_uid},
                                                {"controller", true}}});
  }
  return {{"apiVersion", std::string(kResourceApiVersion)},
          {"kind", "ResourceSlice"},
          {"metadata", metadata},
          {"spec", resource_slice_spec(options, gpus, generation)}};
}

bool same_offer(const json& a, const json& b) {
  if (!a.is_object() || !b.is_object()) return false;
  if (!same_member(a, b, "driver") || !same_member(a, b, "nodeName")) return false;
  const json* pa = member(a, "pool");
  const json* pb = member(b, "pool");
  if (pa == nullptr || pb == nullptr || !same_member(*pa, *pb, "name") ||
      !same_member(*pa, *pb, "resourceSliceCount")) {
    return false;
  }
  const json empty = json::array();
  const json* da = member(a, "devices");
  const json* db = member(b, "devices");
  const json& x = da == nullptr || da->is_null() ? empty : *da;
  const json& y = db == nullptr || db->is_null() ? empty : *db;
  if (!x.is_array() || !y.is_array() || x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!same_device(x[i], y[i])) return false;
  }
  return true;
}

}  // namespace gpuos::dra
