#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Co-location matrix runner: HP inference + BE training on one GPU, mode by mode, in one run.

Modes (in this order):
  exclusive-hp        HP alone. First a closed-loop calibration gives HP's capacity (req/s); then HP
                      serves open-loop Poisson arrivals at --load x capacity. Every later HP run
                      uses this same rate. hp_busy_fraction comes from here.
  exclusive-be        BE alone; its throughput over --be-window seconds after warm-up.
  time-slicing        HP + BE as two plain processes (the driver's default time-slicing).
  mps                 HP + BE as clients of one MPS server (private pipe/log dirs under /tmp).
  mps-be50            as mps, with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 for the BE client only.
  mps-prio1[-tN]      as mps, the BE client at CUDA_MPS_CLIENT_PRIORITY=1 (and with -tN also
                      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=N); only when named.
  gpuos-time-<p>      HP + BE under `gpuos run` (guaranteed / best-effort) with the gpuos daemon
                      running policy <p>; gpuos-time-open = no gating (interposer overhead only).
  gpuos-space-<p>     as above, and both tenants in one spatial domain (`gpuos run --space`): gpuosd
                      starts the domain's MPS control daemon and gives each its SM partition
                      (--space-hp-sms, --space-lend-after-ms); <p> is the scheduling policy.
  gpuos-<kind>-slo-B  <kind> time or space with the daemon's policy 'budget' and HP declaring its
                      latency budget (gpuos run --max-slowdown B, 1 < B <= 100): BE gets GPU time while
                      HP stays within B x its exclusive latency.
  exclusive-hp-again  (only when named) HP alone once more, last, at the same rate: the drift of
                      HP's exclusive latency over the run, beside the first figure.
--exclusive-repeats N (issue #40's method: N >= 5, --window >= 60): HP alone N times at the same rate,
interleaved: exclusive-hp (which calibrates) first, exclusive-hp-r2 .. -r(N-1) spread evenly between
the co-located modes, exclusive-hp-rN after the last of them, so drift over the run is sampled. Every
run is kept in raw.json; the summary's ratios are against their mean, with 95% intervals (report.py).
--be ddp: BE is be_train.py's data-parallel training over --be-gpus (one process per GPU, NCCL; under
gpuos each rank is its own best-effort tenant), HP pinned to --hp-gpu (CUDA_VISIBLE_DEVICES): a
guaranteed server on one GPU beside a job that spans it and others (issue #27). raw.json/summary.json
then name the GPUs used, the node's gpu_count and the NCCL version the BE's rank 0 reported.
In every co-located mode BE starts first; HP loads and captures meanwhile and starts its measured
window once BE is warm (BE's --ready-file); BE throughput is its rate over HP's measured window.
--load-step-to L2 makes every HP run step from --load to L2 x capacity at --load-step-at seconds
into its window; the summary then has HP's latency per 1 s window after the step.

Output (--out, default bench/results/<date>-<label>): summary.json, summary.md, cdf.png, be.png,
frontier.png, frontier.json (BE throughput against HP's slowdown, gpuos against the baselines per
latency budget), raw.json (all per-mode raw results). summary.json/summary.md/raw.json are
rewritten after every mode, so a run cut short still leaves what it measured.

--dry-run prints the plan, every command and the time estimate, and starts nothing.

The parts, beside this file: planning.py (modes, estimates, commands, environments, the dry run),
processes.py (the processes a mode starts: tenants, gpuosd, MPS), readers.py (the GPUs, HP's and
BE's results); this file runs the modes in order and writes the results.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import traceback
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import be_train  # noqa: E402  (torch-free at import: its DDP launcher's helpers)
import common  # noqa: E402
import gpu_state  # noqa: E402
import lengths  # noqa: E402
import readers  # noqa: E402
import report  # noqa: E402
# The parts' names as this module's too (the runner's tests and callers use them from here).
from planning import (AGAIN_MODE, BASELINE_MODES, DEFAULT_GPUOS_MODES, ModeError, ModeSpec,  # noqa: E402,F401
                      Plan, visible_device)
from processes import Mps, Proc  # noqa: E402,F401
from readers import parse_gpu_list  # noqa: E402,F401


# ---------------------------------------------------------------------------------------------
# The runner

class Runner:
    """Runs a Plan's modes one after another and writes the results after each."""

    def __init__(self, args) -> None:
        self.a = args
        self.plan = Plan(args)
        self.t_begin = time.monotonic()
        self.procs: List[Proc] = []
        self.mps: Optional[Mps] = None
        self.daemon: Optional[Proc] = None
        self.hp_rate: Optional[float] = args.hp_rate or None
        self.capacity: Optional[float] = None
        self.be_excl: Optional[float] = None
        self.results: Dict[str, dict] = {}
        self.meta: dict = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.t_begin

    def start(self, name: str, cmd: List[str], extra_env: dict) -> Proc:
        env = dict(os.environ)
        env.update(extra_env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        p = Proc(name, cmd, env, os.path.join(self.plan.workdir, f"{name}.log"))
        self.procs.append(p)
        print(f"[run] {name}: pid {p.pid}: {shlex.join(cmd)}", flush=True)
        return p

    def cleanup(self) -> None:
        for p in self.procs:
            p.stop(grace_s=5)
        self.procs = []
        if self.daemon is not None:
            self.daemon.stop(grace_s=10)
            self.daemon = None
        if self.mps is not None:
            self.mps.stop()
            self.mps = None


    def run(self) -> int:
        a = self.a
        out = self.plan.out_dir()
        os.makedirs(out, exist_ok=True)
        config_files = [*self.plan.variant_configs.values(),
                         *([os.environ["GPUOS_CONFIG"]] if os.environ.get("GPUOS_CONFIG") else [])]
        # The settings that shape a run (not where it writes, nor its name).
        settings = {k: v for k, v in vars(a).items() if k not in ("out", "workdir", "label", "dry_run")}
        self.meta = {
            "date": _dt.datetime.now().isoformat(timespec="seconds"),
            "label": a.label, "load": a.load, "workload": a.workload, "be": a.be,
            "lengths": a.lengths if a.workload == "torch" else None, "seed": a.seed,
            "params_b": a.params_b if a.workload == "torch" else None,
            "gpu": readers.gpu_info(), "argv": sys.argv[1:], "workdir": self.plan.workdir,
            "hp_gpu": a.hp_gpu, "be_gpus": a.be_gpu_list if a.be == "ddp" else None,
            "gpus_used": self.plan.gpus_used(),
            "min_requests": a.min_requests, "budget_s": a.budget_s,
            "load_step": ({"to": a.load_step_to, "at_s": self.plan.load_step_at()} if a.load_step_to else None),
            "modes_planned": [s.name for s in self.plan.modes],
            "window_s": a.window, "exclusive_repeats": a.exclusive_repeats,
            "paired_seeds": [int(x) for x in a.paired_seeds.split(",")] if a.paired_seeds else None,
            "pair_calibrate_s": a.pair_calibrate_s if a.paired_seeds else None,
            "commit": common.commit_of(REPO),
            "config": {"variants": self.plan.variant_configs, "gpuos_config": os.environ.get("GPUOS_CONFIG") or None,
                       "files_sha256": common.files_sha256(config_files),
                       "texts": common.config_texts(config_files),
                       "sha256": common.config_sha256(config_files, settings)},
        }
        self.meta["gpu_count"] = self.meta["gpu"].get("count")
        print(f"[run] GPU {self.meta['gpu']}; out {out}; workdir {self.plan.workdir}", flush=True)
        try:
            for i, spec in enumerate(self.plan.modes):
                est = self.plan.estimate(spec) + (a.cold_start_s if i == 0 else 0.0)
                if self.elapsed() + est > a.budget_s:
                    rec = {"mode": spec.name, "status": "skipped",
                           "error": f"time budget: {self.elapsed():.0f}s used + {est:.0f}s estimated > "
                                    f"{a.budget_s:.0f}s"}
                else:
                    try:
                        rec = self.run_mode(spec)
                    except KeyboardInterrupt:
                        self.results[spec.name] = {"mode": spec.name, "status": "error",
                                                   "error": "interrupted (runner got SIGTERM/SIGINT)"}
                        raise
                self.results[spec.name] = rec
                print(f"[run] {spec.name}: {rec['status']} {rec.get('error') or ''} "
                      f"({self.elapsed():.0f}s elapsed)", flush=True)
                self.write(out, plots=False)
        finally:
            self.cleanup()
        self.meta["wall_s"] = self.elapsed()
        self.write(out, plots=True)
        print(f"[run] done in {self.elapsed():.0f}s; results in {out}", flush=True)
        try:
            with open(os.path.join(out, "summary.md")) as f:
                print(f.read(), flush=True)
        except OSError:
            pass
        return 0

    def write(self, out: str, plots: bool) -> None:
        raw = {"meta": self.meta, "modes": self.results,
               "hp_rate_rps": self.hp_rate, "capacity_rps": self.capacity}
        common.write_json_atomic(os.path.join(out, "raw.json"), raw)
        try:
            report.write_all(raw, out, plots=plots)
        except Exception:  # noqa: BLE001 - a report bug must not lose the raw results
            print("[run] report failed:\n" + traceback.format_exc(), flush=True)

    # --- one mode -------------------------------------------------------------------------------

    def run_mode(self, spec: ModeSpec) -> dict:
        rec: dict = {"mode": spec.name, "status": "ok", "error": None, "notes": [],
                     "estimate_s": self.plan.estimate(spec)}
        t0 = time.monotonic()
        print(f"[run] === {spec.name} (estimate {rec['estimate_s']:.0f}s)", flush=True)
        sampler = gpu_state.Sampler(self.plan._file(spec.name, "gpu-state.csv"), self.a.gpu_sample_ms,
                                    gpu_index=self.plan.hp_visible() or 0)  # HP's GPU
        sampler.start()
        try:
            if spec.gpuos_kind and not os.path.exists(self.plan.gpuos_bin):
                rec["status"] = "skipped"
                rec["error"] = f"{self.plan.gpuos_bin} not built"
                return rec
            if self.a.workload == "synthetic" and not os.path.exists(self.plan.synth_bin):
                raise ModeError(f"{self.plan.synth_bin} not built")
            if spec.hp and spec.name != "exclusive-hp" and not self.hp_rate:
                raise ModeError("no HP rate: exclusive-hp (calibration) did not produce one; "
                                "pass --hp-rate to run without it")
            mps_env = None
            if spec.mps:
                self.mps = Mps(self.plan.workdir, spec.name)
                self.mps.start()
                mps_env = self.mps.env
            hp_env, be_env = self.plan.envs(spec, mps_env)
            if spec.gpuos_kind == "space":
                # gpuosd starts and supervises the MPS control daemon of the domain the tenants join.
                cfg = self.plan.space_config(spec)
                hp_env["GPUOS_CONFIG"] = be_env["GPUOS_CONFIG"] = cfg
            if spec.gpuos_kind:
                # gpuosd governs every GPU, not only HP's.
                self.start_daemon(spec, {k: v for k, v in hp_env.items() if k != "CUDA_VISIBLE_DEVICES"})
            if spec.gpuos_kind == "space":
                self.wait_space_domain(rec)
            if spec.exclusive_hp:
                self.mode_exclusive_hp(spec, rec, hp_env)
            elif spec.name == "exclusive-be":
                self.mode_exclusive_be(spec, rec, be_env)
            else:
                self.mode_colocated(spec, rec, hp_env, be_env)
        except ModeError as e:
            rec["status"] = "error"
            rec["error"] = str(e)
        except Exception as e:  # noqa: BLE001 - one broken mode must not end the matrix
            rec["status"] = "error"
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc()[-3000:]
        finally:
            rec["gpu_state"] = sampler.stop()
            if rec["gpu_state"]:
                rec["notes"].append(gpu_state.describe(rec["gpu_state"]))
            if self.daemon is not None and spec.gpuos_kind:
                rec["gpuos_ps"] = self.gpuos_ps(spec)
            for p in self.procs:
                rc = p.stop()
                rec.setdefault("exit_codes", {})[p.name] = rc
                try:  # <name>.log is the next mode's too: the whole of this mode's stays beside
                    shutil.copyfile(p.log_path, self.plan._file(spec.name, f"{p.name}.log"))
                except OSError:
                    pass
                if rec["status"] == "error" or (rc not in (0, None, -signal.SIGTERM)):
                    rec.setdefault("log_tails", {})[p.name] = p.tail()
            self.procs = []
            if self.daemon is not None:
                self.daemon.stop(grace_s=10)
                if rec["status"] == "error":
                    rec.setdefault("log_tails", {})["gpuos-daemon"] = self.daemon.tail()
                self.note_budget_log(rec, self.daemon.log_path)
                self.daemon = None
            if self.plan.space_mps_dir:
                shutil.rmtree(self.plan.space_mps_dir, ignore_errors=True)
                self.plan.space_mps_dir = None
            if self.mps is not None:
                if rec["status"] == "error":
                    rec["mps_log_tail"] = self.mps.log_tail()
                err = self.mps.stop()
                if err:
                    rec["notes"].append(err)
                self.mps = None
            rec["wall_s"] = time.monotonic() - t0
        return rec

    @staticmethod
    def note_budget_log(rec: dict, log_path: str) -> None:
        """What moved a budget's share over the mode, from gpuosd's probe lines (rec["budget_log"]
        and a note)."""
        try:
            with open(log_path, errors="replace") as f:
                b = readers.budget_log(f.read())
        except OSError:
            return
        if b is not None:
            rec["budget_log"] = b
            rec["notes"].append(readers.describe_budget_log(b))

    def start_daemon(self, spec: ModeSpec, env: dict) -> None:
        sock = self.plan.socket_path(spec)
        if os.path.exists(sock):
            os.unlink(sock)
        self.daemon = Proc("gpuos-daemon", self.plan.gpuos_daemon_cmd(spec), dict(os.environ, **env),
                           os.path.join(self.plan.workdir, f"{spec.name}.daemon.log"))
        print(f"[run] gpuos daemon pid {self.daemon.pid}: {shlex.join(self.daemon.cmd)}", flush=True)
        end = time.monotonic() + 15
        while time.monotonic() < end and not os.path.exists(sock):
            if self.daemon.poll() is not None:
                raise ModeError(f"gpuos daemon exited rc={self.daemon.poll()}: {self.daemon.tail(800)}")
            time.sleep(0.05)
        if not os.path.exists(sock):
            raise ModeError(f"gpuos daemon socket {sock} did not appear in 15 s")

    def wait_space_domain(self, rec: dict, timeout_s: float = 20.0) -> None:
        status = os.path.join(self.plan.space_mps_dir, self.plan.SPACE_DOMAIN, "status")
        end = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < end:
            try:
                with open(status) as f:
                    text = f.read().strip()
            except OSError:
                text = ""
            if text == "available":
                return
            time.sleep(0.1)
        raise ModeError(f"the domain's MPS control daemon is not available after {timeout_s:.0f} s: {text!r}")

    def gpuos_ps(self, spec: ModeSpec):
        cmd = [self.plan.gpuos_bin] + shlex.split(self.a.gpuos_ps_args.format(socket=self.plan.socket_path(spec)))
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=10,
                               env=dict(os.environ, GPUOS_SOCKET=self.plan.socket_path(spec)))
            try:
                import json
                return json.loads(r.stdout)
            except ValueError:
                return {"rc": r.returncode, "output": (r.stdout + r.stderr)[-1500:]}
        except (OSError, subprocess.SubprocessError) as e:
            return {"error": str(e)}

    def _wrap(self, spec: ModeSpec, cmd: List[str], cls: str, name: str) -> List[str]:
        return self.plan.gpuos_wrap(spec, cmd, cls, name) if spec.gpuos_kind else cmd

    def _read_hp(self, spec: ModeSpec, rec: dict, hp: Proc) -> dict:
        return readers.read_hp(self.plan._file(spec.name, "hp.json"), self.a.workload == "synthetic",
                               self.a.min_requests, rec, hp)

    def _hp_timeout(self, spec: ModeSpec) -> float:
        return self.plan.estimate(spec) + self.a.drain_s + 90.0

    def _wait_hp(self, hp: Proc, be: Optional[Proc], spec: ModeSpec, rec: dict,
                 ready_file: str = "") -> None:
        """Wait for HP to exit; watch BE (a BE that dies before warm-up ends the mode)."""
        t_start = time.monotonic()
        deadline = t_start + self._hp_timeout(spec)
        ready_deadline = t_start + self.plan.est_be_startup() + self.a.cold_start_s + 60.0
        saw_ready = False
        while hp.poll() is None:
            if time.monotonic() > deadline:
                hp.stop(grace_s=15)
                raise ModeError(f"HP did not finish within {self._hp_timeout(spec):.0f}s")
            if (be is not None and ready_file and not saw_ready and not os.path.exists(ready_file)
                    and time.monotonic() > ready_deadline):
                hp.stop(grace_s=5)
                raise ModeError(f"BE not warm after {ready_deadline - t_start:.0f}s: {be.tail(1500)}")
            if be is not None and not saw_ready and ready_file and os.path.exists(ready_file):
                saw_ready = True
                if self.mps is not None:
                    rec["mps_server_list"] = self.mps.server_list()
            if be is not None and be.poll() is not None and not rec.get("be_exited_early"):
                rec["be_exited_early"] = be.poll()
                if not saw_ready and not (ready_file and os.path.exists(ready_file)) \
                        and self.a.workload == "torch":
                    hp.stop(grace_s=5)
                    raise ModeError(f"BE exited (rc={be.poll()}) before warm-up: {be.tail(1500)}")
                rec["notes"].append(f"BE exited (rc={be.poll()}) while HP was running")
            time.sleep(0.2)


    # --- mode bodies -----------------------------------------------------------------------------

    def mode_exclusive_hp(self, spec: ModeSpec, rec: dict, hp_env: dict) -> None:
        a = self.a
        calibrate = not self.hp_rate
        if a.workload == "synthetic":
            cmds = self.plan.hp_cmd(spec, calibrate, self.hp_rate, "")
            if calibrate:
                cal = self.start("hp-cal", self._wrap(spec, cmds[0], "guaranteed", "hp"), hp_env)
                if cal.wait(self._hp_timeout(spec)) is None:
                    raise ModeError("synthetic HP calibration timed out")
                cj = common.read_json(self.plan._file(spec.name, "hp-cal.json")) or {}
                cap = cj.get("throughput_per_s")
                if not cap:
                    raise ModeError(f"synthetic calibration gave no throughput: {cal.tail(1000)}")
                self.capacity = cap
                self.hp_rate = a.load * cap
                rec["calibration"] = {"capacity_rps": cap, "synth": cj}
            cmd = self.plan.hp_cmd(spec, False, self.hp_rate, "")[-1]
            hp = self.start("hp", self._wrap(spec, cmd, "guaranteed", "hp"), hp_env)
            self._wait_hp(hp, None, spec, rec)
            js = self._read_hp(spec, rec, hp)
            if self.capacity and js.get("achieved_rps"):
                rec["hp_busy_fraction"] = min(1.0, js["achieved_rps"] / self.capacity)
                rec["notes"].append("synthetic: busy fraction = achieved rate / closed-loop capacity")
            return
        cmd = self.plan.hp_cmd(spec, calibrate, self.hp_rate, "")[0]
        hp = self.start("hp", self._wrap(spec, cmd, "guaranteed", "hp"), hp_env)
        self._wait_hp(hp, None, spec, rec)
        js = self._read_hp(spec, rec, hp)
        if calibrate:
            if not js.get("capacity_rps") or not js.get("rate_rps"):
                raise ModeError("calibration gave no capacity")
            self.capacity = js["capacity_rps"]
            self.hp_rate = js["rate_rps"]
            cal = js.get("calibration") or {}
            busy_sat = cal.get("busy_fraction_at_saturation")
            if busy_sat is not None and busy_sat < 0.7:
                rec["notes"].append(f"HP GPU-busy only {busy_sat:.2f} at saturation: host-bound? "
                                    "(use a bigger --params-b)")
        rec["hp_busy_fraction"] = js.get("busy_fraction")

    def mode_exclusive_be(self, spec: ModeSpec, rec: dict, be_env: dict) -> None:
        a = self.a
        ready = self.plan._file(spec.name, "be.ready")
        if a.workload == "synthetic":
            n = self.plan.synth_be_count()
            be = self.start("be", self._wrap(spec, self.plan.be_cmd(spec, ready, count=n), "best-effort", "be"),
                            be_env)
            if be.wait(a.be_window * 3 + 60) is None:
                raise ModeError("synthetic BE did not finish")
            readers.read_be(self.plan._file(spec.name, "be.json"), a.workload == "synthetic", rec, None, None)
        else:
            be = self.start("be", self._wrap(spec, self.plan.be_cmd(spec, ready), "best-effort", "be"), be_env)
            end = time.monotonic() + self.plan.est_be_startup() + a.cold_start_s + 120
            while not os.path.exists(ready):
                if be.poll() is not None:
                    raise ModeError(f"BE exited rc={be.poll()} before warm-up: {be.tail(1500)}")
                if time.monotonic() > end:
                    raise ModeError("BE did not warm up in time")
                time.sleep(0.1)
            t0 = time.time()
            time.sleep(a.be_window)
            t1 = time.time()
            if be.poll() is not None:
                rec["notes"].append(f"BE exited rc={be.poll()} during its window")
            be.stop()
            readers.read_be(self.plan._file(spec.name, "be.json"), a.workload == "synthetic", rec, t0, t1)
        if rec.get("be_rate"):
            self.be_excl = rec["be_rate"]
        else:
            raise ModeError("BE throughput unavailable")

    def mode_colocated(self, spec: ModeSpec, rec: dict, hp_env: dict, be_env: dict) -> None:
        a = self.a
        ready = self.plan._file(spec.name, "be.ready")
        be = self.start("be", self._wrap(spec, self.plan.be_cmd(spec, ready), "best-effort", "be"), be_env)
        if a.workload == "synthetic":
            time.sleep(a.synth_be_lead_s)
            if be.poll() is not None:
                raise ModeError(f"synthetic BE exited rc={be.poll()}: {be.tail(1000)}")
            if self.mps is not None:
                rec["mps_server_list"] = self.mps.server_list()
            cmd = self.plan.hp_cmd(spec, False, self.hp_rate, "")[-1]
        else:
            cmd = self.plan.hp_cmd(spec, False, self.hp_rate, ready)[0]
            if a.hp_after_be_ready > 0:
                self._wait_be_ready(be, ready, a.hp_after_be_ready, rec)
        hp = self.start("hp", self._wrap(spec, cmd, "guaranteed", "hp"), hp_env)
        self._wait_hp(hp, be, spec, rec, ready if a.workload == "torch" else "")
        js = self._read_hp(spec, rec, hp)
        be.stop()
        win = js.get("window") or {}
        readers.read_be(self.plan._file(spec.name, "be.json"), a.workload == "synthetic", rec,
                        win.get("t0"), win.get("t1"))
        if a.workload == "synthetic" and rec.get("be_rate") is None:
            rec["notes"].append("synthetic BE wrote no JSON on SIGTERM: BE throughput unknown")


    @staticmethod
    def _wait_be_ready(be: "Proc", ready: str, limit_s: float, rec: dict) -> None:
        """Holds HP back until BE is warm (so HP arrives on a GPU whose memory BE already holds)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit_s and not os.path.exists(ready):
            if be.poll() is not None:
                raise ModeError(f"BE exited rc={be.poll()} before it was ready: {be.tail(1000)}")
            time.sleep(0.2)
        waited = time.monotonic() - t0
        rec["notes"].append(f"HP started {waited:.1f} s after BE, "
                            + ("once BE was ready" if os.path.exists(ready) else "BE still not ready"))


# ---------------------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("matrix")
    g.add_argument("--load", type=float, default=0.5, help="HP rate as a fraction of its capacity (0.3/0.5/0.7)")
    g.add_argument("--label", default="baseline", help="results folder suffix")
    g.add_argument("--out", default="", help="output folder (default bench/results/<date>-<label>)")
    g.add_argument("--modes", default="",
                   help=f"comma list of baseline modes (default: {','.join(BASELINE_MODES)}; also "
                        "mps-prio1, mps-prio1-tN and exclusive-hp-again)")
    g.add_argument("--gpuos", default=",".join(DEFAULT_GPUOS_MODES),
                   help="comma list of gpuos modes (gpuos-time-<p>, gpuos-space-<p>; <p> = slo-B: policy "
                        "'budget', HP under --max-slowdown B), or 'none'; skipped with a note when "
                        "build/bin/gpuos is missing")
    g.add_argument("--variant", action="append", metavar="NAME=CONFIG",
                   help="gpuosd config file for the gpuos modes named <mode>@NAME (e.g. "
                        "gpuos-time-slo-1.25@iv100), which run beside the same modes under the default "
                        "config (GPUOS_CONFIG); repeatable")
    g.add_argument("--load-step-to", type=float, default=0.0, metavar="L2",
                   help="load step: HP's arrival rate changes from --load to L2 x capacity at "
                        "--load-step-at in every HP run (latency per 1 s window in the summary)")
    g.add_argument("--load-step-at", type=float, default=None, metavar="S",
                   help="seconds into HP's measured window of the load step (default: --window / 2)")
    g.add_argument("--workload", choices=["torch", "synthetic"], default="torch")
    g.add_argument("--be", choices=["train", "infer", "ddp"], default="train",
                   help="which BE (torch workload); ddp: be_train.py data-parallel over --be-gpus")
    g.add_argument("--be-gpus", default="0,1",
                   help="--be ddp: the GPUs of its ranks, one process each (CUDA's indices)")
    g.add_argument("--hp-gpu", type=int, default=None,
                   help="pin HP to this GPU (CUDA_VISIBLE_DEVICES; a one-GPU BE too); --be ddp: default 0")
    g.add_argument("--hp-rate", type=float, default=0.0, help="skip calibration; HP rate in req/s")
    g.add_argument("--window", type=float, default=40.0, help="HP measured window per mode, s")
    g.add_argument("--exclusive-repeats", type=int, default=1, metavar="N",
                   help="measure HP alone N times at the same rate, interleaved among the other modes "
                        "(exclusive-hp first, exclusive-hp-r2..rN between and after the co-located "
                        "modes); ratios against their mean, with 95%% intervals when N >= 2 (issue "
                        "#40's method: N >= 5 and --window >= 60)")
    g.add_argument("--paired-seeds", default="", metavar="S1,S2,S3",
                   help="issue #56's method v2: per arrival seed s, HP alone with seed s (exclusive-hp+s<s>, "
                        "after a --pair-calibrate-s calibration replay) then every co-located mode with seed s "
                        "(<mode>+s<s>), back to back; each mode's bound is the bootstrap 95%% upper bound over "
                        "its pairs' ratios (method_v2.py); >= 3 seeds for a headline claim, fewer is a point check")
    g.add_argument("--pair-calibrate-s", type=float, default=5.0, metavar="S",
                   help="--paired-seeds: seconds of the calibration replay (HP alone at the run's rate, its own "
                        "arrivals) before each pair's alone window; a pair whose replay's TPOT p50 is off the "
                        "run's median by more than method_v2.CALIBRATION_TOLERANCE is excluded (0 = none, no "
                        "pair is excluded). Not --calibrate-s: that is the closed-loop capacity run, once")
    g.add_argument("--be-window", type=float, default=20.0, help="exclusive-be measured window, s")
    g.add_argument("--calibrate-s", type=float, default=8.0, help="HP closed-loop calibration, s")
    g.add_argument("--warmup", type=float, default=2.0, help="HP unmeasured warm-up traffic, s")
    g.add_argument("--drain-s", type=float, default=10.0, help="HP max drain after the last arrival, s")
    g.add_argument("--min-requests", type=int, default=300)
    g.add_argument("--budget-s", type=float, default=500.0,
                   help="skip any mode whose estimate would end past this many seconds")
    g.add_argument("--cold-start-s", type=float, default=15.0,
                   help="estimate margin for the first mode (cold imports on a fresh machine)")
    g.add_argument("--hp-after-be-ready", type=float, default=0.0,
                   help="torch workload: start the HP process only once BE is warm (at most this many s)")
    g.add_argument("--gpu-sample-ms", type=int, default=1000,
                   help="sample the GPU's SM clock, temperature and power (nvidia-smi) this often during "
                        "each mode (0 = not)")
    g.add_argument("--dry-run", action="store_true", help="print the plan, commands and time estimate")
    g.add_argument("--workdir", default="", help="logs and per-process JSON (default: a new /tmp dir)")
    g.add_argument("--python", default=sys.executable or "python3")
    g.add_argument("--fake", action="store_true",
                   help="self-test without a GPU: fake_tenant.py stands in for the torch workloads")
    h = ap.add_argument_group("HP (torch)")
    h.add_argument("--params-b", type=float, default=1.0)
    h.add_argument("--prompt", type=int, default=128)
    h.add_argument("--out-tokens", type=int, default=32)
    h.add_argument("--max-batch", type=int, default=32)
    h.add_argument("--lengths", choices=lengths.CHOICES, default="fixed",
                   help="HP's request lengths: fixed (--prompt, --out-tokens) or drawn per request from the "
                        "Azure LLM inference trace 2023's conversation or coding service (lengths.py)")
    h.add_argument("--seed", type=int, default=1,
                   help="HP's arrival seed (hp_server.py --seed: its arrivals, and drawn lengths, in every "
                        "mode of the run)")
    h.add_argument("--hp-args", default="", help="extra hp_server.py flags, e.g. '--no-graphs'")
    b = ap.add_argument_group("BE (torch)")
    b.add_argument("--be-params-m", type=int, default=350)
    b.add_argument("--be-batch", type=int, default=16)
    b.add_argument("--be-seq", type=int, default=1024)
    b.add_argument("--be-infer-batch", type=int, default=64)
    b.add_argument("--be-infer-prompt", type=int, default=512)
    b.add_argument("--be-infer-gen", type=int, default=16)
    b.add_argument("--be-args", default="", help="extra be_train.py / be_infer.py flags")
    s = ap.add_argument_group("synthetic workload")
    s.add_argument("--synth-bin", default=os.path.join(REPO, "build", "bin", "gpuos-synth"))
    s.add_argument("--synth-hp-iters", type=int, default=125000)
    s.add_argument("--synth-be-iters", type=int, default=2500000)
    s.add_argument("--synth-blocks-per-sm", type=int, default=8)
    s.add_argument("--synth-hp-blocks-per-sm", type=int, default=0,
                   help="HP's grid in blocks per SM (0 = --synth-blocks-per-sm). The kernel is a chain of "
                        "dependent FMAs of 256-thread blocks; on the H200 two blocks on one SM take 1.26x "
                        "as long as one (2026-12-03-spatial-service), so any of these grids needs the "
                        "whole GPU for its exclusive latency")
    s.add_argument("--synth-hp-blocks", type=int, default=0,
                   help="HP's grid in blocks, whatever the SM count (overrides --synth-hp-blocks-per-sm): "
                        "64 makes a kernel that needs 64 SMs, one block each, and runs as fast on a "
                        "64-SM partition as on the whole GPU (the tenant right-sizing is for)")
    s.add_argument("--synth-trace", action="store_true",
                   help="HP writes each request's latency against its arrival (CLOCK_MONOTONIC) to "
                        "<workdir>/<mode>.hp-trace.csv, to line up with gpuosd's log")
    s.add_argument("--synth-device-trace", action="store_true",
                   help="HP runs the instrumented fixed-work kernel (gpuos-synth --device-trace, in "
                        "calibration too) and writes the GPU's timestamps of each kernel to "
                        "<workdir>/<mode>.hp-device.csv (real GPU only)")
    s.add_argument("--synth-be-lead-s", type=float, default=1.0, help="BE head start before HP, s")
    o = ap.add_argument_group("gpuos")
    o.add_argument("--gpuos-bin", default=os.path.join(REPO, "build", "bin", "gpuos"))
    o.add_argument("--gpuos-daemon-args", default="daemon --socket {socket}")
    o.add_argument("--gpuos-policy-args", default="--policy {policy}",
                   help="appended to the daemon args for every policy but time/open")
    o.add_argument("--gpuos-run-args", default="run --class {cls} --name {name} --socket {socket} --")
    o.add_argument("--gpuos-ps-args", default="ps --json --all --socket {socket}")
    o.add_argument("--space-hp-sms", type=int, default=0,
                   help="gpuos-space modes: SMs of HP's partition (gpuos run --sms); 0 = gpuosd's default")
    o.add_argument("--space-mps-control", default="",
                   help="gpuos-space modes: [spatial] mps_control (a stand-in for self-tests); default MPS's own")
    o.add_argument("--space-lend-after-ms", type=int, default=-1,
                   help="gpuos-space modes: [spatial] lend_after_ms; -1 = gpuosd's default")
    o.add_argument("--space-lend-max-kernel-ms", type=int, default=0,
                   help="gpuos-space modes: [spatial] lend_max_kernel_ms; 0 = gpuosd's default")
    o.add_argument("--space-be-reserve-groups", type=int, default=0,
                   help="gpuos-space modes: [spatial] be_reserve_groups (SM groups HP leaves to BE); 0 = gpuosd's default")
    args = ap.parse_args(argv)
    if not 0 < args.load < 1:
        ap.error("--load must be in (0, 1)")
    if args.load_step_to:
        if args.load_step_to < 0:
            ap.error("--load-step-to must be > 0")
        if args.workload != "torch":
            ap.error("--load-step-to needs --workload torch (gpuos-synth has no load step)")
    if args.be == "ddp":
        if args.workload != "torch":
            ap.error("--be ddp needs --workload torch")
        if args.hp_gpu is None:
            args.hp_gpu = 0
    try:
        args.be_gpu_list = be_train.parse_gpus(args.be_gpus)
    except ValueError as e:
        ap.error(f"--be-gpus: {e}")
    if args.hp_gpu is not None:
        if args.hp_gpu < 0:
            ap.error("--hp-gpu must be >= 0")
        try:
            visible_device(args.hp_gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
        except ValueError as e:
            ap.error(f"--hp-gpu: {e}")
    if args.load_step_at is not None and not args.load_step_to:
        ap.error("--load-step-at needs --load-step-to")
    if args.load_step_at is not None and not 0 < args.load_step_at < args.window:
        ap.error("--load-step-at must lie inside the window (0 < S < --window)")
    try:
        names = Plan.mode_names(args, check=True)
    except ValueError as e:
        ap.error(str(e))
    if args.exclusive_repeats < 1:
        ap.error("--exclusive-repeats must be >= 1")
    if args.exclusive_repeats > 1 and "exclusive-hp" not in names:
        ap.error("--exclusive-repeats needs exclusive-hp among the modes")
    if args.paired_seeds:
        try:
            seeds = [int(x) for x in args.paired_seeds.split(",")]
        except ValueError:
            ap.error(f"--paired-seeds {args.paired_seeds!r}: comma-separated integers >= 0, e.g. 1,2,3")
        if any(x < 0 for x in seeds) or len(set(seeds)) != len(seeds):
            ap.error(f"--paired-seeds {args.paired_seeds!r}: distinct integers >= 0")
        if "exclusive-hp" not in names or "exclusive-be" not in names:
            ap.error("--paired-seeds needs exclusive-hp and exclusive-be among the modes")
        if args.exclusive_repeats > 1:
            ap.error("--paired-seeds and --exclusive-repeats are two methods: each pair has its own alone run")
        if args.workload != "torch":
            ap.error("--paired-seeds needs --workload torch (gpuos-synth has no arrival seed)")
        if args.pair_calibrate_s < 0:
            ap.error("--pair-calibrate-s must be >= 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    r = Runner(args)
    if args.dry_run:
        return r.plan.dry_run()

    def on_signal(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    try:
        return r.run()
    except KeyboardInterrupt as e:
        print(f"[run] interrupted: {e}; writing partial results", flush=True)
        r.cleanup()
        r.meta["interrupted"] = str(e)
        r.meta["wall_s"] = r.elapsed()
        r.write(r.plan.out_dir(), plots=False)
        return 130
    finally:
        r.cleanup()


if __name__ == "__main__":
    sys.exit(main())
