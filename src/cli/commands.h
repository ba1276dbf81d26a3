// SPDX-License-Identifier: Apache-2.0
// gpuos CLI subcommands. Each returns the process exit code (run_command only on failure: on
// success it does not return).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpuos::cli {

struct RunOptions {
  std::string name;       // "" = basename of the command
  std::string tenant_class;  // "" = config default_class
  std::optional<int32_t> priority;  // none = inherited $GPUOS_TENANT_PRIORITY or 0
  std::optional<uint32_t> weight;   // none = inherited $GPUOS_TENANT_WEIGHT or 100
  std::string mem;        // "" = inherited $GPUOS_TENANT_MEM or unlimited; e.g. "8GiB", "512MiB"
  std::string borrow;     // "" = inherited $GPUOS_TENANT_MEM_BORROW or none; needs mem
  bool swap = false;      // GPUOS_SWAP=1: swappable memory (gpuos run --swap)
  std::string space;      // "" = none; else a [[spatial.domain]] name (gpuos run --space)
  uint32_t sms = 0;       // with --space: SMs a guaranteed tenant asks for (0 = gpuosd's default)
  uint32_t max_slowdown_permille = 0;  // latency budget, 1250 for "1.25" (0 = inherited $GPUOS_TENANT_MAX_SLOWDOWN or the class default)
  bool simulate = false;  // run on the simulated device (the driver test double; cli/simulate.h)
  std::string socket;
  std::string config;
};
int run_command(const RunOptions& o, const std::vector<std::string>& cmd);


struct DemoOptions {
  std::string policy = "priority";  // gpuosd scheduling policy for the demo
  double seconds = 2.0;  // about how long each phase runs
  bool json = false;
  bool keep = false;  // keep the temporary directory (logs) for inspection
  // "space" (a spatial domain: MPS on a GPU, a stand-in on the simulated device, whose driver double
  // models SM partitions), "time" (the gate), "auto": space on a GPU with MPS and on the simulated device.
  std::string sharing = "auto";
  std::string mps_control = "nvidia-cuda-mps-control";
};
int demo_command(const DemoOptions& o);

}  // namespace gpuos::cli
