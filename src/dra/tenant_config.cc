// SPDX-License-Identifier: Apache-2.0
#include "dra/tenant_config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <exception>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/tenant_numbers.h"
#include "dra/resource_slice.h"
#include "gpuos/abi.h"

namespace gpuos::dra {
namespace {

using json = nlohmann::json;

bool fail(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
  return false;
}

std::string quote_text(std::string_view text) {
  // Messages quote what they were given; a long or binary value is cut and escaped, not copied.
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size() && i < 64; ++i) {
    const unsigned char ch = static_cast<unsigned char>(text[i]);
    if (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\') {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    } else {
      out += static_cast<char>(ch);
    }
  }
  if (text.size() > 64) out += "...";
  return out + "\"";
}

// A JSON value in a message: never throws (invalid UTF-8 replaced), at most 64 bytes.
std::string json_text(const json& v) {
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 64) + "...";
  return text;
}

enum class QuantityParse { kOk, kNotQuantity, kBad };

// resource.Quantity's grammar: [+-] (digits [. digits] | . digits) [suffix], suffix one of
// Ki Mi Gi Ti Pi Ei | m "" k M G T P E | (e|E) [+-] digits. The value must be whole and fit 64 bits.
QuantityParse parse_quantity(std::string_view text, uint64_t* value, std::string* why) {
  std::size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  std::string digits;  // integer and fraction digits together
  int exponent10 = 0;  // value = digits * 10^exponent10 * 2^shift2
  int shift2 = 0;
  std::size_t int_digits = 0, frac_digits = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++int_digits) digits += text[i];
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++frac_digits) {
      digits += text[i];
    }
  }
  if (int_digits + frac_digits == 0) return QuantityParse::kNotQuantity;
  exponent10 = -static_cast<int>(std::min<std::size_t>(frac_digits, 100000));
  const std::string_view suffix = text.substr(i);
  static constexpr std::array<std::pair<std::string_view, int>, 6> kBinary = {
      {{"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}, {"Pi", 50}, {"Ei", 60}}};
  static constexpr std::array<std::pair<std::string_view, int>, 8> kDecimal = {
      {{"", 0}, {"m", -3}, {"k", 3}, {"M", 6}, {"G", 9}, {"T", 12}, {"P", 15}, {"E", 18}}};
  bool known = false;
  for (const auto& [name, shift] : kBinary) {
    if (suffix == name) shift2 = shift, known = true;
  }
  for (const auto& [name, exp] : kDecimal) {
    if (suffix == name) exponent10 += exp, known = true;
  }
  if (!known && suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E')) {
    std::size_t j = 1;
    bool exp_negative = false;
    if (suffix[j] == '+' || suffix[j] == '-') exp_negative = suffix[j++] == '-';
    int exp = 0;
    std::size_t exp_digits = 0;
    for (; j < suffix.size() && std::isdigit(static_cast<unsigned char>(suffix[j])); ++j, ++exp_digits) {
      if (exp < 100000) exp = exp * 10 + (suffix[j] - '0');
    }
    if (exp_digits == 0 || j != suffix.size()) return QuantityParse::kNotQuantity;
    exponent10 += exp_negative ? -exp : exp;
    known = true;
  }
  if (!known) return QuantityParse::kNotQuantity;

  const std::string q = quote_text(text);
  auto bad = [&](const std::string& what) {
    if (why != nullptr) *why = q + " " + what;
    return QuantityParse::kBad;
  };
  // Significant digits only: no leading zeros, trailing zeros moved into the exponent.
  const std::size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) {
    *value = 0;
    return QuantityParse::kOk;
  }
  digits.erase(0, first);
  while (digits.back() == '0') {
    digits.pop_back();
    ++exponent10;
  }
  if (negative) return bad("is negative");
  if (digits.size() > 38) return bad("has more than 38 significant digits");
  unsigned __int128 mantissa = 0;
  for (char ch : digits) mantissa = mantissa * 10 + static_cast<unsigned>(ch - '0');
  const std::string too_large = "is more than 2^64 - 1 bytes";
  const std::string fraction =
      suffix == "m" ? "is a fraction of a byte (m is milli in a Kubernetes quantity; 512Mi is 512 MiB)"
                    : "is a fraction of a byte";
  constexpr unsigned __int128 kMax = UINT64_MAX;
  if (exponent10 >= 0) {
    for (int k = 0; k < exponent10; ++k) {
      if (mantissa > kMax) return bad(too_large);
      mantissa *= 10;
    }
    if (mantissa > kMax || mantissa > (kMax >> shift2)) return bad(too_large);
    *value = static_cast<uint64_t>(mantissa << shift2);
    return QuantityParse::kOk;
  }
  // value = mantissa * 2^shift2 / (5^k * 2^k), k = -exponent10: whole only if 5^k divides the
  // mantissa (below 10^38 < 5^55) and the twos cover 2^k.
  const int k = -exponent10;
  if (k >= 55) return bad(fraction);
  unsigned __int128 pow5 = 1;
  for (int n = 0; n < k; ++n) pow5 *= 5;
  if (mantissa % pow5 != 0) return bad(fraction);
  mantissa /= pow5;
  if (shift2 >= k) {
    const int left = shift2 - k;
    if (mantissa > kMax || mantissa > (kMax >> left)) return bad(too_large);
    *value = static_cast<uint64_t>(mantissa << left);
    return QuantityParse::kOk;
  }
  const int right = k - shift2;  // 1..54
  if ((mantissa & ((static_cast<unsigned __int128>(1) << right) - 1)) != 0) return bad(fraction);
  mantissa >>= right;
  if (mantissa > kMax) return bad(too_large);
  *value = static_cast<uint64_t>(mantissa);
  return QuantityParse::kOk;
}

constexpr std::array<std::string_view, 10> kTenantFields = {"apiVersion", "kind",   "class", "priority", "weight",
                                                           "mem",        "borrow", "space", "sms",      "maxSlowdown"};

std::string known_fields() {
  std::string out;
  for (std::string_view f : kTenantFields) {
    if (f == "apiVersion" || f == "kind") continue;
    if (!out.empty()) out += ", ";
    out += f;
  }
  return out;
}

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// A JSON integer within [lo, hi]. On failure *what says why (without the field's name).
bool json_integer(const json& v, int64_t lo, int64_t hi, int64_t* out, std::string* what) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return fail(what, std::to_string(u) + " is out of range " + range);
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t n = v.get<int64_t>();
    if (n < lo || n > hi) return fail(what, std::to_string(n) + " is out of range " + range);
    *out = n;
    return true;
  }
  if (v.is_number_float()) return fail(what, "wants a whole number " + range + ", got " + v.dump());
  return fail(what, std::string("wants a whole number ") + range + ", got " + v.type_name());
}

