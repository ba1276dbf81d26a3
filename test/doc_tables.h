// SPDX-License-Identifier: Apache-2.0
// Reads the names a table of the docs documents, so that a test can hold the docs to the code
// (issue #43: the metric table of docs/OPERATIONS.md, the `gpuos ps --json` fields of
// docs/CONTRACTS.md). A table row names its subjects in its first cell, in backticks
// (`gpuos_gpu_info{gpu,name,uuid}`, or several: `a`, `b`); a label set in braces is not part of the
// name. Only rows of the section under `heading` (up to the next heading of its level) count.
#pragma once

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace gpuos::test {

// The names in the first cells of the tables under the heading line `heading` (e.g. "## Metrics")
// of the Markdown file at path. Empty if the file or the heading is missing (the test then fails on
// the comparison, naming every name).
inline std::set<std::string> documented_names(const std::string& path, const std::string& heading) {
  std::ifstream in(path);
  std::set<std::string> names;
  const std::string level = heading.substr(0, heading.find(' ') + 1);  // "## "
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line == heading) {
      inside = true;
      continue;
    }
    if (!inside) continue;
    if (line.rfind(level, 0) == 0 || (line.rfind("# ", 0) == 0 && level != "# ")) break;
    if (line.rfind("| `", 0) != 0) continue;
    const std::string cell = line.substr(1, line.find('|', 1) - 1);
    for (std::size_t at = cell.find('`'); at != std::string::npos;) {
      const std::size_t end = cell.find('`', at + 1);
      if (end == std::string::npos) break;
      std::string name = cell.substr(at + 1, end - at - 1);
      name = name.substr(0, name.find('{'));
      if (!name.empty()) names.insert(name);
      at = cell.find('`', end + 1);
    }
  }
  return names;
}

// "missing from the docs: a, b; documented but not in the code: c" (empty when the sets agree).
inline std::string compare_names(const std::set<std::string>& code, const std::set<std::string>& docs) {
  std::ostringstream missing, stale;
  for (const std::string& n : code)
    if (!docs.count(n)) missing << " " << n;
  for (const std::string& n : docs)
    if (!code.count(n)) stale << " " << n;
  std::string out;
  if (!missing.str().empty()) out += "in the code but not in the docs' table:" + missing.str() + "\n";
  if (!stale.str().empty()) out += "in the docs' table but not in the code:" + stale.str() + "\n";
  return out;
}

}  // namespace gpuos::test
