# SPDX-License-Identifier: Apache-2.0
"""run_matrix.py's planning: the modes asked for (names, order, time estimates), every process's command
line and environment, gpuosd's config of a mode, and the dry run's printout. Nothing here starts a
process (a Plan makes its work directory, and space_config writes a gpuos-space mode's config)."""
from __future__ import annotations

import datetime as _dt
import os
import shlex
import sys
import tempfile
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import be_train  # noqa: E402  (torch-free at import: its DDP launcher's helpers)
import common  # noqa: E402
import lengths  # noqa: E402
import llama_shapes  # noqa: E402

BASELINE_MODES = ["exclusive-hp", "exclusive-be", "time-slicing", "mps", "mps-be50"]
# Asked for by name only; runs after every other mode: HP alone again at the same rate, so drift
# over the run (a GPU warmed by the modes between) shows beside the first exclusive figure.
AGAIN_MODE = "exclusive-hp-again"
DEFAULT_GPUOS_MODES = ["gpuos-time-open"]
# --exclusive-repeats N: exclusive-hp-r2 .. exclusive-hp-rN (common.repeat_name) beside exclusive-hp.
is_repeat, repeat_name = common.is_repeat, common.repeat_name


def interleave(first: List[str], colocated: List[str], last: List[str], repeats: int) -> List[str]:
    """Mode order with `repeats` exclusive-hp runs: exclusive-hp first (then `first`, e.g.
    exclusive-be), the co-located modes with repeats 2 .. N-1 spread evenly between them, repeat N
    after the last co-located mode, then `last` (exclusive-hp-again). Repeat k (2 <= k < N) goes
    after (k - 1) x M / (N - 1) of the M co-located modes (rounded, halves up), so the N runs sample HP alone at
    even steps through the run."""
    out = ["exclusive-hp", *first]
    m = len(colocated)
    after = {k: int((k - 1) * m / (repeats - 1) + 0.5) for k in range(2, repeats)}  # halves round up
    for i in range(m + 1):
        out += [repeat_name(k) for k in range(2, repeats) if after[k] == i]
        if i < m:
            out.append(colocated[i])
    if repeats >= 2:
        out.append(repeat_name(repeats))
    return out + last


def paired_seeds(a) -> List[int]:
    """--paired-seeds as a list of seeds ([] without it)."""
    text = getattr(a, "paired_seeds", "") or ""
    return [int(x) for x in text.split(",") if x.strip()]


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



class ModeSpec:
    def __init__(self, name: str) -> None:
        self.name = name
        # +s<seed>: the mode replayed with that arrival seed (--paired-seeds, method v2); None: --seed.
        name, self.seed = common.split_seed(name)
        if self.seed is not None and (name == "exclusive-be" or is_repeat(name) or name == AGAIN_MODE):
            raise ValueError(f"bad mode {self.name!r}: a seed suffix goes on exclusive-hp and co-located modes")
        self.hp = name != "exclusive-be"
        # HP alone: exclusive-hp, its --exclusive-repeats runs, exclusive-hp-again.
        self.exclusive_hp = name in ("exclusive-hp", AGAIN_MODE) or is_repeat(name)
        self.be = not self.exclusive_hp
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
        elif name not in BASELINE_MODES and not self.exclusive_hp:
            raise ValueError(f"unknown mode {name!r}")



def mps_env_for(workdir: str, mode: str) -> Dict[str, str]:
    """A mode's private MPS pipe and log directories (the MPS clients' and the control daemon's)."""
    return {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(workdir, f"{mode}.mps-pipe"),
            "CUDA_MPS_LOG_DIRECTORY": os.path.join(workdir, f"{mode}.mps-log")}


