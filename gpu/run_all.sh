#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Everything gpuos runs on a GPU machine in one go (one device call):
#   1. the GPU suite (gpu/run_suite.sh): CUDA C++, PyTorch eager, CUDA graphs, Triton under gpuos;
#   2. the launch-overhead benchmark, registered with a live gpuosd;
#   3. memory quotas with PyTorch (default allocator and expandable segments);
#   4. long launches learned from a budgeted tenant's timings (gpu/learned_phase.sh);
#   5. `gpuos demo` on the GPU;
#   6. spatial sharing (gpu/spatial_test.sh): confinement, resizing under load, stream order, PyTorch;
#   7. KV pools (gpu/kv_test.sh): growth cost, a borrower that meets its target, one swapped out.
# Usage (repo root, build tree at ./build or GPUOS_BUILD_DIR): OUT=/results bash gpu/run_all.sh
# PARTS (default: all of them) runs some only, when device time is short: e.g. PARTS="suite launch
# learned" checks an interposer change (the suite, its launch cost, learned phases).
# Writes to $OUT: gpu_suite.json, gpu_suite.md, launch_overhead.json, quota.jsonl, learned_phase.json, demo.txt,
# spatial.json, spatial.md, kv.json, kv.md, logs.tar.gz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
: "${OUT:?set OUT}"
BUILD=${GPUOS_BUILD_DIR:-build}
export LD_LIBRARY_PATH="$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # libbenchmark if carried
PARTS=" ${PARTS:-suite launch quota learned demo spatial kv} "
part() { [[ $PARTS == *" $1 "* ]]; }
rc=0
mkdir -p "$OUT/logs"

part suite && { OUT="$OUT" bash gpu/run_suite.sh || rc=1; }

if part launch || part quota; then
  sock=/tmp/gpuos-bench/gpuosd.sock
  mkdir -p /tmp/gpuos-bench
  source gpu/lib/gpuosd.sh
  gpuosd_start "$BUILD/bin/gpuos" "$sock" "$OUT/logs/bench-gpuosd.log" "$BUILD/bin/gpuosd" --socket "$sock"
  gpuosd_wait 5
  if part launch; then
    echo "== launch overhead (registered with gpuosd)"
    GPUOS_SOCKET=$sock "$BUILD/bin/gpuos-bench-launch" --benchmark_enable_random_interleaving=true \
      --benchmark_out="$OUT/launch_overhead.json" --benchmark_out_format=json 2>&1 | tail -20 || rc=1
  fi
  if part quota; then
    echo "== memory quota (PyTorch, 4 GiB)"
    : >"$OUT/quota.jsonl"
    for conf in "" "expandable_segments:True"; do
      PYTORCH_CUDA_ALLOC_CONF=$conf "$BUILD/bin/gpuos" run --socket "$sock" --name quota --mem 4GiB -- \
        python3 gpu/tests/torch_quota.py >>"$OUT/quota.jsonl" 2>>"$OUT/logs/quota.log" || rc=1
    done
    cat "$OUT/quota.jsonl"
  fi
  gpuosd_stop
fi

if part learned; then
  echo "== long launches learned from timings (a budget, no engine hint)"
  OUT="$OUT" bash gpu/learned_phase.sh || rc=1
fi

if part demo; then
  echo "== gpuos demo"
  timeout 240 "$BUILD/bin/gpuos" demo --seconds 3 2>&1 | tee "$OUT/demo.txt" || rc=1
fi

if part spatial; then
  echo "== spatial sharing"
  OUT="$OUT" bash gpu/spatial_test.sh || rc=1
fi

if part kv; then
  echo "== KV pools"
  OUT="$OUT" bash gpu/kv_test.sh || rc=1
fi

find "$OUT/logs" \( -type s -o -type p \) -delete 2>/dev/null  # MPS pipes: they do not travel back
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"
cat "$OUT/gpu_suite.md" "$OUT/spatial.md" "$OUT/kv.md" 2>/dev/null
exit $rc
