#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Issue #24's scenario: several LLM servers on one GPU, static KV splits vs gpuos-elastic KV.

Three Llama-shaped servers (1B, 3B and 8B shapes, llama.config_for_params) run as separate
processes (paged_server.py) under bursty ON/OFF Poisson load whose ON windows follow one another
(server i has phase i/n and ON fraction 1/n: anti-correlated). Modes:

  static-<split>   every server has a fixed KV pool (--kv static); the KV memory is split
                   `equal`, by `params` (model size), or by explicit weights `a:b:c` (skewed).
                   No gpuos. The best split by TTFT p99 is what a careful operator would pick.
  gpuos-elastic    gpuosd (started here, [memory] swap_pool set) and every server under
                   `gpuos run --mem <weights + overhead + its equal KV share> --borrow <the rest of
                   the KV memory>` with --kv gpuos --kv-max-gib <all the KV memory>: a server in
                   its ON window borrows what idle peers gave back; when a peer needs its share,
                   gpuosd sets the borrower a target and it preempts requests and unmaps pages.

Memory arithmetic (H200, about 140 GiB; defaults P = 1024 prompt + T = 256 output tokens,
1280 tokens per sequence; bf16; blocks of one 2 MiB page, kv_logic.sequence_bytes):
  model  layers  KV/token  block tokens  KV per sequence  weights
  1B     19       38 KiB       53           50 MiB          1.8 GiB
  3B     28      112 KiB       18          144 MiB          5.6 GiB
  8B     35      140 KiB       14          184 MiB         14.7 GiB
  Weights 22 GiB + 3 x 4 GiB activations/workspace (--overhead-gib) + 3 CUDA contexts (~1.5 GiB)
  + KV 24 GiB (--kv-total-gib) = ~60 GiB: the rest of the GPU stays unused on purpose, so that KV
  memory, not compute, limits the batch. At about 100 sequences in flight during its ON window
  (--on-rates, about 100 / request seconds), a server wants 5 (1B), 14 (3B) or 18 (8B) GiB of KV:
  37 GiB if all peaked at once, more than the 24 GiB there are, so no static split serves every
  peak (equal: 8 GiB each = 163 / 56 / 44 sequences), while one ON server at a time fits in the
  whole 24 GiB. --max-batch 128 is above those concurrencies, so the batch is KV-bound.
  The ON rates are estimates (request time = T decode steps of roughly 15 / 25 / 35 ms in eager
  mode with three servers on the GPU); check each server's kv_blocked_steps and max_kv_gib_used in
  the output and scale with --rate-scale.

Output: <out>/summary.json, summary.md, raw.json (every server's JSON, gpuos ps, logs' tails);
default <out> = bench/results/<date>-kv-<label>/.
  --dry-run   the plan, the memory arithmetic and a time estimate (nothing started)
  --quick     a smoke run: shorter sequences and windows, static-equal and gpuos-elastic (~3 min)
  --budget-s  a mode whose estimate would end past this is skipped (recorded)
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "colocation"))
import common  # noqa: E402
import kv_logic  # noqa: E402
import kv_summary  # noqa: E402
import readers  # noqa: E402  (bench/colocation's: the node's GPUs)
import llama_shapes  # noqa: E402

GIB = kv_logic.GIB
GPU_GIB = 140.0
CONTEXT_GIB = 0.5


# ---------------------------------------------------------------------------------------------
# The plan (pure: tested without a GPU)

def parse_split(name: str, params: List[float]) -> List[float]:
    """Weights of a split: equal, params (by model size), or a:b:c (one number per server)."""
    if name == "equal":
        return [1.0] * len(params)
    if name == "params":
        return list(params)
    parts = name.split(":")
    try:
        w = [float(x) for x in parts]
    except ValueError:
        raise ValueError(f"bad split {name!r}: equal, params or weights a:b:c") from None
    if len(w) != len(params) or any(x <= 0 for x in w):
        raise ValueError(f"split {name!r} needs {len(params)} positive weights")
    return w


def split_gib(total_gib: float, weights: List[float]) -> List[float]:
    s = sum(weights)
    return [total_gib * w / s for w in weights]


def mode_names(splits: List[str], elastic: bool) -> List[str]:
    return [kv_summary.STATIC_PREFIX + s for s in splits] + ([kv_summary.ELASTIC_MODE] if elastic else [])


