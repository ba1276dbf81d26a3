# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Sourced by the GPU scripts that run tenants in a spatial domain (spatial_test.sh,
# spatial_service.sh, verify_nvml.sh): one gpuosd with one [[spatial.domain]], up once the domain is
# available. Started and stopped with gpu/lib/gpuosd.sh (gpuosd_stop ends it).
#
# start_space_domain GPUOS WORKDIR DOMAIN LOGFILE [TOML...]
#   Writes WORKDIR/gpuos.toml (mps_dir WORKDIR/mps, the domain, any TOML lines given first, and
#   SPATIAL_TOML's lines in [spatial], e.g. mps_control = "..." for a stand-in), exports
#   GPUOS_CONFIG, GPUOS_SOCKET (WORKDIR/gpuosd.sock) and GPUOS_CLI, starts gpuosd (policy priority,
#   in its own session, output to LOGFILE; GPUOSD_PID). Returns once gpuosd calls the domain
#   available (its MPS control daemon answers; at most 20 s): a tenant that asked before then would
#   be admitted time-shared. Returns 1 if it never did.
source "$(dirname "${BASH_SOURCE[0]}")/gpuosd.sh"

start_space_domain() {
  local gpuos=$1 w=$2 domain=$3 logfile=$4
  shift 4
  {
    printf '%s\n' "$@"
    printf '[spatial]\nmps_dir = "%s"\n%s\n[[spatial.domain]]\nname = "%s"\n' "$w/mps" "${SPATIAL_TOML:-}" "$domain"
  } >"$w/gpuos.toml"
  export GPUOS_CONFIG=$w/gpuos.toml GPUOS_SOCKET=$w/gpuosd.sock GPUOS_CLI=$gpuos
  SPACE_DOMAIN_STATUS=$w/mps/$domain/status
  gpuosd_start "$gpuos" "$GPUOS_SOCKET" "$logfile" "$gpuos" daemon --socket "$GPUOS_SOCKET" --policy priority
  gpuosd_wait 20 space_domain_available
}

space_domain_available() { [[ $(cat "$SPACE_DOMAIN_STATUS" 2>/dev/null) == available ]]; }
