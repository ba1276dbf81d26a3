#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Issue #56's zoo (no GPU, no torch): the request-length sampler (lengths.py: deterministic per
seed, the cited medians), hp_server's scheduler with lengths per request on a stand-in engine,
run_matrix.py's --lengths / --seed (commands, plan, a --fake run's summary), gpu/zoo.sh's slice
expansion and plan, and zoo_table.py's table from two small summaries."""
import contextlib
import io
import json
import os
import random
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
import hp_server  # noqa: E402
import lengths  # noqa: E402
import run_matrix  # noqa: E402
import zoo_table  # noqa: E402
from fake_matrix import run_fake_matrix  # noqa: E402


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2]


class Sampler(unittest.TestCase):
    N = 20000

    def test_one_seed_replays_the_same_requests(self):
        for kind in ("azure-conv", "azure-code"):
            ln = lengths.Lengths(kind)
            a = ln.draw(500, 1)
            self.assertEqual(a, lengths.Lengths(kind).draw(500, 1))
            self.assertEqual(ln.draw(200, 1), a[:200])         # a shorter draw is a longer one's start
            self.assertNotEqual(ln.draw(500, 2), a)            # another seed, other requests
            self.assertNotEqual(ln.draw(500, 1, "warmup"), a)  # the warm-up's are its own
            stream = ln.stream(1, "window")
            self.assertEqual([next(stream) for _ in range(50)], a[:50])

    def test_medians_are_the_cited_ones(self):
        # Wide bounds, so no clipping moves a percentile; then the defaults' bounds.
        for kind, table in lengths.AZURE_2023.items():
            draws = lengths.Lengths(kind, max_prompt=16384, max_out=4096).draw(self.N, 7)
            for i, what in enumerate(("prompt", "output")):
                xs = [d[i] for d in draws]
                trace_p50 = dict(table[what])[0.5]
                self.assertLessEqual(abs(median(xs) - trace_p50) / trace_p50, 0.03, (kind, what, median(xs)))
                paper = lengths.SPLITWISE_MEDIANS[kind][what]
                self.assertLessEqual(abs(median(xs) - paper) / paper, 0.05, (kind, what, median(xs), paper))
                for p in (0.25, 0.75, 0.9):
                    want = dict(table[what])[p]
                    got = sorted(xs)[int(p * len(xs))]
                    self.assertLessEqual(abs(got - want) / want, 0.06, (kind, what, p, got, want))

    def test_bounds_and_fixed(self):
        for kind in ("azure-conv", "azure-code"):
            draws = lengths.Lengths(kind).draw(self.N, 3)
            self.assertTrue(all(1 <= p <= lengths.MAX_PROMPT and 2 <= o <= lengths.MAX_OUT for p, o in draws))
        code = lengths.Lengths("azure-code").draw(self.N, 3)
        clipped = sum(1 for p, _ in code if p == lengths.MAX_PROMPT) / self.N
        self.assertAlmostEqual(clipped, 0.141, delta=0.02)  # the trace's coding prompts above 4096
        ln = lengths.Lengths("fixed", 128, 32)
        self.assertEqual(ln.draw(3, 9), [(128, 32)] * 3)
        self.assertEqual((ln.prompt_buckets(), ln.context(), ln.ctx_buckets()), ([128], 160, [160]))
        with self.assertRaises(ValueError):
            lengths.Lengths("azure-chat")

    def test_server_shapes(self):
        ln = lengths.Lengths("azure-conv")
        self.assertEqual(ln.prompt_buckets(), [128, 256, 512, 1024, 2048, 4096])
        self.assertEqual(ln.context(), 5120)
        self.assertEqual(ln.ctx_buckets(), [256, 512, 1024, 2048, 4096, 5120])
        shapes = lengths.prefill_graphs([1, 2, 4, 8], ln.prompt_buckets(), lengths.PREFILL_TOKENS)
        self.assertEqual(len(shapes), 21)
        self.assertIn((1, 4096), shapes)
        self.assertNotIn((4, 4096), shapes)
        # the KV cache: 8B (35 layers, 8 KV heads of 128), 40 slots of 5120 tokens, bf16
        cfg = {"layers": 35, "kv_heads": 8, "head_dim": 128}
        self.assertAlmostEqual(lengths.kv_gib(cfg, 40, 5120), 27.34, places=2)

    def test_prefill_takes_first_come_while_a_shape_holds_them(self):
        pb, qb, tokens = [1, 2, 4, 8], [128, 256, 512, 1024, 2048, 4096], 8192
        shapes = set(lengths.prefill_graphs(pb, qb, tokens))
        self.assertEqual(lengths.prefill_take([100, 120, 90], 8, pb, qb, tokens), 3)
        self.assertEqual(lengths.prefill_take([4000, 10], 8, pb, qb, tokens), 2)       # 2 x 4096
        self.assertEqual(lengths.prefill_take([4000, 10, 20], 8, pb, qb, tokens), 2)   # 4 x 4096 > 8192
        self.assertEqual(lengths.prefill_take([10, 4000, 5], 1, pb, qb, tokens), 1)    # the limit
        self.assertEqual(lengths.prefill_take([], 8, pb, qb, tokens), 0)
        rng = random.Random(5)
        for _ in range(500):
            lens = [rng.randint(1, 4096) for _ in range(rng.randint(1, 12))]
            limit = rng.randint(1, 8)
            m = lengths.prefill_take(lens, limit, pb, qb, tokens)
            self.assertTrue(1 <= m <= min(limit, len(lens)))
            shape = (lengths.bucket_of(pb, m), lengths.bucket_of(qb, max(lens[:m])))
            self.assertIn(shape, shapes, (lens, limit, m))
            if m < min(limit, len(lens)):  # it stopped because one more would need no captured shape
                more = (lengths.bucket_of(pb, m + 1), lengths.bucket_of(qb, max(lens[:m + 1])))
                self.assertNotIn(more, shapes)


