// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: what gpuos-dra reads from the API server and from users' claims (#26) —
// gpuos::dra::parse_claim over the bytes as a ResourceClaim, parse_tenant_config over them as JSON,
// and the small parsers (sizes, device names) over them as text.
//
// Beyond "no crash, no leak, no UB, no exception": every refusal has a reason; an accepted claim
// carries a spec that obeys every rule of the design (class set and matching its device, ranges,
// borrow needs mem, sms needs space, maxSlowdown only guaranteed); an accepted TenantConfig is in
// range; a device name parses back to itself. Seeds: fuzz/corpus/dra_claim (fuzz/make_corpus.py),
// claims whose metadata.uid is "fuzz-uid", the uid the harness expects.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "dra/resource_slice.h"
#include "dra/tenant_config.h"

using namespace gpuos::dra;

#define FUZZ_CHECK(cond)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "fuzz_dra_claim: invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

namespace {

void check_ranges(const TenantSpec& s) {
  if (s.tenant_class) FUZZ_CHECK(*s.tenant_class == kClassGuaranteed || *s.tenant_class == kClassBestEffort);
  if (s.priority) FUZZ_CHECK(*s.priority >= -1000 && *s.priority <= 1000);
  if (s.weight) FUZZ_CHECK(*s.weight >= 1 && *s.weight <= 10000);
  if (s.mem_bytes) FUZZ_CHECK(*s.mem_bytes > 0);
  if (s.borrow_bytes) FUZZ_CHECK(*s.borrow_bytes > 0);
  if (s.space) FUZZ_CHECK(!s.space->empty() && s.space->size() < 32);
  if (s.sms) FUZZ_CHECK(*s.sms >= 1 && *s.sms <= 4096);
  if (s.max_slowdown_permille) FUZZ_CHECK(*s.max_slowdown_permille >= 1001 && *s.max_slowdown_permille <= 100000);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  ClaimAllocation claim;
  std::string why;
  if (parse_claim(text, "gpuos.io", "fuzz-uid", &claim, &why)) {
    FUZZ_CHECK(claim.claim_uid == "fuzz-uid" && !claim.claim_name.empty());
    const TenantSpec& s = claim.spec;
    check_ranges(s);
    std::string device_class;
    FUZZ_CHECK(parse_device_name(claim.share.device, nullptr, &device_class, nullptr));
    FUZZ_CHECK(s.tenant_class && *s.tenant_class == device_class);
    FUZZ_CHECK(!s.borrow_bytes || s.mem_bytes);
    FUZZ_CHECK(!s.sms || s.space);
    FUZZ_CHECK(!s.max_slowdown_permille || *s.tenant_class == kClassGuaranteed);
    FUZZ_CHECK(!claim.share.request.empty() && !claim.share.pool.empty());
  } else {
    FUZZ_CHECK(!why.empty());
  }

  const nlohmann::json params = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!params.is_discarded()) {
    TenantSpec spec;
    why.clear();
    if (parse_tenant_config(params, &spec, &why)) {
      check_ranges(spec);
      // The whole-spec checks refuse with a reason or fill the class from the device.
      TenantSpec finished = spec;
      why.clear();
      if (finish_tenant_spec("best-effort", "gpu-0-best-effort-0", &finished, &why)) {
        FUZZ_CHECK(finished.tenant_class == "best-effort" && !finished.max_slowdown_permille);
      } else {
        FUZZ_CHECK(!why.empty());
      }
    } else {
      FUZZ_CHECK(!why.empty());
    }
  }

  if (size <= 64) {
    uint64_t bytes = 0;
    why.clear();
    if (parse_quantity_bytes(text, &bytes, &why)) {
      FUZZ_CHECK(bytes > 0);
    } else {
      FUZZ_CHECK(!why.empty());
    }
    uint32_t gpu = 0, share = 0;
    std::string klass;
    if (parse_device_name(text, &gpu, &klass, &share)) FUZZ_CHECK(device_name(gpu, klass, share) == text);
  }
  return 0;
}
