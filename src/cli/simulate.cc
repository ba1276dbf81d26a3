// SPDX-License-Identifier: Apache-2.0
#include "cli/simulate.h"

#include <sys/stat.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "client/client.h"

namespace gpuos::cli {
using namespace ::gpuos::client;  // the gpuosd client library (src/client)

std::string find_driver_double(std::string* why) {
  const std::string dir = exe_dir() + "/../lib/driver_double";
  struct stat st;
  char real[PATH_MAX];
  if (::stat((dir + "/libcuda.so.1").c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      realpath(dir.c_str(), real) == nullptr) {
    *why = "the simulated device (the driver test double " + dir +
           "/libcuda.so.1) is not there: build it (cmake --build build builds it into build/lib/driver_double/) "
           "or install gpuos with -DGPUOS_INSTALL_DRIVER_DOUBLE=ON";
    return "";
  }
  return real;
}

EnvVars simulated_device_env(const std::string& dir, unsigned devices) {
  const char* old = std::getenv("LD_LIBRARY_PATH");
  EnvVars env = {{"LD_LIBRARY_PATH", dir + (old != nullptr && old[0] != '\0' ? std::string(":") + old : "")},
                 {"GPUOS_DRIVER_LIBRARY", dir + "/libcuda.so.1"}};
  if (devices > 0) env.emplace_back("GPUOS_SIM_DEVICES", std::to_string(devices));
  return env;
}

bool use_simulated_device(const char* cmd, unsigned devices) {
  std::string why;
  const std::string dir = find_driver_double(&why);
  if (dir.empty()) {
    std::fprintf(stderr, "gpuos %s: --simulate: %s\n", cmd, why.c_str());
    return false;
  }
  for (const auto& [k, v] : simulated_device_env(dir, devices)) setenv(k.c_str(), v.c_str(), 1);
  return true;
}

}  // namespace gpuos::cli
