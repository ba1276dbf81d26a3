#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Latency-critical (HP) inference server for the co-location suite.

A Llama-shaped decoder with random bf16 weights (llama.py) serving open-loop Poisson arrivals with
continuous batching: every scheduler iteration first prefills newly arrived requests (batched, up
to --max-prefill at once) and then runs one decode step for all active requests. Prefill and decode
steps are CUDA graphs captured per batch-size bucket over static buffers and a preallocated KV
cache, so the host only replays graphs and the GPU does the work (GPU-bound, like production
servers, not host-bound like eager batch-1 generation).

Latency is measured from each request's *scheduled* arrival time, so queueing counts:
  TTFT  = first token (end of its prefill step) - arrival
  TTFT from admission = first token - the start of its prefill step (it got a batch slot)
  TPOT  = (last token - first token) / (T - 1)
  e2e   = last token - arrival
GPU busy time = sum over steps of the CUDA-event time of each graph replay; busy_fraction =
busy / window wall time (meaningful when the server is alone on the GPU).

Modes:
  --calibrate-load L : first a closed-loop run at saturation (max-batch requests always in flight)
                       gives the capacity (req/s); then the open-loop run uses rate = L * capacity.
  --rate R           : open-loop run at R req/s.
--load-step T:R2 changes the arrival rate to R2 req/s T seconds into the measured window (a load
step; warm-up keeps the first rate) and records every request's arrival time and latency.
--start-file F makes the server wait (after loading, capture and warm-up) until F exists, so the
measured window starts only once a co-runner is warm.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import os
import sys
import time
import traceback
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import lengths as lengths_mod  # noqa: E402


class Req:
    __slots__ = ("arr", "admit", "first", "done", "ntok", "plen", "T")

    def __init__(self, arr: float, plen: int = 0, T: int = 0) -> None:
        self.arr = arr
        self.admit = None  # when it got a batch slot (its prefill step began)
        self.first = None
        self.done = None
        self.ntok = 0
        self.plen = plen   # its prompt's length (tokens)
        self.T = T         # the tokens it asks for (its first comes from its prefill)


class EngineReporter:
    """Tells gpuosd the server's batch slots and waiting requests (gpuos.kv.report_slots and
    report_queue, at most every 50 ms) and marks its prefills as admissions (gpuos.kv.admission: a
    budget then measures steps and admissions apart), all shown by `gpuos ps`; nothing when not
    under gpuos (the baselines) or without the package. phases=False (--no-phase-hints): its
    prefills go unmarked, as an engine that gives no hint, for gpuos to learn them from timings."""

    PERIOD_S = 0.05

    def __init__(self, capacity: int, phases: bool = True) -> None:
        self.capacity = capacity
        self.phases = phases
        self.kv = None
        self.next = 0.0
        try:
            sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
            import gpuos.kv as kv
            if kv.available():
                kv.report_slots(0, capacity)
                self.kv = kv
        except Exception:  # not under gpuos, no library, an older interposer: report nothing
            self.kv = None

    def admission(self):
        if self.kv is None or not self.phases:
            return contextlib.nullcontext()
        return self.kv.admission()

    def report(self, now: float, active: int, waiting: int) -> None:
        if self.kv is None or now < self.next:
            return
        self.next = now + self.PERIOD_S
        try:
            self.kv.report_slots(min(active, self.capacity), self.capacity)
            self.kv.report_queue(waiting)
        except Exception:
            self.kv = None


def bucket_name(key) -> str:
    """A step's graph as the summary names it: its batch bucket, or batch x length bucket."""
    return f"{key[0]}x{key[1]}" if isinstance(key, tuple) else str(key)


