#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Issue #56's method v2 and its SLO headline (bench/colocation/method_v2.py; no GPU, no torch):
the bootstrap bound on a known input, the outlier rule (a slow calibration is excluded, a slow
co-located metric is not), pairing (seed s's ratios divide by seed s's alone run), attainment,
goodput and aggregate on synthetic requests, the highest load at 99%, run_matrix.py --paired-seeds'
plan, a --fake run end to end, the frontier plots' legend names, gpu/zoo.sh method=v2 and
zoo_table.py's columns."""
import contextlib
import io
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "colocation"))
import common  # noqa: E402
import method_v2  # noqa: E402
import report  # noqa: E402
import run_matrix  # noqa: E402
from fake_matrix import run_fake_matrix  # noqa: E402


def exact_upper(values, q=0.95):
    """The q-quantile of the exact bootstrap distribution of the mean (every resample enumerated):
    the least m with P(mean <= m) >= q."""
    n = len(values)
    means = sorted(sum(c) / n for c in itertools.product(values, repeat=n))
    return means[math.ceil(q * len(means)) - 1]


class Bootstrap(unittest.TestCase):
    def test_a_known_input(self):
        # Means of 3 draws from {1, 2, 4}: only (4, 4, 4) (1 in 27, 3.7%) exceeds 10/3, so the exact
        # 95% upper bound is 10/3; 10,000 resamples with the fixed RNG seed find it.
        self.assertAlmostEqual(exact_upper([1.0, 2.0, 4.0]), 10 / 3)
        self.assertAlmostEqual(method_v2.upper95([1.0, 2.0, 4.0]), 10 / 3)
        # Two values: P(mean <= 1.5) = 3/4 < 0.95, so the bound is the larger.
        self.assertEqual(method_v2.upper95([1.0, 2.0]), 2.0)

    def test_degenerate_and_reproducible(self):
        self.assertIsNone(method_v2.upper95([]))
        self.assertEqual(method_v2.upper95([1.3]), 1.3)
        self.assertAlmostEqual(method_v2.upper95([1.2, 1.2, 1.2]), 1.2)
        v = [1.10, 1.31, 1.22, 1.45, 1.18]
        self.assertEqual(method_v2.upper95(v), method_v2.upper95(v))      # a fixed RNG seed
        self.assertGreater(method_v2.upper95(v), sum(v) / len(v))
        self.assertLessEqual(method_v2.upper95(v), max(v))
        self.assertEqual((method_v2.BOOTSTRAP_RESAMPLES, method_v2.UPPER_QUANTILE), (10_000, 0.95))


# --- synthetic raw results -------------------------------------------------------------------------

def log_of(ttft, tpot):
    return {"arrival_s": [i * 0.01 for i in range(len(ttft))], "ttft_ms": list(ttft), "tpot_ms": list(tpot)}


def hp_result(ttft_p99, tpot_p99, log=None, calib_tpot_p50=None, admit_p99=None):
    hp = {"ttft_ms": {"p99": ttft_p99}, "tpot_ms": {"p99": tpot_p99},
          "ttft_admit_ms": {"p99": admit_p99 if admit_p99 is not None else ttft_p99 / 2},
          "e2e_ms": {"p99": ttft_p99 * 3}, "requests": len((log or {}).get("ttft_ms") or [1]),
          "window": {"seconds": 10.0}}
    if log is not None:
        hp["request_log"] = log
    if calib_tpot_p50 is not None:
        hp["calib_replay"] = {"tpot_ms": {"p50": calib_tpot_p50}}
    return hp


def paired_raw(alone, colocated, calibs, be_rates=None, load=0.3, seeds=(1, 2, 3)):
    """raw.json of a --paired-seeds run with one co-located mode (time-slicing): alone[s] and
    colocated[s] are hp_result()s, calibs[s] the calibration TPOT p50s."""
    modes = {"exclusive-hp": {"status": "ok", "hp": alone[seeds[0]]},
             "exclusive-be": {"status": "ok", "be_rate": 10.0, "be_unit": "steps/s"}}
    planned = ["exclusive-hp", "exclusive-be"]
    for s in seeds:
        a = dict(alone[s])
        if calibs.get(s) is not None:
            a["calib_replay"] = {"tpot_ms": {"p50": calibs[s]}}
        modes[f"exclusive-hp+s{s}"] = {"status": "ok", "hp": a}
        modes[f"time-slicing+s{s}"] = {"status": "ok", "hp": colocated[s],
                                       "be_rate": (be_rates or {}).get(s, 4.0)}
        planned += [f"exclusive-hp+s{s}", f"time-slicing+s{s}"]
    meta = {"load": load, "window_s": 10.0, "paired_seeds": list(seeds), "pair_calibrate_s": 5.0,
            "modes_planned": planned, "min_requests": 1}
    return {"meta": meta, "modes": modes}


