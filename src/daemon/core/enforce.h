// SPDX-License-Identifier: Apache-2.0
// What gpuosd does about a finding of its usage check (usage_verifier.h): the verify engine's
// enforcement parameters (VerifyOptions::enforce) and the rule that applies them, apart from the
// mechanisms that carry it out (enforcer.h).
//
// Every finding is reported (log line, metrics). A process found against the rules in
// `grace_rounds` rounds in a row is then frozen or killed, as configured: a tenant, and a process on
// gpuosd's GPUs that never registered (issue #62: under freeze or kill, every process on a governed
// GPU is a tenant or meets the enforcement; gpuosd itself, MPS servers, a tenant that just exited
// and one of the previous gpuosd that has yet to rejoin excepted). A tenant that leaves its
// connection while held (an escape: VerifyEngine::escaped) meets it at once.
#pragma once

#include <cstdint>
#include <string_view>

namespace gpuos::daemon {

enum class EnforceMode { kReport, kFreeze, kKill };
enum class EnforceAction { kReport, kFreeze, kKill };

// "report" / "freeze" / "kill"; false for anything else.
bool parse_enforce_mode(std::string_view text, EnforceMode* out);

struct EnforceParams {
  EnforceMode mode = EnforceMode::kReport;
  uint32_t grace_rounds = 2;  // >= 1
};

// rounds_in_a_row: how many consecutive rounds found this process against the rules (this one
// included).
EnforceAction decide_enforcement(const EnforceParams& p, uint32_t rounds_in_a_row);

}  // namespace gpuos::daemon
