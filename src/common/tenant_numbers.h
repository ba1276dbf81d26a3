// SPDX-License-Identifier: Apache-2.0
// The numbers a tenant asks for (its class, priority, weight, SMs, memory and latency budget): each
// range defined here, once, and checked by one function at every boundary they cross: `gpuos run`,
// gpuos-dra's TenantConfig, gpuosd's CLAIM_PREPARE (and its claims file) and REGISTER. They travel
// as numbers (gpuos_msg_register, gpuos_msg_claim_prepare); only the environment across exec
// (`gpuos run` and gpuos-dra's CDI spec -> the interposer) is text, read and written here too.
// libc only (no allocation in the checks and the reader): the interposer uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpuos/abi.h"

namespace gpuos {

// A closed range of one field, with the field's name as messages say it.
struct NumberRange {
  const char* name;
  int64_t lo;
  int64_t hi;
  constexpr bool contains(int64_t v) const { return v >= lo && v <= hi; }
};

// Guaranteed tenants: larger = more important.
inline constexpr NumberRange kPriorityRange{"priority", -1000, 1000};
// Best-effort tenants' fair-share weight.
inline constexpr NumberRange kWeightRange{"weight", 1, 10000};
// SMs a guaranteed tenant asks for in its spatial domain (0: the domain's default).
inline constexpr NumberRange kSmsRange{"sms", 1, 4096};
// A latency budget in per mille of the tenant's time alone (0: the class's default from the config):
// more than 1.0 (1.0 is "as if alone": the class guaranteed without a budget) and at most 100x.
inline constexpr NumberRange kSlowdownRange{"max_slowdown_permille", 1001, 100000};
inline constexpr uint32_t kMinSlowdownPermille = static_cast<uint32_t>(kSlowdownRange.lo);
inline constexpr uint32_t kMaxSlowdownPermille = static_cast<uint32_t>(kSlowdownRange.hi);

inline constexpr int32_t kDefaultPriority = 0;
inline constexpr uint32_t kDefaultWeight = 100;

// The numbers as REGISTER and CLAIM_PREPARE carry them; 0 in space_sms, mem_bytes, borrow_bytes and
// max_slowdown_permille means none (or the default).
struct TenantNumbers {
  uint32_t tenant_class = GPUOS_CLASS_BEST_EFFORT;
  int32_t priority = kDefaultPriority;
  uint32_t weight = kDefaultWeight;
  uint32_t space_sms = 0;
  uint64_t mem_bytes = 0;
  uint64_t borrow_bytes = 0;
  uint32_t max_slowdown_permille = 0;
  bool operator==(const TenantNumbers&) const = default;
};
TenantNumbers numbers_of(const gpuos_msg_register& m);
TenantNumbers numbers_of(const gpuos_msg_claim_prepare& m);
void put_numbers(const TenantNumbers& n, gpuos_msg_register* m);
void put_numbers(const TenantNumbers& n, gpuos_msg_claim_prepare* m);

// One number against its range: true, or false with "weight 0 is out of range 1..10000" in why
// (NUL-terminated, cut to why_len).
bool check_number(const NumberRange& r, int64_t v, char* why, std::size_t why_len);
// The one check of a tenant's numbers: a class gpuos knows, each number in its range (0 where it
// means the default), quota + borrow within 2^64 - 1 (they are summed into one limit: a sum that
// wraps would pass any cap, #42). True, or false with the first reason in why.
bool check_tenant_numbers(const TenantNumbers& n, char* why, std::size_t why_len);
// std::string forms of the two, for the daemon's claims and the CLI: "" or why.
std::string number_refusal(const NumberRange& r, int64_t v);
std::string tenant_numbers_refusal(const TenantNumbers& n);

// A whole decimal number (an optional '-' or '+', digits; nothing else, no spaces) within r: the CLI's
// and the environment's form. False with why ("\"x\" is not a whole number", or number_refusal's text).
bool parse_number(std::string_view text, const NumberRange& r, int64_t* out, char* why, std::size_t why_len);

// A latency budget as a tenant declares it ("1.25": its GPU work may take 1.25x as long as alone) in
// per mille (1250): digits, an optional point and up to three decimals; no sign, no exponent,
// independent of the locale. False for anything else or outside kSlowdownRange.
bool parse_slowdown_permille(std::string_view s, uint32_t* out);
// Its shortest text back: 1250 -> "1.25", 2000 -> "2", 1001 -> "1.001" (parse_slowdown_permille reads
// it back exactly).
std::string slowdown_text(uint32_t permille);

// The environment across exec: GPUOS_TENANT_CLASS ("guaranteed" | "best-effort"),
// GPUOS_TENANT_PRIORITY, _WEIGHT, _SMS (whole numbers), _MEM, _MEM_BORROW (bytes),
// _MAX_SLOWDOWN (a factor, "1.25").
//
// Reads the variables that are set and not empty into *n (the others keep their values). One that
// does not parse, or is out of range, keeps its value too and is named through warn (the variable,
// its text, what it wants), when warn is given; so does a borrow whose sum with the quota wraps. What
// it reads passes check_tenant_numbers. Needs no allocation (the interposer).
void read_tenant_env(TenantNumbers* n, void (*warn)(const char* var, const char* value, const char* want));
// The variables for n, as name and text; text "" means unset it (a number at 0 where 0 means none).
std::vector<std::pair<std::string, std::string>> tenant_env(const TenantNumbers& n);

}  // namespace gpuos
