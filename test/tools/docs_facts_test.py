#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Facts the docs and the examples repeat from the code, held to it (issue #43, "docs that cannot
drift"; the metric and `ps --json` tables have their own tests in test/daemon and test/cli):
  - every glibc version the docs and deploy/ name for libgpuos.so is the floor that
    test/interpose/glibc_floor.sh enforces;
  - docs/KUBERNETES.md's gpuos-dra command line has the binary's options, with the defaults its
    --help states (only with GPUOS_DRA_BIN).
Usage: docs_facts_test.py SOURCE_DIR [GPUOS_DRA_BIN]
"""
import os
import re
import subprocess
import sys

src = sys.argv[1]
dra_bin = sys.argv[2] if len(sys.argv) > 2 else ""
failures = []


def read(rel):
    with open(os.path.join(src, rel), encoding="utf-8") as f:
        return f.read()


# 1. The glibc floor.
m = re.search(r"the floor is GLIBC_(2\.\d+)", read("test/interpose/glibc_floor.sh"))
floor = m.group(1) if m else None
if floor is None:
    failures.append("test/interpose/glibc_floor.sh names no floor (\"the floor is GLIBC_2.N\")")
else:
    mentions = 0
    for top in ("docs", "deploy"):
        for dirpath, _, files in os.walk(os.path.join(src, top)):
            for name in files:
                if not name.endswith((".md", ".yaml", ".yml")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        for v in re.findall(r"glibc (?:>= ?)?(2\.\d+)", line, re.IGNORECASE):
                            mentions += 1
                            if v != floor:
                                failures.append("%s:%d: glibc %s, but libgpuos.so's floor is %s (glibc_floor.sh)"
                                                % (os.path.relpath(path, src), n, v, floor))
    if mentions == 0:
        failures.append("no glibc version found in docs/ or deploy/: the check looks in the wrong place")

# 2. gpuos-dra's command line in docs/KUBERNETES.md against its --help.
if dra_bin:
    doc = read("docs/KUBERNETES.md")
    block = re.search(r"```\n(gpuos-dra --node-name.*?)```", doc, re.S)
    if not block:
        failures.append("docs/KUBERNETES.md: the gpuos-dra command-line block is gone")
    else:
        documented = {}
        for opt, value in re.findall(r"(--[a-z0-9-]+)(?: ([^\]\s]+))?", block.group(1)):
            documented[opt] = value
        helptext = subprocess.run([dra_bin, "--help"], capture_output=True, text=True, timeout=30).stdout
        actual = {}
        for line in helptext.splitlines():
            hm = re.match(r"\s+(?:-\w,)?(--[a-z0-9-]+)\b(.*)", line)
            if not hm or hm.group(1) in ("--help", "--version"):
                continue
            dm = re.search(r"\(default ([^):]+)\)", hm.group(2))
            actual[hm.group(1)] = dm.group(1) if dm else None
        for opt in sorted(set(actual) - set(documented)):
            failures.append("docs/KUBERNETES.md: gpuos-dra's %s is missing from its command line" % opt)
        for opt in sorted(set(documented) - set(actual)):
            failures.append("docs/KUBERNETES.md: gpuos-dra has no option %s" % opt)
        for opt in sorted(set(documented) & set(actual)):
            want = actual[opt]
            if want is not None and "DRIVER" not in want and documented[opt] != want:
                failures.append("docs/KUBERNETES.md: gpuos-dra %s defaults to %s, the docs say %s"
                                % (opt, want, documented[opt]))

for f in failures:
    print("FAIL:", f)
if failures:
    sys.exit(1)
print("docs facts: ok (glibc floor %s%s)" % (floor, ", gpuos-dra's command line" if dra_bin else ""))
