#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/colocation's run_matrix.py parts on their own (no GPU, no torch): planning.py (the modes'
order, estimates, commands) and readers.py (HP's and BE's results into a mode's record, the node's
GPUs); and what every summary.json records of its run (commit, config hash, GPU, driver)."""
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "colocation"))
import planning  # noqa: E402
import readers  # noqa: E402
import common  # noqa: E402
import run_matrix  # noqa: E402
import hp_server  # noqa: E402
from fake_matrix import run_fake_matrix  # noqa: E402

ModeSpec = planning.ModeSpec


def plan(*argv):
    return planning.Plan(run_matrix.parse_args(["--dry-run", "--workdir", "/tmp/w", *argv]))


class Proc:
    """Stands in for a processes.Proc: an exit code and a log tail."""

    def poll(self):
        return 1

    def tail(self, n=2500):  # noqa: ARG002
        return "the log's tail"


class Planning(unittest.TestCase):
    def test_baselines_first_then_gpuos_then_again(self):
        p = plan("--modes", "exclusive-hp-again,mps-prio1,time-slicing,exclusive-hp", "--gpuos",
                 "gpuos-time-priority")
        self.assertEqual([s.name for s in p.modes],
                         ["exclusive-hp", "time-slicing", "mps-prio1", "gpuos-time-priority", "exclusive-hp-again"])

    def test_estimates(self):
        p = plan("--workload", "synthetic", "--window", "10", "--be-window", "5", "--calibrate-s", "2",
                 "--modes", "exclusive-hp,exclusive-be,mps", "--gpuos", "gpuos-space-priority")
        est = {s.name: p.estimate(s) for s in p.modes}
        self.assertEqual(est["exclusive-hp"], 1.5 + 2 + 10 + 4)   # start, calibration, window, margin
        self.assertEqual(est["exclusive-be"], 1.5 + 5 + 3)
        self.assertEqual(est["mps"], 2.5 + 10 + 5 + 4)             # MPS: 4 s for its daemon
        self.assertEqual(est["gpuos-space-priority"], 2.5 + 10 + 5 + 8)
        self.assertEqual(plan("--hp-rate", "5", "--window", "10").estimate(ModeSpec("exclusive-hp")),
                         14.0 + 1.5 + 2.0 + 10 + 4)                # no calibration with --hp-rate

    def test_synthetic_commands(self):
        p = plan("--workload", "synthetic", "--synth-hp-blocks", "64", "--synth-bin", "/s",
                 "--modes", "exclusive-hp", "--gpuos", "none")
        cal, run = p.hp_cmd(p.modes[0], True, 100.0, "")
        self.assertEqual(cal[:2], ["/s", "--name"])
        self.assertEqual(cal[cal.index("--blocks") + 1], "64")
        self.assertEqual(cal[cal.index("--mode") + 1], "closed")
        self.assertEqual(run[run.index("--rate") + 1], "100.000")
        self.assertEqual(run[run.index("--count") + 1], str(int(100.0 * 40.0)))
        self.assertEqual(run[run.index("--json") + 1], "/tmp/w/exclusive-hp.hp.json")

    def test_mps_modes_share_private_directories(self):
        p = plan("--modes", "mps-be50", "--gpuos", "none")
        hp, be = p.envs(p.modes[0])
        self.assertEqual(hp["CUDA_MPS_PIPE_DIRECTORY"], "/tmp/w/mps-be50.mps-pipe")
        self.assertEqual(be["CUDA_MPS_PIPE_DIRECTORY"], hp["CUDA_MPS_PIPE_DIRECTORY"])
        self.assertEqual(be["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50")
        self.assertNotIn("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", hp)


class Method(unittest.TestCase):
    """Issue #40's method: --exclusive-repeats (HP alone N times, interleaved) and the 95% intervals."""

    COLOC = ["time-slicing", "mps", "mps-prio1-t25", "gpuos-time-priority", "gpuos-space-slo-1.25",
             "gpuos-space-slo-1.5"]

    def test_repeats_are_spread_evenly_between_the_colocated_modes(self):
        order = planning.interleave(["exclusive-be"], self.COLOC, [], 5)
        # 6 co-located modes, 4 gaps: r2 after 1.5 -> 2, r3 after 3, r4 after 4.5 -> 5, r5 last.
        self.assertEqual(order, ["exclusive-hp", "exclusive-be", "time-slicing", "mps", "exclusive-hp-r2",
                                 "mps-prio1-t25", "exclusive-hp-r3", "gpuos-time-priority", "gpuos-space-slo-1.25",
                                 "exclusive-hp-r4", "gpuos-space-slo-1.5", "exclusive-hp-r5"])
        self.assertEqual(planning.interleave([], ["a"], ["exclusive-hp-again"], 2),
                         ["exclusive-hp", "a", "exclusive-hp-r2", "exclusive-hp-again"])
        self.assertEqual(planning.interleave([], [], [], 3), ["exclusive-hp", "exclusive-hp-r2", "exclusive-hp-r3"])
        self.assertEqual(planning.interleave(["exclusive-be"], ["a", "b"], [], 1), ["exclusive-hp", "exclusive-be", "a", "b"])

    def test_the_plan_with_repeats(self):
        p = plan("--exclusive-repeats", "5", "--window", "60", "--modes",
                 "exclusive-hp-again,exclusive-hp,exclusive-be,time-slicing,mps,mps-prio1-t25",
                 "--gpuos", "gpuos-time-priority,gpuos-space-slo-1.25,gpuos-space-slo-1.5")
        names = [s.name for s in p.modes]
        self.assertEqual(names, planning.interleave(["exclusive-be"], self.COLOC, ["exclusive-hp-again"], 5))
        r3 = p.modes[names.index("exclusive-hp-r3")]
        self.assertTrue(r3.exclusive_hp and r3.hp and not r3.be and not r3.mps and r3.gpuos_kind is None)
        # Only the first calibrates; every repeat serves at its rate for the same window.
        self.assertEqual(p.estimate(r3), 14.0 + 1.5 + 2.0 + 60 + 4)
        self.assertEqual(p.estimate(p.modes[0]), 14.0 + 1.5 + 2.0 + 8.0 + 60 + 4)
        self.assertEqual(common.exclusive_runs(names), ["exclusive-hp"] + [f"exclusive-hp-r{k}" for k in range(2, 6)])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            p.dry_run()
        self.assertIn("HP alone measured 5 time(s), interleaved; window 60 s: by issue #40's method", out.getvalue())
        self.assertIn("longer than one device call (600 s)", out.getvalue())

    def test_one_repeat_is_todays_plan(self):
        argv = ("--modes", "exclusive-hp,exclusive-be,mps", "--gpuos", "gpuos-time-open")
        self.assertEqual([s.name for s in plan(*argv).modes], [s.name for s in plan("--exclusive-repeats", "1", *argv).modes])
        self.assertEqual([s.name for s in plan(*argv).modes], ["exclusive-hp", "exclusive-be", "mps", "gpuos-time-open"])

    def test_bad_repeats(self):
        for argv in (["--exclusive-repeats", "0"], ["--exclusive-repeats", "3", "--modes", "mps"],
                     ["--modes", "exclusive-hp,exclusive-hp-r2"]):
            with contextlib.redirect_stderr(io.StringIO()) as err, self.assertRaises(SystemExit):
                run_matrix.parse_args(argv)
            self.assertIn("exclusive", err.getvalue())
        self.assertFalse(common.is_repeat("exclusive-hp-r1") or common.is_repeat("exclusive-hp-r02")
                         or common.is_repeat("exclusive-hp-again"))

    def test_interval_math_on_known_numbers(self):
        self.assertEqual((common.t975(1), common.t975(4), common.t975(30)), (12.706, 2.776, 2.042))
        self.assertAlmostEqual(common.t975(60), 2.000, places=3)
        self.assertAlmostEqual(common.t975(1000), 1.962, places=3)
        ref = common.mean_ci95([10.0, 11.0, 12.0, 13.0, 14.0])
        # mean 12, sd sqrt(10/4) = 1.5811, half = 2.776 x 1.5811 / sqrt(5) = 1.96293
        self.assertEqual((ref["n"], ref["mean"]), (5, 12.0))
        self.assertAlmostEqual(ref["sd"], 1.58114, places=5)
        self.assertAlmostEqual(ref["half"], 1.96293, places=5)
        self.assertAlmostEqual(ref["ci95"][0], 10.03707, places=5)
        lo, hi = common.ratio_ci95(13.2, ref)   # 1.1 x the mean
        self.assertAlmostEqual(lo, 13.2 / 13.96293, places=5)
        self.assertAlmostEqual(hi, 13.2 / 10.03707, places=5)   # 1.3151
        one = common.mean_ci95([12.0])
        self.assertEqual((one["mean"], one["sd"], one["ci95"]), (12.0, None, None))
        self.assertIsNone(common.ratio_ci95(13.2, one))
        self.assertIsNone(common.ratio_ci95(None, ref))
        wide = common.mean_ci95([1.0, 20.0])   # mean - half < 0: the ratio's upper end unbounded
        self.assertIsNone(common.ratio_ci95(5.0, wide)[1])