class Plan:
    """What a matrix run will do, from its arguments alone: modes, estimates, commands, environments."""

    def __init__(self, args) -> None:
        self.a = args
        self.space_mps_dir: Optional[str] = None  # gpuos-space modes: the domain's MPS directories
        if args.dry_run:
            self.workdir = args.workdir or "/tmp/gpuos-coloc-XXXXXX"
        else:
            self.workdir = args.workdir or tempfile.mkdtemp(prefix="gpuos-coloc-")
            os.makedirs(self.workdir, exist_ok=True)
        self.modes = self._modes()
        self.variant_configs = self.variants(args)  # --variant, checked by parse_args
        self.py = args.python
        self.gpuos_bin = os.path.abspath(args.gpuos_bin)
        self.synth_bin = os.path.abspath(args.synth_bin)

    @staticmethod
    def mode_names(a, check: bool = False) -> List[str]:
        """Mode names asked for by --modes and --gpuos; check: ValueError for a bad one."""
        names = [m for m in a.modes.split(",") if m] if a.modes else list(BASELINE_MODES)
        if a.gpuos and a.gpuos != "none":
            names += [m for m in a.gpuos.split(",") if m and m not in names]
        if check:
            variants = Plan.variants(a)
            for n in names:
                if is_repeat(n):
                    raise ValueError(f"mode {n!r}: the exclusive-hp repeats come from --exclusive-repeats")
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
        seeds = paired_seeds(self.a)
        if seeds:
            # Method v2 (checked by parse_args: exclusive-hp and exclusive-be among the modes, one
            # exclusive run): exclusive-hp (capacity) and exclusive-be first, then per seed s HP alone
            # with seed s (its calibration replay first) and every co-located mode with seed s, back
            # to back; exclusive-hp-again last.
            names = [s.name for s in specs]
            head = [x for x in names if x in ("exclusive-hp", "exclusive-be")]
            colocated = [x for x in names if x not in ("exclusive-hp", "exclusive-be", AGAIN_MODE)]
            order = list(head)
            for sd in seeds:
                order += [common.seed_name("exclusive-hp", sd)] + [common.seed_name(c, sd) for c in colocated]
            order += [x for x in names if x == AGAIN_MODE]
            return [ModeSpec(x) for x in order]
        n = getattr(self.a, "exclusive_repeats", 1)
        if n <= 1:
            return specs
        # Checked by parse_args: exclusive-hp is among the modes.
        names = [s.name for s in specs]
        first = [x for x in names if x == "exclusive-be"]
        last = [x for x in names if x == AGAIN_MODE]
        colocated = [x for x in names if x not in ("exclusive-hp", "exclusive-be", AGAIN_MODE)]
        by_name = {s.name: s for s in specs}
        return [by_name.get(x) or ModeSpec(x) for x in interleave(first, colocated, last, n)]

    def est_hp_startup(self) -> float:
        if self.a.workload == "synthetic":
            return 1.5
        # Drawn lengths: a graph per length bucket too (57 against 10), and their warm-ups.
        more = 0.0 if self.lengths().fixed else 4.0 + 1.0 * self.a.params_b
        return 14.0 + 1.5 * self.a.params_b + self.a.warmup + more

    def lengths(self) -> "lengths.Lengths":
        """HP's request lengths (hp_server.py's defaults for the drawn ones' bounds)."""
        return lengths.Lengths(getattr(self.a, "lengths", "fixed"), self.a.prompt, self.a.out_tokens)

    def hp_memory(self) -> dict:
        """HP's device memory by its shapes (GiB): weights and KV cache (max_batch + 8 slots of the
        whole context), bf16; activations and the graph pool not counted."""
        cfg = llama_shapes.config_for_params(self.a.params_b)
        ln = self.lengths()
        slots = self.a.max_batch + 8  # hp_server's default prefill buckets end at 8
        weights = cfg["params"] * 2 / 2**30
        kv = lengths.kv_gib(cfg, slots, ln.context())
        return {"weights": weights, "kv": kv, "slots": slots, "context": ln.context(), "total": weights + kv}

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
        if spec.exclusive_hp:
            cal = 0.0 if self.a.hp_rate or spec.name != "exclusive-hp" else a.calibrate_s
            cal += self.calib_replay_s(spec) * 1.2  # the pair's calibration replay, and its drain
            return self.est_hp_startup() + cal + a.window + 4.0
        if spec.name == "exclusive-be":
            return self.est_be_startup() + a.be_window + 3.0 + extra
        start = max(self.est_be_startup() + 1.0, 1.3 * self.est_hp_startup())
        return start + a.window + 2.0 + 3.0 + extra


    # --- commands ---------------------------------------------------------------------------

    def _file(self, mode: str, what: str) -> str:
        return os.path.join(self.workdir, f"{mode}.{what}")

    def calib_replay_s(self, spec: ModeSpec) -> float:
        """Seconds of the calibration replay before HP's window: a pair's alone run (method v2's
        outlier signal, --pair-calibrate-s), else none."""
        if spec.seed is None or not spec.exclusive_hp or self.a.workload != "torch":
            return 0.0
        return float(getattr(self.a, "pair_calibrate_s", 0.0) or 0.0)

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
               "--lengths", a.lengths, "--seed", str(a.seed if spec.seed is None else spec.seed),
               "--max-batch", str(a.max_batch), "--duration", str(a.window),
               "--warmup", str(a.warmup), "--drain-s", str(a.drain_s), "--json", js]
        if calibrate:
            cmd += ["--calibrate-load", str(a.load), "--calibrate-s", str(a.calibrate_s)]
        else:
            cmd += ["--rate", rate_s]
        if self.calib_replay_s(spec) > 0:
            cmd += ["--calib-replay-s", f"{self.calib_replay_s(spec):g}"]
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
            env = mps_env or mps_env_for(self.workdir, spec.name)
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

    DEVICE_CALL_S = 600  # the most one call to the GPU machine may run

    def dry_run(self) -> int:
        a = self.a
        print(f"co-location matrix: workload={a.workload} be={a.be} load={a.load} out={self.out_dir()}")
        if a.workload == "torch":
            ln = self.lengths()
            shape = (f"prompt {a.prompt}, {a.out_tokens} output tokens" if ln.fixed else
                     f"lengths {a.lengths} (Azure LLM trace 2023; prompts up to {ln.max_prompt}, outputs up "
                     f"to {ln.max_out})")
            mem = self.hp_memory()
            print(f"  HP: Llama ~{a.params_b}B bf16, {shape}, arrival seed {a.seed}, "
                  f"max batch {a.max_batch}, window {a.window}s (+{a.warmup}s warm-up), "
                  f"calibration {a.calibrate_s}s closed loop")
            print(f"  HP memory ~{mem['total']:.1f} GiB: weights {mem['weights']:.1f} + KV cache {mem['kv']:.1f} "
                  f"({mem['slots']} slots x {mem['context']} tokens), before activations and graphs")
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
        seeds = paired_seeds(a)
        if seeds:
            m = len([x for x in self.modes if x.seed == seeds[0] and not x.exclusive_hp])
            print(f"  method v2: {len(seeds)} paired seed(s) {','.join(map(str, seeds))}: per seed HP alone "
                  f"(a {getattr(a, 'pair_calibrate_s', 0):g} s calibration replay first, the outlier signal) then "
                  f"{m} co-located mode(s), back to back; "
                  + (f"headline claims (>= {common.V2_MIN_PAIRS} pairs per mode)" if len(seeds) >= common.V2_MIN_PAIRS
                     else f"fewer than {common.V2_MIN_PAIRS} pairs: a point check"))
        n = a.exclusive_repeats
        by_method = n >= common.METHOD_MIN_EXCLUSIVE_RUNS and a.window >= common.METHOD_MIN_WINDOW_S
        print(f"  HP alone measured {n} time(s), interleaved; window {a.window:g} s: "
              + ("by issue #40's method" if by_method else
                 f"not by issue #40's method (>= {common.METHOD_MIN_EXCLUSIVE_RUNS} exclusive runs, "
                 f"window >= {common.METHOD_MIN_WINDOW_S:g} s)"))
        print()
        total = unbuilt = 0.0
        rows = []
        for i, s in enumerate(self.modes):
            note = ""
            if s.gpuos_kind and not os.path.exists(self.gpuos_bin):
                note = f"SKIPPED: {self.gpuos_bin} missing (~{self.estimate(s):.0f}s once built)"
                unbuilt += self.estimate(s)
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
        if unbuilt:
            print(f"{'total once built':<28}{total + unbuilt:>8.0f}        ({(total + unbuilt) / 60:.1f} min, "
                  "with the gpuos modes skipped here)")
        if total + unbuilt > self.DEVICE_CALL_S:
            print(f"  longer than one device call ({self.DEVICE_CALL_S} s): run it detached "
                  "(gpu/slo_frontier.sh, gpu/budget_runs.sh: a first call starts it, later ones collect it)")
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
                for cmd in self.hp_cmd(s, s.name == "exclusive-hp" and not (self.a.hp_rate or None), (self.a.hp_rate or None),
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

    def out_dir(self) -> str:
        if self.a.out:
            return self.a.out
        date = _dt.date.today().isoformat()
        return os.path.join(REPO, "bench", "results", f"{date}-{self.a.label}")


    def gpus_used(self) -> List[int]:
        """GPU indices (as CUDA numbers them for the runner) that HP and BE use."""
        hp = 0 if self.a.hp_gpu is None else self.a.hp_gpu
        return sorted({hp, *self.a.be_gpu_list}) if self.a.be == "ddp" else [hp]

