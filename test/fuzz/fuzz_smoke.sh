#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fuzz smoke test (ctest label fuzz, GPUOS_FUZZ=ON builds): runs one libFuzzer binary over its seed
# corpus plus RUNS generated inputs. New inputs go to a scratch directory, never into the source tree.
# A crash, leak, sanitizer report or harness invariant failure makes libFuzzer exit non-zero and
# leaves the reproducer (crash-*, leak-*) in the scratch directory, whose path is printed.
# Usage: fuzz_smoke.sh FUZZER SEED_CORPUS_DIR [RUNS]
set -euo pipefail
fuzzer=$1
seeds=$2
runs=${3:-20000}
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuos-fuzz-smoke.XXXXXX")
mkdir -p "$work/corpus"
cd "$work"
if "$fuzzer" -runs="$runs" -max_len=1024 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "$work/corpus" "$seeds" >"$work/log" 2>&1; then
  grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/log" || tail -3 "$work/log"
  rm -rf "$work"
  exit 0
fi
tail -60 "$work/log"
echo "fuzz_smoke: $fuzzer failed; reproducer and log kept in $work" >&2
exit 1
