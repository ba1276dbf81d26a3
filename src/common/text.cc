// SPDX-License-Identifier: Apache-2.0
#include "common/text.h"

#include <cstdint>
#include <cstdio>

namespace gpuos {

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  char esc[16];
  auto hex = [&](unsigned char c) {
    std::snprintf(esc, sizeof(esc), "\\x%02x", c);
    out += esc;
  };
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\\\";
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7f) {
      hex(c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length and the code point, or an invalid byte (escaped alone).
    std::size_t len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c <= 0xdf ? 2 : 0;
    if (c >= 0xf5) len = 0;
    uint32_t cp = len == 2 ? c & 0x1fu : len == 3 ? c & 0x0fu : c & 0x07u;
    bool ok = len != 0 && i + len <= s.size();
    for (std::size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if (ok && ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
               (cp >= 0xd800 && cp <= 0xdfff))) {
      ok = false;
    }
    if (!ok) {
      hex(c);
      ++i;
      continue;
    }
    // C1 controls (0x9b is CSI on some terminals) and the bidi/format controls that reorder or hide
    // text: shown as \uXXXX.
    if ((cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) ||
        cp == 0x200e || cp == 0x200f || cp == 0x061c || cp == 0x2028 || cp == 0x2029) {
      std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned>(cp));
      out += esc;
    } else {
      out.append(s.data() + i, len);
    }
    i += len;
  }
  return out;
}

}  // namespace gpuos
