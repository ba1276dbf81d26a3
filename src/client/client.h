// SPDX-License-Identifier: Apache-2.0
// gpuos_client: talking to gpuosd over the control socket, and formatting what it says (the CLI and
// gpuos-dra both use it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/text.h"
#include "gpuos/abi.h"

namespace gpuos::client {

struct Listing {
  std::vector<gpuos_msg_gpu_info> gpus;
  std::vector<gpuos_msg_tenant_info> tenants;
  // Live tenants' GPUs (TENANT_GPU), in the order they came; none from a daemon that predates them.
  std::vector<gpuos_msg_tenant_gpu> tenant_gpus;
};

// --socket if given, else the config's [daemon] socket, else the default one where a gpuosd answers
// (gpuos::connect_default_daemon: $GPUOS_SOCKET, or the user's own socket, then the system one),
// else the user's own socket; "" if there is none (then *why, when given, says why: XDG_RUNTIME_DIR
// unset and no system gpuosd, path too long). *answered (when given): false when the path is a
// default where no daemon answered (`gpuos run` then leaves the choice to the tenant's first CUDA
// call, when a daemon may have started).
std::string resolve_socket(const std::string& socket_opt, const Config& cfg, std::string* why = nullptr,
                           bool* answered = nullptr);

// Whether a gpuosd answers on `socket`, with the checks every client makes (its directory, its
// uid); false with the reason in *err.
bool daemon_answers(const std::string& socket, std::string* err);

// Each returns false with a one-line reason in *err (no daemon, refused, malformed reply...).
bool list_tenants(const std::string& socket, bool include_exited, Listing* out, std::string* err);
bool set_gate(const std::string& socket, uint32_t tenant_id, uint32_t gate, std::string* err);
bool shutdown_daemon(const std::string& socket, std::string* err);
// Kubernetes claims (admin; gpuos-dra): CLAIM_PREPARE, whose reply names the claim's socket
// directory (*socket_dir), and CLAIM_UNPREPARE.
bool prepare_claim(const std::string& socket, const gpuos_msg_claim_prepare& m, std::string* socket_dir,
                   std::string* err);
bool unprepare_claim(const std::string& socket, const std::string& claim_uid, std::string* err);

// gpuosd's word on a spatial trust domain (SPACE_QUERY), for `gpuos run --space`: the daemon owns
// the config, so the client does not guess from a file of its own.
struct SpaceDomainInfo {
  gpuos_status status = GPUOS_ERR_NOT_FOUND;  // OK, NOT_FOUND, PERMISSION (may not join), INTERNAL
  bool available = false;                     // its MPS control daemon answers
  std::string pipe_dir, log_dir;              // absolute; set unless NOT_FOUND/INTERNAL
  std::string text;                           // why not (printable)
};
enum class SpaceQuery {
  kAnswered,      // *out holds gpuosd's answer
  kNoDaemon,      // nobody (trustworthy) answers on the socket
  kNotSupported,  // a gpuosd that predates SPACE_QUERY
  kFailed,        // a malformed or unexpected answer
};
SpaceQuery query_space_domain(const std::string& socket, const std::string& domain, SpaceDomainInfo* out,
                              std::string* err);

// The `gpuos ps --json` schema of docs/CONTRACTS.md, whose version its top-level "schema_version"
// says: raised when a field is removed, renamed or changes meaning (added fields keep it).
constexpr int kPsJsonSchemaVersion = 1;
nlohmann::json listing_json(const Listing& l);
// The `gpuos ps` table (GPU lines, then one row per tenant).
std::string listing_table(const Listing& l);
// The GPUS cell of `gpuos ps` (a node with several GPUs): the GPUs a live tenant works on, "0,1";
// "-" when none is known (or it exited).
std::string gpus_text(const Listing& l, const gpuos_msg_tenant_info& t);
// "0 B", "512 B", "1.5 KiB", "12.0 MiB", "3.25 GiB".
std::string human_bytes(uint64_t bytes);
// The SMS column of `gpuos ps` and `gpuos top`: the tenant's spatial partition in SMs, "-" when
// unconfined; "64/104" = right-sized to 64 of its default 104.
std::string partition_text(const gpuos_msg_tenant_info& t);
// A guaranteed tenant's latency budget: "1.08/1.25 be 20%" (its slowdown as measured, "?" before
// the first measure, its budget, the share best-effort tenants have beside it); a paced
// best-effort tenant's pacing: "paced 20% <=157us" (its share of the GPU's time, the longest launch
// it may start now; "paced 100% <=1.0ms" while held in a guaranteed tenant's pause); else "-".
std::string budget_text(const gpuos_msg_tenant_info& t);
const char* state_name(uint32_t state);
// Who holds a live tenant's gate closed (TENANT_INFO gate_by): "admin" (gpuos gate ID close; it
// outranks the rest), "memory" (its memory is out or moving), "policy"; "" when the gate is open or
// the daemon does not say.
const char* gated_by_name(const gpuos_msg_tenant_info& t);
// The GPUs (bit i = GPU i) the policy holds a live tenant on while it runs on its others.
uint32_t gated_gpus(const gpuos_msg_tenant_info& t);
// The STATE column of ps and top: a live tenant whose memory is not on the GPU shows its swap state
// instead of "gated", one an admin holds shows "held" (a policy's gate opens by itself; a hold
// waits for an admin), and one gated on some of its GPUs only "gated:0,2" (those GPUs).
std::string display_state(const gpuos_msg_tenant_info& t);
// Time at the closed gate including the wait in progress (gate_wait_ns counts finished waits only):
// the GATE-WAIT of `gpuos ps` and the rate behind `gpuos top`'s GATE-WAIT%.
uint64_t gate_wait_with_current_ns(const gpuos_msg_tenant_info& t);

// Directory holding the running executable (from /proc/self/exe); "" if unknown.
std::string exe_dir();
std::string self_exe();

}  // namespace gpuos::client
