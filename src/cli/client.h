// gpuos CLI: talking to gpuosd over the control socket, and formatting what it says.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/text.h"
#include "gpuos/abi.h"

namespace gpuos::cli {

struct Listing {
  std::vector<gpuos_msg_gpu_info> gpus;
  std::vector<gpuos_msg_tenant_info> tenants;
};

// --socket if given, else the config's [daemon] socket, else gpuos::socket_path(); "" if there is
// none (then *why, when given, says why: XDG_RUNTIME_DIR unset, path too long).
std::string resolve_socket(const std::string& socket_opt, const Config& cfg, std::string* why = nullptr);


// Each returns false with a one-line reason in *err (no daemon, refused, malformed reply...).
bool list_tenants(const std::string& socket, bool include_exited, Listing* out, std::string* err);
bool set_gate(const std::string& socket, uint32_t tenant_id, uint32_t gate, std::string* err);
bool shutdown_daemon(const std::string& socket, std::string* err);

// The `gpuos ps --json` schema of docs/CONTRACTS.md.
nlohmann::json listing_json(const Listing& l);
// The `gpuos ps` table (GPU lines, then one row per tenant).
std::string listing_table(const Listing& l);
// "0 B", "512 B", "1.5 KiB", "12.0 MiB", "3.25 GiB".
std::string human_bytes(uint64_t bytes);
// The SMS column of `gpuos ps` and `gpuos top`: the tenant's spatial partition in SMs, "-" when
// unconfined; "64/104" = right-sized to 64 of its default 104.
std::string partition_text(const gpuos_msg_tenant_info& t);
// A guaranteed tenant's latency budget: "1.08/1.25 be 20%" (its slowdown as measured, "?" before
// the first measure, its budget, the share best-effort tenants have beside it); "-" without one.
std::string budget_text(const gpuos_msg_tenant_info& t);
const char* state_name(uint32_t state);
// Time at the closed gate including the wait in progress (gate_wait_ns counts finished waits only):
// the GATE-WAIT of `gpuos ps` and the rate behind `gpuos top`'s GATE-WAIT%.
uint64_t gate_wait_with_current_ns(const gpuos_msg_tenant_info& t);

// Directory holding the running executable (from /proc/self/exe); "" if unknown.
std::string exe_dir();
std::string self_exe();

}  // namespace gpuos::cli
