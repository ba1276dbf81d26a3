# SPDX-License-Identifier: Apache-2.0
"""bench/kv without torch or a GPU: block geometry and allocator, the batcher's admission,
growth, preemption and target handling, the serve loop on a fake engine, ON/OFF arrivals, the
summary and the runner's plan.  python3 -m unittest discover -s bench/kv -p "test_*.py"
"""
import contextlib
import io
import os
import random
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "colocation"))
import kv_logic  # noqa: E402
import kv_summary  # noqa: E402
import llama_shapes  # noqa: E402
import multi_model  # noqa: E402
import onoff  # noqa: E402
import paged_server  # noqa: E402

MIB = kv_logic.MIB
PAGE = kv_logic.DEFAULT_PAGE_BYTES


def page_blocks(num_blocks, all_mapped=False, chunk=kv_logic.DEFAULT_CHUNK_BYTES):
    """A pool whose blocks are exactly one page each (the default geometry)."""
    geo = kv_logic.Geometry(num_blocks, PAGE - 4096, PAGE, PAGE, chunk)
    return kv_logic.BlockAllocator(geo, all_mapped)


class FakePool:
    """map/unmap recorder; refuses maps that would pass max_pages mapped."""

    def __init__(self, max_pages=10**9):
        self.mapped = set()
        self.max_pages = max_pages
        self.calls = []

    def map(self, pages):
        if len(self.mapped | set(pages)) > self.max_pages:
            return False
        self.calls.append(("map", list(pages)))
        self.mapped |= set(pages)
        return True

    def unmap(self, pages):
        assert set(pages) <= self.mapped, "unmap of unmapped pages"
        self.calls.append(("unmap", list(pages)))
        self.mapped -= set(pages)


def batcher(num_blocks=64, bt=16, max_batch=8, max_prefill=4, pool=None, all_mapped=False):
    alloc = page_blocks(num_blocks, all_mapped)
    pool = pool or FakePool()
    return kv_logic.Batcher(alloc, bt, max_batch, max_prefill, pool.map, pool.unmap), pool


def req(i, prompt=32, new=4, arr=0.0):
    return kv_logic.Req(i, arr, [i % 7] * prompt, new)


class Geometry(unittest.TestCase):
    def test_default_blocks_fill_a_page(self):
        for params, bt in ((1, 53), (3, 18), (8, 14)):
            cfg = llama_shapes.config_for_params(params)
            s = kv_logic.sequence_bytes(cfg, 1280)
            self.assertEqual(s["block_tokens"], bt)
            self.assertEqual(s["stride_bytes"], PAGE)
            self.assertLessEqual(s["bytes_per_token"] * bt, PAGE)

    def test_stride_divides_or_is_a_multiple_of_the_page(self):
        self.assertEqual(kv_logic.block_stride_bytes(600 * 1024), 1 * MIB)
        self.assertEqual(kv_logic.block_stride_bytes(1 * MIB), 1 * MIB)
        self.assertEqual(kv_logic.block_stride_bytes(PAGE), PAGE)
        self.assertEqual(kv_logic.block_stride_bytes(PAGE + 1), 2 * PAGE)
        with self.assertRaises(ValueError):
            kv_logic.Geometry(10, 3 * MIB, 3 * MIB)          # neither divides nor multiple of 2 MiB

    def test_pages_of_blocks_small_and_large(self):
        small = kv_logic.Geometry(16, 500 * 1024, 512 * 1024)   # four blocks per page
        self.assertEqual(list(small.pages_of_block(5)), [1])
        self.assertEqual(list(small.blocks_of_page(1)), [4, 5, 6, 7])
        big = kv_logic.Geometry(4, 3 * MIB, 4 * MIB)             # two pages per block
        self.assertEqual(list(big.pages_of_block(1)), [2, 3])
        self.assertEqual(list(big.blocks_of_page(3)), [1])

    def test_target_limit_is_in_whole_chunks(self):
        geo = page_blocks(64).geo                                # 16 pages per chunk
        self.assertEqual(geo.limit_page_for_target(32 * MIB), 16)
        self.assertEqual(geo.limit_page_for_target(63 * MIB), 16)   # a partial chunk cannot stay
        self.assertEqual(geo.limit_page_for_target(0), 0)


