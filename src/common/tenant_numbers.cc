// SPDX-License-Identifier: Apache-2.0
#include "common/tenant_numbers.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpuos {
namespace {

constexpr const char* kEnvClass = "GPUOS_TENANT_CLASS";
constexpr const char* kEnvPriority = "GPUOS_TENANT_PRIORITY";
constexpr const char* kEnvWeight = "GPUOS_TENANT_WEIGHT";
constexpr const char* kEnvSms = "GPUOS_TENANT_SMS";
constexpr const char* kEnvMem = "GPUOS_TENANT_MEM";
constexpr const char* kEnvBorrow = "GPUOS_TENANT_MEM_BORROW";
constexpr const char* kEnvSlowdown = "GPUOS_TENANT_MAX_SLOWDOWN";

// Digits only, into a uint64_t; false on anything else or past 2^64 - 1.
bool parse_digits(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v)) {
      return false;
    }
  }
  *out = v;
  return true;
}

}  // namespace

TenantNumbers numbers_of(const gpuos_msg_register& m) {
  return TenantNumbers{m.tenant_class, m.priority, m.weight, m.space_sms, m.requested_mem_bytes,
                       m.requested_borrow_bytes, m.max_slowdown_permille};
}

TenantNumbers numbers_of(const gpuos_msg_claim_prepare& m) {
  return TenantNumbers{m.tenant_class, m.priority, m.weight, m.space_sms, m.mem_bytes, m.borrow_bytes,
                       m.max_slowdown_permille};
}

void put_numbers(const TenantNumbers& n, gpuos_msg_register* m) {
  m->tenant_class = n.tenant_class;
  m->priority = n.priority;
  m->weight = n.weight;
  m->space_sms = n.space_sms;
  m->requested_mem_bytes = n.mem_bytes;
  m->requested_borrow_bytes = n.borrow_bytes;
  m->max_slowdown_permille = n.max_slowdown_permille;
}

void put_numbers(const TenantNumbers& n, gpuos_msg_claim_prepare* m) {
  m->tenant_class = n.tenant_class;
  m->priority = n.priority;
  m->weight = n.weight;
  m->space_sms = n.space_sms;
  m->mem_bytes = n.mem_bytes;
  m->borrow_bytes = n.borrow_bytes;
  m->max_slowdown_permille = n.max_slowdown_permille;
}

bool check_number(const NumberRange& r, int64_t v, char* why, std::size_t why_len) {
  if (r.contains(v)) return true;
  std::snprintf(why, why_len, "%s %lld is out of range %lld..%lld", r.name, static_cast<long long>(v),
                static_cast<long long>(r.lo), static_cast<long long>(r.hi));
  return false;
}

bool check_tenant_numbers(const TenantNumbers& n, char* why, std::size_t why_len) {
  if (n.tenant_class != GPUOS_CLASS_GUARANTEED && n.tenant_class != GPUOS_CLASS_BEST_EFFORT) {
    std::snprintf(why, why_len, "unknown tenant class %u", n.tenant_class);
    return false;
  }
  if (!check_number(kPriorityRange, n.priority, why, why_len) || !check_number(kWeightRange, n.weight, why, why_len) ||
      (n.space_sms != 0 && !check_number(kSmsRange, n.space_sms, why, why_len)) ||
      (n.max_slowdown_permille != 0 && !check_number(kSlowdownRange, n.max_slowdown_permille, why, why_len))) {
    return false;
  }
  if (uint64_t sum = 0; __builtin_add_overflow(n.mem_bytes, n.borrow_bytes, &sum)) {
    std::snprintf(why, why_len, "memory quota %llu + borrow %llu bytes is more than 2^64 - 1",
                  static_cast<unsigned long long>(n.mem_bytes), static_cast<unsigned long long>(n.borrow_bytes));
    return false;
  }
  return true;
}

std::string number_refusal(const NumberRange& r, int64_t v) {
  char why[GPUOS_TEXT_MAX];
  return check_number(r, v, why, sizeof(why)) ? std::string() : std::string(why);
}

std::string tenant_numbers_refusal(const TenantNumbers& n) {
  char why[GPUOS_TEXT_MAX];
  return check_tenant_numbers(n, why, sizeof(why)) ? std::string() : std::string(why);
}

bool parse_number(std::string_view text, const NumberRange& r, int64_t* out, char* why, std::size_t why_len) {
  std::string_view digits = text;
  const bool negative = !digits.empty() && digits[0] == '-';
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits.remove_prefix(1);
  uint64_t magnitude = 0;
  if (!parse_digits(digits, &magnitude)) {
    std::snprintf(why, why_len, "\"%.*s\" is not a whole number", static_cast<int>(text.size() > 64 ? 64 : text.size()),
                  text.data());
    return false;
  }
  // Past int64_t: out of every range (said with the bound nearest to it).
  const int64_t v = magnitude > static_cast<uint64_t>(INT64_MAX) ? (negative ? INT64_MIN : INT64_MAX)
                    : negative                                    ? -static_cast<int64_t>(magnitude)
                                                                  : static_cast<int64_t>(magnitude);
  if (!check_number(r, v, why, why_len)) return false;
  *out = v;
  return true;
}

