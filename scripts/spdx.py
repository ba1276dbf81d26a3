#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The SPDX licence identifier of gpuos (Apache-2.0) at the top of every source file.

    spdx.py --check [ROOT]    lists the tracked sources that lack the line; exit 1 if any does
    spdx.py --apply [ROOT]    adds the line to each of them (run it again after a merge)

ROOT is the repository (default: the folder above this script's); its files are what `git ls-files`
lists, so build folders and untracked files are never touched. The line is

    // SPDX-License-Identifier: Apache-2.0    C, C++, CUDA (.c .cc .cpp .h .hpp .cu .cuh ...), .proto
    # SPDX-License-Identifier: Apache-2.0     Python, shell, CMake (CMakeLists.txt, .cmake), YAML
                                              (deploy/'s manifests), Containerfile, and any other file
                                              that starts with a shebang (#!)

written as the file's first line, or after the lines that must stay first: a shebang, Python's
coding declaration, a Containerfile's parser directives (# syntax=...). A file has it when the exact
line is among its first HEAD_LINES lines; one that names another licence there is reported, never
changed. Not sources, so left alone: documents (.md), results and records (bench/results/, .json,
.csv, .log, ...), fuzz corpora, configuration (.toml: gpuosd's configs, whose bytes bench runs hash
to tell runs apart, and pyproject.toml, which declares the licence itself), the systemd unit, linker
version scripts (.map), dpkg's triggers file, templates (.in). Vendored code keeps its own licence:
EXCLUDED_DIRS names where it would live (none is tracked today; toml++, CLI11 and nlohmann-json
come from the build machine's packages).
Exit status: 0 all have it (or --apply wrote it), 1 some lack it (--check) or carry another
identifier, 2 usage, 77 ROOT is not a git checkout (nothing to list: ctest reports it skipped).
"""
import os
import re
import subprocess
import sys

LICENSE_ID = "Apache-2.0"
TAG = "SPDX-License-Identifier:"
HEAD_LINES = 5

SLASH_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh", ".proto")
HASH_SUFFIXES = (".py", ".sh", ".bash", ".cmake", ".yaml", ".yml")
HASH_NAMES = ("CMakeLists.txt", "Containerfile", "Dockerfile")
# Records, not sources, and where third-party code would be kept with its own licence.
EXCLUDED_DIRS = ("bench/results/", "fuzz/corpus/", "third_party/", "vendor/", "external/")

# A line that is an SPDX identifier (a comment of its own), whatever the licence it names.
_ANY_SPDX = re.compile(rb"^(?://|#|/\*|\*)?\s*SPDX-License-Identifier:\s*\S")
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*[-\w.]+")
_PARSER_DIRECTIVE = re.compile(rb"^#\s*[A-Za-z]+\s*=\S")


def comment_prefix(path, head):
    """'//' or '#' for a source that must carry the line, None for any other file."""
    name = os.path.basename(path)
    if any(path.startswith(d) for d in EXCLUDED_DIRS):
        return None
    if name.endswith(SLASH_SUFFIXES):
        return "//"
    if name.endswith(HASH_SUFFIXES) or name in HASH_NAMES or head.startswith(b"#!"):
        return "#"
    return None


def lines_kept_first(path, lines):
    """How many of the file's first lines must stay above the SPDX line."""
    n = 0
    if lines and lines[0].startswith(b"#!"):
        n = 1
    if path.endswith(".py"):
        # Python reads a coding declaration on line 1 or 2 only.
        for i in range(n, min(2, len(lines))):
            if _CODING.match(lines[i]):
                n = i + 1
    if os.path.basename(path) in ("Containerfile", "Dockerfile"):
        # Parser directives count only above every other line, comments included.
        while n < len(lines) and _PARSER_DIRECTIVE.match(lines[n]):
            n += 1
    return n


def spdx_line(prefix):
    return "%s %s %s" % (prefix, TAG, LICENSE_ID)


def examine(root, path):
    """(prefix, state) of one tracked file: state 'ok', 'missing' or 'other' (another identifier)."""
    full = os.path.join(root, path)
    if os.path.islink(full) or not os.path.isfile(full):
        return None, None
    with open(full, "rb") as f:
        data = f.read()
    prefix = comment_prefix(path, data[:2])
    if prefix is None:
        return None, None
    head = [line.strip() for line in data.splitlines()[:HEAD_LINES]]
    if spdx_line(prefix).encode() in head:
        return prefix, "ok"
    if any(_ANY_SPDX.match(line) for line in head):
        return prefix, "other"
    return prefix, "missing"


def apply(root, path, prefix):
    full = os.path.join(root, path)
    with open(full, "rb") as f:
        data = f.read()
    lines = data.splitlines(keepends=True)
    newline = b"\r\n" if lines and lines[0].endswith(b"\r\n") else b"\n"
    at = lines_kept_first(path, lines)
    if at and not lines[at - 1].endswith((b"\n", b"\r")):
        lines[at - 1] += newline  # a file of only a shebang without a final newline
    lines.insert(at, spdx_line(prefix).encode() + newline)
    with open(full, "wb") as f:  # in place: the file keeps its mode
        f.write(b"".join(lines))


def tracked_files(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, timeout=60)
    if out.returncode != 0:
        return None
    return sorted(p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p)


def main(argv):
    if len(argv) not in (2, 3) or argv[1] not in ("--check", "--apply"):
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[2] if len(argv) == 3 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = tracked_files(root)
    if files is None:
        print("skipped: %s is not a git checkout (spdx.py checks the files git tracks)" % root)
        return 77
    missing, other, checked = [], [], 0
    for path in files:
        prefix, state = examine(root, path)
        if prefix is None:
            continue
        checked += 1
        if state == "missing":
            missing.append((path, prefix))
        elif state == "other":
            other.append(path)
    for path in other:
        print("%s: has an SPDX identifier other than %s" % (path, LICENSE_ID))
    if argv[1] == "--apply":
        for path, prefix in missing:
            apply(root, path, prefix)
            print("added: " + path)
        print("spdx: %d sources, %d given the line" % (checked, len(missing)))
        return 1 if other else 0
    for path, prefix in missing:
        print("%s: no '%s' line (scripts/spdx.py --apply adds it)" % (path, spdx_line(prefix)))
    print("spdx: %d sources, %d lack the line, %d carry another identifier" % (checked, len(missing), len(other)))
    return 1 if missing or other else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
