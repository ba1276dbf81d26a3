#!/usr/bin/env python3
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
import tempfile
import time
import traceback
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import be_train  # noqa: E402  (torch-free at import: its DDP launcher's helpers)
import common  # noqa: E402
import gpu_state  # noqa: E402
import report  # noqa: E402

BASELINE_MODES = ["exclusive-hp", "exclusive-be", "time-slicing", "mps", "mps-be50"]
# Asked for by name only; runs after every other mode: HP alone again at the same rate, so drift
# over the run (a GPU warmed by the modes between) shows beside the first exclusive figure.
AGAIN_MODE = "exclusive-hp-again"
DEFAULT_GPUOS_MODES = ["gpuos-time-open"]


class ModeError(Exception):
    pass


def visible_device(index: int, outer: Optional[str]) -> str:
    """The CUDA_VISIBLE_DEVICES that leaves a process GPU `index` alone, `index` counted as CUDA counts
    in the runner's own environment: under an outer CUDA_VISIBLE_DEVICES, its index-th entry (an
    index or a UUID). ValueError if there is no such GPU."""
    if outer is None:
        return str(index)
    parts = [p.strip() for p in outer.split(",") if p.strip()]
    if not 0 <= index < len(parts):
        raise ValueError(f"GPU {index} is not among CUDA_VISIBLE_DEVICES={outer!r}")
    return parts[index]


def parse_gpu_list(text: str) -> List[dict]:
    """`nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader` -> one
    {index, name, driver_version} per GPU (lines that do not parse are left out)."""
    out = []
    for line in text.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 3 and f[0].isdigit():
            out.append({"index": int(f[0]), "name": ",".join(f[1:-1]), "driver_version": f[-1]})
    return out


class ModeSpec:
    def __init__(self, name: str) -> None:
        self.name = name
        self.hp = name != "exclusive-be"
        self.be = name not in ("exclusive-hp", AGAIN_MODE)
        self.mps = name == "mps" or name.startswith("mps-")
        self.be_env: Dict[str, str] = {}     # extra environment of the BE client only
        self.gpuos_kind = None
        self.policy = None
        self.budget: Optional[float] = None  # gpuos-<kind>-slo-B: HP's --max-slowdown B
        base, self.variant = common.split_variant(name)  # @variant: gpuosd's config (--variant)
        if self.variant is not None:
            if not base.startswith("gpuos-"):
                raise ValueError(f"bad mode {name!r}: only gpuos modes take @<variant> (gpuosd's config)")
            if not common.VARIANT_RE.match(self.variant):
                raise ValueError(f"bad variant in {name!r}: @ then 1-32 of a-z, 0-9 and _")
        if base.startswith("gpuos-"):
            parts = base.split("-", 2)
            if len(parts) != 3 or parts[1] not in ("time", "space") or not parts[2]:
                raise ValueError(f"bad gpuos mode name {name!r}: gpuos-time-<policy> or gpuos-space-<policy>")
            self.gpuos_kind, self.policy = parts[1], parts[2]
            self.budget = common.slo_budget(self.policy)
            if self.budget is not None:
                self.policy = "budget"  # the daemon's time gate that keeps HP within its budget
        elif name == "mps-be50":
            self.be_env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}
        elif name == "mps-prio1" or name.startswith("mps-prio1-t"):
            # MPS's own answer to co-location: the BE client at the lower scheduling priority (1),
            # optionally also held to N% of the SMs.
            self.be_env = {"CUDA_MPS_CLIENT_PRIORITY": "1"}
            if name != "mps-prio1":
                n = name[len("mps-prio1-t"):]
                if not n.isdigit() or not 1 <= int(n) <= 100:
                    raise ValueError(f"bad mode {name!r}: mps-prio1-tN with N in 1..100 (BE's SM percentage)")
                self.be_env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(int(n))
        elif name not in BASELINE_MODES and name != AGAIN_MODE:
            raise ValueError(f"unknown mode {name!r}")


# ---------------------------------------------------------------------------------------------
# Processes

class Proc:
    """A child in its own process group (so a wrapper and its child stop together), logging to a file."""

    def __init__(self, name: str, cmd: List[str], env: Dict[str, str], log_path: str) -> None:
        self.name = name
        self.cmd = cmd
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.p = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO)
        self.pid = self.p.pid

    def poll(self) -> Optional[int]:
        return self.p.poll()

    def wait(self, timeout: float) -> Optional[int]:
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def stop(self, grace_s: float = 20.0) -> Optional[int]:
        """SIGTERM the group, wait grace_s, then SIGKILL the group. Returns the exit code."""
        if self.p.poll() is None:
            self._signal_group(signal.SIGTERM)
            if self.wait(grace_s) is None:
                self._signal_group(signal.SIGKILL)
                self.wait(10)
        # A wrapper that forked may have exited before its child: give the group the same grace,
        # then anything left in it goes too.
        end = time.monotonic() + min(grace_s, 10.0)
        while time.monotonic() < end and self._group_alive():
            time.sleep(0.05)
        self._signal_group(signal.SIGKILL)
        self._log.close()
        return self.p.returncode

    def tail(self, n: int = 2500) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


