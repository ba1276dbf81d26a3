#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/check_layering.py must pass on src/ and must catch a forbidden edge in a made-up tree.
set -euo pipefail
py=$1; checker=$2; src=$3
"$py" "$checker" "$src"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/cli" "$tmp/src/daemon" "$tmp/src/policies"
echo '#include "common/config.h"' > "$tmp/src/cli/ok.cc"
echo '#include "daemon/core.h"' > "$tmp/src/policies/bad.cc"
if out=$("$py" "$checker" "$tmp/src"); then echo "FAIL: a policies -> daemon edge passed"; exit 1; fi
grep -q "policies -> daemon" <<<"$out" || { echo "FAIL: not reported: $out"; exit 1; }
echo '#include "daemon/core.h"' > "$tmp/src/cli/bad.cc"; rm "$tmp/src/policies/bad.cc"
if "$py" "$checker" "$tmp/src" >/dev/null; then echo "FAIL: a cli -> daemon edge passed"; exit 1; fi
rm "$tmp/src/cli/bad.cc"
# No exceptions left (#41): gpuos-dra talks to gpuosd through client/, not cli/; the interposer
# includes kv's texts from include/gpuos/; the client is below the CLI.
mkdir -p "$tmp/src/dra" "$tmp/src/interpose" "$tmp/src/kv" "$tmp/src/client"
echo '#include "client/client.h"' > "$tmp/src/dra/ok.cc"; echo '#include "client/client.h"' > "$tmp/src/cli/ok2.cc"
echo '#include "gpuos/result_text.h"' > "$tmp/src/interpose/ok.cc"
"$py" "$checker" "$tmp/src" >/dev/null || { echo "FAIL: allowed edges refused"; exit 1; }
for edge in "dra cli/commands.h" "interpose kv/kv.h" "client cli/top.h"; do
  set -- $edge
  echo "#include \"$2\"" > "$tmp/src/$1/bad.cc"
  if "$py" "$checker" "$tmp/src" >/dev/null; then echo "FAIL: a $1 -> ${2%%/*} edge passed"; exit 1; fi
  rm "$tmp/src/$1/bad.cc"
done
# gpuosd: its core never includes policies/ (the engines use slots/ and its built-ins); main.cc does.
mkdir -p "$tmp/src/daemon/core" "$tmp/src/daemon/server"
echo '#include "policies/registry.h"' > "$tmp/src/daemon/main.cc"
echo '#include "daemon/core/core.h"' > "$tmp/src/daemon/server/server.cc"
"$py" "$checker" "$tmp/src" >/dev/null || { echo "FAIL: main.cc -> policies or server -> core refused"; exit 1; }
echo '#include "policies/builtin/builtin.h"' > "$tmp/src/daemon/core/core.cc"
if out=$("$py" "$checker" "$tmp/src"); then echo "FAIL: a daemon/core -> policies edge passed"; exit 1; fi
grep -q "daemon/core -> policies" <<<"$out" || { echo "FAIL: not reported: $out"; exit 1; }
echo '#include "daemon/server/server.h"' > "$tmp/src/daemon/core/core.cc"
if "$py" "$checker" "$tmp/src" >/dev/null; then echo "FAIL: a daemon/core -> daemon/server edge passed"; exit 1; fi
echo "layering: ok"
