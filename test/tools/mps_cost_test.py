#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""MPS's own cost (issue #23) without a GPU: gpu/tests/mps_cost_lib.py (profile analysis, the
environment), gpu/mps_cost_report.py (the comparison and its verdict) on synthetic runs,
gpu/tests/mps_cost.py's whole flow on a stand-in torch (mps_fake/fake_torch.py), and
gpu/mps_cost.sh end to end with a stand-in MPS control daemon: the daemon quit on every way out."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
FAKE = os.path.join(HERE, "mps_fake")
sys.path.insert(0, os.path.join(REPO, "gpu", "tests"))
sys.path.insert(0, os.path.join(REPO, "gpu"))
import mps_cost_lib as lib  # noqa: E402
import mps_cost_report as rep  # noqa: E402

# One synthetic decode step: (name, base duration us), four layers.
LAYER = [("rms_norm", 3.0), ("gemv_qkv", 20.0), ("rope", 2.0), ("softmax", 4.0), ("gemv_o", 15.0),
         ("gemv_mlp", 60.0)]
SEQ = LAYER * 4 + [("argmax", 6.0)]


def trace(steps, extra_us=0.0, scale=1.0, gap_us=1.0, extra_gap_us=0.0, between_us=30.0, corr=True, eager=0):
    """A kineto-like Chrome trace of `steps` replays of SEQ; eager: that many one-op launches first."""
    ev, t, c = [], 1000.0, 500
    for i in range(eager):
        c += 1
        ev.append({"ph": "X", "cat": "kernel", "name": "warm", "ts": t, "dur": 2.0, "args": {"correlation": c}})
        t += 50.0
    for s in range(steps):
        c += 1
        for name, d in SEQ:
            t += gap_us + extra_gap_us
            dur = d * scale + extra_us
            e = {"ph": "X", "cat": "Kernel", "name": name, "ts": t, "dur": dur, "args": {"correlation": c} if corr else {}}
            ev.append(e)
            t += dur
        t += between_us
    ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0.0, "dur": 5.0})
    return {"traceEvents": ev}


def run(variant, mps=False, env=None, extra_us=0.0, scale=1.0, extra_gap_us=0.0, outside_us=10.0, mhz=1980.0,
        read=4000.0, ok=True):
    """A result as gpu/tests/mps_cost.py writes it, its profile analysed by mps_cost_lib."""
    if not ok:
        return {"variant": variant, "ok": False, "error": "RuntimeError: boom", "env": {"cuda_env": dict(env or {})}}
    prof = lib.analyze_profile(trace(5, extra_us, scale, extra_gap_us=extra_gap_us), 5)
    step_ms = (prof["step"]["span_us"]["mean"] + outside_us) / 1e3
    cuda_env = {"CUDA_HOME": "/usr/local/cuda", **(env or {})}
    if mps:
        cuda_env.update(CUDA_MPS_PIPE_DIRECTORY="/tmp/x/mps-pipe", CUDA_MPS_LOG_DIRECTORY="/tmp/x/mps-log")
    tiny = 2.0 + extra_us + extra_gap_us
    return {
        "variant": variant, "ok": True,
        "env": {"cuda_env": cuda_env, "mps_control_pipe_exists": mps, "mps_server_running_after_init": mps,
                "gpu": "NVIDIA H200", "smi": {"name": "NVIDIA H200", "driver_version": "580.159.04"}},
        "timed": {"event_ms": lib.summary([step_ms] * 9 + [step_ms * 1.01]), "host_ms": lib.summary([step_ms + 0.03]),
                  "launch_us": lib.summary([20.0])},
        "clocks": {"during": {"samples": 30, "sm_mhz": {"min": mhz - 15, "median": mhz, "max": mhz}, "temp_c": {},
                              "power_w": {"min": 400, "median": 450, "max": 500}},
                   "before": {"clocks.sm": mhz}, "after": {"clocks.sm": mhz}},
        "profile": prof,
        "micro": {"tiny": {"event_us_per_kernel": {"p50": tiny},
                           "profile": {"kernel_mean_us": 1.2 + extra_us, "gap_mean_us": 0.8 + extra_gap_us,
                                       "start_to_start_us": tiny}},
                  "wide": {"event_us_per_kernel": {"p50": 9.0 + extra_us}, "profile": {}}},
        "bandwidth": {"read_gbps_best": read, "copy_gbps_best": read * 0.9},
    }


