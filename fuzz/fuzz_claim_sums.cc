// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the arithmetic of a claim's memory (#42 item 5). A TenantConfig of
// {mem: "1Gi", borrow: "18446744072635809792"} passed a 64 MiB cap because mem + borrow wrapped.
// Three ways in, one invariant: whatever is accepted has a quota + borrow that fits in 64 bits and,
// where gpuosd has a cap, stays within it.
//  - gpuosd: a CLAIM_PREPARE with the input's mem, borrow and cap, through Core::handle_message
//    (claim_from_message and Core::check_claim);
//  - gpuos-dra: the rest of the input as a TenantConfig (parse_tenant_config, finish_tenant_spec),
//    turned into its CLAIM_PREPARE (claim_message) and sent to the same gpuosd;
//  - sizes: the rest as a gpuos size (parse_size): accepted means more than 0 bytes, and the byte
//    count reads back as itself.
// Input: byte 0 picks the cap (bit 0: none; else the 8 bytes at 17..24, or 64 MiB with bit 1), bytes
// 1..16 are mem and borrow (little-endian), the rest is text. Shorter inputs are text only. Seeds:
// fuzz/corpus/claim_sums (fuzz/make_corpus.py).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/ipc.h"
#include "common/log.h"
#include "daemon/core/claims.h"
#include "daemon/core/core.h"
#include "dra/plugin.h"
#include "dra/tenant_config.h"

using namespace gpuos;
using namespace gpuos::daemon;

#define FUZZ_CHECK(cond)                                                                                 \
  do {                                                                                                   \
    if (!(cond)) {                                                                                       \
      std::fprintf(stderr, "fuzz_claim_sums: invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                                      \
    }                                                                                                    \
  } while (0)

namespace {

constexpr const char* kUid = "0b7e5c1e-7f00-4a4b-9a3e-000000000001";
constexpr const char* kGpu = "00000000-0000-0000-0000-000000000000";
constexpr uint64_t kGpuMem = 16ull << 30;

class NoSockets final : public ClaimSockets {
 public:
  std::string open_claim_socket(const std::string&) override { return ""; }
  void close_claim_socket(const std::string&) override {}
};

uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void fill(char* dst, std::size_t n, const char* s) {
  std::memset(dst, 0, n);
  std::strncpy(dst, s, n - 1);
}

// Sends m to a fresh gpuosd with `cap` as an admin; when it is accepted, the prepared claim obeys the
// invariant. Returns whether it was accepted.
bool prepare(const gpuos_msg_claim_prepare& m, uint64_t cap) {
  CoreOptions o;
  o.gpus.push_back(GpuInfo{0, "Sim", std::string("GPU-") + kGpu, 132, kGpuMem, {}, 0});
  o.claim_socket_root = "/nonexistent/gpuos-fuzz/gpuosd.sock";  // (NoSockets makes nothing there)
  o.mem_quota_cap_bytes = cap;
  NoSockets sockets;
  Core core(std::move(o));
  core.set_claim_sockets(&sockets);
  Connection admin;
  admin.id = 1;
  admin.peer = Peer{1, 0, 0, true};
  const Outcome out = core.handle_message(admin, &m, sizeof(m));
  FUZZ_CHECK(out.replies.size() == 1);
  gpuos_msg_reply r{};
  FUZZ_CHECK(out.replies[0].bytes.size() >= sizeof(r));
  std::memcpy(&r, out.replies[0].bytes.data(), sizeof(r));
  const Claim* c = core.claims().find(kUid);
  if (r.status != GPUOS_OK) {
    FUZZ_CHECK(c == nullptr && r.text[0] != '\0');
    return false;
  }
  FUZZ_CHECK(c != nullptr);
  uint64_t limit = 0;
  FUZZ_CHECK(!__builtin_add_overflow(c->mem_bytes, c->borrow_bytes, &limit));
  FUZZ_CHECK(cap == 0 || limit <= cap);
  FUZZ_CHECK(c->mem_bytes <= kGpuMem);
  FUZZ_CHECK(c->borrow_bytes == 0 || c->mem_bytes != 0);
  return true;
}

gpuos_msg_claim_prepare claim_msg(uint64_t mem, uint64_t borrow) {
  gpuos_msg_claim_prepare m{};
  init_header(&m.hdr, GPUOS_MSG_CLAIM_PREPARE, sizeof(m), 7);
  fill(m.claim_uid, sizeof(m.claim_uid), kUid);
  fill(m.claim_namespace, sizeof(m.claim_namespace), "fuzz");
  fill(m.claim_name, sizeof(m.claim_name), "claim");
  fill(m.gpu_uuid, sizeof(m.gpu_uuid), kGpu);
  m.tenant_class = GPUOS_CLASS_GUARANTEED;
  m.weight = 100;
  m.mem_bytes = mem;
  m.borrow_bytes = borrow;
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  log::init("fuzz_claim_sums", log::Level::kError, 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  uint64_t cap = 0;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (size >= 25) {
    const uint8_t flags = data[0];
    cap = (flags & 1) ? 0 : (flags & 2) ? (64ull << 20) : le64(data + 17);
    prepare(claim_msg(le64(data + 1), le64(data + 9)), cap);
    text.remove_prefix(25);
  }

  // gpuos-dra: a TenantConfig, finished against a guaranteed share, then its CLAIM_PREPARE.
  const nlohmann::json params = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!params.is_discarded()) {
    dra::TenantSpec spec;
    std::string why;
    if (dra::parse_tenant_config(params, &spec, &why) &&
        dra::finish_tenant_spec("guaranteed", "gpu-0-guaranteed-0", &spec, &why)) {
      uint64_t sum = 0;
      FUZZ_CHECK(!__builtin_add_overflow(spec.mem_bytes.value_or(0), spec.borrow_bytes.value_or(0), &sum));
      dra::ClaimAllocation a;
      a.claim_namespace = "fuzz";
      a.claim_name = "claim";
      a.claim_uid = kUid;
      a.spec = spec;
      gpuos_msg_claim_prepare m{};
      FUZZ_CHECK(dra::claim_message(a, std::string("GPU-") + kGpu, &m, &why));
      prepare(m, cap);
    } else {
      FUZZ_CHECK(!why.empty());
    }
  }

  // A size as the config and `gpuos run --mem/--borrow` read one.
  if (text.size() <= 64) {
    uint64_t bytes = 0;
    std::string why;
    if (parse_size(text, &bytes, &why)) {
      FUZZ_CHECK(bytes > 0);
      uint64_t again = 0;
      FUZZ_CHECK(parse_size(std::to_string(bytes), &again) && again == bytes);
    } else {
      FUZZ_CHECK(!why.empty());
    }
  }
  return 0;
}