class Readers(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="coloc-readers-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def write(self, name, obj):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            json.dump(obj, f)
        return path

    def rec(self):
        return {"notes": []}

    def test_synthetic_hp_in_hp_servers_shape(self):
        path = self.write("hp.json", {"kernels": 500, "p50_us": 1500.0, "p99_us": 3000.0, "max_us": 4000.0,
                                      "mean_us": 1600.0, "p90_us": 2000.0, "throughput_per_s": 99.0,
                                      "verified": True})
        rec = self.rec()
        js = readers.read_hp(path, True, 300, rec, Proc())
        self.assertEqual((js["requests"], js["achieved_rps"]), (500, 99.0))
        self.assertEqual((js["e2e_ms"]["p50"], js["e2e_ms"]["p99"]), (1.5, 3.0))
        self.assertIs(rec["hp"], js)
        self.assertEqual(rec["notes"], [])

    def test_a_thin_or_unverified_hp(self):
        rec = self.rec()
        readers.read_hp(self.write("hp.json", {"requests": 10, "unfinished": 2}), False, 300, rec, Proc())
        self.assertEqual(len(rec["notes"]), 2)
        self.assertIn("2 requests unfinished", rec["notes"][0])
        self.assertIn("only 10 HP requests (< 300)", rec["notes"][1])
        with self.assertRaisesRegex(planning.ModeError, "synth kernels not verified"):
            readers.read_hp(self.write("bad.json", {"kernels": 5, "verified": False}), True, 1, self.rec(), Proc())
        with self.assertRaisesRegex(planning.ModeError, r"HP wrote no result \(rc=1\): the log's tail"):
            readers.read_hp(os.path.join(self.dir, "none.json"), False, 1, self.rec(), Proc())

    def test_be_rate_over_hps_window(self):
        samples = [[100.0 + i, 10.0 * i] for i in range(11)]   # 10 units/s from t=100 to 110
        rec = self.rec()
        readers.read_be(self.write("be.json", {"unit": "tokens/s", "samples": samples}), False, rec, 102.0, 108.0)
        self.assertAlmostEqual(rec["be_rate"], 10.0)
        self.assertEqual((rec["be_unit"], rec["be_window"]), ("tokens/s", [102.0, 108.0]))
        self.assertNotIn("samples", rec["be"])
        rec = self.rec()   # BE stopped at 108 of a window to 112: the covered part
        readers.read_be(self.write("be2.json", {"unit": "u", "samples": samples[:9]}), False, rec, 102.0, 112.0)
        self.assertAlmostEqual(rec["be_rate"], 10.0)
        self.assertIn("rate over the covered part", rec["notes"][0])
        rec = self.rec()
        readers.read_be(self.write("be3.json", {"kernels": 50, "wall_s": 2.0}), True, rec, None, None)
        self.assertEqual((rec["be_rate"], rec["be_unit"]), (25.0, "kernels/s"))
        rec = self.rec()
        readers.read_be(os.path.join(self.dir, "none.json"), True, rec, None, None)
        self.assertEqual(rec["notes"], ["BE wrote no result"])

    def test_gpu_list(self):
        gpus = readers.parse_gpu_list("0, NVIDIA H100 80GB HBM3, 580.159.04\nNo devices were found\n")
        self.assertEqual(gpus, [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "driver_version": "580.159.04"}])