class OutlierRule(unittest.TestCase):
    def test_the_rule_alone(self):
        r = method_v2.calibration_outliers({1: 1.00, 2: 1.02, 3: 1.30})
        self.assertEqual(r["median_ms"], 1.02)
        self.assertEqual(sorted(r["excluded"]), [3])
        self.assertEqual(method_v2.calibration_outliers({1: 1.0, 2: 1.0, 3: 1.095})["excluded"], {})  # within 10%
        self.assertEqual(sorted(method_v2.calibration_outliers({1: 1.0, 2: 1.0, 3: None})["excluded"]), [3])
        self.assertEqual(method_v2.calibration_outliers({1: None, 2: None})["excluded"], {})  # no replays: none
        self.assertEqual(method_v2.CALIBRATION_TOLERANCE, 0.10)

    def test_a_slow_calibration_is_excluded_and_a_slow_metric_is_not(self):
        alone = {s: hp_result(10.0, 1.0) for s in (1, 2, 3, 4)}
        co = {1: hp_result(12.0, 1.2), 2: hp_result(12.0, 1.2),
              3: hp_result(36.0, 3.6),   # a slow co-located run: its pair stays, its ratio counts
              4: hp_result(12.0, 1.2)}   # a normal co-located run after a slow calibration: excluded
        raw = paired_raw(alone, co, {1: 1.0, 2: 1.01, 3: 0.99, 4: 1.5}, seeds=(1, 2, 3, 4))
        p = method_v2.analyse(raw["meta"], raw["modes"])
        self.assertEqual([e["seed"] for e in p["excluded"]], [4])
        self.assertIn("off the run's median", p["excluded"][0]["reason"])
        m = p["modes"]["time-slicing"]
        self.assertEqual(m["pairs"], 3)
        self.assertEqual(sorted(round(x, 6) for x in m["ratios"]["tpot"]), [1.2, 1.2, 3.6])
        self.assertGreater(m["upper95"]["tpot"], 1.5)  # the slow pair drives the bound, as it must
        self.assertFalse(m["met"])
        self.assertEqual((m["method"], p["method"]), ("v2", "v2"))

    def test_fewer_than_three_pairs_is_a_point_check(self):
        alone = {s: hp_result(10.0, 1.0) for s in (1, 2, 3)}
        co = {s: hp_result(12.0, 1.2) for s in (1, 2, 3)}
        raw = paired_raw(alone, co, {1: 1.0, 2: 1.0, 3: 2.0})
        s = report.build_summary(raw)
        self.assertEqual(s["paired"]["method"], "point")
        row = next(r for r in s["modes"] if r["mode"] == "time-slicing")
        self.assertEqual((row["method"], row["pairs"]), ("point", 2))
        self.assertIn("POINT CHECK", report.markdown(s))
        self.assertIn("excluded pair, seed 3", report.markdown(s))


