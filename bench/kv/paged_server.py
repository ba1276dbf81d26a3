#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A paged-KV LLM server: continuous batching with admission by free KV blocks (issue #24).

Like bench/colocation/hp_server.py (random-weight Llama shapes, latency from each request's
scheduled arrival), with the KV cache in blocks (paged_engine.py) and two kinds of KV memory:

  --kv static --kv-gib X       one preallocated pool of X GiB (like vLLM's gpu_memory_utilization)
  --kv gpuos  --kv-max-gib X   an elastic gpuos.kv pool reserving X GiB (run under `gpuos run`)

Every scheduler iteration (one thread):
  1. arrivals join the queue (ON/OFF bursty Poisson from --seed, onoff.py);
  2. gpuos: if gpuosd's target changed, preempt (youngest first) the requests holding blocks above
     the target's limit, requeue them at the queue head (they recompute: prefill of prompt + the
     tokens so far) and unmap the pages there; blocks above the limit are not handed out while the
     target stands;
  3. admission, FCFS: the queue head is prefilled when its blocks are free (a request waits in the
     queue while they are not: that wait is what makes TTFT p99 grow under memory pressure);
  4. every running request gets the block its next token needs (none free: preempt the youngest);
  5. one decode step for all running requests; finished requests leave and free their blocks;
  6. gpuos: report_queue(len(queue)); idle policy: once the queue has been empty and nothing was
     mapped for --idle-s, unmap the chunks without used blocks above max(--low-watermark-gib, the
     highest used chunk + 2), so anti-correlated peers can grow.
Blocks are handed out lowest first, so used blocks pack into low chunks and high chunks empty.

TTFT = first token - arrival; TPOT = (last - first) / (T - 1); requests still waiting for their
first token at the drain deadline count in TTFT with (end - arrival), a lower bound (censored).

--check N checks the greedy tokens of N sampled finished requests against the non-paged model
after the window (paged_engine.PagedEngine.reference_check: position by position, teacher-forced,
bf16 near-ties allowed): a request with any token beyond the tolerance is a mismatch.
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
import traceback
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "colocation"))
import common  # noqa: E402
import kv_logic  # noqa: E402
import onoff  # noqa: E402


class RealClock:
    def now(self) -> float:
        return time.perf_counter()

    def sleep_until(self, t: float) -> None:
        common.sleep_until(t)


class OomCounter:
    """Torch out-of-memory errors caught in steps (the step's requests are preempted and retried)."""

    def __init__(self, is_oom) -> None:
        self.is_oom = is_oom
        self.count = 0
        self.in_a_row = 0