bool parse_slowdown_permille(std::string_view s, uint32_t* out) {
  uint64_t whole = 0, frac = 0;
  std::size_t i = 0, int_digits = 0, frac_digits = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9' && int_digits < 6; ++i, ++int_digits) whole = whole * 10 + (s[i] - '0');
  if (int_digits == 0) return false;
  if (i < s.size() && s[i] == '.') {
    for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9' && frac_digits < 3; ++i, ++frac_digits) {
      frac = frac * 10 + (s[i] - '0');
    }
    if (frac_digits == 0) return false;
  }
  if (i != s.size()) return false;
  for (std::size_t k = frac_digits; k < 3; ++k) frac *= 10;
  const uint64_t permille = whole * 1000 + frac;
  if (!kSlowdownRange.contains(static_cast<int64_t>(permille))) return false;
  *out = static_cast<uint32_t>(permille);
  return true;
}

std::string slowdown_text(uint32_t permille) {
  char b[32];
  int n = std::snprintf(b, sizeof(b), "%u.%03u", permille / 1000, permille % 1000);
  while (n > 0 && b[n - 1] == '0') --n;  // "1.250" -> "1.25", "2.000" -> "2."
  if (n > 0 && b[n - 1] == '.') --n;     // "2." -> "2"
  return std::string(b, static_cast<std::size_t>(n));
}

void read_tenant_env(TenantNumbers* n, void (*warn)(const char* var, const char* value, const char* want)) {
  auto set = [](const char* var) -> const char* {
    const char* v = std::getenv(var);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  auto bad = [&](const char* var, const char* value, const char* want) {
    if (warn != nullptr) warn(var, value, want);
  };
  char why[GPUOS_TEXT_MAX];
  if (const char* v = set(kEnvClass)) {
    if (!std::strcmp(v, "guaranteed")) n->tenant_class = GPUOS_CLASS_GUARANTEED;
    else if (!std::strcmp(v, "best-effort")) n->tenant_class = GPUOS_CLASS_BEST_EFFORT;
    else bad(kEnvClass, v, "guaranteed or best-effort");
  }
  struct Whole {
    const char* var;
    const NumberRange& range;
    bool zero_is_default;
  };
  for (const Whole& w : {Whole{kEnvPriority, kPriorityRange, false}, Whole{kEnvWeight, kWeightRange, false},
                         Whole{kEnvSms, kSmsRange, true}}) {
    const char* v = set(w.var);
    if (v == nullptr) continue;
    int64_t x = 0;
    if (w.zero_is_default && !std::strcmp(v, "0")) {
      x = 0;
    } else if (!parse_number(v, w.range, &x, why, sizeof(why))) {
      bad(w.var, v, why);
      continue;
    }
    if (w.var == kEnvPriority) n->priority = static_cast<int32_t>(x);
    else if (w.var == kEnvWeight) n->weight = static_cast<uint32_t>(x);
    else n->space_sms = static_cast<uint32_t>(x);
  }
  for (const char* var : {kEnvMem, kEnvBorrow}) {
    const char* v = set(var);
    if (v == nullptr) continue;
    uint64_t bytes = 0;
    if (!parse_digits(v, &bytes)) {
      bad(var, v, "a byte count");
      continue;
    }
    (var == kEnvMem ? n->mem_bytes : n->borrow_bytes) = bytes;
  }
  // (What it reads passes check_tenant_numbers: a borrow whose sum with the quota wraps goes too.)
  if (uint64_t sum = 0; __builtin_add_overflow(n->mem_bytes, n->borrow_bytes, &sum)) {
    if (const char* v = set(kEnvBorrow)) bad(kEnvBorrow, v, "a byte count that, with the quota, fits 2^64 - 1");
    n->borrow_bytes = 0;
  }
  if (const char* v = set(kEnvSlowdown)) {
    if (!parse_slowdown_permille(v, &n->max_slowdown_permille)) {
      bad(kEnvSlowdown, v, "a number such as 1.25, above 1 and at most 100, at most 3 decimals");
    }
  }
}

std::vector<std::pair<std::string, std::string>> tenant_env(const TenantNumbers& n) {
  auto nonzero = [](uint64_t v) { return v != 0 ? std::to_string(v) : std::string(); };
  return {
      {kEnvClass, n.tenant_class == GPUOS_CLASS_GUARANTEED ? "guaranteed" : "best-effort"},
      {kEnvPriority, std::to_string(n.priority)},
      {kEnvWeight, std::to_string(n.weight)},
      {kEnvSms, nonzero(n.space_sms)},
      {kEnvMem, nonzero(n.mem_bytes)},
      {kEnvBorrow, nonzero(n.borrow_bytes)},
      {kEnvSlowdown, n.max_slowdown_permille != 0 ? slowdown_text(n.max_slowdown_permille) : std::string()},
  };
}

}  // namespace gpuos