class Scheduler:
    """Continuous-batching scheduler over an Engine (one thread, one stream).

    Lengths per request (an engine with `variable`): each request carries its prompt length and
    output tokens; a prefill takes waiting prompts first come first served while one captured
    shape holds them (lengths.prefill_take), a decode step attends over the context bucket above
    its longest request, and a request leaves after its own output tokens."""

    def __init__(self, eng, torch, max_batch: int, out_tokens: int, stop: common.StopFlag,
                 phase_hints: bool = True, prompt: int = 0) -> None:
        self.eng = eng
        self.phase_hints = phase_hints
        self.torch = torch
        self.max_batch = max_batch
        self.T = out_tokens
        self.P = prompt
        self.variable = bool(getattr(eng, "variable", False))
        self.stop = stop
        self.cuda = eng.device.type == "cuda"
        if self.cuda:
            self.ev0 = torch.cuda.Event(enable_timing=True)
            self.ev1 = torch.cuda.Event(enable_timing=True)

    def _timed(self, fn, *a):
        """Run one step, wait for it; returns (bucket, gpu_ms, host time after completion)."""
        if self.cuda:
            self.ev0.record()
            b = fn(*a)
            self.ev1.record()
            self.ev1.synchronize()
            t = time.perf_counter()
            return b, self.ev0.elapsed_time(self.ev1), t
        t0 = time.perf_counter()
        b = fn(*a)
        t = time.perf_counter()
        return b, (t - t0) * 1e3, t

    def run(self, arrivals=None, closed_conc: int = 0, closed_until: float = 0.0,
            hard_deadline: float = float("inf"), lens=None) -> dict:
        """Serve until every request is done (or hard_deadline / SIGTERM).

        Open loop: `arrivals` (sorted perf times). Closed loop: closed_conc requests in flight,
        each completion before closed_until spawns a new one at once. lens: the requests' (prompt,
        output tokens), the i-th arrival's i-th (a list) or the closed loop's in turn (an iterator);
        default every request the server's one prompt length and output tokens."""
        eng = self.eng
        arrivals = arrivals or []
        if lens is None:
            fixed = (self.P, self.T)
            next_len = lambda i: fixed  # noqa: E731
        elif isinstance(lens, (list, tuple)):
            next_len = lens.__getitem__
        else:
            it = iter(lens)
            next_len = lambda i: next(it)  # noqa: E731
        spawned = [0]

        def new_req(t: float) -> Req:
            p, n = next_len(spawned[0])
            spawned[0] += 1
            return Req(t, p, n)
        slots = [None] * eng.slots          # slot -> Req, compacted in 0..n_active-1
        n_active = 0
        waiting = collections.deque()
        done = []
        nxt = 0
        busy_ms = 0.0
        n_dec = n_pre = dec_rows = 0
        dec_ms = pre_ms = 0.0
        # Prefills by the graph (bucket) they used: TTFT from admission's tail follows the mix.
        by_bucket = {}
        by_ctx = {}  # decode steps by the context they attended over (lengths per request)
        if closed_conc:
            now = time.perf_counter()
            for _ in range(closed_conc):
                waiting.append(new_req(now))
        aborted = False

        def retire(t: float) -> None:
            nonlocal n_active
            for s in range(n_active - 1, -1, -1):
                r = slots[s]
                if r.ntok >= r.T:
                    r.done = t
                    done.append(r)
                    last = n_active - 1
                    if s != last:
                        if self.variable:  # only what the moved request has written
                            m = slots[last]
                            eng.move_slot(last, s, m.plen + m.ntok - 1)
                        else:
                            eng.move_slot(last, s)
                        slots[s] = slots[last]
                    slots[last] = None
                    n_active -= 1
                    if closed_conc and t < closed_until:
                        waiting.append(new_req(t))

        reporter = EngineReporter(self.max_batch, self.phase_hints)
        while True:
            now = time.perf_counter()
            while nxt < len(arrivals) and arrivals[nxt] <= now:
                waiting.append(new_req(arrivals[nxt]))
                nxt += 1
            reporter.report(now, n_active, len(waiting))
            if not waiting and n_active == 0:
                if nxt >= len(arrivals):
                    break
                common.sleep_until(arrivals[nxt])
                continue
            if now > hard_deadline or self.stop.stop:
                aborted = True
                break
            if waiting and n_active < self.max_batch:
                m = min(len(waiting), self.max_batch - n_active, eng.max_prefill)
                if self.variable:
                    plens = [waiting[i].plen for i in range(m)]
                    m = lengths_mod.prefill_take(plens, m, eng.prefill_buckets, eng.prompt_buckets,
                                                 eng.prefill_tokens)
                    step = (eng.prefill, n_active, m, plens[:m])
                else:
                    step = (eng.prefill, n_active, m)
                admitted = time.perf_counter()
                with reporter.admission():
                    bucket, ms, t = self._timed(*step)
                busy_ms += ms
                pre_ms += ms
                n_pre += 1
                by = by_bucket.setdefault(bucket, {"prefills": 0, "requests": 0, "ms": []})
                by["prefills"] += 1
                by["requests"] += m
                by["ms"].append(ms)
                for _ in range(m):
                    r = waiting.popleft()
                    r.admit = admitted
                    r.first = t
                    r.ntok = 1
                    slots[n_active] = r
                    n_active += 1
                retire(t)
            if n_active:
                if self.variable:
                    max_pos = max(slots[i].plen + slots[i].ntok - 1 for i in range(n_active))
                    key, ms, t = self._timed(eng.decode, n_active, max_pos)
                    by_ctx[key[1]] = by_ctx.get(key[1], 0) + 1
                else:
                    _, ms, t = self._timed(eng.decode, n_active)
                busy_ms += ms
                dec_ms += ms
                n_dec += 1
                dec_rows += n_active
                for s in range(n_active):
                    slots[s].ntok += 1
                retire(t)
        unfinished = [r for r in slots[:n_active]] + list(waiting)
        unfinished += [Req(a, *next_len(i)) for i, a in enumerate(arrivals[nxt:], start=spawned[0])
                       if lens is None or isinstance(lens, (list, tuple))]
        return {
            "done": done,
            "unfinished": unfinished,
            "aborted": aborted,
            "busy_ms": busy_ms,
            "decode_steps": n_dec,
            "prefill_steps": n_pre,
            "mean_decode_batch": dec_rows / n_dec if n_dec else None,
            "mean_decode_step_ms": dec_ms / n_dec if n_dec else None,
            "mean_prefill_step_ms": pre_ms / n_pre if n_pre else None,
            "prefill_buckets": {bucket_name(k): {"prefills": v["prefills"], "requests": v["requests"],
                                                 "ms": common.stats(v["ms"])} for k, v in sorted(by_bucket.items())},
            **({"decode_contexts": {str(c): n for c, n in sorted(by_ctx.items())}} if self.variable else {}),
        }


