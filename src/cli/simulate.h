// SPDX-License-Identifier: Apache-2.0
// The simulated device: the driver test double (a stand-in libcuda.so.1 and libnvidia-ml.so.1, see
// src/driver_double/README.md) selected for gpuosd and its tenants, so gpuos runs by hand on a
// machine without a GPU (`gpuos daemon --simulate N`, `gpuos run --simulate`) and in `gpuos demo`.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gpuos::cli {

using EnvVars = std::vector<std::pair<std::string, std::string>>;

// The double's directory as installed or built next to this binary (<exe dir>/../lib/driver_double,
// resolved), or "" with *why saying what is missing.
std::string find_driver_double(std::string* why);

// The environment that makes a process use the double in `dir`: LD_LIBRARY_PATH (the double first,
// so the program's own libcuda.so.1 and NVML resolve to it), GPUOS_DRIVER_LIBRARY (what gpuosd and
// libgpuos.so open) and, with devices > 0, GPUOS_SIM_DEVICES. Other GPUOS_SIM_* settings of the
// caller's environment are left as they are (docs/CONTRACTS.md "Driver double settings").
EnvVars simulated_device_env(const std::string& dir, unsigned devices);

// Finds the double and puts simulated_device_env into this process's environment (for the program
// it execs next). False after printing "gpuos CMD: ..." on stderr when the double is not built.
bool use_simulated_device(const char* cmd, unsigned devices);

}  // namespace gpuos::cli
