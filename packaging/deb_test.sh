#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The .debs end to end (one per role, packaging/cpack.cmake): built with CPack from BUILD_DIR, then
# checked:
#   - gpuos and gpuos-dra together hold every file `cmake --install` installs (under /usr), plus
#     /etc/gpuos/gpuos.toml in gpuos as a conffile; gpuos-dra holds only the plugin, its man page
#     and its doc folder, and gpuos depends on no gRPC, protobuf or curl; the unit starts
#     /usr/bin/gpuosd and names man:gpuosd(8); every man page is gzipped; each package has its
#     copyright file, which declares gpuos's files (Files: *) Apache-2.0;
#   - lintian reports no error (E:) on either package (skipped without lintian, unless
#     GPUOS_REQUIRE_LINTIAN=1, as .ci/run sets);
#   - unpacked (dpkg-deb -x), gpuos, gpuosd and gpuos-dra print the packages' version, and `gpuos
#     config check` passes the default config;
#   - with --install (CI: root on a Debian machine): dpkg -i of both, the same checks from /usr/bin
#     and /etc, `gpuos run` finds /usr/lib/libgpuos.so, then dpkg --purge leaves none of their files.
#   packaging/deb_test.sh BUILD_DIR [--install]        (exit 77: dpkg-deb or cpack missing: skipped)
# ctest e2e_deb runs it without --install; .ci/run with it.
set -euo pipefail
build=$(cd "${1:?usage: deb_test.sh BUILD_DIR [--install]}" && pwd)
install=0
[[ ${2:-} == --install ]] && install=1
fail() { echo "FAIL: $*" >&2; exit 1; }
trap 'echo "FAIL: deb_test.sh line $LINENO: $BASH_COMMAND" >&2' ERR
cpack=${CPACK_COMMAND:-$(command -v cpack || true)}
cmake=${CMAKE_COMMAND:-$(command -v cmake || true)}
if [[ -z $cpack || -z $cmake ]] || ! command -v dpkg-deb >/dev/null; then
  echo "skipped: needs cpack, cmake and dpkg-deb"
  exit 77
fi
[[ -f $build/CPackConfig.cmake ]] || fail "$build/CPackConfig.cmake missing: configure the build first"

out=$(mktemp -d /tmp/gpuos-deb-test.XXXXXX)
installed=0
cleanup() {
  if (( installed )); then dpkg --purge gpuos-dra gpuos >/dev/null 2>&1 || echo "WARNING: dpkg --purge failed" >&2; fi
  rm -rf "$out"
}
trap cleanup EXIT

"$cpack" -G DEB --config "$build/CPackConfig.cmake" -B "$out" >"$out/cpack.log" 2>&1 \
  || fail "cpack: $(tail -20 "$out/cpack.log")"
deb=$(ls "$out"/gpuos_*.deb 2>/dev/null) && [[ $(wc -l <<<"$deb") == 1 ]] || fail "cpack made no gpuos_*.deb: $(ls "$out")"
dra=$(ls "$out"/gpuos-dra_*.deb 2>/dev/null) && [[ $(wc -l <<<"$dra") == 1 ]] || fail "cpack made no gpuos-dra_*.deb: $(ls "$out")"
version=$(dpkg-deb -f "$deb" Version)
[[ $(dpkg-deb -f "$deb" Package) == gpuos ]] || fail "package name: $(dpkg-deb -f "$deb" Package)"
[[ $(dpkg-deb -f "$dra" Package) == gpuos-dra ]] || fail "package name: $(dpkg-deb -f "$dra" Package)"
[[ -n $version && $(dpkg-deb -f "$dra" Version) == "$version" ]] || fail "Versions: $version, $(dpkg-deb -f "$dra" Version)"
for d in "$deb" "$dra"; do
  echo "built $(basename "$d") ($(du -k "$d" | cut -f1) KiB), Depends: $(dpkg-deb -f "$d" Depends)"
