# SPDX-License-Identifier: Apache-2.0
"""Pure-Python logic of the paged-KV server: block geometry, the block allocator and the batcher.

No torch here: everything in this module is unit-tested on any machine (test_kv_logic.py).

Terms
  page   the unit gpuos.kv maps and unmaps (2 MiB by default).
  chunk  one physical allocation of the pool (32 MiB = 16 pages by default): a chunk holds GPU
         memory while any of its pages is mapped, and gives it back only when all are unmapped.
  block  block_tokens tokens of KV for every layer (the engine's unit). Block b occupies bytes
         [b * stride, b * stride + block_bytes) of the pool, stride >= block_bytes. The stride is
         either a divisor of the page (several blocks per page) or a multiple of it (several pages
         per block), so a page never holds part of a block that also spans another page's blocks.

Policy (what makes chunks empty so memory can really go back):
  * blocks are allocated lowest id first, so used blocks pack into the low chunks;
  * to meet a target, the owners of blocks at or above the limit are preempted (youngest first),
    then every mapped page at or above the limit is unmapped;
  * when idle, chunks at or above a low watermark that hold no used block are unmapped.
"""
from __future__ import annotations

import bisect
import collections
from typing import Callable, Dict, Iterable, List, Optional

MIB = 1 << 20
GIB = 1 << 30
DEFAULT_PAGE_BYTES = 2 * MIB
DEFAULT_CHUNK_BYTES = 32 * MIB


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------------------------
# Model arithmetic (same formulas as llama.py, repeated here so this module needs no torch)

def kv_bytes_per_token(cfg: dict, elem_bytes: int = 2) -> int:
    """K and V of one token over all layers: L * 2 * kv_heads * head_dim * elem_bytes."""
    return cfg["layers"] * 2 * cfg["kv_heads"] * cfg["head_dim"] * elem_bytes


