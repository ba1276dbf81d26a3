#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GPU test: a PyTorch tenant whose memory may be swapped out to host and back (gpu/swap_test.sh).

Run it under `gpuos run --swap --mem SIZE -- python3 gpu/tests/torch_swap.py --gib N --seconds S`.

Setup: allocates N GiB as int32 tensors of --chunk-mib each, fills every chunk on the GPU from its
own seeded generator, and records two checksums per chunk plus its data_ptr():
  s1 = sum of all words (int64);
  s2 = position-mixed: per 4 KiB row (one "page") the int64 row sum r_i, then
       sum_i ((r_i mod P) * w_i mod P) with P = 2^31-1 and distinct weights w_i, so two exchanged,
       misplaced or zeroed pages change s2 even where s1 would not notice.
Then, until S seconds (wall clock) have passed since setup finished: each iteration recomputes both
checksums of every chunk on the GPU (--passes times: a fixed amount of real work that reads all the
memory), copies them to the host once and compares them and every data_ptr() with the reference.
While gpuosd has the tenant swapped out, its CUDA calls simply block: that shows up as a long gap
between two iteration completions. Gaps over --pause-s (1 s) count as pauses.

Out of memory (torch.OutOfMemoryError) is counted: during setup it stops the test, in the loop it
is retried up to --max-ooms times. A watchdog thread reports and exits (code 3) if nothing
progresses for --stall-s or the whole run passes --max-wall-s, so the JSON is printed even when a
CUDA call never returns.