class VariableScheduler(unittest.TestCase):
    """hp_server's Scheduler with lengths per request, on a stand-in engine (CPU): a prefill takes
    what a captured shape holds, each request leaves after its own output tokens, a decode step is
    told its longest position, and compaction copies only what the moved request wrote."""

    class Engine:
        device = type("Device", (), {"type": "cpu"})()
        variable = True
        slots = 10
        max_prefill = 2
        prefill_buckets = [1, 2]
        prompt_buckets = [128, 256, 512]
        prefill_tokens = 512

        def __init__(self):
            self.calls = []

        def prefill(self, base, m, lens):
            self.calls.append(("prefill", base, m, list(lens)))
            return (lengths.bucket_of(self.prefill_buckets, m), lengths.bucket_of(self.prompt_buckets, max(lens)))

        def decode(self, n_active, max_pos):
            self.calls.append(("decode", n_active, max_pos))
            return (n_active, 1024)

        def move_slot(self, src, dst, length=None):
            self.calls.append(("move", src, dst, length))

    def test_lengths_per_request(self):
        eng = self.Engine()
        sched = hp_server.Scheduler(eng, None, 8, 32, common.StopFlag(), phase_hints=False)
        now = time.perf_counter()
        res = sched.run([now] * 3, lens=[(100, 3), (300, 5), (50, 2)])
        self.assertEqual(sorted(r.T for r in res["done"]), [2, 3, 5])
        self.assertTrue(all(r.ntok == r.T for r in res["done"]))
        prefills = [c for c in eng.calls if c[0] == "prefill"]
        # Two prompts padded to 512 would be 1024 > 512 tokens: 100 alone, 300 alone, then 50.
        self.assertEqual([c[3] for c in prefills], [[100], [300], [50]])
        decodes = [c for c in eng.calls if c[0] == "decode"]
        self.assertEqual(decodes[0], ("decode", 1, 100))  # the first request's position: its prompt
        self.assertIn("1x128", res["prefill_buckets"])
        self.assertEqual(sum(res["decode_contexts"].values()), len(decodes))
        for c in eng.calls:
            if c[0] == "move":
                self.assertIsNotNone(c[3])

    def test_tpot_per_request(self):
        r = hp_server.Req(0.0, 100, 5)
        r.first, r.done = 1.0, 1.4
        self.assertAlmostEqual(hp_server._tpot_ms(r), 100.0)
        one = hp_server.Req(0.0, 100, 1)
        one.first = one.done = 1.0
        self.assertIsNone(hp_server._tpot_ms(one))

    def test_fixed_lengths_call_the_engine_as_before(self):
        class Fixed:
            device = type("Device", (), {"type": "cpu"})()
            slots, max_prefill = 8, 2
            calls = []

            def prefill(self, base, m):
                return m

            def decode(self, n_active):
                return n_active

            def move_slot(self, src, dst):
                self.calls.append((src, dst))

        sched = hp_server.Scheduler(Fixed(), None, 8, 3, common.StopFlag(), phase_hints=False, prompt=128)
        res = sched.run([time.perf_counter()] * 3)
        self.assertEqual([(r.plen, r.T, r.ntok) for r in res["done"]], [(128, 3, 3)] * 3)
        self.assertNotIn("decode_contexts", res)


