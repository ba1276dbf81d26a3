# SPDX-License-Identifier: Apache-2.0
"""The build backend (PEP 517, PEP 660) of the gpuos Python package, kept in the package's own tree
(pyproject.toml's backend-path), so that `pip install ./python` needs nothing from a package index:
no setuptools, no wheel, also with pip's build isolation on an offline machine (issue #43).

The package is pure Python: a wheel is a zip of gpuos/*.py and its metadata, which come from
pyproject.toml's [project] table. Standard library only, any Python the package supports (3.9+).
The licence as PEP 639 has it: `license` an SPDX expression (METADATA's License-Expression, core
metadata 2.4), `license-files` glob patterns relative to python/ (each a License-File line, the file
in the wheel's .dist-info/licenses/ and in the sdist at its own path); the older table form
`license = { text = ... }` still gives a License line.
"""

import ast
import base64
import glob
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
_PACKAGE = "gpuos"


def _pyproject():
    """pyproject.toml's [project] and [project.optional-dependencies] tables, as dicts."""
    with open(os.path.join(_ROOT, "pyproject.toml"), "rb") as f:
        data = f.read()
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        tomllib = None
    if tomllib is not None:
        project = tomllib.loads(data.decode())["project"]
        return project, project.get("optional-dependencies", {})
    # Older Pythons: the flat subset of TOML this pyproject.toml uses (key = "string" | [strings] |
    # { text = "string" }, one per line). A key this reader cannot parse is an error, not a guess.
    tables, table = {}, None
    for line in data.decode().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        header = re.fullmatch(r"\[([A-Za-z0-9_.-]+)\]", line)
        if header:
            table = tables.setdefault(header.group(1), {})
            continue
        key, sep, value = line.partition("=")
        if not sep or table is None:
            raise ValueError("pyproject.toml: cannot read line: " + line)
        value = re.sub(r"\{\s*text\s*=\s*(\"[^\"]*\")\s*\}", r"{'text': \1}", value.strip())
        table[key.strip().strip('"')] = ast.literal_eval(value)
    return tables["project"], tables.get("project.optional-dependencies", {})


def _names():
    project, _ = _pyproject()
    name = re.sub(r"[-_.]+", "_", project["name"]).lower()
    return name, project["version"]


def _license_files():
    """(path relative to python/, bytes) of the files pyproject.toml's license-files patterns match,
    sorted, each once. PEP 639: patterns are relative, never reach above python/ (`..`), and each
    must match a file."""
    project, _ = _pyproject()
    patterns = project.get("license-files", [])
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ValueError("pyproject.toml: license-files must be a list of glob patterns")
    found = set()
    for pattern in patterns:
        if os.path.isabs(pattern) or "\\" in pattern or ".." in pattern.split("/"):
            raise ValueError("pyproject.toml: license-files pattern %r leaves the package's folder" % pattern)
        matches = [m for m in glob.glob(os.path.join(glob.escape(_ROOT), pattern), recursive=True) if os.path.isfile(m)]
        if not matches:
            raise ValueError("pyproject.toml: license-files pattern %r matches no file" % pattern)
        found.update(os.path.relpath(m, _ROOT).replace(os.sep, "/") for m in matches)
    out = []
    for path in sorted(found):
        with open(os.path.join(_ROOT, path), "rb") as f:
            out.append((path, f.read()))
    return out


