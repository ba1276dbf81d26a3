# Sourced by the GPU scripts that run tenants in a spatial domain (spatial_test.sh,
# spatial_service.sh): one gpuosd with one [[spatial.domain]], up once the domain is available.
#
# start_space_domain GPUOS WORKDIR DOMAIN LOGFILE [TOML...]
#   Writes WORKDIR/gpuos.toml (mps_dir WORKDIR/mps, the domain, any TOML lines given first, and
#   SPATIAL_TOML's lines in [spatial], e.g. mps_control = "..." for a stand-in), exports
#   GPUOS_CONFIG, GPUOS_SOCKET (WORKDIR/gpuosd.sock) and GPUOS_CLI, starts gpuosd (policy priority,
#   in its own session, output to LOGFILE) and sets DPID. Returns once gpuosd calls the domain
#   available (its MPS control daemon answers; at most 20 s): a tenant that asked before then would
#   be admitted time-shared. Returns 1 if it never did.
start_space_domain() {
  local gpuos=$1 w=$2 domain=$3 logfile=$4
  shift 4
  {
    printf '%s\n' "$@"
    printf '[spatial]\nmps_dir = "%s"\n%s\n[[spatial.domain]]\nname = "%s"\n' "$w/mps" "${SPATIAL_TOML:-}" "$domain"
  } >"$w/gpuos.toml"
  export GPUOS_CONFIG=$w/gpuos.toml GPUOS_SOCKET=$w/gpuosd.sock GPUOS_CLI=$gpuos
  setsid "$gpuos" daemon --socket "$GPUOS_SOCKET" --policy priority >"$logfile" 2>&1 &
  DPID=$!
  local _
  for _ in $(seq 200); do
    [[ $(cat "$w/mps/$domain/status" 2>/dev/null) == available ]] && return 0
    sleep 0.1
  done
  return 1
}