class Pairing(unittest.TestCase):
    def test_seed_s_divides_by_seed_s_alone(self):
        # HP alone differs by seed (10, 20, 40 ms); each co-located run is 1.5x its own seed's.
        alone = {1: hp_result(10.0, 1.0), 2: hp_result(20.0, 2.0), 3: hp_result(40.0, 4.0)}
        co = {1: hp_result(15.0, 1.5), 2: hp_result(30.0, 3.0), 3: hp_result(60.0, 6.0)}
        raw = paired_raw(alone, co, {1: 1.0, 2: 1.0, 3: 1.0})
        p = method_v2.analyse(raw["meta"], raw["modes"])
        m = p["modes"]["time-slicing"]
        for metric in ("ttft", "ttft_admit", "tpot"):
            self.assertEqual([round(x, 9) for x in m["ratios"][metric]], [1.5, 1.5, 1.5], metric)
            self.assertAlmostEqual(m["upper95"][metric], 1.5)
        self.assertTrue(m["met"])  # 1.5 <= B = 1.5
        s = report.build_summary(raw)
        rows = {r["mode"]: r for r in s["modes"]}
        for sd in (1, 2, 3):  # each per-seed row against its own seed's alone run
            self.assertAlmostEqual(rows[f"time-slicing+s{sd}"]["hp_ttft_p99_vs_exclusive"], 1.5)
        self.assertAlmostEqual(rows["time-slicing"]["hp_tpot_p99_vs_exclusive"], 1.5)
        self.assertEqual(rows["time-slicing"]["upper95"]["tpot"], m["upper95"]["tpot"])
        # Mis-paired (every seed against seed 1's alone run), the ratios would be 1.5, 3 and 6.
        self.assertNotAlmostEqual(rows["time-slicing+s3"]["hp_ttft_p99_vs_exclusive"], 6.0)
        # The frontier has the mode once (its mean over the pairs), not its per-seed runs.
        self.assertEqual([x["mode"] for x in report.frontier(s)["points"]], ["time-slicing"])

    def test_the_plan_runs_each_seed_back_to_back(self):
        a = run_matrix.parse_args(["--dry-run", "--paired-seeds", "1,2,3", "--modes",
                                   "exclusive-hp,exclusive-be,time-slicing,mps-prio1-t25", "--gpuos",
                                   "gpuos-space-slo-1.5,gpuos-space-slo-1.5@nog", "--variant",
                                   f"nog={REPO}/bench/colocation/configs/budget_no_growth.toml"])
        plan = run_matrix.Plan(a)
        names = [s.name for s in plan.modes]
        self.assertEqual(names[:2], ["exclusive-hp", "exclusive-be"])
        block = ["time-slicing", "mps-prio1-t25", "gpuos-space-slo-1.5", "gpuos-space-slo-1.5@nog"]
        for i, sd in enumerate((1, 2, 3)):
            self.assertEqual(names[2 + i * 5: 7 + i * 5], [f"exclusive-hp+s{sd}"] + [f"{b}+s{sd}" for b in block])
        by = {s.name: s for s in plan.modes}
        cmd = plan.hp_cmd(by["mps-prio1-t25+s2"], False, 10.0, "")[0]
        self.assertEqual(cmd[cmd.index("--seed") + 1], "2")
        self.assertNotIn("--calib-replay-s", cmd)
        cmd = plan.hp_cmd(by["exclusive-hp+s3"], False, 10.0, "")[0]
        self.assertEqual((cmd[cmd.index("--seed") + 1], cmd[cmd.index("--calib-replay-s") + 1]), ("3", "5"))
        self.assertEqual(by["gpuos-space-slo-1.5@nog+s2"].variant, "nog")
        self.assertEqual(by["gpuos-space-slo-1.5@nog+s2"].budget, 1.5)
        self.assertEqual(common.mode_budget("gpuos-space-slo-1.5@nog+s2"), 1.5)
        for bad in (["--paired-seeds", "1,1"], ["--paired-seeds", "a"],
                    ["--paired-seeds", "1,2", "--modes", "exclusive-hp,time-slicing"],
                    ["--paired-seeds", "1,2", "--exclusive-repeats", "3", "--modes", "exclusive-hp,exclusive-be"]):
            with self.assertRaises(SystemExit, msg=bad), contextlib.redirect_stderr(io.StringIO()):
                run_matrix.parse_args(["--dry-run", *bad])