def _metadata():
    project, extras = _pyproject()
    license = project.get("license")
    license_files = [p for p, _ in _license_files()]
    pep639 = isinstance(license, str) or bool(license_files)
    lines = ["Metadata-Version: " + ("2.4" if pep639 else "2.1"), "Name: " + project["name"],
             "Version: " + project["version"]]
    if "description" in project:
        lines.append("Summary: " + project["description"])
    if isinstance(license, str):
        if not license.strip() or "\n" in license:
            raise ValueError("pyproject.toml: license must be an SPDX expression, such as Apache-2.0")
        lines.append("License-Expression: " + license.strip())
    elif isinstance(license, dict) and "text" in license:
        lines.append("License: " + license["text"])
    lines += ["License-File: " + p for p in license_files]
    if "requires-python" in project:
        lines.append("Requires-Python: " + project["requires-python"])
    lines += ["Classifier: " + c for c in project.get("classifiers", [])]
    lines += ["Requires-Dist: " + d for d in project.get("dependencies", [])]
    for extra, deps in extras.items():
        lines.append("Provides-Extra: " + extra)
        lines += ['Requires-Dist: %s; extra == "%s"' % (d, extra) for d in deps]
    readme = ""
    if "readme" in project:
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(_ROOT, project["readme"]), encoding="utf-8") as f:
            readme = f.read()
    return "\n".join(lines) + "\n\n" + readme


def _dist_info_files():
    name, version = _names()
    wheel = "Wheel-Version: 1.0\nGenerator: gpuos_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = {"METADATA": _metadata().encode(), "WHEEL": wheel.encode()}
    files.update(("licenses/" + path, data) for path, data in _license_files())  # PEP 639
    return "%s-%s.dist-info" % (name, version), files


def _package_files():
    """(path in the wheel, bytes) of the package's modules, sorted (reproducible wheels)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(_ROOT, _PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(".py") or f == "py.typed":
                full = os.path.join(dirpath, f)
                with open(full, "rb") as fh:
                    out.append((os.path.relpath(full, _ROOT).replace(os.sep, "/"), fh.read()))
    return out


def _write_wheel(wheel_directory, files):
    name, version = _names()
    dist_info, meta = _dist_info_files()
    files = list(files) + [(dist_info + "/" + k, v) for k, v in meta.items()]
    record = []
    # The zip's timestamps: SOURCE_DATE_EPOCH where set (reproducible builds), else 1980.
    stamp = time.gmtime(max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800))[:6]
    filename = "%s-%s-py3-none-any.whl" % (name, version)
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            info = zipfile.ZipInfo(path, stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
        record.append(dist_info + "/RECORD,,")
        info = zipfile.ZipInfo(dist_info + "/RECORD", stamp)
        info.external_attr = 0o644 << 16
        z.writestr(info, "\n".join(record) + "\n")
    return filename


# ---- PEP 517 --------------------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist_info, meta = _dist_info_files()
    for k, v in meta.items():
        path = os.path.join(metadata_directory, dist_info, *k.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(v)
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A finder for the one package in this tree (a .pth naming python/ would also put tests/ and
    # backend/ on sys.path).
    finder = (
        "import importlib.util, sys\n"
        "_DIR = %r\n"
        "class _GpuosFinder:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name != %r:\n"
        "            return None\n"
        "        return importlib.util.spec_from_file_location(name, _DIR + '/__init__.py',\n"
        "                                                      submodule_search_locations=[_DIR])\n"
        "sys.meta_path.append(_GpuosFinder)\n" % (os.path.join(_ROOT, _PACKAGE), _PACKAGE))
    return _write_wheel(wheel_directory, [("_gpuos_editable.py", finder.encode()),
                                          ("_gpuos_editable.pth", b"import _gpuos_editable\n")])


def build_sdist(sdist_directory, config_settings=None):
    name, version = _names()
    base = "%s-%s" % (name, version)
    filename = base + ".tar.gz"
    members = (["pyproject.toml", "README.md", "backend/gpuos_backend.py"] + [p for p, _ in _license_files()]
               + [p for p, _ in _package_files()])
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as t:
        def add(path, data):
            info = tarfile.TarInfo(base + "/" + path)
            info.size, info.mode, info.mtime = len(data), 0o644, 315532800
            t.addfile(info, io.BytesIO(data))
        for m in members:
            with open(os.path.join(_ROOT, m), "rb") as f:
                add(m, f.read())
        add("PKG-INFO", _metadata().encode())
    return filename