def _tpot_ms(r: Req) -> Optional[float]:
    """A finished request's time per output token after its first (None: it asked for one)."""
    return (r.done - r.first) * 1e3 / (r.T - 1) if r.T > 1 else None


def request_log(res: dict, t_start: float, t_end: float, T: int = 0) -> dict:
    """Every request that arrived in the window, by arrival (s since t_start), with its TTFT and
    TPOT (None: unfinished at the drain deadline): latency per window after a load step. (T: unused,
    each request has its own output tokens.)"""
    rows = [(r.arr, (r.first - r.arr) * 1e3, _tpot_ms(r),
             None if r.admit is None else (r.first - r.admit) * 1e3) for r in res["done"]]
    rows += [(r.arr, None, None, None) for r in res["unfinished"] if r.arr <= t_end]
    rows.sort(key=lambda x: x[0])

    def r4(v):
        return None if v is None else round(v, 4)
    return {"arrival_s": [round(a - t_start, 4) for a, _, _, _ in rows],
            "ttft_ms": [r4(f) for _, f, _, _ in rows], "tpot_ms": [r4(p) for _, _, p, _ in rows],
            "ttft_admit_ms": [r4(d) for _, _, _, d in rows]}


def summarize(res: dict, t_start: float, t_end: float, clock: common.WallClock, T: int,
              log_requests: bool = True) -> dict:
    done = res["done"]
    e2e = [(r.done - r.arr) * 1e3 for r in done]
    ttft = [(r.first - r.arr) * 1e3 for r in done]
    # TTFT from admission (the request got a batch slot): what the server's steps cost it, without
    # its wait for a slot, which grows with the load whatever runs beside the server.
    ttft_admit = [(r.first - r.admit) * 1e3 for r in done if r.admit is not None]
    tpot = [v for v in (_tpot_ms(r) for r in done) if v is not None]
    # Unfinished requests count in the e2e tail with their latency so far (a lower bound).
    censored = [(t_end - r.arr) * 1e3 for r in res["unfinished"] if r.arr <= t_end]
    wall = max(t_end - t_start, 1e-9)
    return {
        "window": {"t0": clock.wall(t_start), "t1": clock.wall(t_end), "seconds": wall},
        "requests": len(done),
        "unfinished": len(res["unfinished"]),
        "aborted": res["aborted"],
        "achieved_rps": len(done) / wall,
        "e2e_ms": common.stats(e2e + censored),
        "ttft_ms": common.stats(ttft),
        "ttft_admit_ms": common.stats(ttft_admit),
        "tpot_ms": common.stats(tpot),
        "e2e_cdf_ms": common.cdf_points(e2e + censored),
        "gpu_busy_s": res["busy_ms"] / 1e3,
        "busy_fraction": min(1.0, res["busy_ms"] / 1e3 / wall),
        "steps": {k: res[k] for k in ("decode_steps", "prefill_steps", "mean_decode_batch",
                                      "mean_decode_step_ms", "mean_prefill_step_ms", "prefill_buckets",
                                      "decode_contexts") if k in res},
        # The requests' lengths as served (drawn ones vary; fixed ones are the one shape).
        "request_lengths": {"prompt": common.stats([r.plen for r in done]),
                            "output": common.stats([r.T for r in done])},
        **({"request_log": request_log(res, t_start, t_end, T)} if log_requests else {}),
    }


