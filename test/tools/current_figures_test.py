#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/current_figures.py: the committed bench/results/CURRENT.md is what the script writes from
current.json and the results (so the table cannot drift from them), and the script's rules on a
small results folder of its own: figures and ok/MISS from the runs' JSON, a superseded run never
cited, a missing folder or field an error, a stale CURRENT.md caught."""
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import current_figures  # noqa: E402


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = current_figures.main(list(argv))
    return rc, out.getvalue(), err.getvalue()


class Committed(unittest.TestCase):
    def test_current_md_is_what_the_script_writes(self):
        rc, out, err = run("--check")
        self.assertEqual(rc, 0, out[-3000:] + err)


class Rules(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="current-figures-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        for run_dir, p99 in (("2026-01-01-old", 1.2), ("2026-01-02-new", 1.01)):
            os.makedirs(os.path.join(self.dir, run_dir))
            with open(os.path.join(self.dir, run_dir, "summary.json"), "w") as f:
                json.dump({"modes": [{"mode": "exclusive-hp", "hp_p99_vs_exclusive": 1.0},
                                     {"mode": "gpuos-time-priority", "hp_p99_vs_exclusive": p99}]}, f)
        self.spec = {
            "intro": ["Intro."],
            "rows": [{"target": "HP p99 / exclusive", "target_value": "≤ 1.05x", "runs": ["2026-01-02-new"],
                      "value": "{v}x",
                      "fields": {"v": {"file": "summary.json", "mode": "gpuos-time-priority",
                                       "key": "hp_p99_vs_exclusive", "fmt": ".3f"}},
                      "ok_if": ["v", "<=", 1.05]},
                     {"target": "Not yet", "target_value": "x", "runs": [], "value": "not measured", "ok": "-"}],
            "superseded": [{"run": "2026-01-01-old", "by": "2026-01-02-new", "why": "a rerun"}]}

    def write_spec(self):
        with open(os.path.join(self.dir, "current.json"), "w") as f:
            json.dump(self.spec, f)

    def test_figures_and_verdicts_come_from_the_results(self):
        self.write_spec()
        self.assertEqual(run("--results", self.dir)[0], 0)
        with open(os.path.join(self.dir, "CURRENT.md")) as f:
            text = f.read()
        self.assertIn("| HP p99 / exclusive | ≤ 1.05x | 1.010x | ok | 2026-01-02 | [2026-01-02-new](2026-01-02-new/) |",
                      text)
        self.assertIn("| Not yet | x | not measured | - | - | - |", text)
        self.assertIn("| [2026-01-01-old](2026-01-01-old/) | [2026-01-02-new](2026-01-02-new/) | a rerun |", text)
        self.assertEqual(run("--results", self.dir, "--check")[0], 0)
        # A result that changes makes the committed table stale, and its verdict follows the number.
        with open(os.path.join(self.dir, "2026-01-02-new", "summary.json"), "w") as f:
            json.dump({"modes": [{"mode": "gpuos-time-priority", "hp_p99_vs_exclusive": 1.2}]}, f)
        rc, out, err = run("--results", self.dir, "--check")
        self.assertEqual(rc, 1)
        self.assertIn("+| HP p99 / exclusive | ≤ 1.05x | 1.200x | MISS |", out)
        self.assertIn("CURRENT.md is stale", err)

    def test_a_superseded_run_is_never_cited(self):
        self.spec["rows"][0]["runs"] = ["2026-01-01-old"]
        self.write_spec()
        rc, _, err = run("--results", self.dir)
        self.assertEqual(rc, 2)
        self.assertIn("2026-01-01-old is superseded by 2026-01-02-new", err)

    def test_missing_folders_and_fields_are_errors(self):
        self.spec["rows"][0]["fields"]["v"]["key"] = "hp_p50_vs_exclusive"
        self.spec["rows"][1]["runs"] = ["2026-01-03-none"]
        self.write_spec()
        rc, _, err = run("--results", self.dir)
        self.assertEqual(rc, 2)
        self.assertIn("no 'hp_p50_vs_exclusive' in 2026-01-02-new/summary.json", err)
        self.assertIn("no results folder 2026-01-03-none", err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "CURRENT.md")))


if __name__ == "__main__":
    unittest.main()
