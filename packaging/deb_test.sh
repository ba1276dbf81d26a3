#!/usr/bin/env bash
# The .deb end to end: built with CPack from BUILD_DIR, then checked:
#   - it holds every file `cmake --install` installs (under /usr), plus /etc/gpuos/gpuos.toml as a
#     conffile, and its unit starts /usr/bin/gpuosd;
#   - unpacked (dpkg-deb -x), its gpuos and gpuosd print the package's version, and `gpuos config
#     check` passes the default config;
#   - with --install (CI: root on a Debian machine): dpkg -i, the same checks from /usr/bin and /etc,
#     `gpuos run` finds /usr/lib/libgpuos.so, then dpkg --purge leaves none of its files behind.
#   packaging/deb_test.sh BUILD_DIR [--install]        (exit 77: dpkg-deb or cpack missing: skipped)
# ctest packaging.deb runs it without --install; .ci/run with it.
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
  if (( installed )); then dpkg --purge gpuos >/dev/null 2>&1 || echo "WARNING: dpkg --purge gpuos failed" >&2; fi
  rm -rf "$out"
}
trap cleanup EXIT

"$cpack" -G DEB --config "$build/CPackConfig.cmake" -B "$out" >"$out/cpack.log" 2>&1 \
  || fail "cpack: $(tail -20 "$out/cpack.log")"
debs=("$out"/gpuos_*.deb)
[[ ${#debs[@]} == 1 && -f ${debs[0]} ]] || fail "cpack made no gpuos_*.deb: $(ls "$out")"
deb=${debs[0]}
version=$(dpkg-deb -f "$deb" Version)
[[ $(dpkg-deb -f "$deb" Package) == gpuos ]] || fail "package name: $(dpkg-deb -f "$deb" Package)"
[[ -n $version ]] || fail "no Version"
echo "built $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB), Depends: $(dpkg-deb -f "$deb" Depends)"

# Its files: every one `cmake --install` installs, under /usr; the conffile besides.
"$cmake" --install "$build" --prefix "$out/plain" >/dev/null || fail "cmake --install"
(cd "$out/plain" && find . -type f | sed 's|^\./|./usr/|' | sort) >"$out/want"
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $6}' | sort >"$out/have"
missing=$(comm -23 "$out/want" "$out/have")
[[ -z $missing ]] || fail "installed by cmake --install but not in the .deb: $missing"
extra=$(comm -13 "$out/want" "$out/have")
[[ $extra == ./etc/gpuos/gpuos.toml ]] || fail "the .deb's files beyond cmake --install's: '$extra'"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles >"$out/conffiles" || fail "no conffiles"
[[ $(cat "$out/conffiles") == /etc/gpuos/gpuos.toml ]] || fail "conffiles: $(cat "$out/conffiles")"

dpkg-deb -x "$deb" "$out/root"
unit=$out/root/usr/lib/systemd/system/gpuosd.service
grep -qx 'ExecStart=/usr/bin/gpuosd --config /etc/gpuos/gpuos.toml' "$unit" || fail "unit: $(grep ExecStart "$unit")"
! grep -q "$out\|$build" "$unit" || fail "the unit names a build or staging path"
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
echo "unpacked: gpuos and gpuosd $version, default config valid"

if (( install )); then
  [[ $(id -u) == 0 ]] || fail "--install needs root"
  ! dpkg -s gpuos >/dev/null 2>&1 || fail "a gpuos package is installed already: not touching it"
  installed=1
  dpkg -i "$deb" >"$out/dpkg.log" 2>&1 || fail "dpkg -i: $(cat "$out/dpkg.log")"
  [[ $(command -v gpuos) == /usr/bin/gpuos ]] || fail "gpuos on PATH is $(command -v gpuos)"
  check_binaries ""
  preload=$(env -u GPUOS_PRELOAD GPUOS_SOCKET="$out/none.sock" /usr/bin/gpuos run -- sh -c 'echo $LD_PRELOAD' 2>/dev/null)
  [[ $(realpath "${preload%%:*}") == /usr/lib/libgpuos.so ]] || fail "gpuos run preloads '$preload'"
  files=$(dpkg -L gpuos | while read -r f; do if [[ -f $f ]]; then echo "$f"; fi; done)
  dpkg --purge gpuos >"$out/dpkg.log" 2>&1 || fail "dpkg --purge: $(cat "$out/dpkg.log")"
  installed=0
  left=$(for f in $files; do if [[ -e $f ]]; then echo "$f"; fi; done)
  [[ -z $left ]] || fail "left after dpkg --purge: $left"
  echo "installed with dpkg -i, checked from /usr/bin, purged"
fi
echo "deb test: ok"