done
# The node's package pulls in no Kubernetes plugin dependency; the plugin's needs gpuosd's.
! dpkg-deb -f "$deb" Depends | grep -Eq 'grpc|protobuf|absl|curl' || fail "gpuos depends on: $(dpkg-deb -f "$deb" Depends)"
dpkg-deb -f "$dra" Depends | grep -q "gpuos (= $version)" || fail "gpuos-dra does not depend on gpuos $version"

# Their files: every one `cmake --install` installs, under /usr; the conffile besides.
"$cmake" --install "$build" --prefix "$out/plain" >/dev/null || fail "cmake --install"
(cd "$out/plain" && find . -type f | sed 's|^\./|./usr/|' | sort) >"$out/want"
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $6}' | sort >"$out/have-gpuos"
dpkg-deb -c "$dra" | awk '$1 !~ /^d/ {print $6}' | sort >"$out/have-dra"
sort -m "$out/have-gpuos" "$out/have-dra" >"$out/have"
[[ -z $(comm -12 "$out/have-gpuos" "$out/have-dra") ]] || fail "in both packages: $(comm -12 "$out/have-gpuos" "$out/have-dra")"
missing=$(comm -23 "$out/want" "$out/have")
[[ -z $missing ]] || fail "installed by cmake --install but in neither .deb: $missing"
extra=$(comm -13 "$out/want" "$out/have")
[[ $extra == ./etc/gpuos/gpuos.toml ]] || fail "the .debs' files beyond cmake --install's: '$extra'"
grep -q '^./etc/gpuos/gpuos.toml$' "$out/have-gpuos" || fail "/etc/gpuos/gpuos.toml is not in gpuos"
dra_files=$(tr '\n' ' ' <"$out/have-dra")
[[ $dra_files == "./usr/bin/gpuos-dra ./usr/share/doc/gpuos-dra/changelog.gz ./usr/share/doc/gpuos-dra/copyright ./usr/share/man/man8/gpuos-dra.8.gz " ]] ||
  fail "gpuos-dra holds: $dra_files"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles >"$out/conffiles" || fail "no conffiles"
[[ $(cat "$out/conffiles") == /etc/gpuos/gpuos.toml ]] || fail "conffiles: $(cat "$out/conffiles")"
for m in ./usr/share/man/man1/gpuos.1.gz ./usr/share/man/man8/gpuosd.8.gz ./usr/share/man/man8/gpuos-dra.8.gz; do
  grep -qx "$m" "$out/have" || fail "no man page $m"
done
! grep '^./usr/share/man/.*[^z]$' "$out/have" || fail "man pages not gzipped"

# lintian: no error on either package (warnings are listed, not fatal).
if command -v lintian >/dev/null; then
  rc=0
  lintian --tag-display-limit 0 "$deb" "$dra" >"$out/lintian.log" 2>&1 || rc=$?
  grep -v '^running with root privileges' "$out/lintian.log" || true
  ! grep -q '^E: ' "$out/lintian.log" || fail "lintian reports errors: $(grep '^E: ' "$out/lintian.log")"
  (( rc == 0 )) || fail "lintian exited $rc"
  echo "lintian: no errors"
elif [[ ${GPUOS_REQUIRE_LINTIAN:-0} == 1 ]]; then
  fail "lintian is not installed (GPUOS_REQUIRE_LINTIAN=1; Debian: apt-get install lintian)"
else
  echo "lintian not installed: its check skipped"
fi

dpkg-deb -x "$deb" "$out/root"
dpkg-deb -x "$dra" "$out/root"
for unit in "$out/root/usr/lib/systemd/system/gpuosd.service" "$out/root/usr/share/gpuos/gpuosd.service"; do
  grep -qx 'ExecStart=/usr/bin/gpuosd --config /etc/gpuos/gpuos.toml' "$unit" || fail "$unit: $(grep ExecStart "$unit")"
  grep -q '^Documentation=man:gpuosd(8)' "$unit" || fail "$unit: $(grep Documentation "$unit")"
  ! grep -q "$out\|$build\|/usr/local" "$unit" || fail "$unit names a build, staging or /usr/local path"