bool json_size(const json& v, uint64_t* out, std::string* what) {
  if (v.is_string()) return parse_quantity_bytes(v.get_ref<const std::string&>(), out, what);
  if (v.is_number()) {
    // A YAML number (mem: 1073741824, or 1e9): its JSON text read as a quantity.
    std::string reason;
    const std::string text = v.dump();
    if (parse_quantity(text, out, &reason) != QuantityParse::kOk) {
      return fail(what, reason.empty() ? quote_text(text) + " is not a byte count" : reason);
    }
    if (*out == 0) return fail(what, "0 is zero bytes");
    return true;
  }
  return fail(what, std::string("wants a size such as \"40Gi\", got ") + v.type_name());
}

bool json_string(const json& v, std::string* out, std::string* what) {
  if (!v.is_string()) return fail(what, std::string("wants a string, got ") + v.type_name());
  *out = v.get<std::string>();
  return true;
}

bool config_field(std::string_view key, const json& v, TenantSpec* out, std::string* what) {
  if (key == "class") {
    std::string c;
    if (!json_string(v, &c, what)) return false;
    if (c != kClassGuaranteed && c != kClassBestEffort) {
      return fail(what, quote_text(c) + " is no class (\"guaranteed\" or \"best-effort\")");
    }
    out->tenant_class = c;
  } else if (key == "priority") {
    int64_t n = 0;
    if (!json_integer(v, kPriorityRange.lo, kPriorityRange.hi, &n, what)) return false;
    out->priority = static_cast<int32_t>(n);
  } else if (key == "weight") {
    int64_t n = 0;
    if (!json_integer(v, kWeightRange.lo, kWeightRange.hi, &n, what)) return false;
    out->weight = static_cast<uint32_t>(n);
  } else if (key == "mem" || key == "borrow") {
    uint64_t bytes = 0;
    if (!json_size(v, &bytes, what)) return false;
    (key == "mem" ? out->mem_bytes : out->borrow_bytes) = bytes;
  } else if (key == "space") {
    std::string s;
    if (!json_string(v, &s, what)) return false;
    if (!is_valid_domain_name(s) || s.size() >= GPUOS_DOMAIN_MAX) {
      return fail(what, quote_text(s) + " is no spatial-sharing domain name: 1.." + std::to_string(GPUOS_DOMAIN_MAX - 1) +
                            " of A-Z a-z 0-9 _ . -, not \".\" or \"..\"");
    }
    out->space = s;
  } else if (key == "sms") {
    int64_t n = 0;
    if (!json_integer(v, kSmsRange.lo, kSmsRange.hi, &n, what)) return false;
    out->sms = static_cast<uint32_t>(n);
  } else if (key == "maxSlowdown") {
    std::string text;
    if (v.is_string()) {
      text = v.get<std::string>();
    } else if (v.is_number()) {
      text = v.dump();  // 1.25 → "1.25" (shortest round trip), 2 → "2"
    } else {
      return fail(what, std::string("wants a factor such as \"1.25\", got ") + v.type_name());
    }
    uint32_t permille = 0;
    if (!parse_slowdown_permille(text, &permille)) {
      return fail(what, quote_text(text) + " is no slowdown factor: " + slowdown_text(kMinSlowdownPermille) + ".." +
                            slowdown_text(kMaxSlowdownPermille) + ", at most 3 decimals");
    }
    out->max_slowdown_permille = permille;
  }
  return true;
}