class Headline(unittest.TestCase):
    def test_attainment_counts_every_arrival(self):
        ttft = [10.0] * 97 + [20.0, None, 10.0]   # one over the TTFT SLO, one unfinished
        tpot = [1.0] * 97 + [1.0, None, None]     # the last has one output token: TTFT decides
        a = method_v2.attainment(log_of(ttft, tpot), 15.0, 1.5)
        self.assertEqual((a["requests"], a["good"]), (100, 98))
        self.assertAlmostEqual(a["attainment"], 0.98)

    def test_goodput_only_at_99_and_the_aggregate(self):
        # Alone: 200 requests, TTFT p99 10 ms, TPOT p99 1 ms -> SLO 15 ms / 1.5 ms.
        alone = hp_result(10.0, 1.0, log_of([10.0] * 200, [1.0] * 200))
        ok = hp_result(14.0, 1.4, log_of([14.0] * 198 + [16.0, 14.0], [1.4] * 199 + [1.6]))    # 99.0%
        bad = hp_result(14.0, 1.4, log_of([14.0] * 197 + [16.0] * 3, [1.4] * 200))             # 98.5%
        s_ok = method_v2.served(ok, method_v2.slo_of(alone), 10.0)
        self.assertAlmostEqual(s_ok["attainment"], 0.99)
        self.assertAlmostEqual(s_ok["goodput_rps"], 19.8)
        s_bad = method_v2.served(bad, method_v2.slo_of(alone), 10.0)
        self.assertEqual(s_bad["goodput_rps"], 0.0)            # below 99%: no goodput
        self.assertAlmostEqual(s_bad["good_rps"], 19.7)        # the raw rate is kept
        # One pair (no --paired-seeds): mps-prio1-t25 serves at 99% with BE 0.30; time-slicing misses
        # with BE 0.6; gpuos serves with BE 0.40.
        modes = {"exclusive-hp": {"status": "ok", "hp": alone},
                 "exclusive-be": {"status": "ok", "be_rate": 10.0},
                 "mps-prio1-t25": {"status": "ok", "hp": ok, "be_rate": 3.0},
                 "time-slicing": {"status": "ok", "hp": bad, "be_rate": 6.0},
                 "gpuos-space-slo-1.5": {"status": "ok", "hp": ok, "be_rate": 4.0}}
        meta = {"load": 0.3, "window_s": 10.0, "seed": 1, "modes_planned": list(modes), "min_requests": 1}
        p = method_v2.analyse(meta, modes)
        m = p["modes"]
        self.assertAlmostEqual(m["mps-prio1-t25"]["hp_goodput_vs_alone"], 0.99)
        self.assertAlmostEqual(m["mps-prio1-t25"]["aggregate"], 1.29)
        self.assertAlmostEqual(m["time-slicing"]["aggregate"], 0.6)
        self.assertEqual(p["best_baseline"]["mode"], "mps-prio1-t25")
        self.assertAlmostEqual(m["gpuos-space-slo-1.5"]["aggregate"], 1.39)
        self.assertAlmostEqual(m["gpuos-space-slo-1.5"]["aggregate_vs_best_baseline"], 1.39 / 1.29)
        self.assertAlmostEqual(m["gpuos-space-slo-1.5"]["aggregate_per_gpu_vs_dedicated"], 1.39)
        self.assertEqual((p["method"], m["gpuos-space-slo-1.5"]["method"]), ("point", "point"))
        # No baseline above exclusive's 1.0: exclusive is the best baseline.
        del modes["mps-prio1-t25"]
        meta["modes_planned"] = list(modes)
        self.assertEqual(method_v2.analyse(meta, modes)["best_baseline"], {"mode": "exclusive", "aggregate": 1.0})
        # The summary's rows carry it (a point check).
        s = report.build_summary({"meta": meta, "modes": modes})
        row = next(r for r in s["modes"] if r["mode"] == "gpuos-space-slo-1.5")
        self.assertEqual((row["method"], row["pairs"]), ("point", 1))
        self.assertAlmostEqual(row["aggregate"], 1.39)

    def test_the_highest_load_at_99(self):
        def pt(load, alone_bad, mode_bad):
            n = 100
            alone = log_of([10.0] * (n - alone_bad) + [99.0] * alone_bad, [1.0] * n)
            mode = log_of([10.0] * (n - mode_bad) + [99.0] * mode_bad, [1.0] * n)
            return {"load": load, "alone": [alone], "alone_hp": [hp_result(10.0, 1.0)],
                    "modes": {"gpuos": [mode]}}
        # SLO from the lowest load's alone p99 (15 ms): alone keeps it to 0.5; gpuos to 0.3 only;
        # a mode that misses at 0.3 and keeps it at 0.5 keeps it to 0.1 (every lower load must hold).
        r = method_v2.max_load([pt(0.5, 1, 5), pt(0.1, 0, 0), pt(0.3, 0, 1), pt(0.7, 3, 9)])
        self.assertEqual(r["slo_ms"], {"ttft_ms": 15.0, "tpot_ms": 1.5})
        self.assertEqual((r["alone"], r["modes"]["gpuos"]), (0.5, 0.3))
        r = method_v2.max_load([pt(0.1, 0, 0), pt(0.3, 0, 2), pt(0.5, 0, 0)])
        self.assertEqual(r["modes"]["gpuos"], 0.1)
        r = method_v2.max_load([pt(0.1, 0, 5)])
        self.assertIsNone(r["modes"]["gpuos"])