class Provenance(unittest.TestCase):
    def test_config_hash(self):
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
            f.write("[scheduler]\npolicy = \"priority\"\n")
            f.flush()
            a = common.config_sha256([f.name], {"load": 0.5})
            self.assertRegex(a, "^[0-9a-f]{64}$")
            self.assertNotEqual(a, common.config_sha256([f.name], {"load": 0.3}))
            self.assertNotEqual(a, common.config_sha256([], {"load": 0.5}))
            self.assertEqual(common.config_sha256([], {"b": 1, "a": 2}), common.config_sha256([], {"a": 2, "b": 1}))
        self.assertIsNone(common.config_sha256(["/nonexistent/gpuos.toml"], {}))

    def test_config_texts_keep_what_ran(self):
        with tempfile.NamedTemporaryFile("w", suffix=".toml") as f, \
                tempfile.NamedTemporaryFile("w", suffix=".toml") as big:
            f.write("[policy.budget]\ntarget_pct = 85\n")
            f.flush()
            big.write("#" * (common.MAX_CONFIG_TEXT + 1))
            big.flush()
            texts = common.config_texts([f.name, big.name, "/nonexistent/gpuos.toml"])
        self.assertEqual(texts[f.name], "[policy.budget]\ntarget_pct = 85\n")
        self.assertIsNone(texts[big.name])
        self.assertIsNone(texts["/nonexistent/gpuos.toml"])

    def test_a_summary_names_commit_config_gpu_and_driver(self):
        """A --fake run (stand-in nvidia-smi and tenants): GPUOS_COMMIT stands for the commit (a copy
        of the tree whose .git is stale); the config hash is there without any gpuosd config."""
        _, out = run_fake_matrix(self, "coloc-provenance-", ["--modes", "exclusive-hp"],
                                 env={"GPUOS_COMMIT": "0123abc"}, drop_env=["GPUOS_CONFIG"], timeout=50)
        s = common.read_json(os.path.join(out, "summary.json"))
        self.assertEqual((s["commit"], s["gpu"], s["driver_version"]), ("0123abc", "Fake GPU", "0.0"))
        self.assertRegex(s["config"]["sha256"], "^[0-9a-f]{64}$")
        self.assertIsNone(s["config"]["gpuos_config"])
        self.assertEqual(s["config"]["texts"], {})  # no config file


