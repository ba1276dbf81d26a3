# SPDX-License-Identifier: Apache-2.0
"""gpuos KV pools: elastic GPU memory for LLM engines' KV caches.

A pool reserves a device address range once (the most KV cache the engine could want) and backs
it with GPU memory page by page: the engine maps pages when it needs blocks and unmaps them when
it frees blocks. Addresses never change, so tensors over the pool (Pool.tensor) stay valid while
it grows and shrinks. Under gpuos (`gpuos run`), gpuosd may ask the process to shrink: a target
in bytes, delivered to the pressure callback (on_pressure) and readable with target().

This module is pure Python over libgpuos_kv.so (include/gpuos/kv.h) through ctypes. The library
is found, in order, at $GPUOS_KV_LIBRARY; beside the libgpuos.so that $LD_PRELOAD names (a
process started by `gpuos run`); on the loader's path. Outside gpuos, Pool() raises NotGoverned
and an engine falls back to its own static allocation::

    import gpuos.kv
    try:
        pool = gpuos.kv.Pool(max_bytes=40 << 30, device=0)
    except gpuos.kv.KvError:       # NotGoverned, library missing, other ABI version
        pool = None                # allocate the KV cache as usual
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import ctypes.util
import dataclasses
import enum
import heapq
import os
import threading
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

__all__ = [
    "ABI_VERSION", "DEFAULT_PAGE_BYTES", "DEFAULT_CHUNK_BYTES", "MAX_SLOTS",
    "Result", "KvError", "NotGoverned", "LibraryNotFound", "OutOfMemory", "NotInitialized",
    "Stats", "Pool", "PageAllocator",
    "available", "library_path", "abi_version", "result_text",
    "on_pressure", "target", "target_and_deadline", "report_queue", "report_slots", "report_phase",
    "admission", "PHASE_STEP", "PHASE_ADMISSION",
]

ABI_VERSION = 1
DEFAULT_PAGE_BYTES = 2 << 20
DEFAULT_CHUNK_BYTES = 32 << 20
_NO_TARGET = (1 << 64) - 1
_UINT32_MAX = (1 << 32) - 1
MAX_SLOTS = 1 << 20  # GPUOS_KV_MAX_SLOTS
PHASE_STEP = 0       # GPUOS_KV_PHASE_STEP
PHASE_ADMISSION = 1  # GPUOS_KV_PHASE_ADMISSION


class Result(enum.IntEnum):
    """gpuos_kv_result (include/gpuos/kv.h)."""
    OK = 0
    INVALID = 1
    NOT_GOVERNED = 2
    VERSION = 3
    OUT_OF_MEMORY = 4
    DRIVER = 5
    NOT_MAPPED = 6
    NOT_INITIALIZED = 7


class KvError(Exception):
    """A gpuos_kv call failed: .result (a Result, or the int a newer library returned) and .text."""

    def __init__(self, result: int, text: str):
        try:
            result = Result(result)
        except ValueError:
            pass
        super().__init__(f"{text} ({int(result)})")
        self.result = result
        self.text = text


class NotGoverned(KvError):
    """The process does not run under gpuos: allocate statically instead."""


class LibraryNotFound(NotGoverned):
    """libgpuos_kv.so could not be loaded (so no pool either)."""


class OutOfMemory(KvError):
    """No room: the tenant's quota, gpuosd's target, or the GPU (or the pool's range is full)."""


class NotInitialized(KvError):
    """CUDA is not initialised in this process yet: initialise it (e.g. torch.cuda.init()) first."""


_ERRORS = {Result.NOT_GOVERNED: NotGoverned, Result.OUT_OF_MEMORY: OutOfMemory,
           Result.NOT_INITIALIZED: NotInitialized}


# ---- the library --------------------------------------------------------------------------------

class _PoolOptions(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32), ("size", ctypes.c_uint32),
                ("device", ctypes.c_int32), ("flags", ctypes.c_uint32),
                ("max_bytes", ctypes.c_uint64), ("page_bytes", ctypes.c_uint64),
                ("chunk_bytes", ctypes.c_uint64)]