class Summaries(unittest.TestCase):
    def test_summary(self):
        s = lib.summary([4, 1, 3, 2])
        self.assertEqual((s["n"], s["min"], s["max"], s["mean"], s["p50"]), (4, 1, 4, 2.5, 2.5))
        self.assertIsNone(lib.summary([])["p50"])

    def test_smi_line(self):
        self.assertEqual(lib.parse_smi_csv("NVIDIA H200, 580.1, 1980\n", ("name", "driver_version", "clocks.sm")),
                         {"name": "NVIDIA H200", "driver_version": "580.1", "clocks.sm": 1980.0})
        self.assertIsNone(lib.parse_smi_csv("Fake GPU, 0.0\n", ("name", "driver_version", "clocks.sm")))


class Profiles(unittest.TestCase):
    def test_replays_found_by_correlation_among_eager_launches(self):
        p = lib.analyze_profile(trace(4, eager=3), 4)
        self.assertEqual((p["grouping"], p["steps_found"], p["ops_per_step"], p["ops_total"]), ("correlation", 4, 25, 103))
        self.assertAlmostEqual(p["step"]["kernel_sum_us"]["mean"], 4 * 104 + 6)
        self.assertAlmostEqual(p["step"]["gap_sum_us"]["mean"], 24.0)
        self.assertAlmostEqual(p["step"]["span_us"]["mean"], 4 * 104 + 6 + 24)
        self.assertAlmostEqual(p["between_steps_us"]["mean"], 31.0)   # the host's turn plus the next gap
        rows = {k["name"]: k for k in p["kernels"]}
        self.assertEqual(rows["rms_norm"]["per_step"], 4)
        self.assertAlmostEqual(rows["gemv_mlp"]["per_step_us"], 240.0)
        self.assertEqual(p["kernels"][0]["name"], "gemv_mlp")          # largest time per step first
        self.assertAlmostEqual(rows["rms_norm"]["gap_before_mean_us"], 1.0)

    def test_without_correlation_equal_chunks_or_largest_gaps(self):
        p = lib.analyze_profile(trace(3, corr=False), 3)
        self.assertEqual((p["grouping"], p["steps_found"], p["ops_per_step"]), ("equal", 3, 25))
        ops = lib.gpu_ops(trace(3, corr=False))
        groups, how = lib.split_steps(ops[:-2], 3)     # uneven: cut at the two host gaps
        self.assertEqual(how, "gaps")
        self.assertEqual([len(g) for g in groups], [25, 25, 23])

    def test_overlapping_ops_give_no_negative_gap(self):
        ops = [{"name": "a", "ts": 0.0, "dur": 10.0, "end": 10.0}, {"name": "b", "ts": 5.0, "dur": 2.0, "end": 7.0},
               {"name": "c", "ts": 12.0, "dur": 1.0, "end": 13.0}]
        f = lib.step_figures(ops)
        self.assertEqual(f["gaps"], [0.0, 2.0])
        self.assertEqual((f["span_us"], f["kernel_sum_us"], f["start_to_start_us"]), (13.0, 13.0, 6.0))

    def test_no_gpu_activity(self):
        p = lib.analyze_profile({"traceEvents": [{"cat": "cpu_op", "name": "x", "ts": 1, "dur": 1}]}, 5)
        self.assertEqual(p["ops_total"], 0)
        self.assertIn("no GPU activity", p["error"])