def serve(engine, batcher: kv_logic.Batcher, backing, arrivals: List[kv_logic.Req], clock,
          stop, hard_deadline: float, idle_s: float, low_watermark_chunks: int,
          oom: Optional[OomCounter] = None, sample_every_s: float = 0.5) -> dict:
    """Serve `arrivals` (sorted by .arr) until all are done, or hard_deadline / stop.

    engine: prefill(token_lists, tables) -> tokens, decode(tokens, positions, tables) -> tokens,
    zero_blocks(blocks). backing: a kv_backing.KvBacking (elastic: targets, report_queue)."""
    done: List[kv_logic.Req] = []
    nxt = 0
    aborted = False
    steps = {"decode": 0, "prefill": 0, "decode_rows": 0, "decode_s": 0.0, "prefill_s": 0.0}
    targets = []            # (t, target_bytes or None) as they changed
    last_target = None
    timeline = []           # [t, used_blocks, mapped_pages, resident_bytes, queue, running]
    next_sample = clock.now()
    given_back_pages = 0
    t_begin = clock.now()

    def sample(now: float) -> None:
        a = batcher.alloc
        timeline.append([round(now - t_begin, 3), a.num_used(), len(a.mapped),
                         a.resident_bytes() if backing.elastic else None,
                         len(batcher.queue), len(batcher.running)])

    def oom_guard(fn, reqs):
        """Run a step; on a torch OOM count it, preempt reqs (youngest first) and return None."""
        try:
            out = fn()
            if oom is not None:
                oom.in_a_row = 0
            return out
        except Exception as e:  # noqa: BLE001
            if oom is None or not oom.is_oom(e):
                raise
            oom.count += 1
            oom.in_a_row += 1
            if oom.in_a_row > 20:
                raise RuntimeError("20 out-of-memory errors in a row") from e
            for r in sorted(reqs, key=lambda r: r.admit_seq, reverse=True):
                if r in batcher.running:
                    batcher.preempt(r)
            return None

    while True:
        now = clock.now()
        while nxt < len(arrivals) and arrivals[nxt].arr <= now:
            batcher.enqueue(arrivals[nxt])
            nxt += 1
        if now >= next_sample:
            sample(now)
            next_sample = now + sample_every_s
        if stop.stop or now > hard_deadline:
            aborted = bool(batcher.queue or batcher.running or nxt < len(arrivals))
            break
        if backing.elastic:
            tb = backing.target_bytes()
            if tb != last_target:
                targets.append((round(now - t_begin, 3), tb))
                last_target = tb
                batcher.apply_target(tb)
        if not batcher.queue and not batcher.running:
            if nxt >= len(arrivals):
                break
            if backing.elastic:
                given_back_pages += batcher.maybe_give_back(now, idle_s, low_watermark_chunks)
                backing.report_queue(0)
                clock.sleep_until(min(arrivals[nxt].arr, now + 0.05))   # keep answering targets
            else:
                clock.sleep_until(arrivals[nxt].arr)
            continue

        # Admission and prefill (rows grouped by prefill length, one call per length).
        admitted = batcher.admit(now)
        if admitted:
            engine.zero_blocks([b for r in admitted for b in r.blocks])
            groups = {}
            for r in admitted:
                groups.setdefault(len(r.prefill_tokens()), []).append(r)
            for n_tok, rows in groups.items():
                t0 = clock.now()
                toks = oom_guard(lambda: engine.prefill([r.prefill_tokens() for r in rows],
                                                        [r.blocks for r in rows]), rows)
                t1 = clock.now()
                steps["prefill"] += 1
                steps["prefill_s"] += t1 - t0
                if toks is None:
                    continue
                for r, tok in zip(rows, toks):
                    r.kv_len = n_tok
                    r.out.append(tok)
                    if r.first is None:
                        r.first = t1
                for r in rows:
                    if r.finished():
                        r.done = t1
                        batcher.retire(r)
                        done.append(r)

        if not admitted and not batcher.running:
            # The queue head waits for blocks that only a target's lift or a refused map's
            # backoff can give: do not spin.
            clock.sleep_until(clock.now() + 0.001)

        # Decode: every running request gets its next block, then one step.
        if batcher.running:
            before = {id(r): len(r.blocks) for r in batcher.running}
            batcher.grow_for_decode(clock.now())
            new_blocks = [b for r in batcher.running for b in r.blocks[before.get(id(r), len(r.blocks)):]]
            engine.zero_blocks(new_blocks)
            rows = list(batcher.running)
            if rows:
                t0 = clock.now()
                toks = oom_guard(lambda: engine.decode([r.out[-1] for r in rows], [r.kv_len for r in rows],
                                                       [r.blocks for r in rows]), rows[-1:])
                t1 = clock.now()
                steps["decode"] += 1
                steps["decode_s"] += t1 - t0
                if toks is not None:
                    steps["decode_rows"] += len(rows)
                    for r, tok in zip(rows, toks):
                        r.kv_len += 1
                        r.out.append(tok)
                    for r in rows:
                        if r.finished():
                            r.done = t1
                            batcher.retire(r)
                            done.append(r)
        if backing.elastic:
            backing.report_queue(len(batcher.queue))
            given_back_pages += batcher.maybe_give_back(clock.now(), idle_s, low_watermark_chunks)

    sample(clock.now())
    unfinished = list(batcher.running) + list(batcher.queue) + arrivals[nxt:]
    return {"done": done, "unfinished": unfinished, "aborted": aborted, "steps": steps,
            "targets": targets, "timeline": timeline, "given_back_pages": given_back_pages}


def latency_summary(res: dict, t_start: float, t_end: float) -> dict:
    """TTFT / TPOT / e2e stats, throughput. Unfinished requests that arrived by t_end count in TTFT
    (still waiting: t_end - arrival, a lower bound) and in e2e (same bound)."""
    done = res["done"]
    ttft = [(r.first - r.arr) * 1e3 for r in done]
    tpot = [(r.done - r.first) * 1e3 / (len(r.out) - 1) for r in done if len(r.out) > 1]
    e2e = [(r.done - r.arr) * 1e3 for r in done]
    unf = [r for r in res["unfinished"] if r.arr <= t_end]
    ttft_censored = [(t_end - r.arr) * 1e3 for r in unf if r.first is None]
    ttft += [(r.first - r.arr) * 1e3 for r in unf if r.first is not None]
    e2e += [(t_end - r.arr) * 1e3 for r in unf]
    wall = max(t_end - t_start, 1e-9)
    out_tokens = sum(len(r.out) for r in done) + sum(len(r.out) for r in unf)
    return {
        "window_s": wall,
        "requests": len(done),
        "unfinished": len(unf),
        "ttft_censored": len(ttft_censored),
        "ttft_ms": common.stats(ttft + ttft_censored),
        "tpot_ms": common.stats(tpot),
        "e2e_ms": common.stats(e2e),
        "tokens_per_s": out_tokens / wall,
        "requests_per_s": len(done) / wall,
        "preempted_requests": sum(1 for r in done + unf if r.preemptions),
    }


