// SPDX-License-Identifier: Apache-2.0
// Text a tenant chose (its name, a domain, a reason quoted back), made safe to show.
#pragma once

#include <string>
#include <string_view>

namespace gpuos {

// A tenant-provided string made safe for a terminal: C0 controls, DEL, C1 controls, bidi overrides
// and bytes that are not UTF-8 become visible escapes (\x1b, \u202e), a backslash becomes \\, so no
// name can move the cursor, retitle the window or hide text. Valid printable UTF-8 is kept.
std::string printable(std::string_view s);

}  // namespace gpuos
