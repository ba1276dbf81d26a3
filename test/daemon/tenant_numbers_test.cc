// SPDX-License-Identifier: Apache-2.0
// A tenant's numbers (common/tenant_numbers.h) at every boundary they cross: each range is defined
// once, and `gpuos run`'s parser, gpuos-dra's TenantConfig, gpuosd's CLAIM_PREPARE (and its claims
// file) and its REGISTER refuse the same out-of-range value with the same bound; in-range values
// come through each as the same numbers (the environment across exec, the messages, the file).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/ipc.h"
#include "common/tenant_numbers.h"
#include "daemon/core/claims.h"
#include "daemon/core/core.h"
#include "dra/tenant_config.h"
#include "tenant_side.h"

namespace gpuos::daemon {
namespace {

std::string bound(const NumberRange& r) { return std::to_string(r.lo) + ".." + std::to_string(r.hi); }

gpuos_msg_claim_prepare claim_message() {
  gpuos_msg_claim_prepare m{};
  init_header(&m.hdr, GPUOS_MSG_CLAIM_PREPARE, sizeof(m), 1);
  std::strcpy(m.claim_uid, "0a1b2c3d-0000-4000-8000-000000000001");
  std::strcpy(m.claim_namespace, "ns");
  std::strcpy(m.claim_name, "c");
  std::strcpy(m.space_domain, "serve");  // (SMs need one)
  m.tenant_class = GPUOS_CLASS_GUARANTEED;  // (a latency budget needs it)
  m.weight = kDefaultWeight;
  return m;
}

// gpuosd's REGISTER as a tenant sends it; the reply's status and text.
struct Registrar {
  std::unique_ptr<Core> core;
  pid_t next_pid = 5000;
  Registrar() {
    CoreOptions o;
    o.max_tenants = 64;
    o.gpus.push_back(GpuInfo{0, "Sim", "GPU-0", 132, 1ull << 34, {}, 0});
    o.unix_ms = [] { return uint64_t{1700000000000}; };
    o.one_tenant_per_pid = false;
    core = std::make_unique<Core>(std::move(o));
  }
  std::pair<int32_t, std::string> send(const TenantNumbers& n) {
    Connection conn;
    conn.id = static_cast<uint32_t>(next_pid);
    conn.peer.pid = next_pid++;
    conn.peer.uid = 0;
    conn.peer.admin = true;
    gpuos_msg_register m = tenant_side::registration(conn.peer.pid, GPUOS_CLASS_BEST_EFFORT);
    put_numbers(n, &m);
    Outcome out = core->handle_message(conn, &m, sizeof(m));
    if (out.replies.empty()) return {-1, "no reply"};
    auto r = tenant_side::decode<gpuos_msg_register_reply>(out.replies[0]);
    for (const Outgoing& o : out.replies) {
      for (int fd : o.fds) {
        if (fd >= 0) close(fd);
      }
    }
    return {r.status, r.text};
  }
};

struct Field {
  const NumberRange& range;
  void (*set)(TenantNumbers*, int64_t);
  const char* config_key;  // TenantConfig's
};
const Field kFields[] = {
    {kPriorityRange, [](TenantNumbers* n, int64_t v) { n->priority = static_cast<int32_t>(v); }, "priority"},
    {kWeightRange, [](TenantNumbers* n, int64_t v) { n->weight = static_cast<uint32_t>(v); }, "weight"},
    {kSmsRange, [](TenantNumbers* n, int64_t v) { n->space_sms = static_cast<uint32_t>(v); }, "sms"},
    {kSlowdownRange, [](TenantNumbers* n, int64_t v) { n->max_slowdown_permille = static_cast<uint32_t>(v); },
     "maxSlowdown"},
};

TenantNumbers guaranteed() {
  TenantNumbers n;
  n.tenant_class = GPUOS_CLASS_GUARANTEED;
  return n;
}

// The CLI's parser for a field (the one gpuos run's options use): a whole number, or the budget's
// factor for the latency budget.
bool cli_parses(const Field& f, int64_t v, std::string* why) {
  if (&f.range == &kSlowdownRange) {
    uint32_t permille = 0;
    const std::string text = std::to_string(v / 1000) + "." + std::to_string(1000 + v % 1000).substr(1);
    return parse_slowdown_permille(text, &permille);
  }
  int64_t out = 0;
  char buf[GPUOS_TEXT_MAX];
  const bool ok = parse_number(std::to_string(v), f.range, &out, buf, sizeof(buf));
  *why = buf;
  return ok && out == v;
}

std::string tenant_config_refusal(const Field& f, int64_t v) {
  nlohmann::json j = {{"apiVersion", "gpuos.io/v1"}, {"kind", "TenantConfig"}};
  if (&f.range == &kSlowdownRange) {
    j[f.config_key] = std::to_string(v / 1000) + "." + std::to_string(1000 + v % 1000).substr(1);
  } else {
    j[f.config_key] = v;
  }
  dra::TenantSpec spec;
  std::string why;
  return dra::parse_tenant_config(j, &spec, &why) ? "" : why;
}

TEST(TenantNumbers, EveryBoundaryRefusesTheSameValueWithTheSameBound) {
  Registrar daemon;
  for (const Field& f : kFields) {
    for (const int64_t v : {f.range.lo - 1, f.range.hi + 1}) {
      if (v == 0 && (&f.range == &kSmsRange || &f.range == &kSlowdownRange)) continue;  // 0 = the default
      SCOPED_TRACE(std::string(f.range.name) + " " + std::to_string(v));
      TenantNumbers n = guaranteed();
      f.set(&n, v);
      const std::string want = std::string(f.range.name) + " " + std::to_string(v) + " is out of range " + bound(f.range);
      // The shared check.
      EXPECT_EQ(tenant_numbers_refusal(n), want);
      // gpuos run's options.
      std::string why;
      EXPECT_FALSE(cli_parses(f, v, &why));
      if (&f.range != &kSlowdownRange) {
        EXPECT_EQ(why, want);
      }
      // gpuos-dra's TenantConfig (JSON): the same bound, in its own words.
      const std::string config = tenant_config_refusal(f, v);
      EXPECT_NE(config, "");
      if (&f.range == &kSlowdownRange) {
        EXPECT_NE(config.find(slowdown_text(kMinSlowdownPermille) + ".." + slowdown_text(kMaxSlowdownPermille)),
                  std::string::npos)
            << config;
      } else {
        EXPECT_NE(config.find(bound(f.range)), std::string::npos) << config;
      }
      // gpuosd's CLAIM_PREPARE.
      gpuos_msg_claim_prepare c = claim_message();
      put_numbers(n, &c);
      Claim claim;
      EXPECT_EQ(claim_from_message(c, &claim), want);
      // gpuosd's REGISTER.
      auto [status, text] = daemon.send(n);
      EXPECT_EQ(status, GPUOS_ERR_BAD_MESSAGE);
      EXPECT_EQ(text, want);
    }
  }
  EXPECT_EQ(daemon.core->live_tenants(), 0u);
}

TEST(TenantNumbers, InRangeValuesComeThroughAsTheSameNumbers) {
  char dir[] = "/tmp/gpuos-numbers-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/claims";
  Registrar daemon;
  for (const Field& f : kFields) {
    for (const int64_t v : {f.range.lo, f.range.hi}) {
      SCOPED_TRACE(std::string(f.range.name) + " " + std::to_string(v));
      TenantNumbers n = guaranteed();
      f.set(&n, v);
      n.mem_bytes = 3ull << 30;
      n.borrow_bytes = UINT64_MAX - n.mem_bytes;  // the largest sum there is
      ASSERT_EQ(tenant_numbers_refusal(n), "");
      std::string why;
      EXPECT_TRUE(cli_parses(f, v, &why)) << why;
      EXPECT_EQ(tenant_config_refusal(f, v), "");
      // The environment across exec: written, read back by the interposer's reader.
      std::vector<std::string> set;
      for (const auto& [var, text] : tenant_env(n)) {
        if (text.empty()) unsetenv(var.c_str());
        else setenv(var.c_str(), text.c_str(), 1);
        set.push_back(var);
      }
      TenantNumbers back;
      read_tenant_env(&back, [](const char* var, const char* value, const char*) {
        ADD_FAILURE() << var << "=" << value;
      });
      EXPECT_EQ(back, n);
      for (const std::string& var : set) unsetenv(var.c_str());
      // The messages, the claim and gpuosd's claims file.
      gpuos_msg_register r{};
      put_numbers(n, &r);
      EXPECT_EQ(numbers_of(r), n);
      gpuos_msg_claim_prepare c = claim_message();
      put_numbers(n, &c);
      Claim claim;
      ASSERT_EQ(claim_from_message(c, &claim), "");
      std::string unwritten;
      {
        ClaimStore store(path);
        ASSERT_TRUE(store.put(claim, &unwritten)) << unwritten;
      }
      ClaimStore reread(path);
      reread.load();
      const Claim* kept = reread.find(claim.uid);
      ASSERT_NE(kept, nullptr);
      EXPECT_EQ(*kept, claim);
      EXPECT_EQ((TenantNumbers{kept->tenant_class, kept->priority, kept->weight, kept->space_sms, kept->mem_bytes,
                               kept->borrow_bytes, kept->max_slowdown_permille}),
                n);
      // gpuosd's REGISTER admits it.
      n.mem_bytes = n.borrow_bytes = 0;  // (no GPU memory to grant here)
      auto [status, text] = daemon.send(n);
      EXPECT_EQ(status, GPUOS_OK) << text;
    }
  }
  unlink(path.c_str());
  unlink((path + ".tmp").c_str());
  rmdir(dir);
}

TEST(TenantNumbers, TheBudgetsTextRoundTrips) {
  for (uint32_t p = kMinSlowdownPermille; p <= kMaxSlowdownPermille; ++p) {
    uint32_t back = 0;
    const std::string text = slowdown_text(p);
    ASSERT_TRUE(parse_slowdown_permille(text, &back)) << text;
    ASSERT_EQ(back, p) << text;
  }
  EXPECT_EQ(slowdown_text(1250), "1.25");
  EXPECT_EQ(slowdown_text(2000), "2");
  EXPECT_EQ(slowdown_text(1001), "1.001");
  uint32_t v = 0;
  for (const char* bad : {"1", "1.000", "100.001", "-2", "+2", "1.2345", "nan", "1e1", " 1.5", ""}) {
    EXPECT_FALSE(parse_slowdown_permille(bad, &v)) << bad;
  }
}

TEST(TenantNumbers, TheEnvironmentReaderSaysWhatItIgnores) {
  setenv("GPUOS_TENANT_WEIGHT", "0", 1);
  setenv("GPUOS_TENANT_PRIORITY", "12x", 1);
  setenv("GPUOS_TENANT_MAX_SLOWDOWN", "1.0", 1);
  setenv("GPUOS_TENANT_MEM", "-1", 1);
  setenv("GPUOS_TENANT_CLASS", "premium", 1);
  setenv("GPUOS_TENANT_SMS", "0", 1);  // 0: the domain's default, not an error
  static std::vector<std::string> said;
  said.clear();
  TenantNumbers n;
  read_tenant_env(&n, [](const char* var, const char* value, const char* want) {
    said.push_back(std::string(var) + "=" + value + ": " + want);
  });
  EXPECT_EQ(n, TenantNumbers{});  // each left at its default
  ASSERT_EQ(said.size(), 5u);
  EXPECT_EQ(said[0], "GPUOS_TENANT_CLASS=premium: guaranteed or best-effort");
  EXPECT_EQ(said[1], "GPUOS_TENANT_PRIORITY=12x: \"12x\" is not a whole number");
  EXPECT_EQ(said[2], "GPUOS_TENANT_WEIGHT=0: weight 0 is out of range 1..10000");
  EXPECT_EQ(said[3], "GPUOS_TENANT_MEM=-1: a byte count");
  EXPECT_NE(said[4].find("GPUOS_TENANT_MAX_SLOWDOWN=1.0: "), std::string::npos);
  // Quota and borrow that each parse but wrap together: the borrow goes (gpuosd would refuse them).
  setenv("GPUOS_TENANT_MEM", "1073741824", 1);
  setenv("GPUOS_TENANT_MEM_BORROW", "18446744072635809792", 1);
  said.clear();
  n = TenantNumbers{};
  read_tenant_env(&n, [](const char* var, const char* value, const char* want) {
    said.push_back(std::string(var) + "=" + value + ": " + want);
  });
  EXPECT_EQ(n.mem_bytes, 1ull << 30);
  EXPECT_EQ(n.borrow_bytes, 0u);
  ASSERT_EQ(said.size(), 5u);  // (the others as above)
  EXPECT_EQ(said[3], "GPUOS_TENANT_MEM_BORROW=18446744072635809792: a byte count that, with the quota, fits 2^64 - 1");
  EXPECT_EQ(tenant_numbers_refusal(n), "");
  for (const char* var : {"GPUOS_TENANT_WEIGHT", "GPUOS_TENANT_PRIORITY", "GPUOS_TENANT_MAX_SLOWDOWN",
                          "GPUOS_TENANT_MEM", "GPUOS_TENANT_MEM_BORROW", "GPUOS_TENANT_CLASS", "GPUOS_TENANT_SMS"}) {
    unsetenv(var);
  }
}

}  // namespace
}  // namespace gpuos::daemon