def server_plan(a) -> List[dict]:
    """One dict per server: name, params_b, cfg, weights_gib, seq geometry, on_rate, phase."""
    params = [float(x) for x in a.models.split(",") if x]
    rates = [float(x) for x in a.on_rates.split(",") if x]
    if len(rates) != len(params):
        raise ValueError(f"--on-rates needs one rate per model ({len(params)})")
    n = len(params)
    out = []
    for i, (p, r) in enumerate(zip(params, rates)):
        cfg = llama_shapes.config_for_params(p)
        seq = kv_logic.sequence_bytes(cfg, a.prompt + a.out_tokens)
        out.append({"name": f"m{i}-{p:g}b", "params_b": p, "cfg": cfg, "weights_gib": cfg["params"] * 2 / GIB,
                    "seq": seq, "on_rate": r * a.rate_scale, "off_rate": r * a.rate_scale * a.off_ratio,
                    "phase": i / n, "on_fraction": 1.0 / n})
    return out


def kv_split(a, servers: List[dict], mode: str) -> List[float]:
    """KV GiB per server in a static mode; in gpuos-elastic each server's guaranteed share."""
    if mode == kv_summary.ELASTIC_MODE:
        return split_gib(a.kv_total_gib, [1.0] * len(servers))
    name = mode[len(kv_summary.STATIC_PREFIX):]
    return split_gib(a.kv_total_gib, parse_split(name, [s["params_b"] for s in servers]))


def elastic_quota(a, s: dict, guaranteed_kv_gib: float) -> dict:
    """gpuos run --mem (guaranteed) and --borrow for one server in gpuos-elastic."""
    mem = s["weights_gib"] + a.overhead_gib + guaranteed_kv_gib
    borrow = a.kv_total_gib - guaranteed_kv_gib
    return {"mem_gib": mem, "borrow_gib": borrow}


def memory_table(a, servers: List[dict]) -> dict:
    rows = []
    for s in servers:
        q = s["seq"]
        rows.append({"server": s["name"], "layers": s["cfg"]["layers"], "kv_bytes_per_token": q["bytes_per_token"],
                     "block_tokens": q["block_tokens"], "kv_mib_per_seq": q["bytes_per_seq"] / 2**20,
                     "weights_gib": s["weights_gib"]})
    total = (sum(s["weights_gib"] for s in servers) + len(servers) * (a.overhead_gib + CONTEXT_GIB)
             + a.kv_total_gib)
    return {"rows": rows, "total_gib": total, "gpu_gib": GPU_GIB, "fits": total <= GPU_GIB - 2.0}


def estimate_mode_s(a) -> float:
    return a.startup_s + a.duration + a.drain_s + 20.0


def plan_text(a, servers: List[dict], modes: List[str]) -> str:
    mt = memory_table(a, servers)
    lines = [f"servers (P={a.prompt}, T={a.out_tokens}, max batch {a.max_batch}, KV total {a.kv_total_gib:g} GiB):"]
    for s, r in zip(servers, mt["rows"]):
        lines.append(f"  {s['name']}: {s['cfg']['params'] / 1e9:.2f}B, {r['layers']} layers, "
                     f"{r['kv_bytes_per_token'] / 1024:.0f} KiB/token, blocks of {r['block_tokens']} tokens, "
                     f"{r['kv_mib_per_seq']:.0f} MiB/sequence, weights {r['weights_gib']:.1f} GiB, "
                     f"ON {s['on_rate']:.1f}/s OFF {s['off_rate']:.2f}/s phase {s['phase']:.2f}")
    lines.append(f"memory: {mt['total_gib']:.1f} GiB of ~{GPU_GIB:g} ({'fits' if mt['fits'] else 'DOES NOT FIT'})")
    t = 0.0
    for m in modes:
        kv = kv_split(a, servers, m)
        est = estimate_mode_s(a)
        t += est
        over = " OVER BUDGET (skipped)" if t > a.budget_s else ""
        per = ", ".join(f"{s['name']} {g:.1f} GiB ({int(g * GIB // s['seq']['bytes_per_seq'])} seqs)"
                        for s, g in zip(servers, kv))
        if m == kv_summary.ELASTIC_MODE:
            q = [elastic_quota(a, s, g) for s, g in zip(servers, kv)]
            per += "; gpuos run " + ", ".join(f"--mem {x['mem_gib']:.1f}GiB --borrow {x['borrow_gib']:.1f}GiB" for x in q)
        lines.append(f"  {m}: ~{est:.0f} s{over}: {per}")
    lines.append(f"estimate: {t:.0f} s ({t / 60:.1f} min), budget {a.budget_s:.0f} s")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Running

