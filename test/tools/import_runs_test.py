#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/colocation/import_runs.py: a --fake matrix's results, packed as gpu/budget_runs.sh packs
them, filed under a results folder of the test's own."""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fake_matrix import run_fake_matrix  # noqa: E402

IMPORT_RUNS = os.path.join(HERE, "..", "..", "bench", "colocation", "import_runs.py")


class ImportRuns(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpuos-import-test-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        _, out = run_fake_matrix(self, "gpuos-import-matrix-",
                                 ["--modes", "exclusive-hp,exclusive-be,time-slicing", "--load", "0.3", "--label", "trial-0.3"])
        work = os.path.join(self.tmp, "work")
        shutil.copytree(out, os.path.join(work, "run-0"))
        os.makedirs(os.path.join(work, "work-0"))
        with open(os.path.join(work, "work-0", "gpuos-space-slo-1.5@x.daemon.log"), "w") as f:
            f.write("<6>gpuosd: started\n")
        os.makedirs(os.path.join(work, "run-1"))  # a run that had not ended: no summary
        self.tgz = os.path.join(self.tmp, "runs.tgz")
        with tarfile.open(self.tgz, "w:gz") as t:
            t.add(work, arcname=".")
        self.results = os.path.join(self.tmp, "results")
        os.makedirs(self.results)

    def run_import(self, *args):
        return subprocess.run([sys.executable, IMPORT_RUNS, self.tgz, "--results", self.results, *args],
                              capture_output=True, text=True, timeout=60)

    def test_files_each_run_once(self):
        r = self.run_import("--dry-run")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(os.listdir(self.results), [], "a dry run writes nothing")
        r = self.run_import()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("run-1: no summary.json (it did not end): skipped", r.stdout)
        (folder,) = os.listdir(self.results)
        self.assertRegex(folder, r"^\d{4}-\d\d-\d\d-trial-[a-z0-9]+-0\.3$")
        files = set(os.listdir(os.path.join(self.results, folder)))
        self.assertTrue({"summary.md", "summary.json", "raw.json", "README.md", "gpuosd-space-slo-1.5@x.log.gz"} <= files, files)
        with open(os.path.join(self.results, folder, "README.md")) as f:
            text = f.read()
        self.assertIn("# trial-0.3: point check", text)
        self.assertRegex(text, r"\| time-slicing \| [\d.]+ \| [\d.-]+ \| [\d.]+ \| [\d.]+ \|")
        self.assertNotRegex(text, re.compile(r"^\| exclusive-hp ", re.M))
        self.assertIn("check_budgets.py --issue 40", text)
        # Never written over.
        r = self.run_import()
        self.assertEqual(r.returncode, 1)
        self.assertIn("exists: not written over", r.stderr)

    def test_a_removed_config_is_given_from_the_summary(self):
        sys.path.insert(0, os.path.dirname(IMPORT_RUNS))
        import import_runs
        kept = os.path.abspath(IMPORT_RUNS)  # any file that exists
        gone = os.path.join(self.tmp, "gone.toml")
        summary = {"label": "t-0.3", "modes": [],
                   "config": {"variants": {"a": kept, "b": gone},
                              "texts": {kept: "not shown", gone: "[policy.budget]\ntarget_pct = 85\n"}}}
        text = import_runs.readme(summary, "")
        self.assertIn("`b`'s config, no longer in the tree, as the run read it:\n\n```toml\n"
                      "[policy.budget]\ntarget_pct = 85\n```", text)
        self.assertNotIn("not shown", text)

    def test_bad_input_is_named(self):
        bad = os.path.join(self.tmp, "bad.tgz")
        with open(bad, "w") as f:
            f.write("not a tar")
        r = subprocess.run([sys.executable, IMPORT_RUNS, bad, "--results", self.results],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("bad.tgz", r.stderr)
        r = subprocess.run([sys.executable, IMPORT_RUNS, self.tmp + "/none", "--results", self.results],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