_STATS_FIELDS = ("base", "reserved_bytes", "page_bytes", "chunk_bytes", "pages", "mapped_pages",
                 "resident_bytes", "swapped_bytes", "map_calls", "pages_mapped", "pages_unmapped",
                 "chunks_created", "chunks_released", "grow_ns", "grown_bytes", "room_waits")


class _Stats(ctypes.Structure):
    _fields_ = ([("abi_version", ctypes.c_uint32), ("size", ctypes.c_uint32)]
                + [(name, ctypes.c_uint64) for name in _STATS_FIELDS])


_PressureFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32)

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None
_lib_error: Optional[KvError] = None  # why it cannot be used, once that is known
# Every ctypes function handed to gpuos as a pressure callback, kept alive for the process's life:
# a call on a gpuos thread may still be running the previous one while on_pressure replaces it.
_pressure_callbacks: List[object] = []


def _candidates() -> List[str]:
    explicit = os.environ.get("GPUOS_KV_LIBRARY")
    if explicit:
        return [explicit]  # asked for: nothing else is tried
    found = []
    for entry in os.environ.get("LD_PRELOAD", "").replace(":", " ").split():
        if os.path.basename(entry) == "libgpuos.so":
            beside = os.path.join(os.path.dirname(entry), "libgpuos_kv.so")
            if os.path.exists(beside):
                found.append(beside)
    found.append(ctypes.util.find_library("gpuos_kv") or "libgpuos_kv.so")
    return found


