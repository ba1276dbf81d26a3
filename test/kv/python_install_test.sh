#!/usr/bin/env bash
# The Python package installs with pip, offline, from the repository (a copy of python/, so the
# source tree gets no build/ or *.egg-info), into a fresh folder; imported from there it reaches
# libgpuos_kv.so and the pools (ctest runs it with the test stand-in preloaded).
#   test/kv/python_install_test.sh PYTHON PACKAGE_DIR     (exit 77: no pip or setuptools: skipped)
set -euo pipefail
python=${1:?usage: python_install_test.sh PYTHON PACKAGE_DIR}
package=$(cd "${2:?usage: python_install_test.sh PYTHON PACKAGE_DIR}" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
# setuptools < 70.1 builds wheels with the wheel package (Debian 12: python3-pip brings both).
# (Each import alone: Debian's setuptools refuses to load after pip imported distutils.)
can_build() {
  "$1" -m pip --version >/dev/null 2>&1 &&
    { "$1" -c 'import setuptools, wheel' 2>/dev/null || "$1" -c 'from setuptools.command import bdist_wheel' 2>/dev/null; }
}
# The Python CMake found may be a user's (pyenv) without wheel; the system's has it with python3-pip.
if ! can_build "$python"; then
  if [[ -x /usr/bin/python3 ]] && can_build /usr/bin/python3; then
    echo "$python cannot build wheels; using /usr/bin/python3"
    python=/usr/bin/python3
  else
    echo "skipped: $python has no pip, setuptools or wheel (Debian: apt-get install python3-pip)"
    exit 77
  fi
fi
work=$(mktemp -d /tmp/gpuos-python-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -r "$package" "$work/src"
rm -rf "$work/src/tests"
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$python" -m pip install --no-deps --no-build-isolation \
  --no-index --target "$work/site" "$work/src" >"$work/pip.log" 2>&1 || fail "pip install: $(tail -20 "$work/pip.log")"
[[ -f $work/site/gpuos/kv.py && -f $work/site/gpuos/__init__.py ]] || fail "installed: $(ls -R "$work/site")"
! find "$work/site" -name '*.so' | grep -q . || fail "the package holds a compiled file"
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
echo "python install test: ok"
