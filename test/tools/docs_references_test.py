#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What the docs name that the code must have (issue #57, "docs checked"): in README.md, docs/*.md,
gpu/README.md and bench/colocation/README.md,
  - every file path of this repository they name exists: paths under src/, test/, docs/, gpu/,
    scripts/, packaging/, bench/ (historical result folders under bench/results/ too), include/,
    tools/, deploy/, fuzz/, python/ and .ci/, in text, code or links; a path in backticks that starts
    with a folder of src/ (`daemon/core/core.h`); links relative to the doc. `*` and `<name>` match
    anything (at least one file must), `{a,b}` both;
  - every config key they name is one `gpuos config defaults` has (the code's tables and keys: no
    key of before the policy slots either): `[table] key` in backticks, the keys of ```toml blocks,
    and the rows of docs/OPERATIONS.md's configuration table, which must also name every key, with
    its default where the cell is a literal; README.md's TOML block shows defaults, so its values must
    be the defaults.
(Metric names: test/daemon/metrics_test.cc holds every gpuos_* metric a doc names to /metrics.)
Usage: docs_references_test.py SOURCE_DIR GPUOS_BIN
"""
import glob
import os
import re
import subprocess
import sys

src, gpuos = sys.argv[1], sys.argv[2]
failures = []
DOCS = ["README.md", "gpu/README.md", "bench/colocation/README.md"] + sorted(
    os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "docs", "*.md")))
ROOTS = ("src", "test", "docs", "gpu", "scripts", "packaging", "bench", "include", "tools", "deploy", "fuzz",
         "python", ".ci")
SRC_DIRS = {d for d in os.listdir(os.path.join(src, "src")) if os.path.isdir(os.path.join(src, "src", d))}
SEG = r"(?:[\w.\-*<>]|\{[\w.,\-*]*\})+"
# Code files a span may name by a tail of their path (`core.cc`, `gpuos/kv.h`): one must end so.
CODE_EXT = (".cc", ".h", ".c", ".cu", ".py", ".sh", ".cmake", ".hpp")
EXTERNAL = {"cuda.h"}  # not ours: the CUDA toolkit's
NOT_PATHS = {"gpu/guaranteed"}  # a DRA subrequest's name (docs/KUBERNETES.md), not a file
RESULT = re.compile(r"^20\d\d-\d\d-\d\d-[\w.\-*]+$")  # a result folder's name, bench/results/<it>
REPO_FILES = []
for dirpath, dirnames, files in os.walk(src):
    dirnames[:] = [d for d in dirnames if not d.startswith(("build", ".git"))]
    REPO_FILES += [os.path.relpath(os.path.join(dirpath, f), src) for f in files]
BARE = re.compile(r"(?<![\w/.$~\-])((?:%s)/(?:%s/)*(?:%s)?)" % ("|".join(re.escape(r) for r in ROOTS), SEG, SEG))
SPAN_PATH = re.compile(r"^(?:%s/)+(?:%s)?$" % (SEG, SEG))


def fail(doc, n, what):
    failures.append("%s:%d: %s" % (doc, n, what))


def expand(path):
    """The paths a pattern stands for: {a,b} both, as globs (<name> = *)."""
    m = re.search(r"\{([^}]*)\}", path)
    if m:
        return [p for alt in m.group(1).split(",") for p in expand(path[:m.start()] + alt + path[m.end():])]
    return [re.sub(r"<[^>]*>", "*", path)]


def exists(rel):
    for p in expand(rel):
        full = os.path.join(src, p)
        if any(c in p for c in "*?[") and not glob.glob(full):
            return False
        if not any(c in p for c in "*?[") and not os.path.exists(full):
            return False
    return True


def check_path(doc, n, rel, seen):
    rel = rel.rstrip(".,;:")
    if not rel or "..." in rel or rel in seen or rel in NOT_PATHS:
        return
    seen.add(rel)
    if not exists(rel):
        fail(doc, n, "names %s, which is not in the repository" % rel)


# The code's tables and keys: `gpuos config defaults`.
r = subprocess.run([gpuos, "config", "defaults"], capture_output=True, text=True, timeout=30)
if r.returncode != 0:
    sys.exit("gpuos config defaults failed: " + r.stderr)
known, defaults, table = {}, {}, None
for line in r.stdout.splitlines():
    m = re.match(r"^#?\[\[?([a-z_.]+)\]\]?$", line)
    if m:
        table = m.group(1)
        known.setdefault(table, set())
        continue
    m = re.match(r"^#([a-z_]+) = (.*)$", line) or re.match(r"^# ([a-z_]+): ", line)
    if m and table:
        known[table].add(m.group(1))
        if m.re.pattern.startswith("^#(") and table != "spatial.domain":
            defaults[(table, m.group(1))] = m.group(2)
if len(known) < 10 or sum(len(k) for k in known.values()) < 50:
    sys.exit("gpuos config defaults printed too little to check against:\n" + r.stdout)


def check_key(doc, n, table, key, where):
    if table not in known:
        fail(doc, n, "%s: no table [%s] in the config (gpuos config defaults)" % (where, table))
    elif key not in known[table]:
        fail(doc, n, "%s: [%s] has no key %s (gpuos config defaults)" % (where, table, key))


def anchors(rel):
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped,
    blanks as "-" (a second heading of the same text gets "-1")."""
    out, counts, fence = set(), {}, False
    with open(os.path.join(src, rel), encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            m = None if fence else re.match(r"^#{1,6} (.*?)\s*#*\s*$", line)
            if m:
                slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
                out.add(slug if slug not in counts else "%s-%d" % (slug, counts[slug]))
                counts[slug] = counts.get(slug, 0) + 1
    return out


def toml_value(text):
    """A TOML line's value without its comment (the values here hold no '#')."""
    return text.split("#", 1)[0].strip()


for doc in DOCS:
    with open(os.path.join(src, doc), encoding="utf-8") as f:
        lines = f.read().splitlines()
    seen = set()
    fence, toml_table, heading = None, None, ""
    for n, line in enumerate(lines, 1):
        if line.startswith("#") and fence is None:
            heading = line
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            toml_table = None
            continue
        # File paths: bare, in code spans, in links.
        for p in BARE.findall(line):
            check_path(doc, n, p, seen)
        if fence is None:
            for span in re.findall(r"`([^`]+)`", line):
                span = re.sub(r":\d+(-\d+)?$", "", span.strip())
                first = span.split("/", 1)[0]
                if first in SRC_DIRS and first not in ROOTS and SPAN_PATH.match(span):
                    check_path(doc, n, "src/" + span, seen)
                elif first not in ROOTS and span.endswith(CODE_EXT) and re.match(r"^(?:[\w.\-]+/)*[\w\-][\w.\-]*$", span) \
                        and span not in EXTERNAL and span not in seen:
                    seen.add(span)
                    if not any(f == span or f.endswith("/" + span) for f in REPO_FILES):
                        fail(doc, n, "names %s, and no file of the repository ends so" % span)
                if RESULT.match(span):
                    check_path(doc, n, "bench/results/" + span, seen)
                m = re.match(r"^\[\[?([a-z_.]+)\]\]? ([a-z_]+)(?: = .*)?$", span)
                if m:
                    check_key(doc, n, m.group(1), m.group(2), "`%s`" % span)
            for link in re.findall(r"\]\(([^)\s]+)\)", line):
                target, _, anchor = link.partition("#")
                if re.match(r"^[a-z]+:", target):
                    continue
                rel = os.path.normpath(os.path.join(os.path.dirname(doc), target)) if target else doc
                if not os.path.exists(os.path.join(src, rel)):
                    fail(doc, n, "links to %s, which is not in the repository" % target)
                elif anchor and rel.endswith(".md") and anchor not in anchors(rel):
                    fail(doc, n, "links to %s, and %s has no heading #%s" % (link, rel, anchor))
        # TOML blocks: their keys are the code's; README's config block is at the defaults.
        if fence == "toml":
            m = re.match(r"^\[\[?([a-z_.]+)\]\]?\s*(#.*)?$", line)
            if m:
                toml_table = m.group(1)
                continue
            m = re.match(r"^([a-z_]+)\s*=\s*(.*)$", line)
            if m and toml_table:
                check_key(doc, n, toml_table, m.group(1), "a TOML block")
                want = defaults.get((toml_table, m.group(1)))
                if doc == "README.md" and heading.startswith("### Config") and want is not None \
                        and toml_value(m.group(2)) != want:
                    fail(doc, n, "[%s] %s = %s, but its default is %s (the block shows defaults)"
                         % (toml_table, m.group(1), toml_value(m.group(2)), want))

# docs/OPERATIONS.md's configuration table: the code's keys, all of them, with their defaults.
with open(os.path.join(src, "docs", "OPERATIONS.md"), encoding="utf-8") as f:
    ops = f.read().splitlines()
rows, inside, table = set(), False, None
for n, line in enumerate(ops, 1):
    if line == "## Configuration":
        inside = True
    elif inside and line.startswith("## "):
        break
    elif inside:
        m = re.match(r"^\| \*\*\[\[?([a-z_.]+)\]\]?\*\* \|", line)
        if m:
            table = m.group(1)
            continue
        # A row names one key, or several with one meaning (`a`, `b`).
        m = re.match(r"^\| (`[a-z_]+`(?:, `[a-z_]+`)*) \| ([^|]*) \|", line)
        if m and table:
            cell = m.group(2).strip()
            for key in re.findall(r"`([a-z_]+)`", m.group(1)):
                rows.add((table, key))
                check_key("docs/OPERATIONS.md", n, table, key, "the configuration table")
                lit = re.match(r"^`([^`]*)`$", cell)
                want = defaults.get((table, key))
                if lit and want is not None and lit.group(1) != want:
                    fail("docs/OPERATIONS.md", n, "[%s] %s: the table's default is %s, the code's %s"
                         % (table, key, lit.group(1), want))
if not rows:
    failures.append("docs/OPERATIONS.md: no configuration table under \"## Configuration\"")
for table in sorted(known):
    for key in sorted(known[table] - {k for t, k in rows if t == table}):
        failures.append("docs/OPERATIONS.md: the configuration table lacks [%s] %s" % (table, key))

for f in failures:
    print("FAIL:", f)
if failures:
    sys.exit(1)
print("docs references: ok (%d docs; %d config keys)" % (len(DOCS), sum(len(k) for k in known.values())))