std::string claim_label(const std::string& ns, const std::string& name) {
  if (name.empty()) return "claim";
  return "claim " + (ns.empty() ? name : ns + "/" + name);
}

bool request_matches(std::string_view config_request, std::string_view result_request) {
  return config_request == result_request ||
         (result_request.size() > config_request.size() && result_request.starts_with(config_request) &&
          result_request[config_request.size()] == '/');
}

// A string member of an object; "" when absent or not a string.
std::string member_string(const json& obj, const char* key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

bool parse_claim_json(const json& claim, std::string_view driver, std::string_view expected_uid,
                      ClaimAllocation* out, std::string* why) {
  if (!claim.is_object()) return fail(why, "the claim is not a JSON object");
  if (const std::string kind = member_string(claim, "kind"); claim.contains("kind") && kind != "ResourceClaim") {
    return fail(why, "the object is no ResourceClaim (kind " + quote_text(kind) + ")");
  }
  const auto meta = claim.find("metadata");
  if (meta == claim.end() || !meta->is_object()) return fail(why, "the claim has no metadata");
  out->claim_namespace = member_string(*meta, "namespace");
  out->claim_name = member_string(*meta, "name");
  out->claim_uid = member_string(*meta, "uid");
  const std::string label = claim_label(out->claim_namespace, out->claim_name);
  if (out->claim_name.empty()) return fail(why, "the claim has no metadata.name");
  if (out->claim_uid != expected_uid) {
    return fail(why, label + " has uid " + quote_text(out->claim_uid) + ", not " + quote_text(expected_uid) +
                         " (deleted and created again?)");
  }

  const auto status = claim.find("status");
  const json* allocation = nullptr;
  if (status != claim.end() && status->is_object()) {
    if (auto a = status->find("allocation"); a != status->end() && a->is_object()) allocation = &*a;
  }
  if (allocation == nullptr) return fail(why, label + " is not allocated (no status.allocation)");
  const json* devices = nullptr;
  if (auto d = allocation->find("devices"); d != allocation->end()) {
    if (!d->is_object()) return fail(why, label + ": status.allocation.devices is not an object");
    devices = &*d;
  }
  const json* found = nullptr;
  std::size_t ours = 0;
  if (devices != nullptr) {
    if (auto results = devices->find("results"); results != devices->end()) {
      if (!results->is_array()) return fail(why, label + ": status.allocation.devices.results is not a list");
      for (const json& r : *results) {
        if (member_string(r, "driver") != driver) continue;
        ++ours;
        found = &r;
      }
    }
  }
  if (ours == 0) return fail(why, label + " is not allocated a " + std::string(driver) + " share");
  if (ours > 1) {
    return fail(why, label + " is allocated " + std::to_string(ours) + " " + std::string(driver) +
                         " shares: one gpuos share per claim (use one claim per container)");
  }
  AllocatedShare& share = out->share;
  share.request = member_string(*found, "request");
  share.pool = member_string(*found, "pool");
  share.device = member_string(*found, "device");
  if (share.request.empty() || share.pool.empty() || share.device.empty()) {
    return fail(why, label + ": its " + std::string(driver) + " result lacks request, pool or device");
  }
  if (auto admin = found->find("adminAccess"); admin != found->end() && admin->is_boolean() && admin->get<bool>()) {
    return fail(why, label + ": admin access to a gpuos share is not supported (a share is a tenant, not a device)");
  }
  std::string device_class;
  if (!parse_device_name(share.device, nullptr, &device_class, nullptr)) {
    return fail(why, label + ": device " + quote_text(share.device) + " is no " + std::string(driver) +
                         " share (gpu-<i>-guaranteed-<k> or gpu-<i>-best-effort-<k>)");
  }

  // Configs: FromClass entries first, then FromClaim; later entries override earlier, field by field.
  out->spec = TenantSpec{};
  if (devices != nullptr) {
    if (auto configs = devices->find("config"); configs != devices->end()) {
      if (!configs->is_array()) return fail(why, label + ": status.allocation.devices.config is not a list");
      for (const char* source : {"FromClass", "FromClaim"}) {
        std::size_t index = 0;
        for (const json& entry : *configs) {
          const std::size_t position = index++;
          if (!entry.is_object()) return fail(why, label + ": config entry " + std::to_string(position) + " is not an object");
          const std::string entry_source = member_string(entry, "source");
          if (entry_source != "FromClass" && entry_source != "FromClaim") {
            return fail(why, label + ": config entry " + std::to_string(position) + " has source " +
                                 quote_text(entry_source) + " (FromClass or FromClaim)");
          }
          if (entry_source != source) continue;
          auto opaque = entry.find("opaque");
          if (opaque == entry.end() || !opaque->is_object() || member_string(*opaque, "driver") != driver) continue;
          if (auto requests = entry.find("requests"); requests != entry.end()) {
            if (!requests->is_array()) {
              return fail(why, label + ": config entry " + std::to_string(position) + ": requests is not a list");
            }
            bool applies = requests->empty();
            for (const json& r : *requests) {
              if (r.is_string() && request_matches(r.get_ref<const std::string&>(), share.request)) applies = true;
            }
            if (!applies) continue;
          }
          const std::string where = label + ": config " + std::to_string(position) + " (" +
                                    (entry_source == "FromClass" ? "from the DeviceClass" : "from the claim") + ")";
          auto params = opaque->find("parameters");
          if (params == opaque->end()) return fail(why, where + ": opaque config without parameters");
          TenantSpec part;
          std::string reason;
          if (!parse_tenant_config(*params, &part, &reason)) return fail(why, where + ": " + reason);
          merge_tenant_spec(part, &out->spec);
        }
      }
    }
  }

  out->pod.reset();
  if (auto reserved = status->find("reservedFor"); reserved != status->end() && reserved->is_array()) {
    for (const json& ref : *reserved) {
      if (member_string(ref, "resource") != "pods" || !member_string(ref, "apiGroup").empty()) continue;
      out->pod = PodRef{member_string(ref, "name"), member_string(ref, "uid")};
      break;
    }
  }

  std::string reason;
  if (!finish_tenant_spec(device_class, share.device, &out->spec, &reason)) return fail(why, label + ": " + reason);
  return true;
}

}  // namespace

