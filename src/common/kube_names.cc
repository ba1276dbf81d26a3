// SPDX-License-Identifier: Apache-2.0
#include "common/kube_names.h"

namespace gpuos {
namespace {

bool lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

}  // namespace

bool dns_label(std::string_view s) {
  if (s.empty() || s.size() > 63 || !lower_alnum(s.front()) || !lower_alnum(s.back())) return false;
  for (char c : s) {
    if (!lower_alnum(c) && c != '-') return false;
  }
  return true;
}

bool dns_subdomain(std::string_view s, std::size_t max_len) {
  if (s.empty() || s.size() > max_len) return false;
  for (std::size_t start = 0;;) {
    const std::size_t dot = s.find('.', start);
    if (!dns_label(s.substr(start, dot == std::string_view::npos ? s.npos : dot - start))) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool kube_uid(std::string_view s) {
  if (s.empty() || s.size() > 36 || s.find_first_not_of('-') == std::string_view::npos) return false;
  for (char c : s) {
    if (!lower_alnum(c) && c != '-') return false;
  }
  return true;
}

}  // namespace gpuos
