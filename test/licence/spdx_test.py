#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/spdx.py on a made-up repository: --check lists each source without the Apache-2.0 line (and
only sources: no documents, records or data), exits 1; --apply writes the line in each one's comment
syntax, after the lines that must stay first (shebang, coding declaration, parser directives), and
leaves modes and every other byte alone; --check passes afterwards; another identifier is reported,
never overwritten.
    spdx_test.py SPDX_PY
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

SPDX_PY = None
SLASH = b"// SPDX-License-Identifier: Apache-2.0\n"
HASH = b"# SPDX-License-Identifier: Apache-2.0\n"

FILES = {
    # path: (content, expected after --apply; None: untouched)
    "src/a.cc": (b"#include <cstdio>\n", SLASH + b"#include <cstdio>\n"),
    "src/a.h": (b"#pragma once\n", SLASH + b"#pragma once\n"),
    "src/k.cu": (b"__global__ void k() {}\n", SLASH + b"__global__ void k() {}\n"),
    "src/p.proto": (b'syntax = "proto3";\n', SLASH + b'syntax = "proto3";\n'),
    "src/empty.h": (b"", SLASH),
    "tool.py": (b"#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\n\"\"\"Doc.\"\"\"\n",
                b"#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\n" + HASH + b"\"\"\"Doc.\"\"\"\n"),
    "lib.py": (b"\"\"\"Doc.\"\"\"\n", HASH + b"\"\"\"Doc.\"\"\"\n"),
    "run.sh": (b"#!/usr/bin/env bash\r\nset -e\r\n",
               b"#!/usr/bin/env bash\r\n# SPDX-License-Identifier: Apache-2.0\r\nset -e\r\n"),
    "bin/fake-tool": (b"#!/bin/sh\necho hi\n", b"#!/bin/sh\n" + HASH + b"echo hi\n"),
    "only-shebang": (b"#!/bin/sh", b"#!/bin/sh\n" + HASH),
    "CMakeLists.txt": (b"cmake_minimum_required(VERSION 3.25)\n", HASH + b"cmake_minimum_required(VERSION 3.25)\n"),
    "cmake/x.cmake": (b"set(X 1)\n", HASH + b"set(X 1)\n"),
    "cmake/prose.cmake": (b"# writes the line `SPDX-License-Identifier: MIT` (prose, not an identifier)\n",
                          HASH + b"# writes the line `SPDX-License-Identifier: MIT` (prose, not an identifier)\n"),
    "deploy/a.yaml": (b"kind: Namespace\n", HASH + b"kind: Namespace\n"),
    "image/Containerfile": (b"# syntax=docker/dockerfile:1\nFROM debian:12\n",
                            b"# syntax=docker/dockerfile:1\n" + HASH + b"FROM debian:12\n"),
    "done.cc": (b"// SPDX-License-Identifier: Apache-2.0\nint x;\n", None),
    "done.sh": (b"#!/bin/sh\n# SPDX-License-Identifier: Apache-2.0\n", None),
    # Not sources: left alone.
    "README.md": (b"# gpuos\n", None),
    "config.toml": (b"[scheduler]\n", None),
    "data.json": (b"{}\n", None),
    "notes.txt": (b"text\n", None),
    "bench/results/run/plot.py": (b"print(1)\n", None),
    "fuzz/corpus/core/garbage": (b"\x00\x01", None),
    "third_party/lib/lib.h": (b"// MIT\n", None),
}


def git(root, *args):
    subprocess.run(["git", "-C", root, *args], check=True, capture_output=True)


class SpdxScript(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="gpuos-spdx-test.")
        self.addCleanup(shutil.rmtree, self.root)
        for path, (content, _) in FILES.items():
            full = os.path.join(self.root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(content)
        os.chmod(os.path.join(self.root, "run.sh"), 0o755)
        with open(os.path.join(self.root, "untracked.cc"), "wb") as f:
            f.write(b"int y;\n")
        git(self.root, "init", "-q")
        git(self.root, "add", *FILES)

    def spdx(self, mode):
        return subprocess.run([sys.executable, SPDX_PY, mode, self.root], capture_output=True, text=True,
                              timeout=60)

    def read(self, path):
        with open(os.path.join(self.root, path), "rb") as f:
            return f.read()

    def test_check_lists_the_sources_without_it_then_apply_writes_it(self):
        lacking = sorted(p for p, (_, after) in FILES.items() if after is not None)
        result = self.spdx("--check")
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        listed = sorted(line.split(":")[0] for line in result.stdout.splitlines() if not line.startswith("spdx:"))
        self.assertEqual(listed, lacking)
        self.assertIn("%d sources, %d lack the line" % (len(lacking) + 2, len(lacking)), result.stdout)

        result = self.spdx("--apply")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        for path, (before, after) in FILES.items():
            self.assertEqual(self.read(path), before if after is None else after, path)
        self.assertEqual(self.read("untracked.cc"), b"int y;\n")
        self.assertTrue(os.stat(os.path.join(self.root, "run.sh")).st_mode & stat.S_IXUSR)

        result = self.spdx("--check")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(self.spdx("--apply").stdout.splitlines()[-1],
                         "spdx: %d sources, 0 given the line" % (len(lacking) + 2))

    def test_another_identifier_is_reported_not_replaced(self):
        other = b"// SPDX-License-Identifier: MIT\nint z;\n"
        with open(os.path.join(self.root, "other.cc"), "wb") as f:
            f.write(other)
        git(self.root, "add", "other.cc")
        for mode in ("--check", "--apply"):
            result = self.spdx(mode)
            self.assertEqual(result.returncode, 1, mode)
            self.assertIn("other.cc: has an SPDX identifier other than Apache-2.0", result.stdout)
        self.assertEqual(self.read("other.cc"), other)

    def test_not_a_checkout_is_skipped_and_bad_usage_refused(self):
        shutil.rmtree(os.path.join(self.root, ".git"))
        self.assertEqual(self.spdx("--check").returncode, 77)
        self.assertEqual(subprocess.run([sys.executable, SPDX_PY, "--fix"], capture_output=True).returncode, 2)


if __name__ == "__main__":
    SPDX_PY = os.path.abspath(sys.argv.pop(1))
    unittest.main()