class Environment(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mpsenv-")
        self.addCleanup(shutil.rmtree, self.dir)

    def proc(self, pid, comm, argv0, env):
        d = os.path.join(self.dir, "proc", str(pid))
        os.makedirs(d)
        for name, text in (("comm", comm + "\n"), ("cmdline", argv0 + "\0-d\0"),
                           ("environ", "\0".join(f"{k}={v}" for k, v in env.items()) + "\0")):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)

    def test_private_daemon_and_server_seen(self):
        pipe = os.path.join(self.dir, "pipe")
        os.makedirs(pipe)
        open(os.path.join(pipe, "control"), "w").close()
        self.proc(10, "nvidia-cuda-mps", "/usr/bin/nvidia-cuda-mps-control", {"CUDA_MPS_PIPE_DIRECTORY": pipe})
        self.proc(11, "nvidia-cuda-mps", "nvidia-cuda-mps-server", {"CUDA_MPS_PIPE_DIRECTORY": pipe})
        self.proc(12, "python3", "python3", {"CUDA_MPS_PIPE_DIRECTORY": pipe})
        e = lib.env_info({"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_DEVICE_MAX_CONNECTIONS": "1", "HOME": "/root"},
                         os.path.join(self.dir, "proc"))
        self.assertEqual(e["cuda_env"], {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "CUDA_MPS_PIPE_DIRECTORY": pipe})
        self.assertTrue(e["mps_pipe_dir_set"] and e["mps_control_pipe_exists"] and e["mps_server_for_pipe"])
        self.assertEqual([(p["pid"], p["cmd"]) for p in e["mps_processes"]],
                         [(10, "nvidia-cuda-mps-control"), (11, "nvidia-cuda-mps-server")])

    def test_server_of_another_pipe_is_not_ours(self):
        self.proc(11, "nvidia-cuda-mps", "nvidia-cuda-mps-server", {})     # the default pipe directory
        e = lib.env_info({"CUDA_MPS_PIPE_DIRECTORY": os.path.join(self.dir, "none")}, os.path.join(self.dir, "proc"))
        self.assertFalse(e["mps_control_pipe_exists"] or e["mps_server_for_pipe"])
        self.assertTrue(e["mps_server_running"])