class Mps:
    """An MPS control daemon with private pipe/log dirs; stop() always quits it."""

    def __init__(self, workdir: str, mode: str) -> None:
        self.env = self.env_for(workdir, mode)
        self.pipe = self.env["CUDA_MPS_PIPE_DIRECTORY"]
        self.log = self.env["CUDA_MPS_LOG_DIRECTORY"]
        self.started = False

    @staticmethod
    def env_for(workdir: str, mode: str) -> Dict[str, str]:
        return {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(workdir, f"{mode}.mps-pipe"),
                "CUDA_MPS_LOG_DIRECTORY": os.path.join(workdir, f"{mode}.mps-log")}

    def _ctl(self, text: str, timeout: float = 15.0) -> str:
        env = dict(os.environ, **self.env)
        r = subprocess.run(["nvidia-cuda-mps-control"], input=text + "\n", env=env, timeout=timeout,
                           capture_output=True, text=True)
        return (r.stdout + r.stderr).strip()

    def start(self) -> None:
        if not shutil.which("nvidia-cuda-mps-control"):
            raise ModeError("nvidia-cuda-mps-control not found")
        os.makedirs(self.pipe, exist_ok=True)
        os.makedirs(self.log, exist_ok=True)
        env = dict(os.environ, **self.env)
        # Output to a file, not a pipe: the daemonized child would hold a pipe open.
        with open(os.path.join(self.log, "start.out"), "w") as out:
            r = subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, timeout=20,
                               stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.started = True
        if r.returncode != 0:
            raise ModeError(f"MPS control daemon failed to start: rc={r.returncode}")
        end = time.monotonic() + 10
        while time.monotonic() < end and not self.pids():
            time.sleep(0.05)
        if not self.pids():
            raise ModeError("MPS control daemon not running after start")

    def pids(self) -> List[int]:
        """PIDs of the MPS control daemon / server using our pipe directory (found via /proc)."""
        want = f"CUDA_MPS_PIPE_DIRECTORY={self.pipe}".encode()
        out = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/comm", "rb") as f:
                    if not f.read().startswith(b"nvidia-cuda-mps"):
                        continue
                with open(f"/proc/{d}/environ", "rb") as f:
                    if want in f.read().split(b"\0"):
                        out.append(int(d))
            except OSError:
                continue
        return out

    def server_list(self) -> str:
        try:
            return self._ctl("get_server_list", 10)
        except (subprocess.SubprocessError, OSError) as e:
            return f"error: {e}"

    def stop(self) -> Optional[str]:
        """Quit the daemon (and its server); SIGKILL our own MPS processes if they outlive it."""
        if not self.started:
            return None
        self.started = False
        note = None
        try:
            self._ctl("quit", 30)
        except (subprocess.SubprocessError, OSError) as e:
            note = f"MPS quit failed: {e}"
        end = time.monotonic() + 15
        while time.monotonic() < end and self.pids():
            time.sleep(0.1)
        left = self.pids()
        if left:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            note = f"MPS processes {left} still alive 15 s after quit: killed"
        time.sleep(0.5)   # let the server release the GPU
        return note

    def log_tail(self) -> str:
        p = os.path.join(self.log, "control.log")
        try:
            with open(p) as f:
                return f.read()[-2000:]
        except OSError:
            return ""


# ---------------------------------------------------------------------------------------------
# The runner

