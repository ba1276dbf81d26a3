#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Files the runs a device call brought back (gpu/budget_runs.sh's runs.tgz or runs-partial.tgz,
or the folder it unpacks to) under bench/results, one folder per run:

  <date>-<name>-<gpu>-<load>   from the run's summary.json: its label "<name>-<load>" (a label
                               without the load gets it appended), its date, its GPU (h100, h200)

Each gets the run's summary.md, summary.json, raw.json, frontier.json/.png and slo_frontier.png, every gpuos mode's
gpuosd log gzipped (gpuosd-<mode less "gpuos-">.log.gz), and a README.md to finish by hand: the
#40 table (TTFT, TTFT from admission, TPOT p99 against exclusive, 95% intervals where the run has
them; BE against exclusive), what moved each budget's share, and check_budgets.py's verdict. An
existing folder is never written over; a run without a summary (it did not end) is named and
skipped.

  python3 bench/colocation/import_runs.py /path/to/runs.tgz            files them
  python3 bench/colocation/import_runs.py /path/to/runs.tgz --dry-run  names the folders only
"""
import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "..", "results")
COPIED = ("summary.md", "summary.json", "raw.json", "frontier.json", "frontier.png", "slo_frontier.png")
COLUMNS = (("TTFT p99/excl", "hp_ttft_p99_vs_exclusive"), ("TTFT adm p99/excl", "hp_ttft_admit_p99_vs_exclusive"),
           ("TPOT p99/excl", "hp_tpot_p99_vs_exclusive"))


def gpu_tag(name: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "h100"; a name without a known model: its first word of
    letters and digits after "NVIDIA", lowercased."""
    m = re.search(r"\b([A-Z]\d{2,4})\b", name or "")
    if m:
        return m.group(1).lower()
    words = [w for w in re.findall(r"[A-Za-z0-9]+", name or "") if w.upper() != "NVIDIA"]
    return words[0].lower() if words else "gpu"


def folder_name(summary: dict) -> str:
    load = summary.get("load")
    label = summary.get("label") or "run"
    load_text = f"{load:g}" if isinstance(load, (int, float)) else None
    name = label
    if load_text and label.endswith("-" + load_text):
        name = label[: -len(load_text) - 1]
    date = (summary.get("date") or "")[:10] or "undated"
    parts = [date, name, gpu_tag(summary.get("gpu"))] + ([load_text] if load_text else [])
    return "-".join(parts)


def ratio(mode: dict, key: str) -> str:
    v = mode.get(key)
    if v is None:
        return "-"
    ci = mode.get(key + "_ci95")
    return f"{v:.3g} [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else f"{v:.3g}"


def how_measured(summary: dict) -> str:
    m = summary.get("method") or {}
    runs, window = m.get("exclusive_runs"), m.get("window_s")
    if m.get("follows"):
        return f"by #40's method ({runs} exclusive runs, {window:g} s windows)"
    if runs and runs > 1:
        return f"{runs} exclusive runs, {window:g} s windows (short of #40's method)"
    return f"point check, {window:g} s windows, one exclusive run" if window else "point check"


def gone_variants(variants: dict, texts: dict) -> list:
    """README lines giving the text (as the summary kept it) of each variant's config that is no
    longer in the tree: a trial config removed before its run was filed."""
    repo = os.path.join(HERE, "..", "..")
    out = []
    for name, path in sorted(variants.items()):
        here = path if os.path.isabs(path) else os.path.join(repo, path)
        if os.path.exists(here) or texts.get(path) is None:
            continue
        out += ["", f"`{name}`'s config, no longer in the tree, as the run read it:", "", "```toml",
                texts[path].rstrip("\n"), "```"]
    return out


