#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python package installs with a plain `pip install`, offline (no index, build isolation on),
# from the repository (a copy of python/, so the source tree gets no build output), into a fresh
# folder and, where the Python has venv, into a fresh venv; imported from there it reaches
# libgpuos_kv.so and the pools (ctest runs it with the test stand-in preloaded).
#   test/kv/python_install_test.sh PYTHON PACKAGE_DIR     (exit 77: no pip: skipped)
set -euo pipefail
python=${1:?usage: python_install_test.sh PYTHON PACKAGE_DIR}
package=$(cd "${2:?usage: python_install_test.sh PYTHON PACKAGE_DIR}" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
# pip alone: the package builds with its own backend (python/backend), nothing from an index, with
# pip's build isolation on, as a user's plain `pip install ./python` does.
if ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "skipped: $python has no pip (Debian: apt-get install python3-pip)"
  exit 77
fi
work=$(mktemp -d /tmp/gpuos-python-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$package" "$work/src"
rm -rf "$work/src/tests"
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# Offline: no index, and any proxy a machine may have points nowhere.
export http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9
"$python" -m pip install --no-index --target "$work/site" "$work/src" >"$work/pip.log" 2>&1 ||
  fail "pip install: $(tail -20 "$work/pip.log")"
[[ -f $work/site/gpuos/kv.py && -f $work/site/gpuos/__init__.py ]] || fail "installed: $(ls -R "$work/site")"
! find "$work/site" -name '*.so' | grep -q . || fail "the package holds a compiled file"
# The licence, as pip installed it (PEP 639): declared in METADATA, its text in .dist-info/licenses/.
grep -qx 'License-Expression: Apache-2.0' "$work"/site/gpuos-*.dist-info/METADATA ||
  fail "METADATA declares no Apache-2.0: $(grep -i '^License' "$work"/site/gpuos-*.dist-info/METADATA)"
cmp -s "$work"/site/gpuos-*.dist-info/licenses/LICENSE "$package/LICENSE" || fail "no LICENSE in the installed .dist-info"
cd "$work"  # not the repository: the import must come from the installed folder
PYTHONPATH=$work/site PYTHONDONTWRITEBYTECODE=1 "$python" - "$work/site" <<'PY' || fail "import from the installed package"
import os, sys
import gpuos, gpuos.kv as kv
site = sys.argv[1]
assert os.path.dirname(gpuos.__file__) == os.path.join(site, "gpuos"), gpuos.__file__
assert kv.abi_version() == kv.ABI_VERSION
with kv.Pool(64 << 20) as pool:
    pool.map([0, 1])
    assert pool.stats().mapped_pages == 2
print("installed gpuos", gpuos.__version__, "from", site)
PY
# Into a venv too, the way docs/KV.md shows (Debian: python3-venv; without it, the folder above).
cd "$work"
if "$python" -m venv "$work/venv" >/dev/null 2>&1 && [[ -x $work/venv/bin/python ]] &&
   "$work/venv/bin/python" -m pip --version >/dev/null 2>&1; then
  "$work/venv/bin/python" -m pip install --no-index "$work/src" >"$work/pip-venv.log" 2>&1 ||
    fail "pip install into a venv: $(tail -20 "$work/pip-venv.log")"
  PYTHONDONTWRITEBYTECODE=1 "$work/venv/bin/python" -c '
import gpuos.kv as kv, sys
assert kv.__file__.startswith(sys.prefix), kv.__file__
with kv.Pool(64 << 20) as pool:
    pool.map([0])
print("installed into the venv", sys.prefix)' || fail "import from the venv"
else
  echo "no venv with pip for $python: the folder install above only"
fi
echo "python install test: ok"