class Runner:
    def __init__(self, args) -> None:
        self.a = args
        self.t_begin = time.monotonic()
        self.space_mps_dir: Optional[str] = None  # gpuos-space modes: the domain's MPS directories
        self.procs: List[Proc] = []
        self.mps: Optional[Mps] = None
        self.daemon: Optional[Proc] = None
        if args.dry_run:
            self.workdir = args.workdir or "/tmp/gpuos-coloc-XXXXXX"
        else:
            self.workdir = args.workdir or tempfile.mkdtemp(prefix="gpuos-coloc-")
            os.makedirs(self.workdir, exist_ok=True)
        self.hp_rate: Optional[float] = args.hp_rate or None
        self.capacity: Optional[float] = None
        self.be_excl: Optional[float] = None
        self.results: Dict[str, dict] = {}
        self.modes = self._modes()
        self.variant_configs = self.variants(args)  # --variant, checked by parse_args
        self.py = args.python
        self.gpuos_bin = os.path.abspath(args.gpuos_bin)
        self.synth_bin = os.path.abspath(args.synth_bin)
        self.meta: dict = {}

    # --- plan -----------------------------------------------------------------------------

    @staticmethod
    def mode_names(a, check: bool = False) -> List[str]:
        """Mode names asked for by --modes and --gpuos; check: ValueError for a bad one."""
        names = [m for m in a.modes.split(",") if m] if a.modes else list(BASELINE_MODES)
        if a.gpuos and a.gpuos != "none":
            names += [m for m in a.gpuos.split(",") if m and m not in names]
        if check:
            variants = Runner.variants(a)
            for n in names:
                v = ModeSpec(n).variant
                if v is not None and v not in variants:
                    raise ValueError(f"mode {n!r}: no --variant {v}=CONFIG")
        return names

    @staticmethod
    def variants(a) -> Dict[str, str]:
        """--variant NAME=CONFIG, each once: {name: gpuosd config file}; ValueError for a bad one."""
        out: Dict[str, str] = {}
        for v in a.variant or []:
            name, sep, path = v.partition("=")
            if not sep or not common.VARIANT_RE.match(name) or not path:
                raise ValueError(f"bad --variant {v!r}: NAME=CONFIG, NAME 1-32 of a-z, 0-9 and _")
            if name in out:
                raise ValueError(f"--variant {name} given twice")
            if not os.path.isfile(path):
                raise ValueError(f"--variant {name}: no such config file {path!r}")
            out[name] = os.path.abspath(path)
        return out

    def gpuos_config(self, spec: ModeSpec) -> Optional[str]:
        """The gpuosd config file of a mode: its variant's, else the caller's GPUOS_CONFIG (or none)."""
        if spec.variant is not None:
            return self.variant_configs[spec.variant]
        return os.environ.get("GPUOS_CONFIG") or None

    def _modes(self) -> List[ModeSpec]:
        specs = [ModeSpec(n) for n in self.mode_names(self.a)]
        order = {n: i for i, n in enumerate(BASELINE_MODES)}
        order[AGAIN_MODE] = len(order) + 1  # after the gpuos modes too

        def rank(s: ModeSpec) -> float:
            if s.name in order:
                return order[s.name]
            # other MPS baselines (mps-prio1*) right after mps-be50, gpuos modes after them
            return order["mps-be50"] + 0.5 if s.mps else len(BASELINE_MODES)
        specs.sort(key=rank)
        return specs

    def est_hp_startup(self) -> float:
        if self.a.workload == "synthetic":
            return 1.5
        return 14.0 + 1.5 * self.a.params_b + self.a.warmup

    def est_be_startup(self) -> float:
        if self.a.workload == "synthetic":
            return 1.5
        if self.a.be == "ddp":
            return 25.0  # the ranks' imports, NCCL's communicator and DDP's first buckets
        return 15.0 if self.a.be == "train" else 12.0 + 1.5 * self.a.params_b

    def estimate(self, spec: ModeSpec) -> float:
        """Seconds this mode takes on the H200 (model loads and captures included)."""
        a = self.a
        extra = (4.0 if spec.mps or spec.gpuos_kind == "space" else 0.0) + (4.0 if spec.gpuos_kind else 0.0)
        if spec.name in ("exclusive-hp", AGAIN_MODE):
            cal = 0.0 if self.a.hp_rate or spec.name == AGAIN_MODE else a.calibrate_s
            return self.est_hp_startup() + cal + a.window + 4.0
        if spec.name == "exclusive-be":
            return self.est_be_startup() + a.be_window + 3.0 + extra
        start = max(self.est_be_startup() + 1.0, 1.3 * self.est_hp_startup())
        return start + a.window + 2.0 + 3.0 + extra

    def elapsed(self) -> float:
        return time.monotonic() - self.t_begin

    # --- commands ---------------------------------------------------------------------------

    def _file(self, mode: str, what: str) -> str:
        return os.path.join(self.workdir, f"{mode}.{what}")

    def hp_cmd(self, spec: ModeSpec, calibrate: bool, rate: Optional[float], start_file: str) -> List[List[str]]:
        """HP command(s) for a mode: one (torch) or two in sequence (synthetic: calibration + run)."""
        a = self.a
        js = self._file(spec.name, "hp.json")
        rate_s = f"{rate:.3f}" if rate else "<load*capacity>"
        if a.workload == "synthetic":
            grid = (["--blocks", str(a.synth_hp_blocks)] if a.synth_hp_blocks > 0 else
                    ["--blocks-per-sm", str(a.synth_hp_blocks_per_sm or a.synth_blocks_per_sm)])
            base = [self.synth_bin, "--name", "hp", "--iters", str(a.synth_hp_iters), *grid,
                    "--block", "256", "--gap-us", "0", "--mem-mib", "64"]
            cmds = []
            if calibrate:
                n_cal = max(200, int(a.calibrate_s * 1000.0 / self.synth_hp_ms()))
                dcal = (["--device-trace", self._file(spec.name, "hp-cal-device.csv")]
                        if a.synth_device_trace else [])
                cmds.append(base + ["--count", str(n_cal), "--mode", "closed", "--json",
                                    self._file(spec.name, "hp-cal.json"), *dcal])
            n = "<rate*window>" if rate is None else str(max(1, int(rate * a.window)))
            trace = ["--trace", self._file(spec.name, "hp-trace.csv")] if a.synth_trace else []
            if a.synth_device_trace:
                trace += ["--device-trace", self._file(spec.name, "hp-device.csv")]
            cmds.append(base + ["--count", n, "--mode", "open", "--rate", rate_s, "--json", js, *trace])
            return cmds
        cmd = [self.py, os.path.join(HERE, "hp_server.py"), "--params-b", str(a.params_b),
               "--prompt", str(a.prompt), "--out-tokens", str(a.out_tokens),
               "--max-batch", str(a.max_batch), "--duration", str(a.window),
               "--warmup", str(a.warmup), "--drain-s", str(a.drain_s), "--json", js]
        if calibrate:
            cmd += ["--calibrate-load", str(a.load), "--calibrate-s", str(a.calibrate_s)]
        else:
            cmd += ["--rate", rate_s]
        if a.load_step_to:
            # rate2 = L2 x capacity = rate x L2 / L1; a calibrating run learns its rate only then.
            k = a.load_step_to / a.load
            r2 = f"{k:.10g}x" if calibrate else f"{rate * k:.3f}" if rate else "<load-step-to*capacity>"
            cmd += ["--load-step", f"{self.load_step_at():g}:{r2}"]
        if start_file:
            cmd += ["--start-file", start_file]
        cmd += shlex.split(a.hp_args)
        return [self._fake(cmd, "hp")]

    def load_step_at(self) -> float:
        """Seconds into HP's measured window of the load step (default: its middle)."""
        return self.a.load_step_at if self.a.load_step_at is not None else self.a.window / 2

    def be_cmd(self, spec: ModeSpec, ready_file: str, count: Optional[int] = None) -> List[str]:
        a = self.a
        js = self._file(spec.name, "be.json")
        if a.workload == "synthetic":
            n = count if count else 10_000_000
            return [self.synth_bin, "--name", "be", "--iters", str(a.synth_be_iters),
                    "--blocks-per-sm", str(a.synth_blocks_per_sm), "--block", "256", "--count", str(n),
                    "--gap-us", "0", "--mode", "closed", "--mem-mib", "256", "--json", js]
        if a.be in ("train", "ddp"):
            cmd = [self.py, os.path.join(HERE, "be_train.py"), "--params-m", str(a.be_params_m),
                   "--batch", str(a.be_batch), "--seq", str(a.be_seq), "--json", js,
                   "--ready-file", ready_file]
            if a.be == "ddp":
                cmd += ["--ddp-gpus", ",".join(str(g) for g in a.be_gpu_list)]
        else:
            cmd = [self.py, os.path.join(HERE, "be_infer.py"), "--params-b", str(a.params_b),
                   "--batch", str(a.be_infer_batch), "--prompt", str(a.be_infer_prompt),
                   "--gen", str(a.be_infer_gen), "--json", js, "--ready-file", ready_file]
        cmd += shlex.split(a.be_args)
        return self._fake(cmd, "be")

    def _fake(self, cmd: List[str], role: str) -> List[str]:
        """--fake: the same command with fake_tenant.py standing in for the torch workload."""
        if not self.a.fake or self.a.workload != "torch":
            return cmd
        return [cmd[0], os.path.join(HERE, "fake_tenant.py"), role] + cmd[2:]

    def synth_hp_ms(self) -> float:
        return self.a.synth_hp_iters * 1.03e-5   # PLATFORM.md: 125000 iters -> 1.29 ms

    def synth_be_ms(self) -> float:
        return self.a.synth_be_iters * 1.03e-5

    def synth_be_count(self) -> int:
        """exclusive-be (synthetic): kernels for about --be-window seconds alone."""
        return max(20, int(self.a.be_window * 1000.0 / self.synth_be_ms()))

    def socket_path(self, spec: ModeSpec) -> str:
        return self._file(spec.name, "sock")

    def gpuos_wrap(self, spec: ModeSpec, cmd: List[str], cls: str, name: str) -> List[str]:
        t = shlex.split(self.a.gpuos_run_args.format(cls=cls, name=name, socket=self.socket_path(spec)))
        extra = []
        if spec.budget is not None and cls == "guaranteed":
            extra += ["--max-slowdown", f"{spec.budget:g}"]  # the HP's declared latency budget
        if spec.gpuos_kind == "space":
            extra += ["--space", self.SPACE_DOMAIN]
            if cls == "guaranteed" and self.a.space_hp_sms > 0:
                extra += ["--sms", str(self.a.space_hp_sms)]
        if extra and t and t[0] == "run":
            t = t[:1] + extra + t[1:]
        return [self.gpuos_bin] + t + cmd

    def gpuos_daemon_cmd(self, spec: ModeSpec) -> List[str]:
        tmpl = self.a.gpuos_daemon_args
        if spec.policy != "open" or spec.gpuos_kind != "time":
            tmpl += " " + self.a.gpuos_policy_args
        t = tmpl.format(socket=self.socket_path(spec), policy=spec.policy, kind=spec.gpuos_kind)
        return [self.gpuos_bin] + shlex.split(t)

    SPACE_DOMAIN = "bench"

    def space_config(self, spec: ModeSpec) -> str:
        """gpuosd's config for a gpuos-space mode: the caller's GPUOS_CONFIG (if any) plus a
        [spatial] section with one domain for both tenants (MPS directories under a short /tmp path:
        MPS socket paths must stay under 108 bytes)."""
        self.space_mps_dir = tempfile.mkdtemp(prefix="gsm-", dir="/tmp")
        base = ""
        cfg = self.gpuos_config(spec)
        if cfg:
            with open(cfg) as f:
                base = f.read()
        if "[spatial]" in base:
            raise ModeError(f"{cfg} already has a [spatial] section; the harness adds its own")
        path = os.path.join(self.workdir, f"{spec.name}.gpuos.toml")
        with open(path, "w") as f:
            f.write(base + ("\n" if base and not base.endswith("\n") else "")
                    + f'[spatial]\nmps_dir = "{self.space_mps_dir}"\n'
                    + (f'mps_control = "{self.a.space_mps_control}"\n' if self.a.space_mps_control else "")
                    + (f"lend_after_ms = {self.a.space_lend_after_ms}\n" if self.a.space_lend_after_ms >= 0 else "")
                    + (f"lend_max_kernel_ms = {self.a.space_lend_max_kernel_ms}\n" if self.a.space_lend_max_kernel_ms > 0 else "")
                    + (f"be_reserve_groups = {self.a.space_be_reserve_groups}\n" if self.a.space_be_reserve_groups > 0 else "")
                    + f'[[spatial.domain]]\nname = "{self.SPACE_DOMAIN}"\n')
        return path

    def wait_space_domain(self, rec: dict, timeout_s: float = 20.0) -> None:
        status = os.path.join(self.space_mps_dir, self.SPACE_DOMAIN, "status")
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

    def hp_visible(self) -> Optional[str]:
        """HP's CUDA_VISIBLE_DEVICES under --hp-gpu (None: HP sees what the runner sees)."""
        if self.a.hp_gpu is None:
            return None
        return visible_device(self.a.hp_gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))

    def envs(self, spec: ModeSpec, mps_env: Optional[dict] = None):
        """(extra env for HP, extra env for BE) of a mode."""
        hp, be = {}, {}
        pin = self.hp_visible()
        if pin is not None:
            hp["CUDA_VISIBLE_DEVICES"] = pin
            if self.a.be != "ddp":
                be["CUDA_VISIBLE_DEVICES"] = pin  # a one-GPU BE shares HP's GPU; DDP picks its own
        if spec.mps:
            env = mps_env or Mps.env_for(self.workdir, spec.name)
            hp.update(env)
            be.update(env)
        be.update(spec.be_env)
        if spec.gpuos_kind:
            g = {"GPUOS_SOCKET": self.socket_path(spec), "GPUOS_ON_NO_DAEMON": "refuse"}
            if spec.variant is not None:
                g["GPUOS_CONFIG"] = self.gpuos_config(spec)
            hp.update(g)
            be.update(g)
        return hp, be

    # --- dry run ----------------------------------------------------------------------------

    def dry_run(self) -> int:
        a = self.a
        print(f"co-location matrix: workload={a.workload} be={a.be} load={a.load} out={self.out_dir()}")
        if a.workload == "torch":
            print(f"  HP: Llama ~{a.params_b}B bf16, prompt {a.prompt}, {a.out_tokens} output tokens, "
                  f"max batch {a.max_batch}, window {a.window}s (+{a.warmup}s warm-up), "
                  f"calibration {a.calibrate_s}s closed loop")
            if a.hp_gpu is not None:
                print(f"  HP pinned to GPU {a.hp_gpu} (CUDA_VISIBLE_DEVICES={self.hp_visible()})")
            if a.be == "ddp":
                print(f"  BE: GPT ~{a.be_params_m}M data-parallel train over GPUs "
                      f"{','.join(map(str, a.be_gpu_list))} (one process per GPU, NCCL, "
                      f"{' '.join(f'{k}={v}' for k, v in be_train.NCCL_ENV.items())}), batch "
                      f"{a.be_batch}x{a.be_seq} per rank, AdamW, bf16 autocast")
            elif a.be == "train":
                print(f"  BE: GPT ~{a.be_params_m}M train, batch {a.be_batch}x{a.be_seq}, AdamW, bf16 autocast")
            else:
                print(f"  BE: Llama ~{a.params_b}B offline inference, batch {a.be_infer_batch}, "
                      f"prompt {a.be_infer_prompt}, gen {a.be_infer_gen}")
        if a.load_step_to:
            print(f"  load step: HP from {a.load} to {a.load_step_to} of capacity, {self.load_step_at():g}s "
                  "into every HP window")
        print(f"  work dir (logs, per-process JSON): {self.workdir}")
        print()
        total = 0.0
        rows = []
        for i, s in enumerate(self.modes):
            note = ""
            if s.gpuos_kind and not os.path.exists(self.gpuos_bin):
                note = f"SKIPPED: {self.gpuos_bin} missing (~{self.estimate(s):.0f}s once built)"
                est = 0.0
            elif a.workload == "synthetic" and not os.path.exists(self.synth_bin):
                note = f"WILL FAIL: {self.synth_bin} missing"
                est = self.estimate(s)
            else:
                est = self.estimate(s) + (a.cold_start_s if i == 0 else 0.0)
                if total + est > a.budget_s:
                    note = f"OVER BUDGET: skipped unless --budget-s >= {total + est:.0f}"
            total += est
            rows.append((s.name, est, total, note))
        print(f"{'mode':<28}{'est s':>8}{'cum s':>8}  note")
        for n, e, c, note in rows:
            print(f"{n:<28}{e:>8.0f}{c:>8.0f}  {note}")
        print(f"{'total':<28}{total:>8.0f}        ({total / 60:.1f} min; budget {a.budget_s:.0f} s: a mode "
              f"whose estimate would pass the budget is skipped)")
        print()
        for s in self.modes:
            print(f"== {s.name}")
            hp_env, be_env = self.envs(s)
            ready = self._file(s.name, "be.ready") if s.hp and s.be else ""
            if s.mps or s.gpuos_kind == "space":
                print("  MPS: nvidia-cuda-mps-control -d  (pipe/log dirs private, stopped with 'quit' after the mode)")
            if s.gpuos_kind:
                print("  daemon: " + shlex.join(self.gpuos_daemon_cmd(s)))
            if s.be:
                n = None
                if a.workload == "synthetic" and s.name == "exclusive-be":
                    n = self.synth_be_count()
                cmd = self.be_cmd(s, self._file(s.name, "be.ready"), count=n)
                if s.gpuos_kind:
                    cmd = self.gpuos_wrap(s, cmd, "best-effort", "be")
                print("  BE: " + " ".join(f"{k}={v}" for k, v in be_env.items()) + (" " if be_env else "")
                      + shlex.join(cmd))
            if s.hp:
                for cmd in self.hp_cmd(s, s.name == "exclusive-hp" and not self.hp_rate, self.hp_rate,
                                       ready if a.workload == "torch" else ""):
                    if s.gpuos_kind:
                        cmd = self.gpuos_wrap(s, cmd, "guaranteed", "hp")
                    print("  HP: " + " ".join(f"{k}={v}" for k, v in hp_env.items()) + (" " if hp_env else "")
                          + shlex.join(cmd))
            if a.workload == "synthetic":
                if s.name == "exclusive-be":
                    print(f"  BE runs a count sized for ~{a.be_window}s; rate = its kernels / wall_s")
                elif s.hp and s.be:
                    print(f"  BE starts {a.synth_be_lead_s}s ahead of HP; after HP exits BE gets SIGTERM "
                          "(gpuos-synth must write its JSON on SIGTERM)")
            elif s.name == "exclusive-be":
                print(f"  BE measured over {a.be_window}s after its ready file appears, then SIGTERM")
            elif s.hp and s.be:
                print("  BE starts first; HP starts its window when BE is warm; BE rate = over HP's window; "
                      "then BE gets SIGTERM")
        return 0

    # --- run ----------------------------------------------------------------------------------

    def out_dir(self) -> str:
        if self.a.out:
            return self.a.out
        date = _dt.date.today().isoformat()
        return os.path.join(REPO, "bench", "results", f"{date}-{self.a.label}")

    def start(self, name: str, cmd: List[str], extra_env: dict) -> Proc:
        env = dict(os.environ)
        env.update(extra_env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        p = Proc(name, cmd, env, os.path.join(self.workdir, f"{name}.log"))
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

    def gpu_info(self) -> dict:
        """The first GPU's name and driver, and the node's GPUs (nvidia-smi: every GPU of the node,
        whatever CUDA_VISIBLE_DEVICES says)."""
        info = {"name": None, "driver_version": None, "count": None, "gpus": []}
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=index,name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20)
            gpus = parse_gpu_list(r.stdout)
            if gpus:
                info = {"name": gpus[0]["name"], "driver_version": gpus[0]["driver_version"],
                        "count": len(gpus), "gpus": gpus}
            else:
                info["error"] = (r.stdout + r.stderr).strip()[:300]
        except (OSError, subprocess.SubprocessError) as e:
            info["error"] = str(e)
        return info

    def gpus_used(self) -> List[int]:
        """GPU indices (as CUDA numbers them for the runner) that HP and BE use."""
        hp = 0 if self.a.hp_gpu is None else self.a.hp_gpu
        return sorted({hp, *self.a.be_gpu_list}) if self.a.be == "ddp" else [hp]

    def run(self) -> int:
        a = self.a
        out = self.out_dir()
        os.makedirs(out, exist_ok=True)
        self.meta = {
            "date": _dt.datetime.now().isoformat(timespec="seconds"),
            "label": a.label, "load": a.load, "workload": a.workload, "be": a.be,
            "gpu": self.gpu_info(), "argv": sys.argv[1:], "workdir": self.workdir,
            "hp_gpu": a.hp_gpu, "be_gpus": a.be_gpu_list if a.be == "ddp" else None,
            "gpus_used": self.gpus_used(),
            "min_requests": a.min_requests, "budget_s": a.budget_s,
            "load_step": ({"to": a.load_step_to, "at_s": self.load_step_at()} if a.load_step_to else None),
            "modes_planned": [s.name for s in self.modes],
            "commit": common.commit_of(REPO),
            "config": {"variants": self.variant_configs, "gpuos_config": os.environ.get("GPUOS_CONFIG") or None,
                       "sha256": common.files_sha256([*self.variant_configs.values(),
                                                      *([os.environ["GPUOS_CONFIG"]] if os.environ.get("GPUOS_CONFIG") else [])])},
        }
        self.meta["gpu_count"] = self.meta["gpu"].get("count")
        print(f"[run] GPU {self.meta['gpu']}; out {out}; workdir {self.workdir}", flush=True)
        try:
            for i, spec in enumerate(self.modes):
                est = self.estimate(spec) + (a.cold_start_s if i == 0 else 0.0)
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
                     "estimate_s": self.estimate(spec)}
        t0 = time.monotonic()
        print(f"[run] === {spec.name} (estimate {rec['estimate_s']:.0f}s)", flush=True)
        sampler = gpu_state.Sampler(self._file(spec.name, "gpu-state.csv"), self.a.gpu_sample_ms,
                                    gpu_index=self.hp_visible() or 0)  # HP's GPU
        sampler.start()
        try:
            if spec.gpuos_kind and not os.path.exists(self.gpuos_bin):
                rec["status"] = "skipped"
                rec["error"] = f"{self.gpuos_bin} not built"
                return rec
            if self.a.workload == "synthetic" and not os.path.exists(self.synth_bin):
                raise ModeError(f"{self.synth_bin} not built")
            if spec.hp and spec.name != "exclusive-hp" and not self.hp_rate:
                raise ModeError("no HP rate: exclusive-hp (calibration) did not produce one; "
                                "pass --hp-rate to run without it")
            mps_env = None
            if spec.mps:
                self.mps = Mps(self.workdir, spec.name)
                self.mps.start()
                mps_env = self.mps.env
            hp_env, be_env = self.envs(spec, mps_env)
            if spec.gpuos_kind == "space":
                # gpuosd starts and supervises the MPS control daemon of the domain the tenants join.
                cfg = self.space_config(spec)
                hp_env["GPUOS_CONFIG"] = be_env["GPUOS_CONFIG"] = cfg
            if spec.gpuos_kind:
                # gpuosd governs every GPU, not only HP's.
                self.start_daemon(spec, {k: v for k, v in hp_env.items() if k != "CUDA_VISIBLE_DEVICES"})
            if spec.gpuos_kind == "space":
                self.wait_space_domain(rec)
            if spec.name in ("exclusive-hp", AGAIN_MODE):
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
                    shutil.copyfile(p.log_path, self._file(spec.name, f"{p.name}.log"))
                except OSError:
                    pass
                if rec["status"] == "error" or (rc not in (0, None, -signal.SIGTERM)):
                    rec.setdefault("log_tails", {})[p.name] = p.tail()
            self.procs = []
            if self.daemon is not None:
                self.daemon.stop(grace_s=10)
                if rec["status"] == "error":
                    rec.setdefault("log_tails", {})["gpuos-daemon"] = self.daemon.tail()
                self.daemon = None
            if self.space_mps_dir:
                shutil.rmtree(self.space_mps_dir, ignore_errors=True)
                self.space_mps_dir = None
            if self.mps is not None:
                if rec["status"] == "error":
                    rec["mps_log_tail"] = self.mps.log_tail()
                err = self.mps.stop()
                if err:
                    rec["notes"].append(err)
                self.mps = None
            rec["wall_s"] = time.monotonic() - t0
        return rec

    def start_daemon(self, spec: ModeSpec, env: dict) -> None:
        sock = self.socket_path(spec)
        if os.path.exists(sock):
            os.unlink(sock)
        self.daemon = Proc("gpuos-daemon", self.gpuos_daemon_cmd(spec), dict(os.environ, **env),
                           os.path.join(self.workdir, f"{spec.name}.daemon.log"))
        print(f"[run] gpuos daemon pid {self.daemon.pid}: {shlex.join(self.daemon.cmd)}", flush=True)
        end = time.monotonic() + 15
        while time.monotonic() < end and not os.path.exists(sock):
            if self.daemon.poll() is not None:
                raise ModeError(f"gpuos daemon exited rc={self.daemon.poll()}: {self.daemon.tail(800)}")
            time.sleep(0.05)
        if not os.path.exists(sock):
            raise ModeError(f"gpuos daemon socket {sock} did not appear in 15 s")

    def gpuos_ps(self, spec: ModeSpec):
        cmd = [self.gpuos_bin] + shlex.split(self.a.gpuos_ps_args.format(socket=self.socket_path(spec)))
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=10,
                               env=dict(os.environ, GPUOS_SOCKET=self.socket_path(spec)))
            try:
                import json
                return json.loads(r.stdout)
            except ValueError:
                return {"rc": r.returncode, "output": (r.stdout + r.stderr)[-1500:]}
        except (OSError, subprocess.SubprocessError) as e:
            return {"error": str(e)}

    def _wrap(self, spec: ModeSpec, cmd: List[str], cls: str, name: str) -> List[str]:
        return self.gpuos_wrap(spec, cmd, cls, name) if spec.gpuos_kind else cmd

    def _hp_timeout(self, spec: ModeSpec) -> float:
        return self.estimate(spec) + self.a.drain_s + 90.0

    def _wait_hp(self, hp: Proc, be: Optional[Proc], spec: ModeSpec, rec: dict,
                 ready_file: str = "") -> None:
        """Wait for HP to exit; watch BE (a BE that dies before warm-up ends the mode)."""
        t_start = time.monotonic()
        deadline = t_start + self._hp_timeout(spec)
        ready_deadline = t_start + self.est_be_startup() + self.a.cold_start_s + 60.0
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

    # --- torch / synthetic result readers --------------------------------------------------------

    def _read_hp(self, spec: ModeSpec, rec: dict, hp: Proc) -> Optional[dict]:
        js = common.read_json(self._file(spec.name, "hp.json"))
        if js is None:
            raise ModeError(f"HP wrote no result (rc={hp.poll()}): {hp.tail(1500)}")
        if self.a.workload == "synthetic":
            js = self._synth_hp(js)
        rec["hp"] = js
        if js.get("error"):
            raise ModeError(f"HP failed: {js['error']}")
        if js.get("unfinished"):
            rec["notes"].append(f"HP could not keep up: {js['unfinished']} requests unfinished at the drain "
                                "deadline (counted in the e2e tail as censored)")
        if js.get("requests", 0) < self.a.min_requests:
            rec["notes"].append(f"only {js.get('requests')} HP requests (< {self.a.min_requests})")
        return js

    def _synth_hp(self, js: dict) -> dict:
        """gpuos-synth's JSON in hp_server's shape (latencies in ms; no TTFT/TPOT)."""
        def ms(k):
            v = js.get(k)
            return v / 1e3 if isinstance(v, (int, float)) else None
        return {
            "role": "hp", "ok": bool(js.get("verified", True)), "synth": js,
            "requests": js.get("kernels", 0), "unfinished": 0,
            "achieved_rps": js.get("throughput_per_s"),
            "e2e_ms": {"n": js.get("kernels", 0), "p50": ms("p50_us"), "p90": ms("p90_us"),
                       "p99": ms("p99_us"), "max": ms("max_us"), "mean": ms("mean_us")},
            "ttft_ms": common.stats([]), "tpot_ms": common.stats([]),
            "error": None if js.get("verified", True) else "synth kernels not verified",
        }

    def _read_be(self, spec: ModeSpec, rec: dict, t0: Optional[float], t1: Optional[float]) -> None:
        js = common.read_json(self._file(spec.name, "be.json"))
        if js is None:
            rec["notes"].append("BE wrote no result")
            return
        if self.a.workload == "synthetic":
            k, w = js.get("kernels"), js.get("wall_s")
            rate = k / w if k and w else js.get("throughput_per_s")
            rec["be"] = {"unit": "kernels/s", "synth": js}
            rec["be_rate"] = rate
            rec["be_unit"] = "kernels/s"
            return
        samples = js.pop("samples", [])
        rec["be"] = js
        rec["be_unit"] = js.get("unit")
        if js.get("error"):
            rec["notes"].append(f"BE error: {js['error']}")
        if t0 is not None and t1 is not None:
            r = common.rate_over(samples, t0, t1)
            if r is None and samples and samples[0][0] <= t0 < samples[-1][0] \
                    and samples[-1][0] - t0 >= 0.5 * (t1 - t0):
                # BE's last sample came before the window's end (it was stopped early): use what it covers.
                t1 = samples[-1][0]
                r = common.rate_over(samples, t0, t1)
                rec["notes"].append("BE progress ends before HP's window: rate over the covered part")
            rec["be_rate"] = r
            rec["be_window"] = [t0, t1]
            if r is None:
                rec["notes"].append("BE progress does not cover the measured window")

    # --- mode bodies -----------------------------------------------------------------------------

    def mode_exclusive_hp(self, spec: ModeSpec, rec: dict, hp_env: dict) -> None:
        a = self.a
        calibrate = not self.hp_rate
        if a.workload == "synthetic":
            cmds = self.hp_cmd(spec, calibrate, self.hp_rate, "")
            if calibrate:
                cal = self.start("hp-cal", self._wrap(spec, cmds[0], "guaranteed", "hp"), hp_env)
                if cal.wait(self._hp_timeout(spec)) is None:
                    raise ModeError("synthetic HP calibration timed out")
                cj = common.read_json(self._file(spec.name, "hp-cal.json")) or {}
                cap = cj.get("throughput_per_s")
                if not cap:
                    raise ModeError(f"synthetic calibration gave no throughput: {cal.tail(1000)}")
                self.capacity = cap
                self.hp_rate = a.load * cap
                rec["calibration"] = {"capacity_rps": cap, "synth": cj}
            cmd = self.hp_cmd(spec, False, self.hp_rate, "")[-1]
            hp = self.start("hp", self._wrap(spec, cmd, "guaranteed", "hp"), hp_env)
            self._wait_hp(hp, None, spec, rec)
            js = self._read_hp(spec, rec, hp)
            if self.capacity and js.get("achieved_rps"):
                rec["hp_busy_fraction"] = min(1.0, js["achieved_rps"] / self.capacity)
                rec["notes"].append("synthetic: busy fraction = achieved rate / closed-loop capacity")
            return
        cmd = self.hp_cmd(spec, calibrate, self.hp_rate, "")[0]
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
        ready = self._file(spec.name, "be.ready")
        if a.workload == "synthetic":
            n = self.synth_be_count()
            be = self.start("be", self._wrap(spec, self.be_cmd(spec, ready, count=n), "best-effort", "be"),
                            be_env)
            if be.wait(a.be_window * 3 + 60) is None:
                raise ModeError("synthetic BE did not finish")
            self._read_be(spec, rec, None, None)
        else:
            be = self.start("be", self._wrap(spec, self.be_cmd(spec, ready), "best-effort", "be"), be_env)
            end = time.monotonic() + self.est_be_startup() + a.cold_start_s + 120
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
            self._read_be(spec, rec, t0, t1)
        if rec.get("be_rate"):
            self.be_excl = rec["be_rate"]
        else:
            raise ModeError("BE throughput unavailable")

    def mode_colocated(self, spec: ModeSpec, rec: dict, hp_env: dict, be_env: dict) -> None:
        a = self.a
        ready = self._file(spec.name, "be.ready")
        be = self.start("be", self._wrap(spec, self.be_cmd(spec, ready), "best-effort", "be"), be_env)
        if a.workload == "synthetic":
            time.sleep(a.synth_be_lead_s)
            if be.poll() is not None:
                raise ModeError(f"synthetic BE exited rc={be.poll()}: {be.tail(1000)}")
            if self.mps is not None:
                rec["mps_server_list"] = self.mps.server_list()
            cmd = self.hp_cmd(spec, False, self.hp_rate, "")[-1]
        else:
            cmd = self.hp_cmd(spec, False, self.hp_rate, ready)[0]
            if a.hp_after_be_ready > 0:
                self._wait_be_ready(be, ready, a.hp_after_be_ready, rec)
        hp = self.start("hp", self._wrap(spec, cmd, "guaranteed", "hp"), hp_env)
        self._wait_hp(hp, be, spec, rec, ready if a.workload == "torch" else "")
        js = self._read_hp(spec, rec, hp)
        be.stop()
        win = js.get("window") or {}
        self._read_be(spec, rec, win.get("t0"), win.get("t1"))
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
        Runner.mode_names(args, check=True)
    except ValueError as e:
        ap.error(str(e))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    r = Runner(args)
    if args.dry_run:
        return r.dry_run()

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
        r.write(r.out_dir(), plots=False)
        return 130
    finally:
        r.cleanup()


if __name__ == "__main__":
    sys.exit(main())
