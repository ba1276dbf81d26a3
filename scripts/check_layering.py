#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the include graph of src/: each component includes only the components below it.

    common      (config, log, ABI helpers)            -> common
    slots       (the policy slots' interface, built-ins) -> slots, common
    policies    (time gate, space, memory policies)   -> policies, slots, common
    daemon/core (gpuosd's router and engines)         -> daemon/core, slots, common
    daemon/server (socket server, metrics, MPS)       -> daemon/server, daemon/core, slots, common
    daemon      (gpuosd's main: wires policies in)    -> daemon, daemon/server, daemon/core, policies, slots, common
    client      (gpuos_client: talking to gpuosd)     -> client, common
    cli         (the gpuos command)                   -> cli, client, policies, slots, common
    kv          (libgpuos_kv.so, KV pools' C ABI)     -> kv, common
    interpose   (libgpuos.so, inside tenants)         -> interpose, common
    driver_double (the stand-in libcuda)              -> driver_double, common
    dra         (gpuos-dra, the Kubernetes DRA plugin) -> dra, client, common

A component is a folder of src/ or, where the rule names one, a folder inside it (daemon/core): a
file belongs to the longest one that holds it, an include to the longest one its path names.
include/gpuos/ (the ABI) may be included by all. Exit status 1 and one line per forbidden edge
("FILE:LINE: cli -> daemon (#include "daemon/core.h")") when the graph breaks the rule.
Usage: check_layering.py [SRC_DIR]   (default: the src/ next to this script's folder)
"""
import os
import re
import sys

ALLOWED = {
    "common": {"common"},
    "slots": {"slots", "common"},
    "policies": {"policies", "slots", "common"},
    "daemon/core": {"daemon/core", "slots", "common"},
    "daemon/server": {"daemon/server", "daemon/core", "slots", "common"},
    "daemon": {"daemon", "daemon/server", "daemon/core", "policies", "slots", "common"},
    "client": {"client", "common"},
    "cli": {"cli", "client", "policies", "slots", "common"},
    "kv": {"kv", "common"},
    "interpose": {"interpose", "common"},
    "driver_double": {"driver_double", "common"},
    "dra": {"dra", "client", "common"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"(([^"/]+)/[^"]*)"')


def component(rel):
    """The component of a path relative to src/ ("daemon/core/core.h" -> "daemon/core")."""
    parts = rel.split("/")
    for n in range(len(parts) - 1, 0, -1):
        name = "/".join(parts[:n])
        if name in ALLOWED:
            return name
    return parts[0]


def check(src):
    bad = []
    components = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    for top in components:
        if top not in ALLOWED:
            bad.append(f"{src}/{top}: component not in the layering rule (add it to {sys.argv[0]})")
            continue
        for root, _, files in os.walk(os.path.join(src, top)):
            for name in files:
                if not name.endswith((".h", ".hpp", ".cc", ".cpp", ".c")):
                    continue
                path = os.path.join(root, name)
                comp = component(os.path.relpath(path, src).replace(os.sep, "/"))
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(2) == "gpuos":
                            continue
                        target = component(m.group(1))
                        if target in ALLOWED and target not in ALLOWED[comp]:
                            bad.append(f"{path}:{lineno}: {comp} -> {target} ({line.strip()})")
    return bad


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    if not os.path.isdir(src):
        print(f"check_layering: {src}: not a directory", file=sys.stderr)
        return 2
    bad = check(os.path.normpath(src))
    for b in bad:
        print(b)
    if bad:
        print(f"check_layering: {len(bad)} forbidden include(s); see the rule in {__file__}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