class PrefillBuckets(unittest.TestCase):
    """hp_server's Scheduler on a stand-in engine (CPU): its prefills are counted by the graph
    (bucket) they used, with the requests each admitted, for TTFT from admission's tail."""

    class Engine:
        device = type("Device", (), {"type": "cpu"})()
        slots = 8
        max_prefill = 3

        def prefill(self, base, m):
            return 1 if m == 1 else 2 if m == 2 else 4

        def decode(self, n_active):
            return n_active

        def move_slot(self, src, dst):
            pass

    def test_prefills_by_bucket(self):
        stop = common.StopFlag()
        sched = hp_server.Scheduler(self.Engine(), None, 8, 2, stop, phase_hints=False)
        # Four arrived before the run: one prefill of three (at most max_prefill), then the fourth
        # alone, whatever the machine's speed.
        res = sched.run([time.perf_counter()] * 4)
        self.assertEqual(len(res["done"]), 4)
        by = res["prefill_buckets"]
        self.assertEqual({k: (v["prefills"], v["requests"]) for k, v in by.items()}, {"4": (1, 3), "1": (1, 1)})
        self.assertEqual(by["4"]["ms"]["n"], 1)


class ServerHints(unittest.TestCase):
    """hp_server's reports to gpuos: --no-phase-hints leaves its prefills unmarked (gpuos then
    learns its long launches from timings), and its batch slots are still reported."""

    class FakeKv:
        def __init__(self):
            self.calls = []

        def admission(self):
            self.calls.append("admission")
            return contextlib.nullcontext()

        def report_slots(self, active, capacity):
            self.calls.append(("slots", active, capacity))

        def report_queue(self, waiting):
            self.calls.append(("queue", waiting))

    def reporter(self, phases):
        r = hp_server.EngineReporter(32, phases)
        r.kv = self.FakeKv()  # as under gpuos
        return r

    def test_prefills_are_marked_unless_told_not_to(self):
        marked = self.reporter(True)
        with marked.admission():
            pass
        self.assertEqual(marked.kv.calls, ["admission"])
        unmarked = self.reporter(False)
        with unmarked.admission():
            pass
        unmarked.report(1.0, 5, 2)
        self.assertEqual(unmarked.kv.calls, [("slots", 5, 32), ("queue", 2)])


if __name__ == "__main__":
    unittest.main()