def map_call_summary(log) -> dict:
    """Per map call (ms, bytes) -> counts, ms stats, bytes total, ms per GiB over all calls."""
    ms = [m for m, _ in log]
    total_b = sum(b for _, b in log)
    return {"calls": len(log), "ms": common.stats(ms), "bytes_total": total_b,
            "bytes_max": max((b for _, b in log), default=0),
            "ms_per_gib": (sum(ms) / (total_b / kv_logic.GIB)) if total_b else None}


def make_requests(args, vocab: int, t0: float, seed: int, duration: float, on_rate: float,
                  off_rate: float) -> List[kv_logic.Req]:
    times = onoff.onoff_arrivals(on_rate, off_rate, args.period_s, args.phase, duration, seed,
                                 on_fraction=args.on_fraction, t0=t0)
    reqs = []
    for i, t in enumerate(times):
        rng = random.Random(seed * 1_000_003 + i)
        reqs.append(kv_logic.Req(i, t, [rng.randrange(vocab) for _ in range(args.prompt)], args.out_tokens))
    return reqs


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="server")
    ap.add_argument("--params-b", type=float, default=1.0, help="model size in billions (0 = tiny CPU model)")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--prompt", type=int, default=1024, help="prompt tokens P")
    ap.add_argument("--out-tokens", type=int, default=256, help="output tokens per request T")
    ap.add_argument("--max-batch", type=int, default=128, help="most running requests")
    ap.add_argument("--max-prefill", type=int, default=4, help="most requests admitted per step")
    ap.add_argument("--block-tokens", type=int, default=0, help="0 = the most tokens whose KV fits a 2 MiB page")
    ap.add_argument("--kv", choices=["static", "gpuos"], default="static")
    ap.add_argument("--kv-gib", type=float, default=0.0, help="--kv static: the pool's size")
    ap.add_argument("--kv-max-gib", type=float, default=0.0, help="--kv gpuos: the reserved range")
    ap.add_argument("--low-watermark-gib", type=float, default=1.0,
                    help="--kv gpuos: the idle give-back keeps chunks below this")
    ap.add_argument("--idle-s", type=float, default=2.0,
                    help="--kv gpuos: give back free chunks after this long without queue or growth")
    ap.add_argument("--map-backoff-s", type=float, default=0.2, help="no new map this long after a refused one")
    ap.add_argument("--on-rate", type=float, default=4.0, help="arrivals/s while ON")
    ap.add_argument("--off-rate", type=float, default=0.5, help="arrivals/s while OFF")
    ap.add_argument("--period-s", type=float, default=30.0, help="ON/OFF period")
    ap.add_argument("--on-fraction", type=float, default=0.5, help="ON part of the period")
    ap.add_argument("--phase", type=float, default=0.0, help="ON window's start as a fraction of the period")
    ap.add_argument("--duration", type=float, default=60.0, help="arrival window, seconds")
    ap.add_argument("--drain-s", type=float, default=30.0, help="max seconds to finish after the window")
    ap.add_argument("--warmup-requests", type=int, default=4)
    ap.add_argument("--check", type=int, default=0, help="compare N sampled requests with the non-paged reference")
    ap.add_argument("--check-control", type=int, default=1,
                    help="of those, the first N also check llama.Engine's own tokens (the rounding floor)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--ready-file", default="", help="created once the server is warm")
    ap.add_argument("--start-file", default="",
                    help="wait for this file; it may hold the wall time (time.time()) to start at")
    ap.add_argument("--start-timeout", type=float, default=600.0)
    ap.add_argument("--json", required=True)
    a = ap.parse_args(argv)
    if a.kv == "static" and a.kv_gib <= 0:
        ap.error("--kv static needs --kv-gib > 0")
    if a.kv == "gpuos" and a.kv_max_gib <= 0:
        ap.error("--kv gpuos needs --kv-max-gib > 0")
    if a.out_tokens < 1 or a.prompt < 1 or a.max_batch < 1 or a.max_prefill < 1:
        ap.error("--prompt, --out-tokens, --max-batch and --max-prefill must be >= 1")
    return a