class Ballast(unittest.TestCase):
    def test_leaves_the_kv_still_unmapped_and_the_reserves_free(self):
        gib = 1 << 30
        # 100 GiB free, a 9 GiB budget of which 3 GiB are mapped: 6 GiB + 3 x 512 MiB + 600 MiB stay.
        self.assertEqual(kv_logic.ballast_mib(102400, 9 * gib, 3 * gib, 3, 512, 600),
                         (102400 - 6144 - 1536 - 600) // 32 * 32)
        # Servers already above their budget leave only the reserves free.
        self.assertEqual(kv_logic.ballast_mib(10000, 9 * gib, 12 * gib, 3, 512, 600), (10000 - 2136) // 32 * 32)
        # Too little free: no ballast.
        self.assertEqual(kv_logic.ballast_mib(1000, 9 * gib, 0, 3, 512, 600), 0)


class Allocator(unittest.TestCase):
    def test_lowest_first_and_reuse(self):
        a = page_blocks(40)
        self.assertEqual(a.alloc(3), [0, 1, 2])
        self.assertEqual(a.alloc(2), [3, 4])
        a.release([1, 3])
        self.assertEqual(a.alloc(3), [1, 3, 5])
        self.assertIsNone(a.alloc(100))
        self.assertEqual(a.num_used(), 6)
        with self.assertRaises(ValueError):
            a.release([30])

    def test_growth_maps_only_new_pages(self):
        a = page_blocks(40)
        b = a.alloc(2)
        self.assertEqual(a.unmapped_pages_of(b), [0, 1])
        a.note_mapped([0, 1])
        self.assertEqual(a.unmapped_pages_of(a.alloc(1)), [2])
        self.assertEqual(a.resident_bytes(), 32 * MIB)

    def test_shared_pages_are_freed_only_when_all_their_blocks_are(self):
        geo = kv_logic.Geometry(64, 500 * 1024, 512 * 1024)
        a = kv_logic.BlockAllocator(geo, all_mapped=False)
        b = a.alloc(6)                              # pages 0 and 1
        a.note_mapped(a.unmapped_pages_of(b))
        self.assertEqual(sorted(a.mapped), [0, 1])
        a.release([4])
        self.assertEqual(a.mapped_free_pages_at_or_above(0), [])   # block 5 still uses page 1
        a.release([5])
        self.assertEqual(a.mapped_free_pages_at_or_above(0), [1])

    def test_free_chunk_pages_empty_whole_chunks_only(self):
        a = page_blocks(64)
        b = a.alloc(40)                             # chunks 0, 1 and half of 2
        a.note_mapped(a.unmapped_pages_of(b))
        a.release(list(range(16, 40)))              # chunks 1 and 2 empty
        a.release([3])                              # chunk 0 keeps used blocks
        self.assertEqual(a.free_chunk_pages(0), list(range(16, 40)))
        self.assertEqual(a.free_chunk_pages(2), list(range(32, 40)))

    def test_limit_and_mapped_only(self):
        a = page_blocks(64)
        a.set_limit_page(16)
        self.assertIsNone(a.alloc(17))
        self.assertEqual(len(a.alloc(16)), 16)
        a.set_limit_page(None)
        a.release([2])
        a.note_mapped([0, 1, 2])
        self.assertEqual(a.alloc(1, mapped_only=True), [2])
        self.assertIsNone(a.alloc(1, mapped_only=True))
        self.assertEqual(a.alloc(1), [16])


class BatcherLogic(unittest.TestCase):
    def test_admission_waits_for_free_blocks(self):
        bt_, pool = batcher(num_blocks=5, bt=16)
        for i in range(3):
            bt_.enqueue(req(i, prompt=32))          # 2 blocks each
        adm = bt_.admit(0.0)
        self.assertEqual([r.rid for r in adm], [0, 1])
        self.assertEqual(len(bt_.queue), 1)
        self.assertEqual(bt_.kv_blocked_steps, 1)
        self.assertEqual(pool.calls, [("map", [0, 1]), ("map", [2, 3])])
        bt_.retire(adm[0])
        self.assertEqual([r.rid for r in bt_.admit(0.0)], [2])
        self.assertEqual(adm[1].blocks, [2, 3])

    def test_batch_and_prefill_limits(self):
        bt_, _ = batcher(num_blocks=64, max_batch=3, max_prefill=2)
        for i in range(5):
            bt_.enqueue(req(i))
        self.assertEqual(len(bt_.admit(0.0)), 2)
        self.assertEqual(len(bt_.admit(0.0)), 1)
        self.assertEqual(bt_.admit(0.0), [])
        self.assertEqual(bt_.batch_blocked_steps, 2)   # the 2nd and 3rd admit met the batch cap

    def test_growth_preempts_the_youngest(self):
        bt_, _ = batcher(num_blocks=5, bt=16)
        a, b = req(0, prompt=32), req(1, prompt=32)
        bt_.enqueue(a)
        bt_.enqueue(b)
        bt_.admit(0.0)
        for r in (a, b):                           # prefill done: 32 tokens in, one generated
            r.kv_len = 32
            r.out.append(5)
        bt_.grow_for_decode(0.0)                   # both need a third block; one is free
        self.assertEqual(bt_.running, [a])
        self.assertEqual(len(a.blocks), 3)
        self.assertEqual(list(bt_.queue), [b])
        self.assertEqual((b.preemptions, b.kv_len, b.blocks), (1, 0, []))
        self.assertEqual(b.prefill_tokens(), b.prompt + [5])   # recompute prompt + its tokens

    def test_the_youngest_preempts_itself(self):
        bt_, _ = batcher(num_blocks=3, bt=16)
        a, b = req(0, prompt=16), req(1, prompt=16)
        bt_.enqueue(a)
        bt_.enqueue(b)
        bt_.admit(0.0)
        a.kv_len, b.kv_len = 32, 16                # a needs 2 more, b needs 1 more; 1 free
        bt_.grow_for_decode(0.0)
        self.assertEqual(bt_.running, [a])
        self.assertEqual(len(a.blocks), 3)
        self.assertEqual(bt_.preemptions, 1)

    def test_target_preempts_owners_of_high_blocks_and_unmaps_whole_chunks(self):
        bt_, pool = batcher(num_blocks=64, bt=16, max_batch=8, max_prefill=8)
        rs = [req(i, prompt=16 * 8) for i in range(4)]     # 8 blocks each: blocks 0..31
        for r in rs:
            bt_.enqueue(r)
        bt_.admit(0.0)
        self.assertEqual(pool.mapped, set(range(32)))
        n = bt_.apply_target(40 * MIB)             # one chunk (16 pages) may stay
        self.assertEqual(n, 2)                     # rs[2], rs[3] held blocks 16..31
        self.assertEqual([r.rid for r in bt_.running], [0, 1])
        self.assertEqual([r.rid for r in bt_.queue], [2, 3])
        self.assertEqual(pool.mapped, set(range(16)))
        self.assertEqual(bt_.alloc.resident_bytes(), 32 * MIB)
        self.assertEqual(bt_.admit(1.0), [])       # nothing above the limit is handed out
        bt_.apply_target(None)
        self.assertEqual([r.rid for r in bt_.admit(2.0)], [2, 3])

    def test_target_preempts_youngest_first_among_high_owners(self):
        bt_, pool = batcher(num_blocks=64, bt=16, max_batch=8, max_prefill=8)
        old, young = req(0, prompt=16 * 20), req(1, prompt=16 * 4)   # old: blocks 0..19
        bt_.enqueue(old)
        bt_.enqueue(young)
        bt_.admit(0.0)
        bt_.apply_target(32 * MIB)
        self.assertEqual(bt_.preemptions, 2)       # young first (blocks 20..23), then old
        self.assertEqual(pool.mapped, set(range(16)))   # the chunk below the limit may stay

    def test_refused_map_backs_off_and_uses_mapped_blocks(self):
        pool = FakePool(max_pages=4)
        bt_, _ = batcher(num_blocks=64, bt=16, pool=pool)
        a, b = req(0, prompt=48), req(1, prompt=48)
        bt_.enqueue(a)
        bt_.enqueue(b)
        self.assertEqual(bt_.admit(0.0), [a])
        self.assertEqual(bt_.map_refusals, 1)
        calls = len(pool.calls)
        self.assertEqual(bt_.admit(0.1), [])       # within the backoff: no map call at all
        self.assertEqual(len(pool.calls), calls)
        bt_.retire(a)
        self.assertEqual(bt_.admit(0.15), [b])     # mapped blocks are still handed out
        self.assertEqual(b.blocks, [0, 1, 2])

    def test_idle_give_back_keeps_low_watermark_and_headroom(self):
        bt_, pool = batcher(num_blocks=160, bt=16, max_prefill=8)
        rs = [req(i, prompt=16 * 16) for i in range(6)]    # one chunk each: chunks 0..5
        for r in rs:
            bt_.enqueue(r)
        bt_.admit(0.0)
        for r in rs[1:]:
            bt_.retire(r)
        # used: chunk 0. watermark 1 chunk; headroom: chunk 1 stays.
        self.assertEqual(bt_.maybe_give_back(10.0, idle_s=2.0, low_watermark_chunks=1), 4 * 16)
        self.assertEqual(pool.mapped, set(range(32)))
        self.assertEqual(bt_.maybe_give_back(10.5, idle_s=2.0, low_watermark_chunks=1), 0)  # once per idle_s
        bt_.enqueue(req(9))
        self.assertEqual(bt_.maybe_give_back(20.0, idle_s=2.0, low_watermark_chunks=0), 0)  # queue: busy


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def now(self):
        return self.t

    def sleep_until(self, t):
        self.t = max(self.t, t)


def next_token(seq):
    return (sum(i * t for i, t in enumerate(seq)) + len(seq)) % 1000


class FakeEngine:
    """Keeps tokens in fake KV blocks (block -> bt slots) and answers next_token(sequence read
    back through the row's block table): wrong tables, missing writes or unzeroed reuse show up as
    wrong tokens or assertion errors. Each step takes 10 ms of the fake clock."""

    def __init__(self, clock, bt):
        self.clock = clock
        self.bt = bt
        self.kv = {}

    def zero_blocks(self, blocks):
        for b in blocks:
            self.kv[b] = [None] * self.bt

    def _write(self, table, p, tok):
        self.kv[table[p // self.bt]][p % self.bt] = tok

    def _read(self, table, n):
        seq = [self.kv[table[p // self.bt]][p % self.bt] for p in range(n)]
        assert None not in seq, "read a position that was never written"
        return seq

    def prefill(self, token_lists, tables):
        self.clock.t += 0.01
        out = []
        for toks, t in zip(token_lists, tables):
            assert len(t) * self.bt >= len(toks)
            for p, tok in enumerate(toks):
                self._write(t, p, tok)
            out.append(next_token(self._read(t, len(toks))))
        return out

    def decode(self, tokens, positions, tables):
        self.clock.t += 0.01
        out = []
        for tok, p, t in zip(tokens, positions, tables):
            assert p // self.bt < len(t)
            self._write(t, p, tok)
            out.append(next_token(self._read(t, p + 1)))
        return out


class FakeBacking:
    def __init__(self, elastic, pool, targets=None):
        self.elastic = elastic
        self.pool = pool
        self.targets = targets or []   # [(from_t, bytes or None)]
        self.clock = None
        self.queue_reports = []

    def map_pages(self, pages):
        return self.pool.map(pages)

    def unmap_pages(self, pages):
        self.pool.unmap(pages)

    def target_bytes(self):
        cur = None
        for t, v in self.targets:
            if self.clock.t >= t:
                cur = v
        return cur

    def report_queue(self, n):
        self.queue_reports.append(n)


class Stop:
    stop = False


def reference_tokens(r):
    """What FakeEngine yields for r without any preemption."""
    seq = list(r.prompt)
    out = []
    while len(out) < r.max_new:
        out.append(next_token(seq))
        seq.append(out[-1])
    return out


class ServeLoop(unittest.TestCase):
    def run_loop(self, elastic, targets=None, num_blocks=64, n=12, max_pages=10**9):
        clock = FakeClock()
        pool = FakePool(max_pages)
        bt_, _ = batcher(num_blocks=num_blocks, bt=16, max_batch=8, max_prefill=4, pool=pool,
                         all_mapped=not elastic)
        backing = FakeBacking(elastic, pool, targets)
        backing.clock = clock
        eng = FakeEngine(clock, 16)
        rng = random.Random(3)
        reqs = [kv_logic.Req(i, 0.02 * i, [rng.randrange(50) for _ in range(40)], 20) for i in range(n)]
        res = paged_server.serve(eng, bt_, backing, reqs, clock, Stop(), 100.0, 0.5, 0)
        return res, bt_, pool, backing, reqs

    def test_static_pool_serves_everyone_in_order(self):
        res, bt_, pool, _, reqs = self.run_loop(elastic=False)
        self.assertFalse(res["aborted"])
        self.assertEqual(len(res["done"]), 12)
        self.assertEqual(pool.calls, [])           # a static pool never maps
        for r in reqs:
            self.assertEqual(r.out, reference_tokens(r))
        self.assertEqual(bt_.alloc.num_used(), 0)
        s = paged_server.latency_summary(res, 0.0, 100.0)
        self.assertEqual((s["requests"], s["unfinished"], s["ttft_censored"]), (12, 0, 0))

    def test_tight_memory_preempts_and_recomputes_the_same_tokens(self):
        res, bt_, _, _, reqs = self.run_loop(elastic=False, num_blocks=9)
        self.assertEqual(len(res["done"]), 12)
        self.assertGreater(bt_.preemptions, 0)
        for r in reqs:
            self.assertEqual(r.out, reference_tokens(r))

    def test_elastic_pool_meets_a_target_and_gives_memory_back(self):
        clock = FakeClock()
        seen = []                                   # (time, mapped pages) after every map/unmap

        class RecordingPool(FakePool):
            def map(self, pages):
                ok = FakePool.map(self, pages)
                seen.append((clock.t, set(self.mapped)))
                return ok

            def unmap(self, pages):
                FakePool.unmap(self, pages)
                seen.append((clock.t, set(self.mapped)))

        pool = RecordingPool()
        bt_, _ = batcher(num_blocks=64, bt=16, max_batch=8, max_prefill=4, pool=pool)
        backing = FakeBacking(True, pool, [(0.1, 32 * MIB), (0.5, None)])
        backing.clock = clock
        rng = random.Random(3)
        reqs = [kv_logic.Req(i, 0.02 * i, [rng.randrange(50) for _ in range(40)], 20) for i in range(12)]
        reqs.append(kv_logic.Req(12, 5.0, [1] * 40, 20))    # after an idle gap
        res = paged_server.serve(FakeEngine(clock, 16), bt_, backing, reqs, clock, Stop(), 100.0, 0.5, 0)
        self.assertEqual(len(res["done"]), 13)
        self.assertEqual([v for _, v in res["targets"]], [32 * MIB, None])
        self.assertGreater(max(len(m) for _, m in seen), 16)                   # it grew past a chunk
        under = [m for t, m in seen if 0.1 <= t < 0.5]
        self.assertTrue(under and all(max(m, default=-1) < 16 for m in under))  # target met at once
        idle = [m for t, m in seen if 0.5 < t < 5.0]
        # Idle (watermark 0, nothing used): all but one chunk of headroom given back.
        self.assertTrue(idle and idle[-1] == set(range(16)), idle)
        self.assertEqual(backing.queue_reports[-1], 0)
        for r in reqs:
            self.assertEqual(r.out, reference_tokens(r))

    def test_drain_deadline_censors_waiting_requests(self):
        clock = FakeClock()
        bt_, _ = batcher(num_blocks=64, all_mapped=True)
        reqs = [kv_logic.Req(i, 0.0, [1] * 16, 1000) for i in range(10)]
        backing = FakeBacking(False, FakePool())
        backing.clock = clock
        res = paged_server.serve(FakeEngine(clock, 16), bt_, backing, reqs, clock, Stop(), 1.0, 1.0, 0)
        self.assertTrue(res["aborted"])
        s = paged_server.latency_summary(res, 0.0, clock.t)
        self.assertEqual(s["requests"], 0)
        self.assertEqual(s["unfinished"], 10)
        self.assertEqual(s["ttft_censored"], 2)    # max_batch 8 got their first token
        self.assertEqual(s["ttft_ms"]["n"], 10)


class OnOff(unittest.TestCase):
    def test_seeded_and_sorted(self):
        a = onoff.onoff_arrivals(20, 1, 10, 0.0, 60, seed=5)
        self.assertEqual(a, onoff.onoff_arrivals(20, 1, 10, 0.0, 60, seed=5))
        self.assertNotEqual(a, onoff.onoff_arrivals(20, 1, 10, 0.0, 60, seed=6))
        self.assertEqual(a, sorted(a))
        self.assertTrue(all(0 <= t < 60 for t in a))

    def test_rates_on_and_off(self):
        a = onoff.onoff_arrivals(40, 2, 10, 0.0, 400, seed=1, on_fraction=0.5)
        on = sum(1 for t in a if onoff.is_on(t, 10, 0.0, 0.5))
        self.assertAlmostEqual(on / 200.0, 40, delta=3)
        self.assertAlmostEqual((len(a) - on) / 200.0, 2, delta=0.6)

    def test_three_phases_are_anti_correlated(self):
        n, period = 3, 30.0
        arr = [onoff.onoff_arrivals(30, 0, period, i / n, 300, seed=i, on_fraction=1 / n) for i in range(n)]
        for i, a in enumerate(arr):
            self.assertEqual(onoff.on_share(a, 0.0, period, i / n, 1 / n), 1.0)
        # At every second exactly one server is ON.
        for k in range(300):
            t = k + 0.5
            self.assertEqual(sum(onoff.is_on(t, period, i / n, 1 / n) for i in range(n)), 1, t)
        # Server 1's arrivals come in [10, 20) of each period.
        self.assertTrue(all(10 <= (t % period) < 20 for t in arr[1]))

    def test_t0_offsets(self):
        self.assertEqual([t + 100 for t in onoff.onoff_arrivals(5, 1, 4, 0.25, 20, 9)],
                         onoff.onoff_arrivals(5, 1, 4, 0.25, 20, 9, t0=100))

    def test_bad_arguments(self):
        with self.assertRaises(ValueError):
            onoff.onoff_arrivals(1, 1, 0, 0, 10, 1)
        with self.assertRaises(ValueError):
            onoff.onoff_arrivals(1, 1, 10, 0, 10, 1, on_fraction=0)


def metrics(ttft_p99, ok=True, **kw):
    m = {"ok": ok, "ttft_p99_ms": ttft_p99}
    m.update(kw)
    return m


class Summary(unittest.TestCase):
    def test_gain_against_the_best_static_split(self):
        modes = {
            "static-equal": {"servers": {"a": metrics(900.0, mismatches=0, ooms=0), "b": metrics(300.0, mismatches=1, ooms=0)}},
            "static-params": {"servers": {"a": metrics(400.0, tokens_per_s=100.0), "b": metrics(600.0, tokens_per_s=50.0)}},
            "static-1:2": {"servers": {"a": metrics(100.0), "b": metrics(None, ok=False)}},
            "gpuos-elastic": {"servers": {"a": metrics(150.0, mismatches=0, ooms=0, tokens_per_s=120.0),
                                          "b": metrics(200.0, tokens_per_s=60.0)}},
        }
        s = kv_summary.summarize(modes, {"gpu": "H200"})
        self.assertEqual(s["best_static"], "static-params")          # worst server 600 < 900
        self.assertEqual(s["best_static_ttft_p99_ms"], 600.0)
        self.assertEqual(s["elastic_ttft_p99_ms"], 200.0)
        self.assertAlmostEqual(s["ttft_p99_gain"], 3.0)
        self.assertIsNone(s["modes"]["static-1:2"]["ttft_p99_ms"])   # a failed server: no verdict
        self.assertEqual((s["best_static_tokens_per_s"], s["elastic_tokens_per_s"]), (150.0, 180.0))
        self.assertAlmostEqual(s["throughput_ratio"], 1.2)
        self.assertIsNone(s["modes"]["static-equal"]["tokens_per_s"])  # a server without tokens/s
        self.assertEqual(s["mismatches"], 1)
        self.assertEqual(s["ooms"], 0)
        md = kv_summary.markdown(s)
        self.assertIn("| gpuos-elastic | a |", md)
        self.assertIn("ttft_p99_gain (best static / elastic): 3", md)

    def test_no_elastic_no_gain(self):
        s = kv_summary.summarize({"static-equal": {"servers": {"a": metrics(5.0)}}}, {})
        self.assertIsNone(s["ttft_p99_gain"])
        self.assertIsNone(s["mismatches"])

    def test_server_metrics_reads_a_server_json(self):
        js = {"ok": True, "ttft_ms": {"p50": 1.0, "p99": 9.0}, "tpot_ms": {"p99": 2.0}, "preemptions": 3,
              "pool": {"resident_bytes": 2**31}, "map_calls": {"ms": {"p99": 4.0}}, "mismatches": 0}
        m = kv_summary.server_metrics(js)
        self.assertEqual((m["ttft_p99_ms"], m["tpot_p99_ms"], m["preemptions"]), (9.0, 2.0, 3))
        self.assertEqual((m["resident_gib_end"], m["map_call_p99_ms"]), (2.0, 4.0))
        self.assertFalse(kv_summary.server_metrics(None)["ok"])


class Plan(unittest.TestCase):
    def test_splits(self):
        self.assertEqual(multi_model.split_gib(24, multi_model.parse_split("equal", [1, 3, 8])), [8.0, 8.0, 8.0])
        self.assertEqual(multi_model.split_gib(24, multi_model.parse_split("params", [1, 3, 8])), [2.0, 6.0, 16.0])
        self.assertEqual(multi_model.split_gib(16, multi_model.parse_split("1:1:2", [1, 3, 8])), [4.0, 4.0, 8.0])
        for bad in ("1:2", "a:b:c", "0:1:1"):
            with self.assertRaises(ValueError):
                multi_model.parse_split(bad, [1, 3, 8])

    def test_elastic_quota_and_dry_run(self):
        a = multi_model.parse_args(["--dry-run"])
        servers = multi_model.server_plan(a)
        self.assertEqual([s["phase"] for s in servers], [0.0, 1 / 3, 2 / 3])
        share = multi_model.kv_split(a, servers, "gpuos-elastic")
        q = multi_model.elastic_quota(a, servers[2], share[2])
        self.assertAlmostEqual(q["mem_gib"], servers[2]["weights_gib"] + a.overhead_gib + a.kv_total_gib / 3)
        self.assertAlmostEqual(q["borrow_gib"], a.kv_total_gib * 2 / 3)
        self.assertTrue(multi_model.memory_table(a, servers)["fits"])
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            self.assertEqual(multi_model.main(["--dry-run", "--out", "/tmp/kv-plan-test"]), 0)
        text = buf.getvalue()
        self.assertIn("gpuos-elastic", text)
        self.assertIn("--kv gpuos --kv-max-gib 24", text)
        self.assertIn("run --name m2-8b --mem", text)
        self.assertIn("estimate:", text)
        self.assertFalse(os.path.exists("/tmp/kv-plan-test"))      # a dry run writes nothing

    def test_quick_and_budget(self):
        a = multi_model.parse_args(["--quick", "--budget-s", "150"])
        self.assertEqual((a.prompt, a.splits), (256, "equal"))
        r = multi_model.Runner(a)
        self.assertEqual(r.modes, ["static-equal", "gpuos-elastic"])
        self.assertIn("OVER BUDGET", multi_model.plan_text(a, r.servers, r.modes))
        self.assertEqual(multi_model.main(["--dry-run", "--splits", "bogus"]), 2)


if __name__ == "__main__":
    unittest.main()