Prints one JSON line on stdout (also written to --json PATH): {name, pid, gib, iterations,
mismatches, ooms, pauses, max_gap_s, passed, ...}; progress lines go to stderr.
Exit 0 iff mismatches == 0 and ooms == 0 and iterations >= 2 (and nothing raised).
"""
import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback

ROW = 1024  # int32 words per row: 4 KiB, one "page" for the position-mixed checksum
P = 2**31 - 1  # prime modulus of the mixed checksum
W_MOD = 1048573  # prime > rows per chunk up to 4 GiB chunks: weights are distinct within a chunk


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=80.0, help="total GiB to hold (default 80)")
    ap.add_argument("--seconds", type=float, default=60.0, help="keep working this long after setup (default 60)")
    ap.add_argument("--chunk-mib", type=int, default=1024, help="chunk size in MiB (default 1024)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--name", default=os.environ.get("GPUOS_TENANT_NAME", "torch_swap"))
    ap.add_argument("--json", default="", help="also write the result line here")
    ap.add_argument("--passes", type=int, default=1, help="checksum passes over all chunks per iteration")
    ap.add_argument("--pause-s", type=float, default=1.0, help="a gap longer than this is a pause")
    ap.add_argument("--max-ooms", type=int, default=5, help="stop after this many OOMs in the loop")
    ap.add_argument("--stall-s", type=float, default=240.0, help="watchdog: no progress for this long")
    ap.add_argument("--max-wall-s", type=float, default=0.0,
                    help="watchdog: total run limit (default: seconds + 420)")
    ap.add_argument("--device", default="cuda", help="torch device (cpu only to test this script)")
    ap.add_argument("--barrier-dir", default="",
                    help="after reporting, mark this tenant done here and exit only once --barrier-count "
                         "tenants are done (at most --barrier-s): no swap-in then overlaps another's exit")
    ap.add_argument("--barrier-count", type=int, default=2)
    ap.add_argument("--barrier-s", type=float, default=180.0)
    a = ap.parse_args(argv)
    if a.gib <= 0 or a.seconds < 0 or a.chunk_mib <= 0 or a.passes < 1:
        ap.error("--gib and --chunk-mib must be > 0, --seconds >= 0, --passes >= 1")
    if a.chunk_mib > 4096:
        ap.error("--chunk-mib must be <= 4096 (distinct page weights)")
    if a.max_wall_s <= 0:
        a.max_wall_s = a.seconds + 420.0
    return a


def chunk_words(total_bytes, chunk_bytes):
    """int32 word counts of the chunks: whole 4 KiB rows, the last chunk possibly smaller."""
    sizes = []
    left = total_bytes
    while left > 0:
        b = min(chunk_bytes, left)
        words = (b // 4) // ROW * ROW
        if words == 0:
            break
        sizes.append(words)
        left -= words * 4
    return sizes


def gap_stats(times, pause_s):
    """times: completion times (s, increasing), the first being the end of setup.
    Returns (max_gap_s, pauses, [(at_s, gap_s)...] of the pauses, median gap)."""
    gaps = [(times[i], times[i] - times[i - 1]) for i in range(1, len(times))]
    if not gaps:
        return 0.0, 0, [], 0.0
    big = [(round(t - times[0], 3), round(g, 3)) for t, g in gaps if g > pause_s]
    ordered = sorted(g for _, g in gaps)
    return max(g for _, g in gaps), len(big), big, ordered[len(ordered) // 2]


class Reporter:
    """Prints the result exactly once, from the main thread or the watchdog."""

    def __init__(self, args, result):
        self.args = args
        self.result = result
        self.lock = threading.Lock()
        self.done = False

    def emit(self, extra=None):
        with self.lock:
            if self.done:
                return False
            self.done = True
            r = dict(self.result)
            if extra:
                r.update(extra)
            r["passed"] = (r.get("error") is None and r["mismatches"] == 0 and r["ooms"] == 0
                           and r["iterations"] >= 2)
            self.result.update(passed=r["passed"])
            line = json.dumps(r, default=str)
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except OSError:
                pass
            if self.args.json:
                try:
                    with open(self.args.json, "w") as f:
                        f.write(line + "\n")
                except OSError as e:
                    print(f"torch_swap: cannot write {self.args.json}: {e}", file=sys.stderr)
            return r["passed"]


def log(args, msg):
    print(f"[torch_swap {args.name} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main(argv=None):
    args = parse_args(argv)
    t_start = time.monotonic()
    result = {
        "name": args.name, "pid": os.getpid(), "gib": args.gib, "seconds": args.seconds,
        "chunk_mib": args.chunk_mib, "chunks": 0, "bytes": 0, "passes": args.passes,
        "iterations": 0, "mismatches": 0, "mismatched_chunks": [], "ptr_changes": 0, "ooms": 0,
        "pauses": 0, "max_gap_s": 0.0, "pause_list": [], "median_iter_s": None,
        "setup_s": None, "first_alloc_s": None, "max_alloc_s": 0.0, "alloc_s_total": 0.0, "run_s": None,
        "error": None, "passed": False,
    }
    rep = Reporter(args, result)
    state = {"progress": time.monotonic(), "phase": "import"}

    def watchdog():
        while not rep.done:
            time.sleep(1.0)
            now = time.monotonic()
            why = None
            if now - state["progress"] > args.stall_s:
                why = f"no progress for {now - state['progress']:.0f} s in phase {state['phase']}"
            elif now - t_start > args.max_wall_s:
                why = f"run exceeded --max-wall-s {args.max_wall_s:.0f} s in phase {state['phase']}"
            if why:
                log(args, "watchdog: " + why)
                finish(list(times))
                open_gap = now - times[-1] if times else None
                rep.emit({"error": "watchdog: " + why, "watchdog": True,
                          "open_gap_s": round(open_gap, 3) if open_gap is not None else None})
                os._exit(3)

    times = []  # iteration completion times; times[0] = end of setup

    def finish(ts):
        mg, pauses, plist, med = gap_stats(ts, args.pause_s)
        result.update(max_gap_s=round(mg, 3), pauses=pauses, pause_list=plist[:50],
                      median_iter_s=round(med, 4) if len(ts) > 1 else None)
        if len(ts) > 1 and result["iterations"]:
            result["iterations_per_s"] = round(result["iterations"] / (ts[-1] - ts[0]), 3)
        return mg, pauses

    threading.Thread(target=watchdog, daemon=True).start()

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)

    try:
        import torch
    except Exception as e:  # no torch: report, do not crash silently
        rep.emit({"error": f"cannot import torch: {e}"})
        return 1
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None))
                      if isinstance(t, type))

    def is_oom(e):
        return (oom_types and isinstance(e, oom_types)) or "out of memory" in str(e).lower()

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    result["torch"] = torch.__version__
    chunks, ptrs, ref = [], [], None
    try:
        state["phase"] = "setup"
        if cuda:
            torch.cuda.init()
            result["device_name"] = torch.cuda.get_device_name(dev)
            free, total = torch.cuda.mem_get_info(dev)
            result.update(view_free_bytes=free, view_total_bytes=total)
        sizes = chunk_words(int(args.gib * 2**30), args.chunk_mib * 2**20)
        max_rows = max(sizes) // ROW if sizes else 1
        w = (torch.arange(max_rows, dtype=torch.int64, device=dev) * 40503 + 17) % W_MOD + 1

        def checksums(x):
            # Per 4 KiB row, in 64 MiB pieces: a sum with dtype=int64 may widen its whole input
            # first, and a 2 GiB temporary per 1 GiB chunk would blow the tenant's quota.
            r = torch.cat([p.view(-1, ROW).sum(dim=1, dtype=torch.int64) for p in x.split(1 << 24)])
            s1 = r.sum()
            s2 = ((r.remainder(P) * w[: r.numel()]).remainder(P)).sum()
            return torch.stack([s1, s2])

        refs = []
        log(args, f"allocating {len(sizes)} chunks, {sum(sizes) * 4 / 2**30:.2f} GiB")
        for i, n in enumerate(sizes):
            t0 = time.monotonic()
            try:
                x = torch.empty(n, dtype=torch.int32, device=dev)
            except Exception as e:
                if not is_oom(e):
                    raise
                result["ooms"] += 1
                raise RuntimeError(f"out of memory allocating chunk {i} of {len(sizes)} "
                                   f"({sum(sizes[:i]) * 4 / 2**30:.2f} GiB held): {str(e).splitlines()[0][:200]}")
            dt = time.monotonic() - t0
            if i == 0:
                result["first_alloc_s"] = round(dt, 3)
            result["alloc_s_total"] = round(result["alloc_s_total"] + dt, 3)
            result["max_alloc_s"] = round(max(result["max_alloc_s"], dt), 3)
            g = torch.Generator(device=dev)
            g.manual_seed(args.seed * 1000003 + i)
            x.random_(generator=g)  # uniform in [0, 2^31 - 1]
            refs.append(checksums(x))
            chunks.append(x)
            ptrs.append(x.data_ptr())
            state["progress"] = time.monotonic()
        ref = torch.stack(refs).cpu()  # waits for every fill
        del refs
        result.update(chunks=len(chunks), bytes=sum(sizes) * 4, setup_s=round(time.monotonic() - t_start, 3))
        if cuda:
            result["mem_allocated_bytes"] = torch.cuda.memory_allocated(dev)
            result["mem_reserved_bytes"] = torch.cuda.memory_reserved(dev)
        log(args, f"ready: {len(chunks)} chunks, {result['bytes'] / 2**30:.2f} GiB, setup {result['setup_s']} s")

        state["phase"] = "loop"
        t_loop = time.monotonic()
        times.append(t_loop)
        last_log = t_loop
        bad = set()
        while time.monotonic() - t_loop < args.seconds or result["iterations"] < 2:
            if time.monotonic() - t_loop > args.seconds + 120:
                break  # fewer than 2 iterations long after the deadline: report
            try:
                for _ in range(args.passes):
                    out = torch.stack([checksums(x) for x in chunks])
                got = out.cpu()  # the one synchronisation of the iteration
            except Exception as e:
                if not is_oom(e):
                    raise
                result["ooms"] += 1
                log(args, f"OOM in the loop ({result['ooms']}): {str(e).splitlines()[0][:200]}")
                if result["ooms"] >= args.max_ooms:
                    break
                time.sleep(0.2)
                continue
            now = time.monotonic()
            times.append(now)
            state["progress"] = now
            result["iterations"] += 1
            diff = (got != ref).any(dim=1).nonzero().flatten().tolist()
            if diff:
                result["mismatches"] += len(diff)
                bad.update(diff)
                result["mismatched_chunks"] = sorted(bad)[:64]
                log(args, f"MISMATCH in iteration {result['iterations']}: chunks {diff[:16]}")
            moved = sum(1 for x, p in zip(chunks, ptrs) if x.data_ptr() != p)
            result["ptr_changes"] += moved
            result["mismatches"] += moved
            if now - last_log >= 5.0:
                last_log = now
                mg, pauses, _, _ = gap_stats(times, args.pause_s)
                print(json.dumps({"progress": args.name, "t_s": round(now - t_loop, 1),
                                  "iterations": result["iterations"], "mismatches": result["mismatches"],
                                  "ooms": result["ooms"], "pauses": pauses, "max_gap_s": round(mg, 3)}),
                      file=sys.stderr, flush=True)
        result["run_s"] = round(time.monotonic() - t_loop, 3)
    except KeyboardInterrupt as e:
        result["error"] = f"interrupted ({e}) in phase {state['phase']}"
    except Exception as e:
        traceback.print_exc()
        result["error"] = f"{type(e).__name__}: {str(e)[:500]}"
    mg, pauses = finish(times)
    if cuda:
        try:
            result["max_mem_allocated_bytes"] = torch.cuda.max_memory_allocated(dev)
        except Exception:
            pass
    ok = rep.emit()
    log(args, f"done: iterations {result['iterations']}, mismatches {result['mismatches']}, "
              f"ooms {result['ooms']}, pauses {pauses}, max gap {mg:.2f} s, passed {ok}")
    if args.barrier_dir:
        wait_for_the_others(args)
    return 0 if ok else 1


def wait_for_the_others(args):
    """Holds this process (and its GPU memory) until every tenant of the test is done, so that the
    other tenant's last swap-in never runs while this one's memory is being torn down at exit."""
    os.makedirs(args.barrier_dir, exist_ok=True)
    with open(os.path.join(args.barrier_dir, f"{os.getpid()}.done"), "w") as f:
        f.write(args.name + "\n")
    deadline = time.monotonic() + args.barrier_s
    while time.monotonic() < deadline:
        done = [n for n in os.listdir(args.barrier_dir) if n.endswith(".done")]
        if len(done) >= args.barrier_count:
            log(args, "every tenant is done; exiting")
            return
        time.sleep(0.2)
    log(args, f"barrier: gave up after {args.barrier_s:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