def read_start_time(path: str) -> Optional[float]:
    """The wall time written in the start file, or None (empty or not a number)."""
    try:
        with open(path) as f:
            text = f.read().strip()
        return float(text) if text else None
    except (OSError, ValueError):
        return None


def main(argv=None) -> int:
    args = parse_args(argv)
    stop = common.StopFlag()
    out = {"role": "kv-server", "name": args.name, "ok": False, "argv": sys.argv[1:], "pid": os.getpid(),
           "ooms": 0, "mismatches": None}
    engine = backing = None
    try:
        import torch
        import llama
        import paged_engine
        dev = torch.device(args.device)
        if dev.type == "cuda":
            torch.cuda.init()
            out["device"] = torch.cuda.get_device_name(dev)
        out["torch"] = torch.__version__
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
        cfg = llama.config_for_params(args.params_b, args.layers)
        kv_bytes = int((args.kv_gib if args.kv == "static" else args.kv_max_gib) * kv_logic.GIB)
        t0 = time.perf_counter()
        engine, backing, geo = paged_engine.build(
            torch, cfg, kv_bytes, args.prompt, args.out_tokens, dev, dtype, args.seed,
            block_tokens=args.block_tokens, backing=args.kv,
            device_index=dev.index if dev.index is not None else 0)
        alloc = kv_logic.BlockAllocator(geo, all_mapped=(args.kv == "static"))
        batcher = kv_logic.Batcher(alloc, engine.bt, args.max_batch, args.max_prefill,
                                   backing.map_pages, backing.unmap_pages, args.map_backoff_s)
        low_wm_chunks = int(args.low_watermark_gib * kv_logic.GIB) // geo.chunk_bytes
        is_oom = (lambda e: isinstance(e, torch.cuda.OutOfMemoryError)) if dev.type == "cuda" else (lambda e: False)
        oom = OomCounter(is_oom)
        clock = RealClock()
        out["config"] = {
            "model": cfg, "prompt": args.prompt, "out_tokens": args.out_tokens, "max_batch": args.max_batch,
            "max_prefill": args.max_prefill, "kv": args.kv, "kv_bytes": kv_bytes,
            "block_tokens": engine.bt, "block_bytes": geo.block_bytes, "block_stride_bytes": geo.stride_bytes,
            "num_blocks": geo.num_blocks, "page_bytes": geo.page_bytes, "chunk_bytes": geo.chunk_bytes,
            "blocks_per_sequence": kv_logic.ceil_div(args.prompt + args.out_tokens, engine.bt),
            "sequences_that_fit": geo.num_blocks // kv_logic.ceil_div(args.prompt + args.out_tokens, engine.bt),
            "on_rate": args.on_rate, "off_rate": args.off_rate, "period_s": args.period_s,
            "on_fraction": args.on_fraction, "phase": args.phase, "duration": args.duration,
            "low_watermark_gib": args.low_watermark_gib, "idle_s": args.idle_s, "seed": args.seed,
            "dtype": str(dtype).replace("torch.", ""), "cuda_graphs": False,
        }
        print(f"[{args.name}] {cfg['params'] / 1e9:.2f}B, KV {args.kv} {kv_bytes / kv_logic.GIB:.1f} GiB = "
              f"{geo.num_blocks} blocks of {engine.bt} tokens ({out['config']['sequences_that_fit']} sequences), "
              f"built in {time.perf_counter() - t0:.1f}s", flush=True)

        # Warm-up (unmeasured): a few requests arriving at once; then the counters start afresh.
        if args.warmup_requests > 0:
            now = clock.now()
            rng = random.Random(args.seed + 7777)
            warm = [kv_logic.Req(-1 - i, now, [rng.randrange(cfg["vocab"]) for _ in range(args.prompt)],
                                 args.out_tokens) for i in range(args.warmup_requests)]
            serve(engine, batcher, backing, warm, clock, stop, now + 600, args.idle_s, low_wm_chunks, oom)
            if backing.elastic:
                batcher.give_back_idle(low_wm_chunks)
            batcher.reset_counters()
            oom.count = 0
            if backing.elastic:
                backing.map_log.clear()
                backing.refused_log.clear()
        if args.ready_file:
            common.touch(args.ready_file)
        start_wall = None
        if args.start_file:
            print(f"[{args.name}] ready; waiting for {args.start_file}", flush=True)
            if not common.wait_for_file(args.start_file, args.start_timeout):
                raise RuntimeError(f"start file {args.start_file} did not appear in {args.start_timeout}s")
            start_wall = read_start_time(args.start_file)
        if stop.stop:
            raise RuntimeError("stopped before the measured window")

        gc.collect()
        gc.freeze()
        gc.disable()
        t_start = clock.now()
        if start_wall is not None:
            t_start += max(0.0, start_wall - time.time())
        reqs = make_requests(args, cfg["vocab"], t_start, args.seed, args.duration, args.on_rate, args.off_rate)
        t_end_arr = t_start + args.duration
        res = serve(engine, batcher, backing, reqs, clock, stop, t_end_arr + args.drain_s,
                    args.idle_s, low_wm_chunks, oom)
        t_end = clock.now()
        gc.enable()

        out.update(latency_summary(res, t_start, t_end))
        out["offered"] = len(reqs)
        out["aborted"] = res["aborted"]
        st = res["steps"]
        out["steps"] = {"decode": st["decode"], "prefill": st["prefill"],
                        "mean_decode_batch": st["decode_rows"] / st["decode"] if st["decode"] else None,
                        "mean_decode_step_ms": st["decode_s"] * 1e3 / st["decode"] if st["decode"] else None,
                        "mean_prefill_step_ms": st["prefill_s"] * 1e3 / st["prefill"] if st["prefill"] else None}
        out["preemptions"] = batcher.preemptions
        out["pages_mapped"] = batcher.pages_mapped
        out["pages_unmapped"] = batcher.pages_unmapped
        out["map_refusals"] = batcher.map_refusals
        out["kv_blocked_steps"] = batcher.kv_blocked_steps
        out["batch_blocked_steps"] = batcher.batch_blocked_steps
        out["max_blocks_used"] = alloc.max_used
        out["max_kv_gib_used"] = alloc.max_used * geo.stride_bytes / kv_logic.GIB
        out["targets"] = res["targets"]
        out["given_back_pages"] = res["given_back_pages"]
        out["timeline_columns"] = ["t_s", "used_blocks", "mapped_pages", "resident_bytes", "queue", "running"]
        out["timeline"] = res["timeline"]
        out["ooms"] = oom.count
        out["pool"] = backing.stats()
        if backing.elastic:
            out["map_calls"] = map_call_summary(backing.map_log)
            out["refused_map_calls"] = map_call_summary(backing.refused_log)
            gb = out["pool"].get("grown_bytes") or 0
            out["grow_ms_per_gib"] = (out["pool"].get("grow_ns", 0) / 1e6) / (gb / kv_logic.GIB) if gb else None

        if args.check > 0:
            finished = [r for r in res["done"] if len(r.out) >= args.out_tokens]
            rng = random.Random(args.seed + 4242)
            sample = rng.sample(finished, min(args.check, len(finished)))
            rows = []
            for r in sample:
                c = engine.reference_check(r.prompt, r.out[:args.out_tokens])
                if len(rows) < args.check_control:
                    ctl = engine.control_check(r.prompt, args.out_tokens)
                    c["control"] = {"exact": ctl["exact"], "max_gap_std": ctl["max_gap_std"]}
                c.update({"rid": r.rid, "preempted": r.preemptions > 0})
                rows.append(c)
            out["mismatches"] = sum(1 for c in rows if not c["match"])
            out["check"] = {"sampled": len(rows), "mismatched_requests": out["mismatches"],
                            "mismatched_preempted": sum(1 for c in rows if not c["match"] and c["preempted"]),
                            "rows": rows}
        out["ok"] = out["requests"] > 0
        f = common.fmt
        print(f"[{args.name}] {out['requests']} requests ({out['unfinished']} unfinished), ttft p99 "
              f"{f(out['ttft_ms']['p99'])} ms, tpot p99 {f(out['tpot_ms']['p99'])} ms, preemptions "
              f"{out['preemptions']}, max KV {out['max_kv_gib_used']:.1f} GiB, mismatches {out['mismatches']}",
              flush=True)
    except BaseException as exc:  # noqa: BLE001 - always write a result the runner can read
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-4000:]
        print(out["traceback"], file=sys.stderr, flush=True)
    common.write_json_atomic(args.json, out)
    try:
        if engine is not None:
            engine.close()
        if backing is not None:
            backing.close()
    except Exception:  # noqa: BLE001
        pass
    return 0 if out.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