def readme(summary: dict, verdict: str) -> str:
    variants = (summary.get("config") or {}).get("variants") or {}
    lines = [f"# {summary.get('label')}: {how_measured(summary)}", "",
             f"{(summary.get('date') or '')[:10]}, {summary.get('gpu')}, driver {summary.get('driver_version')}, "
             f"commit {summary.get('commit')}; load {summary.get('load')}, BE "
             f"{(summary.get('workload') or {}).get('be')}."]
    if variants:
        lines.append("Variants: " + ", ".join(f"`{k}` = `{os.path.relpath(v, os.path.join(HERE, '..', '..'))}`"
                                               if os.path.isabs(v) else f"`{k}` = `{v}`"
                                               for k, v in sorted(variants.items())) + ".")
        lines += gone_variants(variants, (summary.get("config") or {}).get("texts") or {})
    lines += ["", "| mode | " + " | ".join(c for c, _ in COLUMNS) + " | BE / excl |",
              "|---|" + "---|" * (len(COLUMNS) + 1)]
    for m in summary.get("modes", []):
        if m["mode"] == "exclusive-hp" or re.fullmatch(r"exclusive-hp-(r\d+|again)", m["mode"]):
            continue
        be = m.get("be_vs_exclusive")
        lines.append(f"| {m['mode']} | " + " | ".join(ratio(m, k) for _, k in COLUMNS) +
                     f" | {'-' if be is None else f'{be:.3f}'} |")
    lines.append("")
    for m in summary.get("modes", []):
        for note in m.get("notes") or []:
            if note.startswith("budget ("):
                lines.append(f"- {m['mode']}: {note}")
    lines += ["", "What it shows: (to write)", ""]
    if verdict:
        lines += ["`check_budgets.py --issue 40`:", "", verdict.strip(), ""]
    return "\n".join(lines)


def verdict_of(summary_path: str) -> str:
    r = subprocess.run([sys.executable, os.path.join(HERE, "check_budgets.py"), "--issue", "40", summary_path],
                       capture_output=True, text=True, timeout=60)
    return r.stdout if r.returncode in (0, 1) else ""


def import_run(run_dir: str, work_dir: str, results: str, dry_run: bool) -> str:
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    dest = os.path.join(results, folder_name(summary))
    if os.path.exists(dest):
        raise FileExistsError(f"{dest} exists: not written over")
    if dry_run:
        return dest
    os.makedirs(dest)
    for name in COPIED:
        src = os.path.join(run_dir, name)
        if os.path.exists(src):
            shutil.copy2(src, dest)
    if os.path.isdir(work_dir):
        for name in sorted(os.listdir(work_dir)):
            if name.startswith("gpuos-") and name.endswith(".daemon.log"):
                mode = name[len("gpuos-"):-len(".daemon.log")]
                with open(os.path.join(work_dir, name), "rb") as src, \
                        gzip.open(os.path.join(dest, f"gpuosd-{mode}.log.gz"), "wb") as out:
                    shutil.copyfileobj(src, out)
    with open(os.path.join(dest, "README.md"), "w") as f:
        f.write(readme(summary, verdict_of(os.path.join(dest, "summary.json"))))
    return dest


def safe_extract(t: tarfile.TarFile, dest: str) -> None:
    """Extracts regular files and folders only, each inside dest (the "data" filter where this
    Python has it, which Debian 12's 3.11.2 may not)."""
    if hasattr(tarfile, "data_filter"):
        t.extractall(dest, filter="data")
        return
    root = os.path.realpath(dest)
    members = []
    for m in t.getmembers():
        target = os.path.realpath(os.path.join(dest, m.name))
        if not (m.isfile() or m.isdir()) or os.path.commonpath([root, target]) != root:
            raise tarfile.TarError(f"{m.name}: not a plain file or folder inside the archive's root")
        members.append(m)
    t.extractall(dest, members=members)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", help="runs.tgz (or runs-partial.tgz) from gpu/budget_runs.sh, or the folder it unpacks to")
    ap.add_argument("--results", default=RESULTS, help="where the folders go (default bench/results)")
    ap.add_argument("--dry-run", action="store_true", help="name the folders, write nothing")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpuos-import-") as tmp:
        root = a.runs
        if os.path.isfile(a.runs):
            try:
                with tarfile.open(a.runs) as t:
                    safe_extract(t, tmp)
            except (tarfile.TarError, OSError) as e:
                print(f"import_runs: {a.runs}: {e}", file=sys.stderr)
                return 2
            root = tmp
        if not os.path.isdir(root):
            print(f"import_runs: {a.runs}: no such file or folder", file=sys.stderr)
            return 2
        runs = sorted((d for d in os.listdir(root) if re.fullmatch(r"run-\d+", d)), key=lambda d: int(d[4:]))
        if not runs:
            print(f"import_runs: {a.runs}: no run-N folders", file=sys.stderr)
            return 2
        rc = 0
        for d in runs:
            run_dir = os.path.join(root, d)
            if not os.path.exists(os.path.join(run_dir, "summary.json")):
                print(f"{d}: no summary.json (it did not end): skipped")
                continue
            try:
                print(f"{d} -> {import_run(run_dir, os.path.join(root, 'work-' + d[4:]), a.results, a.dry_run)}")
            except (FileExistsError, OSError, ValueError) as e:
                print(f"{d}: {e}", file=sys.stderr)
                rc = 1
        return rc


if __name__ == "__main__":
    sys.exit(main())