class MatrixFlags(unittest.TestCase):
    def plan(self, *argv):
        return run_matrix.Plan(run_matrix.parse_args(["--dry-run", "--workdir", "/tmp/w", *argv]))

    def test_hp_command_and_estimate(self):
        p = self.plan("--lengths", "azure-code", "--seed", "3", "--params-b", "8")
        cmd = p.hp_cmd(run_matrix.ModeSpec("exclusive-hp"), True, None, "")[0]
        self.assertEqual(cmd[cmd.index("--lengths") + 1], "azure-code")
        self.assertEqual(cmd[cmd.index("--seed") + 1], "3")
        fixed = self.plan("--params-b", "8")
        cmd = fixed.hp_cmd(run_matrix.ModeSpec("exclusive-hp"), True, None, "")[0]
        self.assertEqual((cmd[cmd.index("--lengths") + 1], cmd[cmd.index("--seed") + 1]), ("fixed", "1"))
        self.assertGreater(p.est_hp_startup(), fixed.est_hp_startup())
        self.assertAlmostEqual(p.hp_memory()["kv"], 27.34, places=2)
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
            run_matrix.parse_args(["--dry-run", "--lengths", "azure-chat"])

    def test_a_fake_run_records_lengths_and_seed(self):
        _, out = run_fake_matrix(self, "gpuos-zoo-test-", ["--lengths", "azure-conv", "--seed", "2",
                                                           "--modes", "exclusive-hp,exclusive-be,time-slicing"])
        s = common.read_json(os.path.join(out, "summary.json"))
        self.assertEqual((s["lengths"], s["seed"], s["params_b"]), ("azure-conv", 2, 1.0))
        self.assertEqual(s["workload"]["hp"]["lengths"], "azure-conv")
        with open(os.path.join(out, "summary.md")) as f:
            self.assertIn("arrival seed 2", f.read())