CALIB_SEED_OFFSET = 2000  # the calibration replay's arrivals: seed + this (the window's: seed)


def calib_replay(sched, rate: float, seconds: float, seed: int, drain_s: float, lens=None) -> dict:
    """A short replay at `rate` before the measured window, from its own arrivals (seed +
    CALIB_SEED_OFFSET): its TPOT and TTFT stats (method v2's outlier signal, independent of the
    window's requests)."""
    t0 = time.perf_counter()
    arr = common.poisson_arrivals(rate, t0, seconds, 0, seed + CALIB_SEED_OFFSET)
    res = sched.run(arrivals=arr, hard_deadline=(arr[-1] if arr else t0) + drain_s,
                    lens=None if lens is None else lens.draw(len(arr), seed, "calib-replay"))
    done = res["done"]
    return {"seconds": seconds, "seed": seed + CALIB_SEED_OFFSET, "requests": len(done),
            "unfinished": len(res["unfinished"]),
            "tpot_ms": common.stats(v for v in (_tpot_ms(r) for r in done) if v is not None),
            "ttft_ms": common.stats((r.first - r.arr) * 1e3 for r in done)}


def _load_step_arg(text: str) -> str:
    try:
        if text:
            common.parse_load_step(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params-b", type=float, default=1.0, help="model size in billions (1-8; 0 = tiny CPU self-test model)")
    ap.add_argument("--layers", type=int, default=None, help="override the layer count")
    ap.add_argument("--prompt", type=int, default=128, help="prompt length P (--lengths fixed)")
    ap.add_argument("--out-tokens", type=int, default=32, help="output tokens per request T (--lengths fixed)")
    ap.add_argument("--lengths", choices=lengths_mod.CHOICES, default="fixed",
                    help="each request's prompt and output length: fixed (--prompt, --out-tokens) or drawn "
                         "from the Azure LLM inference trace 2023's conversation / coding service "
                         "(lengths.py: the trace's percentiles, clipped to --max-prompt / --max-out), "
                         "per request from --seed")
    ap.add_argument("--max-prompt", type=int, default=lengths_mod.MAX_PROMPT,
                    help="drawn lengths: the longest prompt (prompts are padded to power-of-two buckets "
                         "from 128 up to it)")
    ap.add_argument("--max-out", type=int, default=lengths_mod.MAX_OUT, help="drawn lengths: the most output tokens")
    ap.add_argument("--prefill-tokens", type=int, default=lengths_mod.PREFILL_TOKENS,
                    help="drawn lengths: the most (padded) prompt tokens one prefill step takes")
    ap.add_argument("--max-batch", type=int, default=32, help="max concurrent requests (decode batch)")
    ap.add_argument("--decode-buckets", default="1,2,4,8,16,32")
    ap.add_argument("--prefill-buckets", default="1,2,4,8")
    ap.add_argument("--rate", type=float, default=0.0, help="open-loop arrival rate, req/s")
    ap.add_argument("--calibrate-load", type=float, default=0.0,
                    help="measure capacity first (closed loop), then serve at this fraction of it")
    ap.add_argument("--calibrate-s", type=float, default=8.0, help="closed-loop calibration seconds")
    ap.add_argument("--duration", type=float, default=45.0, help="arrival window, seconds")
    ap.add_argument("--requests", type=int, default=0, help="number of requests (overrides --duration)")
    ap.add_argument("--load-step", default="", type=_load_step_arg, metavar="T:R2",
                    help="T s into the measured window the arrival rate becomes R2 req/s (T:Kx: K times "
                         "the starting rate); the result then has every request's arrival and latency "
                         "(request_log, which every result has: SLO attainment per request)")
    ap.add_argument("--drain-s", type=float, default=10.0, help="max seconds to finish after the last arrival")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of unmeasured traffic first")
    ap.add_argument("--start-file", default="", help="wait for this file before the measured window")
    ap.add_argument("--start-timeout", type=float, default=240.0)
    ap.add_argument("--start-anyway", action="store_true",
                    help="start the measured window after --start-timeout even without the start file")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--calib-replay-s", type=float, default=0.0,
                    help="before the measured window (and any --start-file), replay this many seconds of "
                         "arrivals at the same rate from their own seed (--seed + 2000): calib_replay in the "
                         "result, method v2's outlier signal (run_matrix.py --paired-seeds)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-graphs", action="store_true", help="eager steps (debugging only)")
    ap.add_argument("--no-phase-hints", action="store_true",
                    help="do not mark prefills as admissions (gpuos learns long launches from timings)")
    ap.add_argument("--json", required=True, help="result file")
    ap.add_argument("--hold-gib", type=float, default=0.0,
                    help="extra GiB held in device memory for the process's life (oversubscription runs)")
    args = ap.parse_args()

    stop = common.StopFlag()
    clock = common.WallClock()
    out = {"role": "hp", "ok": False, "argv": sys.argv[1:], "pid": os.getpid()}
    t_proc = time.perf_counter()
    try:
        import torch
        import llama
        out["torch"] = torch.__version__
        dev = torch.device(args.device)
        if dev.type == "cuda":
            torch.cuda.init()
            out["device"] = torch.cuda.get_device_name(0)
        t_import = time.perf_counter()
        ballast = common.hold_memory(torch, args.hold_gib, dev)  # noqa: F841 (kept alive)
        cfg = llama.config_for_params(args.params_b, args.layers)
        decode_b = [int(x) for x in args.decode_buckets.split(",") if x]
        decode_b = sorted(set([b for b in decode_b if b < args.max_batch] + [args.max_batch]))
        prefill_b = sorted(set(int(x) for x in args.prefill_buckets.split(",") if x))
        max_pre = prefill_b[-1]
        lens = lengths_mod.Lengths(args.lengths, args.prompt, args.out_tokens, args.max_prompt, args.max_out)
        shape = {} if lens.fixed else {"prompt_buckets": lens.prompt_buckets(), "ctx_buckets": lens.ctx_buckets(),
                                       "prefill_tokens": args.prefill_tokens}
        eng = llama.Engine(cfg, max_slots=args.max_batch + max_pre, prompt_len=lens.max_prompt,
                           max_new=lens.max_out, device=args.device, seed=args.seed,
                           max_prefill=max_pre,
                           dtype=torch.bfloat16 if dev.type == "cuda" else torch.float32, **shape)
        t_build = time.perf_counter()
        eng.prepare(decode_b, prefill_b, use_graphs=not args.no_graphs)
        t_cap = time.perf_counter()
        out["config"] = {
            "model": cfg, "prompt": args.prompt, "out_tokens": args.out_tokens,
            "max_batch": args.max_batch, "decode_buckets": decode_b, "prefill_buckets": prefill_b,
            "cuda_graphs": eng.use_graphs, "dtype": str(eng.dtype).replace("torch.", ""), "seed": args.seed,
            "lengths": args.lengths,
            "kv_gib": lengths_mod.kv_gib(cfg, eng.slots, eng.S, torch.tensor([], dtype=eng.dtype).element_size()),
            **({} if lens.fixed else {
                "max_prompt": lens.max_prompt, "max_out": lens.max_out, "context": eng.S,
                "prompt_buckets": eng.prompt_buckets, "ctx_buckets": eng.ctx_buckets,
                "prefill_tokens": eng.prefill_tokens,
                "prefill_graphs": [bucket_name(k) for k in eng.prefill_shapes()],
                "decode_graphs": len(eng.decode_shapes())}),
        }
        out["startup_s"] = {"import": t_import - t_proc, "build": t_build - t_import,
                            "capture": t_cap - t_build}
        print(f"[hp] model {cfg['params'] / 1e9:.2f}B layers={cfg['layers']} hidden={cfg['hidden']} "
              f"graphs={eng.use_graphs} ready in {t_cap - t_proc:.1f}s", flush=True)
        sched = Scheduler(eng, torch, args.max_batch, args.out_tokens, stop, phase_hints=not args.no_phase_hints,
                          prompt=args.prompt)

        rate = args.rate
        if args.calibrate_load > 0:
            t0 = time.perf_counter()
            res = sched.run(closed_conc=args.max_batch, closed_until=t0 + args.calibrate_s,
                            hard_deadline=t0 + args.calibrate_s + 30,
                            lens=None if lens.fixed else lens.stream(args.seed, "calibration"))
            # Count completions in [t0 + skip, t0 + calibrate_s]: steady state, before the drain.
            skip = min(2.0, args.calibrate_s / 4)
            a, b = t0 + skip, t0 + args.calibrate_s
            n_ok = sum(1 for r in res["done"] if a <= r.done <= b)
            cap = n_ok / (b - a)
            if cap <= 0:
                raise RuntimeError("calibration completed no requests")
            rate = args.calibrate_load * cap
            out["calibration"] = {
                "capacity_rps": cap, "seconds": args.calibrate_s, "completed": len(res["done"]),
                "busy_fraction_at_saturation": res["busy_ms"] / 1e3 / max(1e-9, time.perf_counter() - t0),
                "mean_decode_step_ms": res["mean_decode_step_ms"],
                "mean_prefill_step_ms": res["mean_prefill_step_ms"],
                "mean_decode_batch": res["mean_decode_batch"],
            }
            out["capacity_rps"] = cap
            out["load"] = args.calibrate_load
            print(f"[hp] capacity {cap:.1f} req/s (busy {out['calibration']['busy_fraction_at_saturation']:.2f}"
                  f" at saturation) -> rate {rate:.1f} req/s", flush=True)
        if rate <= 0:
            raise ValueError("need --rate > 0 or --calibrate-load > 0")
        out["rate_rps"] = rate
        step = common.load_step_for(args.load_step, rate)
        if step:
            out["load_step"] = {"at_s": step[0], "rate_rps": step[1]}

        if args.warmup > 0:
            t0 = time.perf_counter()
            arr = common.poisson_arrivals(rate, t0, args.warmup, 0, args.seed + 1000)
            sched.run(arrivals=arr, hard_deadline=t0 + args.warmup + 10,
                      lens=None if lens.fixed else lens.draw(len(arr), args.seed, "warmup"))
        if args.calib_replay_s > 0:
            out["calib_replay"] = calib_replay(sched, rate, args.calib_replay_s, args.seed, args.drain_s,
                                               None if lens.fixed else lens)
        if args.start_file:
            print(f"[hp] waiting for {args.start_file}", flush=True)
            if not common.wait_for_file(args.start_file, args.start_timeout):
                if not args.start_anyway:
                    raise RuntimeError(f"start file {args.start_file} did not appear in {args.start_timeout}s")
                out["start_file_missing"] = True  # e.g. a BE that waits for memory: measure anyway
                print(f"[hp] {args.start_file} did not appear in {args.start_timeout}s; starting anyway", flush=True)
        if stop.stop:
            raise RuntimeError("stopped before the measured window")

        # No GC pauses inside the measured window (servers do the same): collect, freeze, disable.
        gc.collect()
        gc.freeze()
        gc.disable()
        t_start = time.perf_counter()
        arr = common.poisson_arrivals(rate, t_start, args.duration, args.requests, args.seed, step)
        last_arr = arr[-1] if arr else t_start
        res = sched.run(arrivals=arr, hard_deadline=last_arr + args.drain_s,
                        lens=None if lens.fixed else lens.draw(len(arr), args.seed))
        t_end = time.perf_counter()
        gc.enable()
        out.update(summarize(res, t_start, t_end, clock, args.out_tokens))
        out["offered"] = len(arr)
        out["offered_rps"] = len(arr) / max(1e-9, last_arr - t_start)
        out["ok"] = not res["aborted"] or out["requests"] > 0
        if res["aborted"]:
            out["note"] = "window cut short (drain deadline or SIGTERM); unfinished requests counted as censored"
        if dev.type == "cuda":  # what the server held at its most (weights, KV cache, graphs, activations)
            out["peak_memory_gib"] = torch.cuda.max_memory_reserved() / 2**30
        e, f = out["e2e_ms"], common.fmt
        print(f"[hp] {out['requests']} requests ({out['unfinished']} unfinished) "
              f"e2e p50 {f(e['p50'])} ms p99 {f(e['p99'])} ms; ttft p99 {f(out['ttft_ms']['p99'])} ms; "
              f"busy {f(out['busy_fraction'])}", flush=True)
    except BaseException as exc:  # noqa: BLE001 - always write a result the runner can read
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-4000:]
        print(out["traceback"], file=sys.stderr, flush=True)
    common.write_json_atomic(args.json, out)
    return 0 if out.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
