#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU suite's CUDA programs (gpu/tests/*.cu) still compile, as the GPU scripts build them
# (nvcc -O2 -arch=sm_90; cuda_api.cu also with --default-stream per-thread), so that one broken
# here is found without device time. Objects only, in a temporary directory removed on exit.
#   gpu_programs_compile.sh [DIR]     (default: the repo's gpu/tests)
#   gpu_programs_compile.sh --self-test   (a broken program beside a good one must fail it)
# Exit 0: all compiled; 1: some did not (named); 77: no nvcc (skipped).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $NVCC ]] || { echo "no nvcc: skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpuos-nvcc-XXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

if [[ ${1:-} == --self-test ]]; then
  mkdir "$tmp/src"
  printf '__global__ void k(float* x) { x[threadIdx.x] = 1; }\nint main() { return 0; }\n' >"$tmp/src/good.cu"
  printf '__global__ void k(float* x) { x[threadIdx.x] = undeclared; }\n' >"$tmp/src/bad.cu"
  out=$(bash "${BASH_SOURCE[0]}" "$tmp/src" 2>&1)
  rc=$?
  if ((rc == 1)) && grep -q "FAILED: .*bad.cu" <<<"$out" && ! grep -q "FAILED: .*good.cu" <<<"$out"; then
    echo "self-test ok: the broken program failed it, alone"
    exit 0
  fi
  echo "self-test FAILED (rc $rc):"
  echo "$out"
  exit 1
fi

dir=${1:-$here/../../gpu/tests}
shopt -s nullglob
files=("$dir"/*.cu)
((${#files[@]} > 0)) || { echo "no .cu files in $dir"; exit 1; }
failed=0
for f in "${files[@]}"; do
  flags=(-O2 -arch=sm_90 -c)
  variants=("")
  [[ $(basename "$f") == cuda_api.cu ]] && variants+=("--default-stream per-thread")
  for v in "${variants[@]}"; do
    # shellcheck disable=SC2086  # a variant is a flag list
    if "$NVCC" "${flags[@]}" $v -o "$tmp/$(basename "$f" .cu).o" "$f" >"$tmp/log" 2>&1; then
      echo "ok: $f ${v}"
    else
      echo "FAILED: $f ${v}"
      head -20 "$tmp/log"
      failed=1
    fi
  done
done
exit $failed