def _declare(lib: ctypes.CDLL) -> None:
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    signatures = {
        "gpuos_kv_abi_version": (ctypes.c_uint32, []),
        "gpuos_kv_result_text": (ctypes.c_char_p, [ctypes.c_int]),
        "gpuos_kv_pool_create": (ctypes.c_int, [ctypes.POINTER(_PoolOptions),
                                                ctypes.POINTER(ctypes.c_void_p), u64p]),
        "gpuos_kv_pool_destroy": (ctypes.c_int, [ctypes.c_void_p]),
        "gpuos_kv_map": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]),
        "gpuos_kv_unmap": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]),
        "gpuos_kv_is_mapped": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64]),
        "gpuos_kv_stats_get": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_Stats)]),
        "gpuos_kv_target": (ctypes.c_int, [u64p, u32p]),
        "gpuos_kv_set_pressure_callback": (ctypes.c_int, [_PressureFn, ctypes.c_void_p]),
        "gpuos_kv_report_queue": (ctypes.c_int, [ctypes.c_uint32]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    # Functions added since ABI version 1 began: a library without them is still usable.
    for name, (restype, argtypes) in {
        "gpuos_kv_report_slots": (ctypes.c_int, [ctypes.c_uint32, ctypes.c_uint32]),
        "gpuos_kv_report_phase": (ctypes.c_int, [ctypes.c_uint32]),
    }.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = restype, argtypes


def _load() -> ctypes.CDLL:
    """libgpuos_kv.so, loaded once; LibraryNotFound (or KvError VERSION) if it cannot be used."""
    global _lib, _lib_path, _lib_error
    with _lock:
        if _lib is None and _lib_error is None:
            errors = []
            for path in _candidates():
                try:
                    lib = ctypes.CDLL(path)
                    _declare(lib)
                except (OSError, AttributeError) as e:
                    errors.append(f"{path}: {e}")
                    continue
                version = lib.gpuos_kv_abi_version()
                if version < ABI_VERSION:
                    _lib_error = KvError(Result.VERSION, f"{path} speaks KV ABI version {version}, not {ABI_VERSION}")
                    break
                _lib, _lib_path = lib, path
                break
            else:
                _lib_error = LibraryNotFound(Result.NOT_GOVERNED,
                                             "libgpuos_kv.so not found (" + "; ".join(errors) + ")")
        if _lib is None:
            raise type(_lib_error)(_lib_error.result, _lib_error.text)
        return _lib


def _check(result: int) -> None:
    if result != Result.OK:
        raise _ERRORS.get(result, KvError)(result, result_text(result))


def library_path() -> Optional[str]:
    """The path (or name) libgpuos_kv.so was loaded from; None if it cannot be loaded."""
    try:
        _load()
    except KvError:
        return None
    return _lib_path


def abi_version() -> int:
    """The KV ABI version of the loaded library (gpuos_kv_abi_version)."""
    return int(_load().gpuos_kv_abi_version())


def result_text(result: int) -> str:
    """The library's text for a result; a text of this module when the library cannot be loaded."""
    try:
        return _load().gpuos_kv_result_text(int(result)).decode()
    except KvError:
        try:
            return Result(result).name.lower().replace("_", " ")
        except ValueError:
            return "unknown result"


def available() -> bool:
    """Whether the library loads and gpuos's pools are in this process (cheap: no pool, no CUDA).

    Pool() is the final word: a process that gpuos runs pass-through (no gpuosd) still gets
    NotGoverned there."""
    try:
        lib = _load()
    except KvError:
        return False
    target_bytes = ctypes.c_uint64()
    return lib.gpuos_kv_target(ctypes.byref(target_bytes), None) == Result.OK


# ---- pressure -----------------------------------------------------------------------------------

def on_pressure(fn: Optional[Callable[[Optional[int], int], None]]) -> None:
    """Calls fn(target_bytes, deadline_ms) when gpuosd sets a target (None: lifted); None removes it.

    fn runs on a gpuos thread: keep it short (set a flag for the engine's loop, which frees blocks
    and unmaps their pages); it may call target() and Pool.stats(), not Pool.map(). An exception
    in fn is printed and ignored."""
    lib = _load()
    if fn is None:
        c_fn = _PressureFn()  # a null function pointer: none
    else:
        def trampoline(_user, target_bytes, deadline_ms):
            fn(None if target_bytes == _NO_TARGET else int(target_bytes), int(deadline_ms))
        c_fn = _PressureFn(trampoline)
    with _lock:
        if fn is not None:
            _pressure_callbacks.append(c_fn)
        _check(lib.gpuos_kv_set_pressure_callback(c_fn, None))


def target_and_deadline() -> Tuple[Optional[int], int]:
    """(gpuosd's target for this process's pools in bytes, or None; the deadline it gave, in ms)."""
    target_bytes, deadline_ms = ctypes.c_uint64(), ctypes.c_uint32()
    _check(_load().gpuos_kv_target(ctypes.byref(target_bytes), ctypes.byref(deadline_ms)))
    value = target_bytes.value
    return (None if value == _NO_TARGET else value), deadline_ms.value


def target() -> Optional[int]:
    """gpuosd's target for the resident bytes of all this process's pools; None: no target."""
    return target_and_deadline()[0]


def report_queue(waiting_requests: int) -> None:
    """Tells gpuosd how many requests wait for KV memory (or a batch slot); saturates at 2**32-1."""
    n = int(waiting_requests)
    if n < 0:
        raise ValueError(f"waiting_requests must be >= 0, not {n}")
    _check(_load().gpuos_kv_report_queue(min(n, _UINT32_MAX)))


def _added_later(name: str):
    """A function the library gained after ABI version 1 began; VERSION from one that predates it."""
    fn = getattr(_load(), name, None)
    if fn is None:
        raise KvError(Result.VERSION, f"{_lib_path} predates {name}")
    return fn


def report_slots(active: int, capacity: int) -> None:
    """Tells gpuosd how many of the engine's batch slots are in use, of how many (gpuos ps shows
    them beside report_queue's waiting requests): 0 <= active <= capacity, 1 <= capacity <= 2**20."""
    active, capacity = int(active), int(capacity)
    if not 1 <= capacity <= MAX_SLOTS or not 0 <= active <= capacity:
        raise ValueError(f"slots must be 0 <= active <= capacity, 1 <= capacity <= {MAX_SLOTS}, "
                         f"not {active} of {capacity}")
    _check(_added_later("gpuos_kv_report_slots")(active, capacity))


def report_phase(phase: int) -> None:
    """Tells gpuosd what the engine launches from now on: PHASE_ADMISSION (the prefill of requests
    it admitted) or PHASE_STEP. A latency budget measures the two apart (gpuos ps: which binds)."""
    if phase not in (PHASE_STEP, PHASE_ADMISSION):
        raise ValueError(f"phase must be PHASE_STEP or PHASE_ADMISSION, not {phase!r}")
    _check(_added_later("gpuos_kv_report_phase")(phase))


@contextlib.contextmanager
def admission():
    """`with gpuos.kv.admission(): prefill(...)`: the launches inside are admissions."""
    report_phase(PHASE_ADMISSION)
    try:
        yield
    finally:
        report_phase(PHASE_STEP)


# ---- pools --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Stats:
    """gpuos_kv_stats: a pool's range, what it holds now, and what it did."""
    base: int
    reserved_bytes: int
    page_bytes: int
    chunk_bytes: int
    pages: int
    mapped_pages: int
    resident_bytes: int
    swapped_bytes: int
    map_calls: int
    pages_mapped: int
    pages_unmapped: int
    chunks_created: int
    chunks_released: int
    grow_ns: int
    grown_bytes: int
    room_waits: int


# typestr (__cuda_array_interface__) of torch dtypes by name; others are viewed through an integer
# of their size (bfloat16 and the float8 types have no typestr).
_TYPESTR = {"float16": "<f2", "float32": "<f4", "float64": "<f8", "int8": "|i1", "uint8": "|u1",
            "int16": "<i2", "int32": "<i4", "int64": "<i8", "bool": "|b1",
            "complex64": "<c8", "complex128": "<c16"}
_INT_OF_SIZE = {1: "|u1", 2: "<i2", 4: "<i4", 8: "<i8"}


class _ArrayView:
    """An object torch.as_tensor reads: __cuda_array_interface__ over the pool's memory. Tensors
    made from it hold it, and it holds the pool, so the pool is not collected under them."""

    def __init__(self, pool: "Pool", interface: Dict):
        self._pool = pool
        self.__cuda_array_interface__ = interface


def _shape_tuple(shape: Union[int, Sequence[int]]) -> Tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool) or d < 0:
            raise ValueError(f"shape must be non-negative ints, not {shape!r}")
    return dims