MIB = 1 << 20
BALLAST_CONTEXT_MIB = 600   # the ballast's own CUDA context and module


def gpu_free_mib() -> Optional[int]:
    """Free memory of the first visible GPU, as nvidia-smi reports it."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", "0"],
                           capture_output=True, text=True, timeout=20)
        return int(r.stdout.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def gib_arg(g: float) -> str:
    """A size for gpuos run: whole MiB."""
    return f"{max(1, int(round(g * 1024)))}MiB"


class Runner:
    def __init__(self, a) -> None:
        self.a = a
        self.servers = server_plan(a)
        self.modes = mode_names([s for s in a.splits.split(",") if s], not a.no_elastic)
        for m in self.modes:
            kv_split(a, self.servers, m)       # validates the split names
        self.gpuos_bin = os.path.join(REPO, "build", "bin", "gpuos")
        self.procs = []
        self.daemon = None
        self.ballast = None
        self.t0 = time.monotonic()

    def out_dir(self) -> str:
        if self.a.out:
            return self.a.out
        return os.path.join(REPO, "bench", "results", f"{_dt.date.today().isoformat()}-kv-{self.a.label}")

    def server_cmd(self, s: dict, mode: str, kv_gib: float, wd: str) -> List[str]:
        a = self.a
        cmd = [sys.executable, os.path.join(HERE, "paged_server.py"), "--name", s["name"],
               "--params-b", f"{s['params_b']:g}", "--prompt", str(a.prompt), "--out-tokens", str(a.out_tokens),
               "--max-batch", str(a.max_batch), "--max-prefill", str(a.max_prefill),
               "--on-rate", f"{s['on_rate']:g}", "--off-rate", f"{s['off_rate']:g}",
               "--period-s", f"{a.period_s:g}", "--phase", f"{s['phase']:g}",
               "--on-fraction", f"{s['on_fraction']:g}", "--duration", f"{a.duration:g}",
               "--drain-s", f"{a.drain_s:g}", "--seed", str(a.seed), "--check", str(a.check),
               "--ready-file", os.path.join(wd, f"{s['name']}.ready"),
               "--start-file", os.path.join(wd, "start"),
               "--json", os.path.join(wd, f"{s['name']}.json")]
        if mode == kv_summary.ELASTIC_MODE:
            cmd += ["--kv", "gpuos", "--kv-max-gib", f"{a.kv_total_gib:g}",
                    "--low-watermark-gib", f"{a.low_watermark_gib:g}", "--idle-s", f"{a.idle_s:g}"]
            q = elastic_quota(a, s, kv_gib)
            run = shlex.split(a.gpuos_run_args.format(name=s["name"], mem=gib_arg(q["mem_gib"]),
                                                      borrow=gib_arg(q["borrow_gib"]), socket=self.socket(wd)))
            cmd = [self.gpuos_bin] + run + cmd
        else:
            cmd += ["--kv", "static", "--kv-gib", f"{kv_gib:g}"]
        return cmd + shlex.split(a.server_args)

    @staticmethod
    def workdir(out: str, mode: str) -> str:
        return os.path.join(out, "work", mode.replace(":", "-"))

    @staticmethod
    def socket(wd: str) -> str:
        return os.path.join(wd, "gpuosd.sock")

    def daemon_config(self, wd: str) -> str:
        base = ""
        if os.environ.get("GPUOS_CONFIG"):
            with open(os.environ["GPUOS_CONFIG"]) as f:
                base = f.read()
        if "[memory]" in base:
            raise RuntimeError("GPUOS_CONFIG already has a [memory] section; the runner adds its own")
        path = os.path.join(wd, "gpuos.toml")
        with open(path, "w") as f:
            f.write(base + ("\n" if base and not base.endswith("\n") else "")
                    + f'[memory]\nswap_pool = "{self.a.swap_pool}"\n')
        return path

    def start(self, name: str, cmd: List[str], env: dict, wd: str):
        import run_matrix
        e = dict(os.environ)
        e.update(env)
        e.setdefault("PYTHONUNBUFFERED", "1")
        p = run_matrix.Proc(name, cmd, e, os.path.join(wd, f"{name}.log"))
        print(f"[kv] {name}: pid {p.pid}: {shlex.join(cmd)}", flush=True)
        return p

    def fill_gpu(self, wd: str) -> dict:
        """Makes the elastic servers' GPU as small as the static modes' KV budget: a guaranteed
        ballast tenant takes what is free beyond the KV the servers have yet to map (kv_total -
        their resident KV) and --activation-reserve-gib each for their activations to grow. Else the
        elastic servers would borrow from the GPU's unused memory (on an H200 ~95 GiB beyond the
        scenario's) and compare more KV against the static splits."""
        a = self.a
        free_mib = gpu_free_mib()
        if free_mib is None:
            raise RuntimeError("nvidia-smi gave no free memory: cannot size the ballast")
        ps = self.gpuos_ps(wd)
        resident = sum(t.get("kv_resident_bytes", 0) for t in ps.get("tenants", []) if t.get("state") != "exited")
        ballast = kv_logic.ballast_mib(free_mib, int(a.kv_total_gib * GIB), resident, len(self.servers),
                                       int(a.activation_reserve_gib * 1024), BALLAST_CONTEXT_MIB)
        rec = {"free_mib_before": free_mib, "servers_kv_resident_mib": resident // MIB, "ballast_mib": ballast}
        if ballast < 1024:
            return rec
        probe = os.path.join(os.path.dirname(self.gpuos_bin), "gpuos-kv-probe")
        out = os.path.join(wd, "ballast.jsonl")
        cmd = [self.gpuos_bin, "run", "--name", "ballast", "--class", "guaranteed", "--mem", f"{ballast + 1024}MiB",
               "--socket", self.socket(wd), "--", probe, "--grow-mib", str(ballast),
               "--hold-until", os.path.join(wd, "ballast.stop")]
        print(f"[kv] ballast: {shlex.join(cmd)}", flush=True)
        with open(out, "w") as so, open(os.path.join(wd, "ballast.log"), "w") as se:  # the child keeps its copies
            self.ballast = subprocess.Popen(cmd, stdout=so, stderr=se, start_new_session=True)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            with open(out) as f:
                if "grown" in f.read():
                    break
            if self.ballast.poll() is not None:
                raise RuntimeError(f"the ballast exited ({self.ballast.returncode}) before it grew")
            time.sleep(0.2)
        else:
            raise RuntimeError("the ballast did not grow in 120 s")
        rec["free_mib_after"] = gpu_free_mib()
        print(f"[kv] ballast {ballast} MiB: free {free_mib} -> {rec['free_mib_after']} MiB", flush=True)
        return rec

    def stop_ballast(self, wd: str) -> None:
        if self.ballast is None:
            return
        open(os.path.join(wd, "ballast.stop"), "w").close()
        try:
            self.ballast.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.ballast.pid, 9)
            self.ballast.wait()
        self.ballast = None

    def cleanup(self) -> None:
        for p in self.procs:
            p.stop(grace_s=10)
        self.procs = []
        if self.daemon is not None:
            self.daemon.stop(grace_s=10)
            self.daemon = None

    def gpuos_ps(self, wd: str):
        try:
            r = subprocess.run([self.gpuos_bin, "ps", "--json", "--all", "--socket", self.socket(wd)],
                               capture_output=True, text=True, timeout=10)
            return json.loads(r.stdout)
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            return {"error": str(e)}

    def run_mode(self, mode: str, out: str) -> dict:
        a = self.a
        wd = self.workdir(out, mode)
        shutil.rmtree(wd, ignore_errors=True)
        os.makedirs(wd)
        kv = kv_split(a, self.servers, mode)
        rec = {"mode": mode, "kv_gib": {s["name"]: g for s, g in zip(self.servers, kv)}, "servers": {},
               "raw": {}, "logs": {}}
        env = {}
        try:
            if mode == kv_summary.ELASTIC_MODE:
                if not os.access(self.gpuos_bin, os.X_OK):
                    raise RuntimeError(f"{self.gpuos_bin} is not built")
                cfg = self.daemon_config(wd)
                sock = self.socket(wd)
                self.daemon = self.start("gpuosd", [self.gpuos_bin] + shlex.split(
                    a.gpuos_daemon_args.format(socket=sock, config=cfg)), {}, wd)
                end = time.monotonic() + 15
                while time.monotonic() < end and not os.path.exists(sock):
                    if self.daemon.poll() is not None:
                        raise RuntimeError(f"gpuosd exited: {self.daemon.tail(800)}")
                    time.sleep(0.05)
                if not os.path.exists(sock):
                    raise RuntimeError("gpuosd's socket did not appear in 15 s")
                env = {"GPUOS_SOCKET": sock, "GPUOS_ON_NO_DAEMON": "refuse"}
            for s, g in zip(self.servers, kv):
                self.procs.append(self.start(s["name"], self.server_cmd(s, mode, g, wd), env, wd))
            # Every server warm, then one common start time (the ON/OFF phases line up).
            end = time.monotonic() + a.startup_timeout_s
            while True:
                ready = [os.path.exists(os.path.join(wd, f"{s['name']}.ready")) for s in self.servers]
                if all(ready):
                    break
                dead = [p.name for p in self.procs if p.poll() is not None]
                if dead:
                    raise RuntimeError(f"exited before ready: {', '.join(dead)}")
                if time.monotonic() > end:
                    raise RuntimeError(f"servers not ready after {a.startup_timeout_s:.0f} s")
                time.sleep(0.2)
            if mode == kv_summary.ELASTIC_MODE and not a.no_ballast:
                rec["ballast"] = self.fill_gpu(wd)
            tmp = os.path.join(wd, "start.tmp")
            with open(tmp, "w") as f:
                f.write(f"{time.time() + 2.0:.6f}\n")
            os.replace(tmp, os.path.join(wd, "start"))
            limit = time.monotonic() + 2.0 + a.duration + a.drain_s + 120.0
            for p in self.procs:
                if p.wait(max(1.0, limit - time.monotonic())) is None:
                    rec.setdefault("notes", []).append(f"{p.name} did not finish in time; stopped")
            if mode == kv_summary.ELASTIC_MODE:
                rec["gpuos_ps"] = self.gpuos_ps(wd)
        except Exception as e:  # noqa: BLE001 - record and go on with the next mode
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc()[-2000:]
        finally:
            for p in self.procs:
                rec["logs"][p.name] = p.tail(1500)
            self.stop_ballast(wd)
            self.cleanup()
        for s in self.servers:
            js = common.read_json(os.path.join(wd, f"{s['name']}.json"))
            rec["raw"][s["name"]] = js
            rec["servers"][s["name"]] = kv_summary.server_metrics(js)
        return rec

    def write(self, out: str, modes: Dict[str, dict], meta: dict) -> dict:
        slim = {m: {k: v for k, v in r.items() if k not in ("raw", "logs", "traceback")} for m, r in modes.items()}
        summary = kv_summary.summarize(slim, meta)
        common.write_json_atomic(os.path.join(out, "summary.json"), summary)
        with open(os.path.join(out, "summary.md"), "w") as f:
            f.write(kv_summary.markdown(summary))
        common.write_json_atomic(os.path.join(out, "raw.json"), modes)
        return summary

    def run(self) -> int:
        a = self.a
        out = self.out_dir()
        os.makedirs(out, exist_ok=True)
        gpu = readers.gpu_info()
        settings = {k: v for k, v in vars(a).items() if k != "dry_run"}
        meta = {"date": _dt.datetime.now().isoformat(timespec="seconds"), "gpu": gpu["name"],
                "driver_version": gpu["driver_version"], "commit": common.commit_of(REPO),
                "config_sha256": common.config_sha256([], {k: v for k, v in settings.items()
                                                           if k not in ("out", "label")}),
                "label": a.label, "quick": a.quick, "plan": plan_text(a, self.servers, self.modes).splitlines(),
                "config": settings}
        print("\n".join(meta["plan"]), flush=True)
        modes: Dict[str, dict] = {}
        for m in self.modes:
            if self.elapsed() + estimate_mode_s(a) > a.budget_s:
                modes[m] = {"mode": m, "error": "skipped: over --budget-s", "servers": {}}
                continue
            print(f"[kv] mode {m}", flush=True)
            modes[m] = self.run_mode(m, out)
            modes[m]["wall_s"] = round(self.elapsed(), 1)
            self.write(out, modes, meta)
        summary = self.write(out, modes, meta)
        print(kv_summary.markdown(summary), flush=True)
        print(f"[kv] wrote {out}/summary.json", flush=True)
        return 0

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