class Report(unittest.TestCase):
    def rep(self, *runs):
        return rep.report(list(runs))

    def test_fixed_cost_per_kernel_inside_kernels_removed_by_a_setting(self):
        r = self.rep(run("no-mps"), run("mps", True, extra_us=1.0),
                     run("mps-conn1", True, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
                     run("mps-prio0", True, {"CUDA_MPS_CLIENT_PRIORITY": "0"}, extra_us=1.0), run("no-mps-again"))
        c = r["comparisons"]["mps"]
        self.assertAlmostEqual(c["delta_step_us"], 25.0, places=1)
        self.assertAlmostEqual(c["delta_kernel_sum_us"], 25.0)
        self.assertAlmostEqual(c["delta_gap_sum_us"], 0.0)
        self.assertAlmostEqual(c["fit"]["a_us"], 1.0)
        self.assertAlmostEqual(c["fit"]["b"], 0.0)
        self.assertEqual(c["kernels_grown"][0]["name"], "gemv_mlp")     # all +4 us a step: ties by name
        v = r["verdict"]
        self.assertIn("inside the kernels", v)
        self.assertIn("added to every kernel", v)
        self.assertIn("CUDA_DEVICE_MAX_CONNECTIONS=1 (mps-conn1) removes it", v)
        self.assertEqual(r["verdict_facts"]["removes"], "mps-conn1")
        rows = {x["variant"]: x for x in r["runs"]}
        self.assertEqual(rows["mps-conn1"]["settings"], {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})   # CUDA_HOME is everyone's
        self.assertEqual(rows["mps"]["settings"], {})

    def test_a_companion_run_is_presence_not_a_setting(self):
        be = run("be-mem-t10", True, scale=1.2)
        be["companion"] = {"kind": "mem", "threads_pct": 10, "kernels_per_s": 250.0, "sms": 13}
        r = self.rep(run("no-mps"), run("mps", True, extra_us=1.0), be, run("no-mps-again"))
        self.assertNotIn("be-mem-t10", r["verdict_facts"]["settings"])   # not a tenant-side setting
        p = r["presence"]["be-mem-t10"]
        self.assertEqual(p["baseline"], "mps")                             # against MPS alone
        self.assertGreater(p["step_ratio"], 1.1)
        self.assertEqual(p["kernels_grown"][0]["name"], "gemv_mlp")        # the longest grows most
        self.assertIn("| be-mem-t10 | mem at 10% | 250.0 kernels/s on 13 SMs", r["md"])

    def test_proportional_growth_is_slower_work(self):
        r = self.rep(run("no-mps"), run("mps", True, scale=1.10), run("no-mps-again"))
        self.assertAlmostEqual(r["comparisons"]["mps"]["fit"]["b"], 0.10)
        self.assertAlmostEqual(r["comparisons"]["mps"]["fit"]["a_us"], 0.0)
        self.assertIn("in proportion to their length", r["verdict"])
        self.assertEqual(r["comparisons"]["mps"]["kernels_grown"][0]["name"], "gemv_mlp")

    def test_gaps_between_kernels(self):
        r = self.rep(run("no-mps"), run("mps", True, extra_gap_us=1.0), run("no-mps-again"))
        self.assertIn("between the kernels", r["verdict"])
        self.assertEqual(r["verdict_facts"]["where"][:19], "between the kernels")
        self.assertNotIn("tenant-side", r["verdict"])               # no setting was tried

    def test_no_setting_helps_and_lower_clock_reported(self):
        r = self.rep(run("no-mps"), run("mps", True, extra_us=1.0, mhz=1900.0),
                     run("mps-atp100", True, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}, extra_us=1.0),
                     run("mps-conn32", True, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}, extra_us=0.9))
        self.assertIn("No tenant-side setting tried removes it (mps-conn32 +", r["verdict"])
        self.assertIn("SM clock ran lower under MPS (1900 vs 1980 MHz)", r["verdict"])
        self.assertNotIn("removes", r["verdict_facts"])

    def test_a_control_setting_that_moves_the_step_without_mps_is_named(self):
        r = self.rep(run("no-mps"), run("mps", True, extra_us=1.0),
                     run("no-mps-conn1", False, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, extra_us=0.5),
                     run("no-mps-conn32", False, {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}))
        self.assertIn("Without MPS, CUDA_DEVICE_MAX_CONNECTIONS=1 (no-mps-conn1) changes the step by +", r["verdict"])
        self.assertNotIn("no-mps-conn32", r["verdict"])

    def test_a_setting_that_halves_it_reduces(self):
        r = self.rep(run("no-mps"), run("mps", True, extra_us=1.0),
                     run("mps-conn1", True, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, extra_us=0.4))
        self.assertEqual(r["verdict_facts"]["reduces"], "mps-conn1")
        self.assertIn("reduces it to +", r["verdict"])

    def test_no_cost_no_claim(self):
        r = self.rep(run("no-mps"), run("mps", True), run("no-mps-again"))
        self.assertIn("does not reproduce a cost of MPS", r["verdict"])
        self.assertNotIn("inside", r["verdict"])

    def test_noisy_baseline_raises_the_bar(self):
        r = self.rep(run("no-mps"), run("mps", True, extra_us=1.0), run("no-mps-again", extra_us=0.8))
        self.assertGreater(r["verdict_facts"]["threshold_pct"], r["verdict_facts"]["cost_pct"])
        self.assertIn("does not reproduce", r["verdict"])

    def test_missing_or_failed_runs(self):
        self.assertIn("No verdict: the baseline", self.rep(run("mps", True))["verdict"])
        r = self.rep(run("no-mps"), run("mps", True, ok=False))
        self.assertIn("No verdict: the MPS run", r["verdict"])
        self.assertIn("failed: RuntimeError: boom", r["md"])

    def test_warns_when_the_mps_run_was_no_client(self):
        r = self.rep(run("no-mps"), run("mps", False, extra_us=1.0))
        self.assertIn("probably not an MPS client", r["verdict"])

    def test_markdown_and_files(self):
        d = tempfile.mkdtemp(prefix="mpsrep-")
        self.addCleanup(shutil.rmtree, d)
        paths = []
        for x in (run("no-mps"), run("mps", True, extra_us=1.0)):
            paths.append(os.path.join(d, x["variant"] + ".json"))
            with open(paths[-1], "w") as f:
                json.dump(x, f)
        paths.append(os.path.join(d, "broken.json"))
        with open(paths[-1], "w") as f:
            f.write("{")
        r = subprocess.run([sys.executable, os.path.join(REPO, "gpu", "mps_cost_report.py"), "--out", d] + paths,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(d, "mps_cost.md")) as f:
            md = f.read()
        self.assertIn("## Verdict", md)
        self.assertIn("| `rms_norm` | 4 | 3.00 | 4.00 | +1.00 | +4.0 |", md)
        self.assertIn("| broken | no |", md)
        with open(os.path.join(d, "mps_cost.json")) as f:
            self.assertIn("inside the kernels", json.load(f)["verdict"])