bool parse_kubernetes_quantity(std::string_view text, uint64_t* value, std::string* why) {
  std::string reason;
  switch (parse_quantity(text, value, &reason)) {
    case QuantityParse::kOk:
      return true;
    case QuantityParse::kBad:
      return fail(why, reason);
    case QuantityParse::kNotQuantity:
      break;
  }
  return fail(why, quote_text(text) + " is no Kubernetes quantity (40Gi, 512Mi, 1G, 1073741824)");
}

bool parse_quantity_bytes(std::string_view text, uint64_t* bytes, std::string* why) {
  std::string reason;
  switch (parse_quantity(text, bytes, &reason)) {
    case QuantityParse::kOk:
      if (*bytes == 0) return fail(why, quote_text(text) + " is zero bytes");
      return true;
    case QuantityParse::kBad:
      return fail(why, reason);
    case QuantityParse::kNotQuantity:
      break;
  }
  if (!text.empty() && text[0] == '-') return fail(why, quote_text(text) + " is negative");
  if (parse_size(text, bytes, &reason)) return true;
  if (reason.find("too large") != std::string::npos || reason.find("zero bytes") != std::string::npos ||
      reason.find("whole number") != std::string::npos || reason.find("digits after") != std::string::npos) {
    return fail(why, reason);
  }
  return fail(why, quote_text(text) +
                       " is neither a Kubernetes quantity (40Gi, 512Mi, 1G, 1073741824) nor a gpuos size (8GiB)");
}

