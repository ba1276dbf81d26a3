// A latency budget as the tenant declares it ("1.25": its GPU work may take 1.25x as long as alone)
// in the fixed-point form the ABI carries (per mille: 1250). Header-only: the interposer uses it too.
#pragma once

#include <cstdint>
#include <string_view>

namespace gpuos {

// The budgets gpuos accepts: more than 1.0 (1.0 is "as if alone": the class guaranteed without a
// budget) and at most 100x.
inline constexpr uint32_t kMinSlowdownPermille = 1001;
inline constexpr uint32_t kMaxSlowdownPermille = 100000;

// Parses "1.25", "2", "1.005" (digits, an optional point and up to three decimals; no sign, no
// exponent, independent of the locale) into per mille. False for anything else or out of range.
inline bool parse_slowdown_permille(std::string_view s, uint32_t* out) {
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
  if (permille < kMinSlowdownPermille || permille > kMaxSlowdownPermille) return false;
  *out = static_cast<uint32_t>(permille);
  return true;
}

}  // namespace gpuos