def stub_env(**extra):
    env = dict(os.environ, PATH=os.path.join(HERE, "fake_bin") + os.pathsep + os.environ["PATH"], **extra)
    for k in list(env):
        if k.startswith("CUDA_MPS_") or k in ("CUDA_DEVICE_MAX_CONNECTIONS", "FAKE_CUPTI_OLD"):
            env.pop(k)
    env.update(extra)
    return env


STUB_ARGS = ["--steps", "20", "--warmup", "2", "--profile-steps", "4", "--params-b", "1", "--micro-reps", "5"]


class MpsCostOnStandInTorch(unittest.TestCase):
    """gpu/tests/mps_cost.py's own code on fake_torch: the JSON the report reads."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="mpsstub-")
        self.addCleanup(shutil.rmtree, self.dir)

    def stub(self, variant, env):
        out = os.path.join(self.dir, variant + ".json")
        r = subprocess.run([sys.executable, os.path.join(FAKE, "run_stub.py"), "--variant", variant, "--json", out]
                           + STUB_ARGS, env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(out) as f:
            return json.load(f)

    def test_mps_client_cost_found_inside_kernels(self):
        pipe = os.path.join(self.dir, "pipe")
        os.makedirs(pipe)
        open(os.path.join(pipe, "control"), "w").close()
        base = self.stub("no-mps", stub_env())
        mps = self.stub("mps", stub_env(CUDA_MPS_PIPE_DIRECTORY=pipe))
        self.assertEqual(base["errors"], [])
        self.assertFalse(base["env"]["mps_control_pipe_exists"])
        self.assertTrue(mps["env"]["mps_control_pipe_exists"])
        p = base["profile"]
        self.assertEqual((p["grouping"], p["steps_found"]), ("correlation", 4))
        self.assertEqual(p["ops_per_step"], base["config"]["layers"] * 8 + 1)
        self.assertEqual(base["micro"]["tiny"]["profile"]["ops_per_step"], 200)
        r = rep.report([base, mps])
        self.assertAlmostEqual(r["comparisons"]["mps"]["fit"]["a_us"], 1.0, places=3)
        self.assertIn("inside the kernels", r["verdict"])
        self.assertAlmostEqual(r["comparisons"]["mps"]["tiny_delta"]["event_us_per_kernel"], 1.0, places=3)

    def test_graphs_invisible_to_a_late_profiler_are_captured_again_inside_it(self):
        res = self.stub("old", stub_env(FAKE_CUPTI_OLD="1"))
        self.assertTrue(res["profile"]["captured_inside_profile"])
        self.assertEqual(res["profile"]["steps_found"], 4)


def mps_pids(tmp):
    """Stand-in MPS processes whose pipe directory lies under tmp."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/comm") as f:
                if not f.read().startswith("nvidia-cuda-mps"):
                    continue
            with open(f"/proc/{d}/environ", "rb") as f:
                if f"CUDA_MPS_PIPE_DIRECTORY={tmp}".encode() in f.read():
                    out.append(int(d))
        except OSError:
            continue
    return out