// parse_tenant_config without its exception guard.
static bool parse_tenant_config_object(const nlohmann::json& params, TenantSpec* out, std::string* why) {
  *out = TenantSpec{};
  if (!params.is_object()) {
    return fail(why, std::string("TenantConfig: the parameters are not a JSON object (got ") + params.type_name() + ")");
  }
  const auto api = params.find("apiVersion");
  if (api == params.end()) return fail(why, "TenantConfig: apiVersion missing (want \"gpuos.io/v1\")");
  if (!api->is_string() || api->get_ref<const std::string&>() != kTenantConfigApiVersion) {
    return fail(why, "TenantConfig: apiVersion " + (api->is_string() ? quote_text(api->get<std::string>()) : json_text(*api)) +
                         " is not supported (want \"gpuos.io/v1\")");
  }
  const auto kind = params.find("kind");
  if (kind == params.end()) return fail(why, "TenantConfig: kind missing (want \"TenantConfig\")");
  if (!kind->is_string() || kind->get_ref<const std::string&>() != kTenantConfigKind) {
    return fail(why, "TenantConfig: kind " + (kind->is_string() ? quote_text(kind->get<std::string>()) : json_text(*kind)) +
                         " is not supported (want \"TenantConfig\")");
  }
  for (const auto& [key, value] : params.items()) {
    if (std::find(kTenantFields.begin(), kTenantFields.end(), key) == kTenantFields.end()) {
      std::string hint;
      for (std::string_view f : kTenantFields) {
        if (equal_ignoring_case(f, key)) hint = " (did you mean \"" + std::string(f) + "\"?)";
      }
      return fail(why, "TenantConfig: unknown field " + quote_text(key) + hint + "; known: " + known_fields());
    }
    std::string what;
    if (!config_field(key, value, out, &what)) return fail(why, "TenantConfig: " + key + ": " + what);
  }
  return true;
}

bool parse_tenant_config(const nlohmann::json& params, TenantSpec* out, std::string* why) {
  try {
    return parse_tenant_config_object(params, out, why);
  } catch (const std::exception& e) {  // no JSON error or allocation failure escapes: a refusal
    return fail(why, std::string("TenantConfig: malformed: ") + e.what());
  }
}

void merge_tenant_spec(const TenantSpec& later, TenantSpec* into) {
  if (later.tenant_class) into->tenant_class = later.tenant_class;
  if (later.priority) into->priority = later.priority;
  if (later.weight) into->weight = later.weight;
  if (later.mem_bytes) into->mem_bytes = later.mem_bytes;
  if (later.borrow_bytes) into->borrow_bytes = later.borrow_bytes;
  if (later.space) into->space = later.space;
  if (later.sms) into->sms = later.sms;
  if (later.max_slowdown_permille) into->max_slowdown_permille = later.max_slowdown_permille;
}

bool finish_tenant_spec(const std::string& device_class, const std::string& device_name, TenantSpec* spec,
                        std::string* why) {
  if (device_class != kClassGuaranteed && device_class != kClassBestEffort) {
    return fail(why, "device " + quote_text(device_name) + " has no gpuos class (" + quote_text(device_class) + ")");
  }
  if (spec->tenant_class && *spec->tenant_class != device_class) {
    return fail(why, "claim asks class " + *spec->tenant_class + " but its device " + device_name + " is a " +
                         device_class + " share");
  }
  if (spec->borrow_bytes && !spec->mem_bytes) {
    return fail(why, "borrow needs mem (borrowed memory is on top of a quota)");
  }
  // gpuosd sums them into one limit: a sum that wraps would pass any cap (#42).
  if (uint64_t sum = 0; spec->borrow_bytes && __builtin_add_overflow(*spec->mem_bytes, *spec->borrow_bytes, &sum)) {
    return fail(why, "mem " + std::to_string(*spec->mem_bytes) + " + borrow " + std::to_string(*spec->borrow_bytes) +
                         " bytes is more than 2^64 - 1");
  }
  if (spec->sms && !spec->space) return fail(why, "sms needs space (SM partitions exist only in spatial sharing)");
  if (spec->max_slowdown_permille && device_class != kClassGuaranteed) {
    return fail(why, "maxSlowdown is a guaranteed tenant's budget; device " + device_name + " is a " + device_class +
                         " share");
  }
  spec->tenant_class = device_class;  // only on success: a refused spec is left as it was
  return true;
}

bool parse_claim(std::string_view claim_json, std::string_view driver, std::string_view expected_uid,
                 ClaimAllocation* out, std::string* why) {
  try {
    const json claim = json::parse(claim_json.begin(), claim_json.end(), nullptr, /*allow_exceptions=*/false);
    if (claim.is_discarded()) return fail(why, "the claim is not valid JSON");
    return parse_claim_json(claim, driver, expected_uid, out, why);
  } catch (const std::exception& e) {  // a JSON type error or allocation failure: bad input, not a crash
    return fail(why, std::string("the claim is malformed: ") + e.what());
  }
}

}  // namespace gpuos::dra