done
for p in gpuos gpuos-dra; do
  c=$out/root/usr/share/doc/$p/copyright
  grep -q '^Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' "$c" ||
    fail "no copyright file for $p"
  # gpuos's own files under Apache-2.0 (the first Files paragraph, `Files: *`), the licence's
  # stand-alone paragraph pointing at Debian's copy of its text.
  [[ $(grep -m1 -A2 '^Files: ' "$c" | tr '\n' '|') == 'Files: *|Copyright: 2026 the gpuos authors|License: Apache-2.0|' ]] ||
    fail "$p's copyright does not put Files: * under Apache-2.0: $(grep -m1 -A2 '^Files: ' "$c")"
  grep -qx 'License: Apache-2.0' "$c" && grep -q '/usr/share/common-licenses/Apache-2.0' "$c" ||
    fail "$p's copyright has no Apache-2.0 license paragraph naming /usr/share/common-licenses/Apache-2.0"
done
cmp -s "$out/root/etc/gpuos/gpuos.toml" "$out/root/usr/share/gpuos/gpuos.toml" || fail "/etc config differs from share/"
# The KV pool library engines load, with its header, beside the interposer.
[[ -f $out/root/usr/lib/libgpuos_kv.so && -f $out/root/usr/include/gpuos/kv.h ]] || fail "no libgpuos_kv.so or gpuos/kv.h"

check_binaries() {  # root: where usr/ and etc/ are ("" for the installed package)
  local root=$1 v
  for b in gpuos gpuosd gpuos-dra; do
    v=$("$root/usr/bin/$b" --version 2>&1) || fail "$root/usr/bin/$b --version exited $?: $v"
    [[ $v == *"$version"* ]] || fail "$b --version says '$v', the package is $version"
  done
  v=$("$root/usr/bin/gpuos" config check "$root/etc/gpuos/gpuos.toml" 2>&1) || fail "config check: $v"
}
check_binaries "$out/root"
echo "unpacked: gpuos, gpuosd and gpuos-dra $version, default config valid"

if (( install )); then
  [[ $(id -u) == 0 ]] || fail "--install needs root"
  ! dpkg -s gpuos >/dev/null 2>&1 && ! dpkg -s gpuos-dra >/dev/null 2>&1 ||
    fail "a gpuos package is installed already: not touching it"
  installed=1
  dpkg -i "$deb" "$dra" >"$out/dpkg.log" 2>&1 || fail "dpkg -i: $(cat "$out/dpkg.log")"
  [[ $(command -v gpuos) == /usr/bin/gpuos ]] || fail "gpuos on PATH is $(command -v gpuos)"
  check_binaries ""
  preload=$(env -u GPUOS_PRELOAD GPUOS_SOCKET="$out/none.sock" /usr/bin/gpuos run -- sh -c 'echo $LD_PRELOAD' 2>/dev/null)
  [[ $(realpath "${preload%%:*}") == /usr/lib/libgpuos.so ]] || fail "gpuos run preloads '$preload'"
  files=$(dpkg -L gpuos gpuos-dra | while read -r f; do if [[ -f $f ]]; then echo "$f"; fi; done)
  dpkg --purge gpuos-dra gpuos >"$out/dpkg.log" 2>&1 || fail "dpkg --purge: $(cat "$out/dpkg.log")"
  installed=0
  left=$(for f in $files; do if [[ -e $f ]]; then echo "$f"; fi; done)
  [[ -z $left ]] || fail "left after dpkg --purge: $left"
  echo "installed with dpkg -i, checked from /usr/bin, purged"
fi
echo "deb test: ok"