class Script(unittest.TestCase):
    """gpu/mps_cost.sh with the stand-in daemon and mps_cost.py on fake_torch."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mc-", dir="/tmp")
        self.out = os.path.join(self.tmp, "out")
        self.addCleanup(self.cleanup)

    def cleanup(self):
        for pid in mps_pids(self.tmp):   # only if a test failed: never leave a stand-in behind
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def script(self, variants, **extra):
        settings = dict(OUT=self.out, TMPDIR=self.tmp, VARIANTS=variants, STEPS="20", PROFILE_STEPS="4", PARAMS_B="1",
                        MPS_CONTROL=os.path.join(FAKE, "nvidia-cuda-mps-control"),
                        RUNNER=f"{sys.executable} {os.path.join(FAKE, 'run_stub.py')}")
        env = stub_env(**{**settings, **extra})
        return subprocess.run(["bash", os.path.join(REPO, "gpu", "mps_cost.sh")], env=env, capture_output=True,
                              text=True, timeout=150)

    def archive(self):
        with tarfile.open(os.path.join(self.out, "mps_cost_runs.tgz")) as t:
            names = t.getnames()
            log = t.extractfile("logs/run.log").read().decode()
            ctl = t.extractfile("logs/control.log").read().decode() if "logs/control.log" in names else ""
        return names, log, ctl

    def test_dry_run_and_unknown_variant(self):
        r = subprocess.run(["bash", os.path.join(REPO, "gpu", "mps_cost.sh"), "dry-run"], capture_output=True,
                           text=True, timeout=30, env=stub_env())
        self.assertEqual(r.returncode, 0)
        self.assertIn("mps-conn1: MPS client CUDA_DEVICE_MAX_CONNECTIONS=1", r.stdout)
        self.assertIn("no-mps-again: no MPS", r.stdout)
        r = subprocess.run(["bash", os.path.join(REPO, "gpu", "mps_cost.sh"), "dry-run"], capture_output=True,
                           text=True, timeout=30, env=stub_env(VARIANTS="mps-atp25 be-train-t1"))
        self.assertIn("mps-atp25: MPS client CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", r.stdout)
        self.assertIn("be-train-t1: MPS client (no setting) beside a train companion at priority 1, 1%", r.stdout)
        for bad in ("mps-atp0", "mps-atp101", "be-spin-t10", "be-alu-t0"):
            r = self.script(bad)
            self.assertEqual(r.returncode, 2, bad)
        r = self.script("no-mps bogus")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown variant bogus", r.stderr)

    def test_runs_compared_daemon_quit_three_files(self):
        r = self.script("no-mps mps mps-conn1 mps-prio0 no-mps-again", FAKE_FAIL_VARIANT="mps-prio0")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(sorted(os.listdir(self.out)), ["mps_cost.json", "mps_cost.md", "mps_cost_runs.tgz"])
        with open(os.path.join(self.out, "mps_cost.json")) as f:
            res = json.load(f)
        self.assertEqual([x["variant"] for x in res["runs"]], ["no-mps", "mps", "mps-conn1", "mps-prio0", "no-mps-again"])
        self.assertIn("(mps-conn1) removes it", res["verdict"])
        rows = {x["variant"]: x for x in res["runs"]}
        self.assertFalse(rows["mps-prio0"]["ok"])
        self.assertIn("no result (rc 3", rows["mps-prio0"]["error"])
        self.assertTrue(rows["mps"]["mps"] and not rows["no-mps-again"]["mps"])
        names, log, ctl = self.archive()
        self.assertIn("runs/mps.json", names)
        self.assertEqual(ctl.count("quit"), 1)         # one daemon for the MPS runs, quit once
        self.assertIn("MPS control daemon stopped", log)
        self.assertEqual(mps_pids(self.tmp), [])
        self.assertEqual(os.listdir(self.tmp), ["out"])  # the work directory is gone

    def test_companion_runs_beside_the_step_and_is_stopped(self):
        stub = os.path.join(FAKE, "presence_be_stub.py")
        r = self.script("mps mps-atp90 be-alu-t10", PRESENCE_BE=stub)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(self.out, "mps_cost.json")) as f:
            res = json.load(f)
        rows = {x["variant"]: x for x in res["runs"]}
        self.assertEqual(rows["mps-atp90"]["cuda_env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "90")
        comp = rows["be-alu-t10"]["companion"]
        self.assertEqual((comp["kind"], comp["threads_pct"], comp["mode"]), ("alu", 10, "alu"))
        self.assertEqual((comp["priority"], comp["threads"]), ("1", "10"))  # an MPS client at priority 1
        self.assertIn("be-alu-t10", res["presence"])
        self.assertNotIn("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", rows["be-alu-t10"]["cuda_env"])  # the step's own: none
        names, log, _ = self.archive()
        self.assertIn("companion alu at 10% of the threads running", log)
        self.assertIn("logs/be-alu-t10.be.log", names)
        self.assertEqual(mps_pids(self.tmp), [])
        out = subprocess.run(["pgrep", "-f", "presence_be_stub"], capture_output=True, text=True).stdout
        self.assertEqual(out.strip(), "")

    def test_companion_that_never_gets_ready_fails_its_variant_only(self):
        stub = os.path.join(FAKE, "presence_be_stub.py")
        r = self.script("mps be-mem-t10", PRESENCE_BE=stub, FAKE_COMPANION_NEVER_READY="1", COMPANION_READY_S="1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(self.out, "mps_cost.json")) as f:
            rows = {x["variant"]: x for x in json.load(f)["runs"]}
        self.assertTrue(rows["mps"]["ok"])
        self.assertIn("companion did not get ready", rows["be-mem-t10"]["error"])
        out = subprocess.run(["pgrep", "-f", "presence_be_stub"], capture_output=True, text=True).stdout
        self.assertEqual(out.strip(), "")

    def test_terminated_midway_still_quits_the_daemon(self):
        r = self.script("no-mps mps mps-conn1", FAKE_KILL_VARIANT="mps")
        self.assertEqual(r.returncode, 130, r.stdout + r.stderr)
        names, log, ctl = self.archive()
        self.assertIn("interrupted", log)
        self.assertIn("quit", ctl)
        self.assertNotIn("runs/mps-conn1.json", names)
        self.assertEqual(mps_pids(self.tmp), [])

    def test_no_daemon_no_mps_runs(self):
        r = self.script("no-mps mps mps-conn1", MPS_CONTROL="/bin/false")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        with open(os.path.join(self.out, "mps_cost.json")) as f:
            res = json.load(f)
        rows = {x["variant"]: x for x in res["runs"]}
        self.assertTrue(rows["no-mps"]["ok"])
        for v in ("mps", "mps-conn1"):       # not run without MPS in their place
            self.assertIn("MPS control daemon did not start", rows[v]["error"])
        self.assertIn("No verdict: the MPS run", res["verdict"])

    def test_daemon_that_ignores_quit_is_killed(self):
        r = self.script("mps", FAKE_MPS_IGNORE_QUIT="1", QUIT_WAIT_S="1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)   # no baseline asked: no verdict, files all the same
        with open(os.path.join(self.out, "mps_cost.json")) as f:
            self.assertIn("No verdict: the baseline", json.load(f)["verdict"])
        names, log, ctl = self.archive()
        self.assertIn("outlived quit: killed", log)
        time.sleep(0.2)
        self.assertEqual(mps_pids(self.tmp), [])


if __name__ == "__main__":
    unittest.main()
