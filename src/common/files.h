// SPDX-License-Identifier: Apache-2.0
// Directories gpuosd and gpuos-dra create for their sockets, claims and CDI specs.
#pragma once

#include <sys/types.h>

#include <string>

namespace gpuos {

// mkdir -p: creates dir with mode (not subject to the umask) and its missing parents with
// parent_mode. An existing directory is left as it is; an existing non-directory is an error.
// On failure *err says which path and why.
bool make_dirs(const std::string& dir, mode_t mode, mode_t parent_mode, std::string* err);

}  // namespace gpuos
