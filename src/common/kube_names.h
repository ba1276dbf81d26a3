// SPDX-License-Identifier: Apache-2.0
// The shapes of Kubernetes names and uids, checked where gpuosd and gpuos-dra take them from a
// message or an API object (a name becomes part of a path, a label, a log line).
#pragma once

#include <cstddef>
#include <string_view>

namespace gpuos {

// RFC 1123 label (a namespace): 1..63 of [a-z0-9-], starting and ending with [a-z0-9].
bool dns_label(std::string_view s);

// RFC 1123 subdomain (an object's name): dot-separated labels, at most max_len bytes in all.
bool dns_subdomain(std::string_view s, std::size_t max_len = 253);

// A uid as gpuos names files after it: 1..36 of [0-9a-z-], not only dashes.
bool kube_uid(std::string_view s);

}  // namespace gpuos