def _page_array(pages: Iterable[int]) -> array.array:
    try:
        return array.array("Q", pages if not isinstance(pages, int) else [pages])
    except OverflowError:
        raise KvError(Result.INVALID, "a page number is negative or too large") from None


class Pool:
    """A KV pool: a device range of `pages` pages of `page_bytes` from `base`, mapped on demand.

    Pool(max_bytes, device=0, page_bytes=None, chunk_bytes=None): None means the library's default
    (2 MiB pages, 32 MiB chunks). Raises NotGoverned outside gpuos, OutOfMemory, KvError.
    A context manager: leaving it closes the pool (every page unmapped, the range released: tensors
    over it must not be used after that)."""

    def __init__(self, max_bytes: int, device: int = 0, page_bytes: Optional[int] = None,
                 chunk_bytes: Optional[int] = None):
        self._lib = _load()
        self._handle = ctypes.c_void_p()
        self._closed = True
        options = _PoolOptions(abi_version=ABI_VERSION, size=ctypes.sizeof(_PoolOptions), device=int(device),
                               flags=0, max_bytes=int(max_bytes), page_bytes=int(page_bytes or 0),
                               chunk_bytes=int(chunk_bytes or 0))
        base = ctypes.c_uint64()
        _check(self._lib.gpuos_kv_pool_create(ctypes.byref(options), ctypes.byref(self._handle), ctypes.byref(base)))
        self._closed = False
        self.device = int(device)
        self.base = base.value
        s = self.stats()
        self.page_bytes = s.page_bytes
        self.chunk_bytes = s.chunk_bytes
        self.pages = s.pages
        self.reserved_bytes = s.reserved_bytes

    # -- lifetime --
    def close(self) -> None:
        """Unmaps every page and releases the range (idempotent)."""
        if not self._closed:
            self._closed = True
            _check(self._lib.gpuos_kv_pool_destroy(self._handle))

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"base=0x{self.base:x} pages={self.pages} page_bytes={self.page_bytes}"
        return f"<gpuos.kv.Pool device={getattr(self, 'device', '?')} {state}>"

    def _live(self) -> ctypes.c_void_p:
        if self._closed:
            raise KvError(Result.INVALID, "the pool is closed")
        return self._handle

    # -- pages --
    def map(self, pages: Iterable[int]) -> None:
        """Maps the pages (any iterable of ints) in one call; all or nothing. Mapped ones stay."""
        handle, batch = self._live(), _page_array(pages)
        if len(batch):
            _check(self._lib.gpuos_kv_map(handle, batch.buffer_info()[0], len(batch)))

    def unmap(self, pages: Iterable[int]) -> None:
        """Unmaps the pages in one call; all or nothing (KvError NOT_MAPPED for one not mapped)."""
        handle, batch = self._live(), _page_array(pages)
        if len(batch):
            _check(self._lib.gpuos_kv_unmap(handle, batch.buffer_info()[0], len(batch)))

    def is_mapped(self, page: int) -> bool:
        result = self._lib.gpuos_kv_is_mapped(self._live(), int(page)) if 0 <= int(page) < (1 << 64) else -1
        if result < 0:
            raise KvError(Result.INVALID, f"page {page} is not in the pool (0..{self.pages - 1})")
        return result == 1

    def address(self, page: int) -> int:
        """The device address of a page."""
        if not 0 <= page < self.pages:
            raise ValueError(f"page {page} is not in the pool (0..{self.pages - 1})")
        return self.base + page * self.page_bytes

    def stats(self) -> Stats:
        raw = _Stats(size=ctypes.sizeof(_Stats))
        _check(self._lib.gpuos_kv_stats_get(self._live(), ctypes.byref(raw)))
        return Stats(**{name: int(getattr(raw, name)) for name in _STATS_FIELDS})

    # -- views --
    def cuda_array_interface(self, typestr: str, shape: Union[int, Sequence[int]], offset_bytes: int = 0) -> Dict:
        """__cuda_array_interface__ (version 3) of a C-contiguous array over the pool's range."""
        dims = _shape_tuple(shape)
        itemsize = int(typestr[2:]) if len(typestr) >= 3 and typestr[0] in "<>|=" and typestr[2:].isdigit() else 0
        if itemsize <= 0:
            raise ValueError(f"not a typestr: {typestr!r}")
        count = 1
        for d in dims:
            count *= d
        if offset_bytes < 0 or offset_bytes % itemsize:
            raise ValueError(f"offset_bytes {offset_bytes} is negative or not a multiple of {itemsize}")
        if offset_bytes + count * itemsize > self.reserved_bytes:
            raise ValueError(f"{count * itemsize} bytes at offset {offset_bytes} exceed the pool's "
                             f"{self.reserved_bytes} bytes")
        self._live()
        pointer = self.base + offset_bytes if count else 0  # CAI v3: 0 for an empty array
        return {"version": 3, "shape": dims, "typestr": typestr, "data": (pointer, False),
                "strides": None, "stream": None}

    def tensor(self, dtype, shape: Union[int, Sequence[int]], offset_bytes: int = 0):
        """A zero-copy torch tensor (cuda:<device>) over the pool's memory from offset_bytes.

        Made through __cuda_array_interface__; torch asks the driver which device the address is
        on, so the page at offset_bytes should be mapped when the view is made (the view stays
        valid while pages are mapped and unmapped under it). Touching an unmapped page faults."""
        import torch  # optional dependency, only for views

        name = str(dtype).replace("torch.", "")
        itemsize = torch.empty((), dtype=dtype).element_size()  # dtype.itemsize needs torch 2.1
        typestr = _TYPESTR.get(name) or _INT_OF_SIZE.get(itemsize)
        if typestr is None:
            raise ValueError(f"no view for dtype {dtype}")
        view = _ArrayView(self, self.cuda_array_interface(typestr, shape, offset_bytes))
        with torch.cuda.device(self.device):
            result = torch.as_tensor(view)
        if result.dtype != dtype:
            result = result.view(dtype)  # same element size: bfloat16, float8 over an integer view
        expected = torch.device("cuda", self.device)
        if result.device != expected or (result.numel() and result.data_ptr() != self.base + offset_bytes):
            raise KvError(Result.INVALID, f"torch made the view on {result.device}, not {expected} at the pool's address")
        return result