class FakeRun(unittest.TestCase):
    ARGS = ["--paired-seeds", "1,2,3", "--pair-calibrate-s", "0.2", "--load", "0.3",
            "--modes", "exclusive-hp,exclusive-be,time-slicing"]

    def test_a_fake_paired_run(self):
        _, out = run_fake_matrix(self, "gpuos-v2-test-", self.ARGS, timeout=120)
        s = common.read_json(os.path.join(out, "summary.json"))
        raw = common.read_json(os.path.join(out, "raw.json"))
        p = s["paired"]
        self.assertEqual((p["method"], p["seeds"], p["excluded"]), ("v2", [1, 2, 3], []))
        m = p["modes"]["time-slicing"]
        self.assertEqual((m["method"], m["pairs"]), ("v2", 3))
        for metric in ("ttft", "ttft_admit", "tpot"):
            self.assertEqual(len(m["ratios"][metric]), 3)
            self.assertGreaterEqual(m["upper95"][metric], m["mean"][metric])
        for sd in (1, 2, 3):  # each run replayed its own seed; each alone run its calibration first
            self.assertEqual(raw["modes"][f"time-slicing+s{sd}"]["hp"]["config"]["seed"], sd)
            self.assertIn("calib_replay", raw["modes"][f"exclusive-hp+s{sd}"]["hp"])
            self.assertIn("request_log", raw["modes"][f"time-slicing+s{sd}"]["hp"])
        self.assertIsNotNone(m["attainment"])
        self.assertIsNotNone(m["aggregate"])
        row = next(r for r in s["modes"] if r["mode"] == "time-slicing")
        self.assertEqual((row["method"], row["pairs"]), ("v2", 3))
        self.assertEqual(s["paired_seeds"], [1, 2, 3])
        with open(os.path.join(out, "summary.md")) as f:
            self.assertIn("## Aggregate at the SLO (method v2)", f.read())

    def test_a_slow_calibration_in_a_fake_run(self):
        _, out = run_fake_matrix(self, "gpuos-v2-test-", self.ARGS, env={"FAKE_SLOW_CALIB_SEEDS": "2"}, timeout=120)
        p = common.read_json(os.path.join(out, "summary.json"))["paired"]
        self.assertEqual([e["seed"] for e in p["excluded"]], [2])
        self.assertEqual((p["method"], p["modes"]["time-slicing"]["pairs"]), ("point", 2))


class Server(unittest.TestCase):
    """hp_server.py's side on a stand-in engine (no torch): the calibration replay before the window
    and the per-request log every result keeps."""

    def test_calibration_replay_and_request_log(self):
        sys.path.insert(0, HERE)
        import hp_server
        from zoo_test import VariableScheduler
        eng = VariableScheduler.Engine()
        sched = hp_server.Scheduler(eng, None, 8, 32, common.StopFlag(), phase_hints=False)
        import lengths
        c = hp_server.calib_replay(sched, 200.0, 0.1, 7, 2.0, lengths.Lengths("azure-code", max_prompt=512, max_out=8))
        self.assertEqual(c["seed"], 7 + hp_server.CALIB_SEED_OFFSET)
        self.assertGreater(c["requests"], 0)
        self.assertIsNotNone(c["tpot_ms"]["p50"])
        # The replay's arrivals are its own seed's, never the window's (seed 7).
        self.assertNotEqual(common.poisson_arrivals(200.0, 0.0, 0.1, 0, 7),
                            common.poisson_arrivals(200.0, 0.0, 0.1, 0, c["seed"]))
        now = time.perf_counter()
        res = sched.run([now, now + 0.001], lens=[(100, 3), (50, 2)])
        log = hp_server.request_log(res, now, time.perf_counter())
        self.assertEqual(sorted(log), ["arrival_s", "tpot_ms", "ttft_admit_ms", "ttft_ms"])
        self.assertEqual(len(log["ttft_admit_ms"]), 2)
        self.assertTrue(all(a <= t for a, t in zip(log["ttft_admit_ms"], log["ttft_ms"])))
        clock = common.WallClock()
        self.assertIn("request_log", hp_server.summarize(res, now, time.perf_counter(), clock, 32))


