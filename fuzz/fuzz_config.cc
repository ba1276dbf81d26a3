// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the TOML config parser (gpuos::parse_config) fed arbitrary text.
//
// Beyond "no crash, no leak, no UB": a parse either yields a Config or a non-empty error (never an
// exception); an accepted config lies within the documented ranges; and the effective config that
// `gpuos config check` prints (format_config) parses back to the very same config.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/config.h"
#include "policies/registry.h"

using namespace gpuos;

#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "fuzz_config: invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ConfigResult r = parse_config(text, "fuzz.toml");
  if (!r) {
    FUZZ_CHECK(!r.error.empty());
    return 0;
  }
  const Config& c = *r.config;
  FUZZ_CHECK(c.history <= 65536);
  FUZZ_CHECK(c.max_tenants >= 1 && c.max_tenants <= 4096);
  // The policies check their own sections: an answer either way, and a reason when it is no.
  std::string why;
  if (!policies::check_policy_config(c, &why)) FUZZ_CHECK(!why.empty());
  FUZZ_CHECK(!c.policies.time_gate.empty() && !c.policies.space.empty() && !c.policies.memory.empty());
  for (const ConfigSection& sec : c.policy_sections) {
    FUZZ_CHECK(c.section(sec.name) == &sec);  // one section per policy
  }
  FUZZ_CHECK(c.on_no_daemon == "passthrough" || c.on_no_daemon == "refuse");
  FUZZ_CHECK(c.socket.empty() || (c.socket[0] == '/' && c.socket.size() < 108));
  FUZZ_CHECK(!c.spatial.mps_control.empty());
  FUZZ_CHECK(c.spatial.mps_dir.empty() || (c.spatial.mps_dir[0] == '/' && c.spatial.mps_dir.size() <= kMaxMpsDirLength));
  FUZZ_CHECK(c.spatial.domains.size() <= kMaxSpatialDomains);
  for (std::size_t i = 0; i < c.spatial.domains.size(); ++i) {
    const SpatialDomain& d = c.spatial.domains[i];
    FUZZ_CHECK(is_valid_domain_name(d.name));
    FUZZ_CHECK(c.spatial.find(d.name) == &d);  // unique
    for (std::size_t g = 0; g < d.gpus.size(); ++g) {
      FUZZ_CHECK(d.gpus[g] <= 1023);
      for (std::size_t h = 0; h < g; ++h) FUZZ_CHECK(d.gpus[h] != d.gpus[g]);
    }
    for (const std::string& u : d.users) FUZZ_CHECK(!u.empty() && u.size() <= 64);
  }

  // Round trip: the printed effective config is valid TOML with the same values.
  const std::string printed = format_config(c);
  ConfigResult again = parse_config(printed, "fuzz.toml");
  if (!again) {
    std::fprintf(stderr, "fuzz_config: format_config output does not parse: %s\n%s\n", again.error.c_str(),
                 printed.c_str());
    std::abort();
  }
  FUZZ_CHECK(format_config(*again.config) == printed);
  return 0;
}
