# SPDX-License-Identifier: Apache-2.0
"""The KV pool's memory: the only place that knows gpuos.kv (everything else sees a KvBacking).

Two implementations:
  StaticBacking  one torch.zeros tensor for the whole pool, allocated once (like vLLM's
                 gpu_memory_utilization): every page is mapped from the start, nothing is ever
                 mapped or unmapped, there is no target.
  GpuosBacking   a gpuos.kv.Pool: a reserved virtual range; pages are mapped when the allocator
                 hands out blocks beyond the mapped set and unmapped when the pool shrinks.

Both give `flat`: a 1-D tensor of num_elems elements of dtype over the pool's bytes from offset 0
(the engine views it as blocks). Torch is passed in (this module imports without it).

gpuos.kv calls used (the Python package of issue #24; adapt here if its API differs):
  gpuos.kv.available() -> bool
  gpuos.kv.Pool(max_bytes, device=, page_bytes=, chunk_bytes=); .page_bytes; .tensor(dtype, shape);
      .map(pages); .unmap(pages); .stats(); .close()
  gpuos.kv.on_pressure(fn(target_bytes, deadline_ms))   (fn runs on a gpuos thread: counts only)
  gpuos.kv.target() -> Optional[int]; gpuos.kv.report_queue(n)
  gpuos.kv.OutOfMemory (a refused map), gpuos.kv.KvError (any other failure)
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import List, Optional

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class KvBacking:
    """Interface. map_pages returns False when the pool may not grow (quota, target, no room)."""

    elastic = False

    def map_pages(self, pages: List[int]) -> bool:
        raise NotImplementedError

    def unmap_pages(self, pages: List[int]) -> None:
        raise NotImplementedError

    def target_bytes(self) -> Optional[int]:
        return None

    def report_queue(self, waiting: int) -> None:
        pass

    def stats(self) -> dict:
        return {}

    def close(self) -> None:
        pass


class StaticBacking(KvBacking):
    def __init__(self, torch, dtype, num_elems: int, device) -> None:
        self.flat = torch.zeros(num_elems, dtype=dtype, device=device)   # [num_elems]
        self.bytes = num_elems * self.flat.element_size()

    def map_pages(self, pages: List[int]) -> bool:
        raise RuntimeError("a static KV pool is mapped in full; nothing to map")

    def unmap_pages(self, pages: List[int]) -> None:
        raise RuntimeError("a static KV pool never unmaps")

    def stats(self) -> dict:
        return {"kind": "static", "resident_bytes": self.bytes}

    def close(self) -> None:
        self.flat = None


def import_gpuos_kv():
    """gpuos.kv, from the installed package or the repository's python/ folder."""
    py = os.path.join(REPO, "python")
    if os.path.isdir(py) and py not in sys.path:
        sys.path.insert(0, py)
    import gpuos.kv as kv  # noqa: E402
    return kv


class GpuosBacking(KvBacking):
    elastic = True

    def __init__(self, torch, dtype, num_elems: int, device_index: int, max_bytes: int,
                 page_bytes: int, chunk_bytes: int) -> None:
        kv = import_gpuos_kv()
        if not kv.available():
            raise RuntimeError("gpuos.kv is not available: run the server under `gpuos run` (--kv gpuos)")
        self.kv = kv
        self.pool = kv.Pool(max_bytes, device=device_index, page_bytes=page_bytes, chunk_bytes=chunk_bytes)
        if self.pool.page_bytes != page_bytes:
            raise RuntimeError(f"gpuos.kv pool pages are {self.pool.page_bytes} bytes, asked for {page_bytes}")
        self.page_bytes = page_bytes
        # torch asks the driver which device the view's address is on: page 0 must be mapped first
        # (the allocator hands out the lowest blocks first, so it is used anyway).
        self.pool.map([0])
        self.flat = self.pool.tensor(dtype, (num_elems,))                # [num_elems], zero-copy
        self.pressure_calls = 0
        self.last_pressure = None
        self.map_log: List[tuple] = []       # (ms, bytes) of every map call that succeeded
        self.refused_log: List[tuple] = []   # (ms, bytes) of every refused map call
        self.unmap_ms = 0.0
        kv.on_pressure(self._on_pressure)

    def _on_pressure(self, target_bytes, deadline_ms) -> None:
        # Runs on a gpuos thread: only note it; the server's loop polls target() every step.
        self.pressure_calls += 1
        self.last_pressure = (target_bytes, deadline_ms)

    def map_pages(self, pages: List[int]) -> bool:
        t0 = time.perf_counter()
        try:
            self.pool.map(pages)
        except self.kv.OutOfMemory:
            self.refused_log.append(((time.perf_counter() - t0) * 1e3, len(pages) * self.page_bytes))
            return False
        self.map_log.append(((time.perf_counter() - t0) * 1e3, len(pages) * self.page_bytes))
        return True

    def unmap_pages(self, pages: List[int]) -> None:
        t0 = time.perf_counter()
        self.pool.unmap(pages)
        self.unmap_ms += (time.perf_counter() - t0) * 1e3

    def target_bytes(self) -> Optional[int]:
        return self.kv.target()

    def report_queue(self, waiting: int) -> None:
        self.kv.report_queue(int(waiting))

    def stats(self) -> dict:
        s = self.pool.stats()
        d = dataclasses.asdict(s) if dataclasses.is_dataclass(s) else dict(vars(s))
        d["kind"] = "gpuos"
        d["pressure_calls"] = self.pressure_calls
        d["unmap_ms_total"] = self.unmap_ms
        return d

    def close(self) -> None:
        self.flat = None
        if self.pool is not None:
            self.pool.close()
            self.pool = None
