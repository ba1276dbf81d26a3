// SPDX-License-Identifier: Apache-2.0
#include "common/files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace gpuos {

bool make_dirs(const std::string& dir, mode_t mode, mode_t parent_mode, std::string* err) {
  if (dir.empty() || dir == "/") return true;
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return true;
    *err = dir + " exists and is not a directory";
    return false;
  }
  const std::size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0 && !make_dirs(dir.substr(0, slash), parent_mode, parent_mode, err)) {
    return false;
  }
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) {
    *err = "cannot create " + dir + ": " + std::strerror(errno);
    return false;
  }
  ::chmod(dir.c_str(), mode);  // not subject to the umask
  return true;
}

}  // namespace gpuos