class Zoo(unittest.TestCase):
    def zoo(self, *args, **env):
        e = {k: v for k, v in os.environ.items() if k not in ("OUT", "ZOO", "BUDGET_S")}
        e["RUN"] = "/tmp/gpuos-v2-zoo-test-%d" % os.getpid()
        e.update(env)
        return subprocess.run(["bash", os.path.join(REPO, "gpu", "zoo.sh"), *args], env=e,
                              capture_output=True, text=True, timeout=120)

    def test_method_v2_is_one_point_per_combination(self):
        r = self.zoo("plan", ZOO="sizes=1,8 loads=0.3,0.5 be=train lengths=fixed method=v2")
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 4, r.stderr)
        self.assertIn("--seed 1 --paired-seeds 1,2,3 --budget-s 1700 --modes", lines[0])
        self.assertTrue(lines[0].endswith("--label zoo-1b-0.3-train-fixed-v2"), lines[0])
        self.assertTrue(lines[3].endswith("--label zoo-8b-0.5-train-fixed-v2"), lines[3])
        r = self.zoo("plan", ZOO="sizes=1 loads=0.3 be=train lengths=fixed seeds=4,5 method=v2")
        self.assertIn("--seed 4 --paired-seeds 4,5 --budget-s 1700", r.stdout)
        r = self.zoo("plan", ZOO="sizes=1 loads=0.3 be=train lengths=fixed seeds=1,2")   # method=point
        self.assertEqual(len(r.stdout.splitlines()), 2)
        self.assertNotIn("--paired-seeds", r.stdout)
        r = self.zoo("plan", ZOO="method=v3")
        self.assertEqual(r.returncode, 2)
        self.assertIn("method=v3", r.stderr)

    @staticmethod
    def legacy_run(folder, load, gpuos_bad):
        """A run without paired seeds (one pair: a point check) at `load`, with raw.json beside."""
        n = 100
        alone = hp_result(10.0, 1.0, log_of([10.0] * n, [1.0] * n))
        gp = hp_result(14.0, 1.4, log_of([14.0] * (n - gpuos_bad) + [99.0] * gpuos_bad, [1.4] * n))
        base = hp_result(14.0, 1.4, log_of([14.0] * n, [1.4] * n))
        modes = {"exclusive-hp": {"status": "ok", "hp": alone},
                 "exclusive-be": {"status": "ok", "be_rate": 10.0, "be_unit": "steps/s"},
                 "mps-prio1-t25": {"status": "ok", "hp": base, "be_rate": 3.0},
                 "gpuos-space-slo-1.5": {"status": "ok", "hp": gp, "be_rate": 4.0}}
        raw = {"meta": {"load": load, "window_s": 10.0, "seed": 1, "be": "train", "lengths": "fixed",
                        "params_b": 1.0, "label": f"zoo-1b-{load}-train-fixed", "modes_planned": list(modes),
                        "min_requests": 1, "commit": "abc"}, "modes": modes}
        os.makedirs(folder)
        report.write_all(raw, folder, plots=False)
        with open(os.path.join(folder, "raw.json"), "w") as f:
            json.dump(raw, f)

    def test_the_table_has_the_headline_and_labels_point_checks(self):
        tmp = tempfile.mkdtemp(prefix="gpuos-v2-table-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        self.legacy_run(os.path.join(tmp, "run-0"), 0.3, 0)
        self.legacy_run(os.path.join(tmp, "run-1"), 0.5, 5)   # gpuos at 95% attainment at 50% load
        r = subprocess.run([sys.executable, os.path.join(REPO, "bench", "colocation", "zoo_table.py"), tmp,
                            "--json", os.path.join(tmp, "zoo.json")], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, GPUOS_COMMIT="feedbee"))
        self.assertEqual(r.returncode, 0, r.stderr)
        j = common.read_json(os.path.join(tmp, "zoo.json"))
        self.assertEqual(j["commit"], "feedbee")
        p3, p5 = j["points"]
        g3 = next(x for x in p3["modes"] if x["mode"] == "gpuos-space-slo-1.5")
        self.assertEqual((g3["method"], g3["pairs"]), ("point", 1))
        self.assertAlmostEqual(g3["attainment"], 1.0)
        self.assertAlmostEqual(g3["aggregate"], 1.4)
        self.assertAlmostEqual(g3["aggregate_vs_best_baseline"], 1.4 / 1.3)
        self.assertEqual(p3["method_v2"]["best_baseline"]["mode"], "mps-prio1-t25")
        g5 = next(x for x in p5["modes"] if x["mode"] == "gpuos-space-slo-1.5")
        self.assertEqual(g5["hp_goodput_vs_alone"], 0.0)      # 95% < 99%: no goodput
        # The highest load at 99%: alone and MPS to 0.5, gpuos to 0.3 only.
        self.assertEqual(p3["max_load_99"]["alone"], 0.5)
        self.assertEqual(p3["max_load_99"]["modes"], {"mps-prio1-t25": 0.5, "gpuos-space-slo-1.5": 0.3})
        self.assertIn("POINT CHECK (1)", r.stdout)
        self.assertIn("| 0.500 / 0.300 |", r.stdout)

    def test_a_fake_paired_run_in_the_table(self):
        _, out = run_fake_matrix(self, "gpuos-v2-test-", FakeRun.ARGS, timeout=120)
        r = subprocess.run([sys.executable, os.path.join(REPO, "bench", "colocation", "zoo_table.py"), out,
                            "--json", os.path.join(out, "zoo.json")], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        (p,) = common.read_json(os.path.join(out, "zoo.json"))["points"]
        self.assertEqual([x["mode"] for x in p["modes"]], ["time-slicing"])   # not its per-seed runs
        (x,) = p["modes"]
        self.assertEqual((x["method"], x["pairs"], x["check"]), ("v2", 3, "pairs_mean"))
        self.assertEqual(sorted(x["upper95"]), ["tpot", "ttft", "ttft_admit"])
        self.assertEqual((p["method_v2"]["method"], p["method_v2"]["seeds"]), ("v2", [1, 2, 3]))
        self.assertIn("v2 (3 pairs)", r.stdout)
        self.assertIn("method v2 over seeds 1,2,3", r.stdout)


class Plots(unittest.TestCase):
    def test_variants_are_named(self):
        line = [{"budget": 1.5}]
        self.assertEqual(report.slo_line_label("gpuos-space", line, "nog"), "gpuos-space-slo-1.5@nog")
        self.assertEqual(report.slo_line_label("gpuos-space", line, ""), "gpuos-space-slo-1.5")
        self.assertEqual(report.slo_line_label("gpuos-time", [{"budget": 1.25}, {"budget": 1.5}], "iv150"),
                         "gpuos-time-slo-{1.25,1.5}@iv150 (label: B)")

    def test_the_legends(self):
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            self.skipTest("no matplotlib")
        alone = hp_result(10.0, 1.0, log_of([10.0] * 100, [1.0] * 100))
        ok = hp_result(14.0, 1.4, log_of([14.0] * 100, [1.4] * 100))
        modes = {"exclusive-hp": {"status": "ok", "hp": alone}, "exclusive-be": {"status": "ok", "be_rate": 10.0},
                 "mps-prio1-t25": {"status": "ok", "hp": ok, "be_rate": 3.0},
                 "gpuos-space-slo-1.5": {"status": "ok", "hp": ok, "be_rate": 4.0},
                 "gpuos-space-slo-1.5@nog": {"status": "ok", "hp": ok, "be_rate": 5.0}}
        s = report.build_summary({"meta": {"load": 0.3, "window_s": 10.0, "modes_planned": list(modes)},
                                  "modes": modes})
        tmp = tempfile.mkdtemp(prefix="gpuos-v2-plot-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        seen = []
        real_save = report._save

        def save(fig, plt_, out_dir, name):
            seen.append((name, [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]))
            return real_save(fig, plt_, out_dir, name)
        report._save = save
        try:
            report.plot_frontier(s, report.frontier(s), tmp, plt)
            report.plot_slo_frontier(s, tmp, plt)
        finally:
            report._save = real_save
        legends = dict(seen)
        self.assertIn("gpuos-space-slo-1.5@nog", legends["frontier.png"])
        self.assertIn("gpuos-space-slo-1.5", legends["frontier.png"])
        self.assertTrue(any(t.startswith("gpuos-space-slo-1.5@nog (") for t in legends["slo_frontier.png"]))
        self.assertTrue(any(t.startswith("mps-prio1-t25 (") for t in legends["slo_frontier.png"]))
        self.assertTrue(os.path.exists(os.path.join(tmp, "slo_frontier.png")))


if __name__ == "__main__":
    unittest.main()