def choose_block_tokens(bytes_per_token: int, page_bytes: int = DEFAULT_PAGE_BYTES) -> int:
    """Default block size: the most tokens whose KV fits in one page (so block == page, padding
    below one token's KV), at least 1. E.g. Llama-8B-shaped (35 layers, 8 KV heads, head_dim 128,
    bf16): 140 KiB per token -> 14 tokens = 1.91 MiB in a 2 MiB page (4.3% padding)."""
    return max(1, page_bytes // bytes_per_token)


def block_stride_bytes(block_bytes: int, page_bytes: int = DEFAULT_PAGE_BYTES) -> int:
    """Bytes from one block to the next: block_bytes rounded up to a power-of-two divisor of the
    page (block_bytes <= page) or to a whole number of pages (block_bytes > page)."""
    if block_bytes <= 0:
        raise ValueError("block_bytes must be positive")
    if block_bytes > page_bytes:
        return ceil_div(block_bytes, page_bytes) * page_bytes
    stride = page_bytes
    while stride // 2 >= block_bytes and (page_bytes % (stride // 2)) == 0:
        stride //= 2
    return stride


class Geometry:
    """Where blocks, pages and chunks lie in the pool (all in bytes from the pool's base)."""

    def __init__(self, num_blocks: int, block_bytes: int, stride_bytes: int,
                 page_bytes: int = DEFAULT_PAGE_BYTES, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        if num_blocks <= 0:
            raise ValueError("num_blocks must be positive")
        if stride_bytes < block_bytes:
            raise ValueError("stride_bytes < block_bytes")
        if not (page_bytes % stride_bytes == 0 or stride_bytes % page_bytes == 0):
            raise ValueError(f"block stride {stride_bytes} must divide the page {page_bytes} or be a multiple of it")
        if chunk_bytes % page_bytes:
            raise ValueError("chunk_bytes must be a multiple of page_bytes")
        self.num_blocks = int(num_blocks)
        self.block_bytes = int(block_bytes)
        self.stride_bytes = int(stride_bytes)
        self.page_bytes = int(page_bytes)
        self.chunk_bytes = int(chunk_bytes)
        self.pages_per_chunk = chunk_bytes // page_bytes
        self.pool_bytes = self.num_blocks * self.stride_bytes
        self.num_pages = ceil_div(self.pool_bytes, page_bytes)
        self.num_chunks = ceil_div(self.num_pages, self.pages_per_chunk)

    def pages_of_block(self, b: int) -> range:
        first = (b * self.stride_bytes) // self.page_bytes
        last = (b * self.stride_bytes + self.block_bytes - 1) // self.page_bytes
        return range(first, last + 1)

    def blocks_of_page(self, p: int) -> range:
        """Blocks that have bytes in page p."""
        lo = (p * self.page_bytes) // self.stride_bytes
        hi = min(self.num_blocks, ceil_div((p + 1) * self.page_bytes, self.stride_bytes))
        return range(lo, hi)

    def chunk_of_page(self, p: int) -> int:
        return p // self.pages_per_chunk

    def first_block_at_or_above_page(self, p: int) -> int:
        """The lowest block any of whose bytes lie in page p or above."""
        return min(self.num_blocks, (p * self.page_bytes) // self.stride_bytes)

    def limit_page_for_target(self, target_bytes: int) -> int:
        """Pages below this may stay mapped for resident bytes <= target_bytes: whole chunks only
        (a chunk with one mapped page is resident in full)."""
        chunks = max(0, target_bytes) // self.chunk_bytes
        return min(self.num_pages, chunks * self.pages_per_chunk)


# ---------------------------------------------------------------------------------------------
# The block allocator

class BlockAllocator:
    """Free blocks (lowest first), the mapped pages, and the map/unmap decisions.

    all_mapped=True: a static pool (everything mapped once, nothing to map or unmap ever).
    limit_block: blocks at or above it are not handed out (a target is in force)."""

    def __init__(self, geo: Geometry, all_mapped: bool) -> None:
        self.geo = geo
        self.free: List[int] = list(range(geo.num_blocks))    # sorted ascending
        self.used = set()
        self.mapped = set(range(geo.num_pages)) if all_mapped else set()
        self.limit_block = geo.num_blocks
        self.max_used = 0          # most blocks used at once
        self.high_water = 0        # highest block id + 1 ever used

    # --- queries ---
    def num_free_below_limit(self) -> int:
        return bisect.bisect_left(self.free, self.limit_block)

    def num_used(self) -> int:
        return len(self.used)

    def resident_chunks(self) -> int:
        return len({self.geo.chunk_of_page(p) for p in self.mapped})

    def resident_bytes(self) -> int:
        return self.resident_chunks() * self.geo.chunk_bytes

    def unmapped_pages_of(self, blocks: Iterable[int]) -> List[int]:
        pages = set()
        for b in blocks:
            for p in self.geo.pages_of_block(b):
                if p not in self.mapped:
                    pages.add(p)
        return sorted(pages)

    def page_is_free(self, p: int) -> bool:
        return not any(b in self.used for b in self.geo.blocks_of_page(p))

    # --- allocation ---
    def block_is_mapped(self, b: int) -> bool:
        return all(p in self.mapped for p in self.geo.pages_of_block(b))

    def alloc(self, n: int, mapped_only: bool = False) -> Optional[List[int]]:
        """The n lowest free blocks below the limit (mapped_only: among those whose pages are all
        mapped already), now used; None if there are not n."""
        if n < 0:
            raise ValueError("n < 0")
        if self.num_free_below_limit() < n:
            return None
        if not mapped_only:
            blocks = self.free[:n]
            del self.free[:n]
        else:
            blocks = []
            for b in self.free:
                if len(blocks) == n or b >= self.limit_block:
                    break
                if self.block_is_mapped(b):
                    blocks.append(b)
            if len(blocks) < n:
                return None
            for b in blocks:
                del self.free[bisect.bisect_left(self.free, b)]
        self.used.update(blocks)
        self.max_used = max(self.max_used, len(self.used))
        if blocks:
            self.high_water = max(self.high_water, blocks[-1] + 1)
        return blocks

    def release(self, blocks: Iterable[int]) -> None:
        for b in blocks:
            if b not in self.used:
                raise ValueError(f"block {b} is not in use")
            self.used.remove(b)
            bisect.insort(self.free, b)

    def note_mapped(self, pages: Iterable[int]) -> None:
        self.mapped.update(pages)

    def note_unmapped(self, pages: Iterable[int]) -> None:
        for p in pages:
            self.mapped.discard(p)

    # --- shrinking ---
    def set_limit_page(self, limit_page: Optional[int]) -> None:
        """Hand out no block with bytes at or above limit_page (None: no limit)."""
        if limit_page is None:
            self.limit_block = self.geo.num_blocks
        else:
            self.limit_block = self.geo.first_block_at_or_above_page(limit_page)

    def used_blocks_at_or_above(self, block: int) -> List[int]:
        return sorted(b for b in self.used if b >= block)

    def mapped_free_pages_at_or_above(self, limit_page: int) -> List[int]:
        """Mapped pages >= limit_page holding no used block (to unmap for a target)."""
        return sorted(p for p in self.mapped if p >= limit_page and self.page_is_free(p))

    def free_chunk_pages(self, min_chunk: int) -> List[int]:
        """Mapped pages of chunks >= min_chunk that hold no used block: unmapping them releases
        those chunks' memory (idle give-back)."""
        by_chunk: Dict[int, List[int]] = collections.defaultdict(list)
        for p in self.mapped:
            c = self.geo.chunk_of_page(p)
            if c >= min_chunk:
                by_chunk[c].append(p)
        out: List[int] = []
        for c, pages in by_chunk.items():
            if all(self.page_is_free(p) for p in pages):
                out.extend(pages)
        return sorted(out)


# ---------------------------------------------------------------------------------------------
# Requests and the batcher (admission by free blocks, growth, preemption)

class Req:
    """One request. prompt: token ids; out: generated token ids (out[-1] is the next decode input
    once admitted); kv_len: tokens whose K/V are in the request's blocks."""

    def __init__(self, rid: int, arr: float, prompt: List[int], max_new: int) -> None:
        self.rid = rid
        self.arr = arr
        self.prompt = prompt
        self.max_new = max_new
        self.out: List[int] = []
        self.blocks: List[int] = []
        self.kv_len = 0
        self.first: Optional[float] = None
        self.done: Optional[float] = None
        self.preemptions = 0
        self.admit_seq = -1

    def prefill_tokens(self) -> List[int]:
        """What a (re)admission prefills: the prompt plus every token generated so far (recompute)."""
        return self.prompt + self.out

    def finished(self) -> bool:
        return len(self.out) >= self.max_new


class Batcher:
    """Continuous-batching decisions over a BlockAllocator; the engine and the clock are outside.

    map_pages(pages) -> bool maps pages of the pool (False: refused, e.g. gpuos.kv.OutOfMemory);
    unmap_pages(pages) unmaps them. In a static pool both are never called (all pages mapped).
    After a refused map no new page is asked for during map_backoff_s."""

    def __init__(self, alloc: BlockAllocator, block_tokens: int, max_batch: int, max_prefill: int,
                 map_pages: Callable[[List[int]], bool], unmap_pages: Callable[[List[int]], None],
                 map_backoff_s: float = 0.2) -> None:
        self.alloc = alloc
        self.bt = int(block_tokens)
        self.max_batch = int(max_batch)
        self.max_prefill = int(max_prefill)
        self.map_pages = map_pages
        self.unmap_pages = unmap_pages
        self.map_backoff_s = map_backoff_s
        self.queue: collections.deque = collections.deque()
        self.running: List[Req] = []      # by admission, youngest last
        self._seq = 0
        self.map_blocked_until = -1.0
        self.limit_page: Optional[int] = None
        self.last_busy = 0.0            # last time the queue was not empty or a page was mapped
        self.last_give_back = 0.0
        # counters
        self.preemptions = 0
        self.map_refusals = 0
        self.pages_mapped = 0
        self.pages_unmapped = 0
        self.map_calls = 0
        self.unmap_calls = 0
        self.kv_blocked_steps = 0       # steps where the queue head waited for KV blocks
        self.batch_blocked_steps = 0    # steps where the queue head waited for a batch slot

    def reset_counters(self) -> None:
        """Start the counters afresh (after a warm-up); the most blocks used restarts from now."""
        self.preemptions = self.map_refusals = self.pages_mapped = self.pages_unmapped = 0
        self.map_calls = self.unmap_calls = self.kv_blocked_steps = self.batch_blocked_steps = 0
        self.alloc.max_used = self.alloc.num_used()

    def blocks_for(self, tokens: int) -> int:
        return ceil_div(tokens, self.bt)

    # --- blocks with their pages ---
    def _take(self, n: int, now: float) -> Optional[List[int]]:
        """n blocks with their pages mapped, or None (not enough free blocks, or the map refused).
        Lowest first; while maps are refused (backoff), only blocks already mapped."""
        if now < self.map_blocked_until:
            return self.alloc.alloc(n, mapped_only=True)
        blocks = self.alloc.alloc(n)
        if blocks is None:
            return None
        pages = self.alloc.unmapped_pages_of(blocks)
        if pages:
            self.map_calls += 1
            if not self.map_pages(pages):
                self.alloc.release(blocks)
                self.map_refusals += 1
                self.map_blocked_until = now + self.map_backoff_s
                return self.alloc.alloc(n, mapped_only=True)
            self.alloc.note_mapped(pages)
            self.pages_mapped += len(pages)
            self.last_busy = now
        return blocks

    def _unmap(self, pages: List[int]) -> None:
        if not pages:
            return
        self.unmap_calls += 1
        self.unmap_pages(pages)
        self.alloc.note_unmapped(pages)
        self.pages_unmapped += len(pages)

    # --- requests ---
    def enqueue(self, r: Req) -> None:
        self.queue.append(r)

    def preempt(self, r: Req) -> None:
        """Free r's blocks and put it at the head of the queue (it recomputes its KV later)."""
        self.running.remove(r)
        self.alloc.release(r.blocks)
        r.blocks = []
        r.kv_len = 0
        r.preemptions += 1
        self.preemptions += 1
        self.queue.appendleft(r)

    def retire(self, r: Req) -> None:
        self.running.remove(r)
        self.alloc.release(r.blocks)
        r.blocks = []

    def admit(self, now: float) -> List[Req]:
        """Requests to prefill now (FCFS; stops at the first that does not fit). Each has the
        blocks for its prefill tokens. The engine's prefill then sets kv_len and appends a token."""
        out: List[Req] = []
        while self.queue and len(out) < self.max_prefill:
            if len(self.running) >= self.max_batch:
                self.batch_blocked_steps += 1
                break
            r = self.queue[0]
            blocks = self._take(self.blocks_for(len(r.prefill_tokens())), now)
            if blocks is None:
                self.kv_blocked_steps += 1
                break
            self.queue.popleft()
            r.blocks = blocks
            r.admit_seq = self._seq
            self._seq += 1
            self.running.append(r)
            out.append(r)
        return out

    def grow_for_decode(self, now: float) -> None:
        """Give every running request the block its next decode write needs (position kv_len);
        when none can be had, preempt the youngest running request and try again."""
        i = 0
        while i < len(self.running):
            r = self.running[i]
            need = self.blocks_for(r.kv_len + 1) - len(r.blocks)
            if need <= 0:
                i += 1
                continue
            blocks = self._take(need, now)
            if blocks is not None:
                r.blocks.extend(blocks)
                i += 1
                continue
            victim = self.running[-1]
            self.preempt(victim)
            if victim is r:
                continue          # r itself was the youngest: the one at index i is the next
            # retry r (index i is still r: the victim was after it)

    # --- giving memory back ---
    def apply_target(self, target_bytes: Optional[int]) -> int:
        """Bring the pool under target_bytes (None: lift the limit). Preempts the owners of blocks
        at or above the limit, youngest first, then unmaps the mapped pages there. Returns the
        number of preempted requests."""
        if target_bytes is None:
            self.limit_page = None
            self.alloc.set_limit_page(None)
            return 0
        limit_page = self.alloc.geo.limit_page_for_target(target_bytes)
        self.limit_page = limit_page
        self.alloc.set_limit_page(limit_page)
        first_bad = self.alloc.geo.first_block_at_or_above_page(limit_page)
        n = 0
        while True:
            bad = set(self.alloc.used_blocks_at_or_above(first_bad))
            if not bad:
                break
            victim = None
            for r in reversed(self.running):          # youngest first
                if any(b in bad for b in r.blocks):
                    victim = r
                    break
            if victim is None:
                raise RuntimeError("used blocks above the limit belong to no running request")
            self.preempt(victim)
            n += 1
        self._unmap(self.alloc.mapped_free_pages_at_or_above(limit_page))
        return n

    def give_back_idle(self, low_watermark_chunks: int) -> int:
        """Unmap the chunks that hold no used block, at or above both low_watermark_chunks and
        two chunks above the highest used one (one free chunk stays as headroom for growth).
        Returns the pages unmapped."""
        used = self.alloc.used
        top_chunk = self.alloc.geo.chunk_of_page(self.alloc.geo.pages_of_block(max(used))[-1]) if used else -1
        pages = self.alloc.free_chunk_pages(max(low_watermark_chunks, top_chunk + 2))
        self._unmap(pages)
        return len(pages)

    def maybe_give_back(self, now: float, idle_s: float, low_watermark_chunks: int) -> int:
        """The idle policy: once the queue has been empty and nothing was mapped for idle_s, give
        back free chunks (give_back_idle), at most once per idle_s. Returns the pages unmapped."""
        if self.queue:
            self.last_busy = now
            return 0
        if now - self.last_busy < idle_s or now - self.last_give_back < idle_s:
            return 0
        self.last_give_back = now
        return self.give_back_idle(low_watermark_chunks)


def sequence_bytes(cfg: dict, seq_tokens: int, page_bytes: int = DEFAULT_PAGE_BYTES) -> dict:
    """Block geometry of a bf16 model with default blocks, and what one sequence costs."""
    bpt = kv_bytes_per_token(cfg, 2)
    bt = choose_block_tokens(bpt, page_bytes)
    stride = block_stride_bytes(bpt * bt, page_bytes)
    blocks = ceil_div(seq_tokens, bt)
    return {"bytes_per_token": bpt, "block_tokens": bt, "stride_bytes": stride,
            "blocks_per_seq": blocks, "bytes_per_seq": blocks * stride}


def ballast_mib(free_mib: int, kv_total_bytes: int, kv_resident_bytes: int, servers: int,
                activation_reserve_mib: int, context_mib: int) -> int:
    """How much a ballast tenant takes so that what stays free on the GPU is the KV the servers
    have yet to map (their budget minus what they hold) plus an activation reserve each: the elastic
    servers then share the static modes' KV budget, not the whole GPU. Whole 32 MiB chunks; 0 when
    too little is free for one."""
    still_mapped = max(0, kv_total_bytes - kv_resident_bytes)
    keep = ceil_div(still_mapped, 1 << 20) + servers * activation_reserve_mib + context_mib
    return max(0, free_mib - keep) // 32 * 32