# ---- a page allocator for engines ---------------------------------------------------------------

class PageAllocator:
    """Hands out a pool's pages lowest first (so chunks fill before new ones get memory), maps
    them on demand in one call, and suggests which free pages to unmap to release whole chunks.

    It assumes it is the only one mapping and unmapping the pool's pages. Not thread-safe."""

    def __init__(self, pool: Pool):
        self.pool = pool
        self._pages_per_chunk = pool.chunk_bytes // pool.page_bytes
        self._allocated = set()
        self._mapped = set()
        if pool.stats().mapped_pages:
            self._mapped = {p for p in range(pool.pages) if pool.is_mapped(p)}
        self._free_heap: List[int] = []  # freed pages below _next_unused
        self._next_unused = 0            # pages from here up were never handed out

    @property
    def allocated_pages(self) -> int:
        return len(self._allocated)

    @property
    def mapped_pages(self) -> int:
        return len(self._mapped)

    @property
    def free_pages(self) -> int:
        """Pages that allocate() can still hand out."""
        return self.pool.pages - len(self._allocated)

    @property
    def resident_bytes(self) -> int:
        """GPU memory the pool holds: its chunks with a mapped page."""
        return len({p // self._pages_per_chunk for p in self._mapped}) * self.pool.chunk_bytes

    def allocate(self, count: int) -> List[int]:
        """`count` pages, lowest numbers first, all mapped (one map call for those that were not).
        OutOfMemory (nothing allocated) when the pool's range is full or gpuos refuses memory."""
        if count < 0:
            raise ValueError(f"count must be >= 0, not {count}")
        if count > self.free_pages:
            raise OutOfMemory(Result.OUT_OF_MEMORY, f"the pool has {self.free_pages} free pages, not {count}")
        from_heap = min(count, len(self._free_heap))
        pages = [heapq.heappop(self._free_heap) for _ in range(from_heap)]
        pages += range(self._next_unused, self._next_unused + count - from_heap)
        to_map = [p for p in pages if p not in self._mapped]
        try:
            self.pool.map(to_map)
        except BaseException:
            for p in pages[:from_heap]:
                heapq.heappush(self._free_heap, p)
            raise
        self._next_unused += count - from_heap
        self._mapped.update(to_map)
        self._allocated.update(pages)
        return pages

    def free(self, pages: Iterable[int]) -> None:
        """Gives pages back (they stay mapped, for reuse, until release() unmaps them)."""
        batch = list(pages)
        not_allocated = [p for p in batch if p not in self._allocated]
        if not_allocated or len(set(batch)) != len(batch):
            raise ValueError(f"pages not allocated (or given twice): {sorted(set(not_allocated)) or batch}")
        for p in batch:
            self._allocated.remove(p)
            heapq.heappush(self._free_heap, p)

    def pages_to_release(self, target_bytes: int) -> List[int]:
        """Free mapped pages whose unmapping brings resident_bytes down to target_bytes (or as near
        as free chunks allow): whole chunks only, highest first; sorted. target_bytes is this
        pool's share (gpuosd's target counts all the process's pools)."""
        resident = self.resident_bytes
        by_chunk: Dict[int, List[int]] = {}
        for p in self._mapped:
            by_chunk.setdefault(p // self._pages_per_chunk, []).append(p)
        release: List[int] = []
        for chunk in sorted(by_chunk, reverse=True):
            if resident <= target_bytes:
                break
            if not any(p in self._allocated for p in by_chunk[chunk]):
                release += by_chunk[chunk]
                resident -= self.pool.chunk_bytes
        return sorted(release)

    def release(self, pages: Iterable[int]) -> None:
        """Unmaps free pages in one call (e.g. pages_to_release's); ValueError for an allocated one."""
        batch = sorted(set(pages))
        if any(p in self._allocated for p in batch):
            raise ValueError("cannot release allocated pages")
        batch = [p for p in batch if p in self._mapped]
        self.pool.unmap(batch)
        self._mapped.difference_update(batch)

    def shrink_to(self, target_bytes: int) -> int:
        """Releases pages_to_release(target_bytes); returns resident_bytes after."""
        self.release(self.pages_to_release(target_bytes))
        return self.resident_bytes