QUICK = {"prompt": 256, "out_tokens": 64, "duration": 20.0, "period_s": 20.0, "drain_s": 10.0,
         "splits": "equal", "kv_total_gib": 8.0, "startup_s": 40.0, "check": 2}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smoke run (~3 min): " + json.dumps(QUICK))
    ap.add_argument("--label", default="multi")
    ap.add_argument("--out", default="", help="default bench/results/<date>-kv-<label>")
    ap.add_argument("--models", default="1,3,8", help="model sizes in billions, one server each")
    ap.add_argument("--on-rates", default="26,16,11", help="arrivals/s per server while ON")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="multiplies every rate")
    ap.add_argument("--off-ratio", type=float, default=0.05, help="OFF rate = this x ON rate")
    ap.add_argument("--period-s", type=float, default=90.0, help="ON/OFF period (each server ON 1/n of it)")
    ap.add_argument("--duration", type=float, default=180.0, help="arrival window per mode, s")
    ap.add_argument("--drain-s", type=float, default=40.0)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--out-tokens", type=int, default=256)
    ap.add_argument("--max-batch", type=int, default=128)
    ap.add_argument("--max-prefill", type=int, default=4)
    ap.add_argument("--kv-total-gib", type=float, default=24.0, help="KV memory shared by all servers")
    ap.add_argument("--overhead-gib", type=float, default=4.0, help="per server, beyond weights and KV (gpuos --mem)")
    ap.add_argument("--splits", default="equal,params,1:2:5", help="static splits: equal, params, a:b:c")
    ap.add_argument("--no-elastic", action="store_true", help="static modes only")
    ap.add_argument("--low-watermark-gib", type=float, default=1.0)
    ap.add_argument("--idle-s", type=float, default=2.0)
    ap.add_argument("--check", type=int, default=8, help="requests per server compared with the reference")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--activation-reserve-gib", type=float, default=0.5,
                    help="gpuos-elastic: free memory per server left beside its KV budget by the ballast")
    ap.add_argument("--no-ballast", action="store_true",
                    help="gpuos-elastic without the ballast: servers may borrow the whole GPU's free memory")
    ap.add_argument("--swap-pool", default="64GiB", help="gpuosd [memory] swap_pool")
    ap.add_argument("--budget-s", type=float, default=1800.0, help="total time ceiling")
    ap.add_argument("--startup-s", type=float, default=90.0, help="estimate of load + warm-up per mode")
    ap.add_argument("--startup-timeout-s", type=float, default=600.0)
    ap.add_argument("--gpuos-daemon-args", default="daemon --socket {socket} --config {config}")
    ap.add_argument("--gpuos-run-args", default="run --name {name} --mem {mem} --borrow {borrow} --socket {socket} --")
    ap.add_argument("--server-args", default="", help="extra flags for every paged_server.py")
    a = ap.parse_args(argv)
    if a.quick:
        for k, v in QUICK.items():
            if getattr(a, k) == ap.get_default(k):
                setattr(a, k, v)
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    try:
        r = Runner(a)
    except ValueError as e:
        print(f"multi_model: {e}", file=sys.stderr)
        return 2
    if a.dry_run:
        print(plan_text(a, r.servers, r.modes))
        print(f"output: {r.out_dir()}")
        for m in r.modes:
            wd = r.workdir(r.out_dir(), m)
            for s, g in zip(r.servers, kv_split(a, r.servers, m)):
                print(f"  {m} {s['name']}: {shlex.join(r.server_cmd(s, m, g, wd))}")
        return 0
    try:
        return r.run()
    finally:
        r.cleanup()


if __name__ == "__main__":
    sys.exit(main())