class ZooScript(unittest.TestCase):
    def zoo(self, *args, **env):
        e = {k: v for k, v in os.environ.items() if k not in ("OUT", "ZOO")}
        e["RUN"] = "/tmp/gpuos-zoo-test-%d" % os.getpid()
        e.update(env)
        return subprocess.run(["bash", os.path.join(REPO, "gpu", "zoo.sh"), *args], env=e,
                              capture_output=True, text=True, timeout=120)

    MODES = "--modes exclusive-hp,exclusive-be,mps-prio1-t10,mps-prio1-t25,mps-prio1-t50,time-slicing " \
            "--gpuos gpuos-space-slo-1.5"

    def test_a_slice_expands_to_its_runs(self):
        r = self.zoo("plan", ZOO="sizes=1,8 loads=0.3 be=train lengths=fixed")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [
            f"--params-b 1 --load 0.3 --be train --lengths fixed --seed 1 {self.MODES} --label zoo-1b-0.3-train-fixed",
            f"--params-b 8 --load 0.3 --be train --lengths fixed --seed 1 {self.MODES} --label zoo-8b-0.3-train-fixed"])
        r = self.zoo("plan", ZOO="sizes=3 loads=0.1,0.7 be=infer lengths=azure-code seeds=1,2 modes=exclusive-hp,exclusive-be")
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 4)
        self.assertEqual(lines[1], "--params-b 3 --load 0.1 --be infer --lengths azure-code --seed 2 "
                                   "--modes exclusive-hp,exclusive-be --gpuos gpuos-space-slo-1.5 --window 60 "
                                   "--calibrate-s 20 --drain-s 30 --label zoo-3b-0.1-infer-azure-code-s2")
        self.assertIn("--label zoo-3b-0.7-infer-azure-code", lines[2])
        self.assertEqual(len(self.zoo("plan").stdout.splitlines()), 72)  # the whole zoo
        self.assertIn("--window 30 --label", self.zoo("plan", ZOO="sizes=1 loads=0.5 be=train lengths=fixed window=30").stdout)

    def test_a_slice_runs_end_to_end(self):
        """zoo.sh -> budget_runs.sh (detached, collected) -> run_matrix.py --fake (MORE) -> the table."""
        tmp = tempfile.mkdtemp(prefix="gpuos-zoo-e2e-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        more = ("--fake --window 1 --be-window 1 --calibrate-s 0.2 --warmup 0 --drain-s 1 --min-requests 1 "
                "--gpu-sample-ms 0")
        r = self.zoo(ZOO="sizes=8 loads=0.3 be=infer lengths=azure-code modes=exclusive-hp,exclusive-be,time-slicing "
                         "gpuos=none", MORE=more, RUN=os.path.join(tmp, "run"), OUT=os.path.join(tmp, "out"),
                     WAIT_S="100", FAKE_GPUS="1",
                     PATH=os.path.join(HERE, "fake_bin") + os.pathsep + os.environ["PATH"])
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-2000:])
        j = common.read_json(os.path.join(tmp, "out", "zoo.json"))
        (p,) = j["points"]
        self.assertEqual((p["label"], p["size_b"], p["be"], p["lengths"], p["seed"]),
                         ("zoo-8b-0.3-infer-azure-code", 8.0, "infer", "azure-code", 1))
        self.assertEqual([m["mode"] for m in p["modes"]], ["time-slicing"])
        self.assertTrue(os.path.exists(os.path.join(tmp, "out", "runs.tgz")))
        self.assertIn("| 8B 0.3 infer azure-code | time-slicing |", r.stdout)

    def test_bad_slices(self):
        for bad in ("size=1", "loads=1.5", "be=ddp", "lengths=sharegpt", "sizes", "seeds=a"):
            r = self.zoo("plan", ZOO=bad)
            self.assertEqual(r.returncode, 2, bad)
            self.assertIn("zoo:", r.stderr)

    def test_dry_run_estimates_every_point(self):
        r = self.zoo("dry-run", ZOO="sizes=1,8 loads=0.3 be=train lengths=fixed")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("zoo: 2 point(s)", r.stdout)
        self.assertEqual(r.stdout.count("--lengths fixed --seed 1"), 2)
        self.assertIn("--label zoo-8b-0.3-train-fixed", r.stdout)
        self.assertRegex(r.stdout, r"all runs: ~\d+ s \(\d+ min\) of device time")
        self.assertFalse(os.path.exists("/tmp/gpuos-zoo-test-%d" % os.getpid()))  # started nothing

    def test_table_from_the_runs_folder(self):
        tmp = tempfile.mkdtemp(prefix="gpuos-zoo-table-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        for i, s in enumerate(ZooTable.summaries()):
            os.makedirs(os.path.join(tmp, "run", "work", f"run-{i}"))
            with open(os.path.join(tmp, "run", "work", f"run-{i}", "summary.json"), "w") as f:
                json.dump(s, f)
        r = self.zoo("table", RUN=os.path.join(tmp, "run"), OUT=os.path.join(tmp, "out"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(os.path.exists(os.path.join(tmp, "out", "zoo.md")))
        self.assertEqual(len(common.read_json(os.path.join(tmp, "out", "zoo.json"))["points"]), 2)
        r = self.zoo("table", RUN=os.path.join(tmp, "none"), OUT=os.path.join(tmp, "out2"))
        self.assertEqual(r.returncode, 3)


class ZooTable(unittest.TestCase):
    @staticmethod
    def mode(name, ttft, admit, tpot, be, budget=None, ci=None):
        r = {"mode": name, "status": "ok", "hp_ttft_p99_vs_exclusive": ttft,
             "hp_ttft_admit_p99_vs_exclusive": admit, "hp_tpot_p99_vs_exclusive": tpot,
             "be_vs_exclusive": be, "budget": budget}
        if ci:
            for k in ("hp_ttft_p99_vs_exclusive", "hp_ttft_admit_p99_vs_exclusive", "hp_tpot_p99_vs_exclusive"):
                r[k + "_ci95"] = [r[k] * 0.95, r[k] * ci]
        return r

    @classmethod
    def summaries(cls):
        m = cls.mode
        one = {"label": "zoo-1b-0.3-train-fixed", "gpu": "H100", "commit": "abc", "load": 0.3,
               "lengths": "fixed", "seed": 1, "params_b": 1.0, "workload": {"be": "train", "hp": {}},
               "method": {"exclusive_runs": 5, "window_s": 60.0},
               "modes": [m("exclusive-hp", 1.0, 1.0, 1.0, None), m("exclusive-be", None, None, None, 1.0),
                         m("time-slicing", 3.0, 3.0, 2.0, 0.5), m("mps-prio1-t10", 1.2, 1.2, 1.3, 0.2),
                         m("mps-prio1-t25", 1.4, 1.4, 1.45, 0.3),
                         m("gpuos-space-slo-1.5", 1.3, 1.2, 1.4, 0.36, 1.5, ci=1.06)]}
        # 8B at 50%: TTFT from arrival far above B, from admission within: judged from admission;
        # gpuos's interval upper end over B (one run: point values, no interval).
        two = {"label": "zoo-8b-0.5-infer-azure-conv", "gpu": "H100", "commit": "abc", "load": 0.5,
               "workload": {"be": "infer", "hp": {"lengths": "azure-conv", "seed": 1,
                                                  "model": {"params": 7.896e9}}},
               "method": {"exclusive_runs": 1, "window_s": 60.0},
               "modes": [m("exclusive-hp", 1.0, 1.0, 1.0, None), m("mps-prio1-t50", 5.0, 1.3, 1.2, 0.4),
                         m("mps-prio1-t25", 4.0, 1.6, 1.2, 0.5),
                         m("gpuos-space-slo-1.5", 6.0, 1.45, 1.3, 0.42, 1.5)]}
        return [one, two]

    def test_the_budget_spent_and_what_held_it(self):
        pt = {"modes": [{"mode": "gpuos-space-slo-1.5", "gpuos": True, "bound": 1.2},
                        {"mode": "gpuos-time-slo-1.25@x", "gpuos": True, "bound": 1.25},
                        {"mode": "gpuos-time-priority", "gpuos": True, "bound": 0.9},
                        {"mode": "mps-prio1-t25", "gpuos": False, "bound": 1.4}]}
        raw = {"modes": {"gpuos-space-slo-1.5": {"budget_log": {"limits": {"largest-share": 3, "spent": 1}}}}}
        zoo_table.note_spent(pt, raw)
        a, b, prio, mps = pt["modes"]
        self.assertAlmostEqual(a["spent"], 0.4)   # 0.2 of B - 1 = 0.5
        self.assertEqual(a["held_by"], {"largest-share": 3, "spent": 1})
        self.assertAlmostEqual(b["spent"], 1.0)   # its own B: 1.25
        self.assertIsNone(b["held_by"])
        self.assertNotIn("spent", prio)            # no budget
        self.assertNotIn("spent", mps)

    def test_points_and_verdicts(self):
        one, two = [zoo_table.judge(s, s["label"]) for s in self.summaries()]
        self.assertEqual((one["size_b"], one["load"], one["be"], one["lengths"], one["seed"]), (1.0, 0.3, "train", "fixed", 1))
        self.assertEqual((two["size_b"], two["be"], two["lengths"], two["ttft_from"]), (8.0, "infer", "azure-conv", "admission"))
        rows = {r["mode"]: r for r in one["modes"]}
        self.assertNotIn("exclusive-hp", rows)
        self.assertFalse(rows["time-slicing"]["met"])
        self.assertTrue(rows["mps-prio1-t25"]["met"])
        self.assertEqual(one["best_baseline"], {"mode": "mps-prio1-t25", "be_vs_excl": 0.3})
        g = rows["gpuos-space-slo-1.5"]
        self.assertEqual(g["check"], "ci95_upper")           # five exclusive runs: on the interval's end
        self.assertAlmostEqual(g["bound"], 1.4 * 1.06)
        self.assertTrue(g["met"])
        self.assertAlmostEqual(g["vs_best_baseline"], 1.2)
        rows = {r["mode"]: r for r in two["modes"]}
        self.assertTrue(rows["mps-prio1-t50"]["met"])          # TTFT from admission 1.3
        self.assertFalse(rows["mps-prio1-t25"]["met"])         # 1.6 from admission
        self.assertEqual(two["best_baseline"]["mode"], "mps-prio1-t50")
        self.assertEqual(rows["gpuos-space-slo-1.5"]["check"], "point")
        self.assertAlmostEqual(rows["gpuos-space-slo-1.5"]["vs_best_baseline"], 0.42 / 0.4)

    def test_the_table_from_two_summaries(self):
        tmp = tempfile.mkdtemp(prefix="gpuos-zoo-table-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        paths = []
        for i, s in enumerate(reversed(self.summaries())):
            os.makedirs(os.path.join(tmp, f"r{i}"))
            paths.append(os.path.join(tmp, f"r{i}", "summary.json"))
            with open(paths[-1], "w") as f:
                json.dump(s, f)
        md, js = os.path.join(tmp, "zoo.md"), os.path.join(tmp, "zoo.json")
        r = subprocess.run([sys.executable, os.path.join(REPO, "bench", "colocation", "zoo_table.py"), tmp,
                            "--md", md, "--json", js], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(md) as f:
            text = f.read()
        self.assertEqual(text, r.stdout)
        # One run per mode (no paired seeds): a point check by method v2, labelled so.
        self.assertIn("| 1B 0.3 train fixed | POINT CHECK (1) | gpuos-space-slo-1.5 | yes | 0.360 | mps-prio1-t25 | "
                      "0.300 | 1.20 |", text)
        self.assertIn("| 8B 0.5 infer azure-conv | POINT CHECK (1) | gpuos-space-slo-1.5 | yes | 0.420 | mps-prio1-t50 | "
                      "0.400 | 1.05 |", text)
        self.assertLess(text.index("1B 0.3"), text.index("8B 0.5"))  # by size, whatever the order found
        j = common.read_json(js)
        self.assertEqual([p["label"] for p in j["points"]], ["zoo-1b-0.3-train-fixed", "zoo-8b-0.5-infer-azure-conv"])
        self.assertEqual(j["budget"], 1.5)
        r = subprocess.run([sys.executable, os.path.join(REPO, "bench", "colocation", "zoo_table.py"),
                            os.path.join(tmp, "nothing-here")], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
