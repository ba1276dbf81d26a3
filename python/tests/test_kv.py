# SPDX-License-Identifier: Apache-2.0
"""gpuos.kv over libgpuos_kv.so and the test stand-in of the interposer's pools.

ctest kv.python runs these with libgpuos_kv_fake.so preloaded (as `gpuos run` preloads
libgpuos.so), GPUOS_KV_LIBRARY naming build/lib/libgpuos_kv.so and GPUOS_KV_TEST_FAKE the fake.
The fake's controls (gpuos_kv_fake_*) are found in the process's global symbols. Tests that need
torch (and a GPU) are skipped without them.
"""

import ctypes
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import gpuos.kv as kv

MiB = 1 << 20
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fake():
    process = ctypes.CDLL(None)
    process.gpuos_kv_fake_set_target.argtypes = [ctypes.c_uint64, ctypes.c_uint32]
    process.gpuos_kv_fake_set_quota.argtypes = [ctypes.c_uint64]
    process.gpuos_kv_fake_queue.restype = ctypes.c_uint32
    process.gpuos_kv_fake_slots.restype = ctypes.c_uint64
    process.gpuos_kv_fake_phase.restype = ctypes.c_uint32
    process.gpuos_kv_fake_pools.restype = ctypes.c_uint32
    return process


def run_python(code, env):
    """Runs code in a fresh interpreter (the library is looked up once per process)."""
    env = dict(env, PYTHONPATH=PACKAGE_ROOT, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=60)


class FakeTestCase(unittest.TestCase):
    def setUp(self):
        if not os.environ.get("GPUOS_KV_TEST_FAKE"):
            self.skipTest("needs libgpuos_kv_fake.so preloaded (ctest kv.python)")
        self.fake = fake()
        self.fake.gpuos_kv_fake_reset()
        self.addCleanup(self.fake.gpuos_kv_fake_reset)
        self.addCleanup(kv.on_pressure, None)

    def tearDown(self):
        self.assertEqual(self.fake.gpuos_kv_fake_pools(), 0, "a test left a pool open")


class LibraryTest(FakeTestCase):
    def test_loads_the_library_named_and_speaks_version_1(self):
        self.assertTrue(kv.available())
        self.assertEqual(kv.library_path(), os.environ["GPUOS_KV_LIBRARY"])
        self.assertEqual(kv.abi_version(), kv.ABI_VERSION)
        self.assertEqual(kv.result_text(kv.Result.OUT_OF_MEMORY), "out of memory (quota, target or GPU)")
        self.assertEqual(kv.result_text(99), "unknown result")

    def test_without_an_interposer_pools_are_not_governed(self):
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        result = run_python("""
            import gpuos.kv as kv
            assert not kv.available()
            try:
                kv.Pool(64 << 20)
            except kv.NotGoverned as e:
                assert e.result == kv.Result.NOT_GOVERNED, e.result
                assert e.text == "not running under gpuos", e.text
            else:
                raise AssertionError("Pool() succeeded without gpuos")
            try:
                kv.target()
            except kv.NotGoverned:
                pass
            print("ok")
        """, env)
        self.assertEqual((result.returncode, result.stdout.strip()), (0, "ok"), result.stderr)

    def test_without_the_library_errors_say_so(self):
        env = dict(os.environ, GPUOS_KV_LIBRARY="/nonexistent/libgpuos_kv.so")
        result = run_python("""
            import gpuos.kv as kv
            assert not kv.available() and kv.library_path() is None
            try:
                kv.Pool(64 << 20)
            except kv.LibraryNotFound as e:
                assert isinstance(e, kv.NotGoverned) and "/nonexistent/libgpuos_kv.so" in str(e), e
            print(kv.result_text(kv.Result.NOT_GOVERNED))
        """, env)
        self.assertEqual((result.returncode, result.stdout.strip()), (0, "not governed"), result.stderr)

    def test_finds_the_library_beside_the_preloaded_libgpuos(self):
        # A folder like an installed gpuos: libgpuos.so (the fake plays the interposer) and
        # libgpuos_kv.so side by side; LD_PRELOAD names the first, as `gpuos run` does.
        with tempfile.TemporaryDirectory() as folder:
            os.symlink(os.environ["GPUOS_KV_TEST_FAKE"], os.path.join(folder, "libgpuos.so"))
            os.symlink(os.environ["GPUOS_KV_LIBRARY"], os.path.join(folder, "libgpuos_kv.so"))
            env = {k: v for k, v in os.environ.items() if k != "GPUOS_KV_LIBRARY"}
            env["LD_PRELOAD"] = os.path.join(folder, "libgpuos.so")
            result = run_python("""
                import gpuos.kv as kv
                with kv.Pool(64 << 20) as pool:
                    pool.map([0])
                print(kv.library_path())
            """, env)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(result.stdout.strip(), os.path.join(folder, "libgpuos_kv.so"))


class PoolTest(FakeTestCase):
    def test_map_unmap_stats_in_batches(self):
        with kv.Pool(100 * MiB, device=0, page_bytes=2 * MiB, chunk_bytes=8 * MiB) as pool:
            self.assertEqual((pool.page_bytes, pool.chunk_bytes, pool.pages, pool.reserved_bytes),
                             (2 * MiB, 8 * MiB, 52, 104 * MiB))
            self.assertNotEqual(pool.base, 0)
            pool.map(p for p in (0, 1, 5, 51))  # any iterable
            pool.map([])                        # nothing to do
            self.assertTrue(pool.is_mapped(5))
            self.assertFalse(pool.is_mapped(6))
            stats = pool.stats()
            self.assertIsInstance(stats, kv.Stats)
            self.assertEqual((stats.mapped_pages, stats.resident_bytes, stats.map_calls, stats.base),
                             (4, 24 * MiB, 1, pool.base))
            # The range is real memory (host memory in the fake).
            ctypes.memset(pool.address(51), 0x5A, 2 * MiB)
            self.assertEqual(ctypes.string_at(pool.address(51) + 7, 1), b"\x5a")
            with self.assertRaises(kv.KvError) as caught:
                pool.unmap([5, 6])
            self.assertEqual(caught.exception.result, kv.Result.NOT_MAPPED)
            self.assertTrue(pool.is_mapped(5))  # all or nothing
            pool.unmap([0, 1])
            stats = pool.stats()
            self.assertEqual((stats.resident_bytes, stats.chunks_released), (16 * MiB, 1))
        self.assertTrue(pool.closed)
        pool.close()  # idempotent
        with self.assertRaises(kv.KvError):
            pool.map([0])

    def test_bad_arguments_raise_kv_errors(self):
        with self.assertRaises(kv.KvError) as caught:
            kv.Pool(64 * MiB, page_bytes=3 * MiB)
        self.assertEqual(caught.exception.result, kv.Result.INVALID)
        self.assertEqual(type(caught.exception), kv.KvError)
        with kv.Pool(64 * MiB) as pool:
            for bad in ([-1], [pool.pages], [1 << 64]):
                with self.assertRaises(kv.KvError) as caught:
                    pool.map(bad)
                self.assertEqual(caught.exception.result, kv.Result.INVALID)
            with self.assertRaises(kv.KvError):
                pool.is_mapped(pool.pages)
            with self.assertRaises(TypeError):
                pool.map(["0"])

    def test_quota_raises_out_of_memory(self):
        self.fake.gpuos_kv_fake_set_quota(32 * MiB)
        with kv.Pool(128 * MiB) as pool:
            pool.map(range(16))  # one 32 MiB chunk
            with self.assertRaises(kv.OutOfMemory) as caught:
                pool.map([15, 16])
            self.assertEqual(caught.exception.result, kv.Result.OUT_OF_MEMORY)
            self.assertFalse(pool.is_mapped(16))

    def test_cuda_array_interface(self):
        with kv.Pool(64 * MiB) as pool:
            cai = pool.cuda_array_interface("<f2", (4, 8), offset_bytes=2 * MiB)
            self.assertEqual(cai, {"version": 3, "shape": (4, 8), "typestr": "<f2",
                                   "data": (pool.base + 2 * MiB, False), "strides": None, "stream": None})
            self.assertEqual(pool.cuda_array_interface("|u1", 0)["data"], (0, False))  # empty: null
            self.assertEqual(pool.cuda_array_interface("<i8", pool.reserved_bytes // 8)["shape"],
                             (pool.reserved_bytes // 8,))
            for typestr, shape, offset in (("<f2", 1, 1), ("<f4", pool.reserved_bytes // 4 + 1, 0),
                                           ("<f4", (2, -1), 0), ("f4", 1, 0), ("<f4", 1, -4)):
                with self.assertRaises(ValueError):
                    pool.cuda_array_interface(typestr, shape, offset)


class PressureTest(FakeTestCase):
    def test_callback_target_and_queue(self):
        self.assertIsNone(kv.target())
        seen = []
        kv.on_pressure(lambda target, deadline_ms: seen.append((target, deadline_ms, kv.target())))
        self.fake.gpuos_kv_fake_set_target(40 * MiB, 250)
        self.assertEqual(seen, [(40 * MiB, 250, 40 * MiB)])
        self.assertEqual(kv.target_and_deadline(), (40 * MiB, 250))
        self.fake.gpuos_kv_fake_set_target((1 << 64) - 1, 0)  # lifted
        self.assertEqual(seen[-1], (None, 0, None))
        kv.on_pressure(None)
        self.fake.gpuos_kv_fake_set_target(1, 1)
        self.assertEqual(len(seen), 2)
        kv.report_queue(17)
        self.assertEqual(self.fake.gpuos_kv_fake_queue(), 17)
        kv.report_queue(1 << 40)  # saturates
        self.assertEqual(self.fake.gpuos_kv_fake_queue(), (1 << 32) - 1)
        with self.assertRaises(ValueError):
            kv.report_queue(-1)

    def test_slots(self):
        kv.report_slots(12, 32)
        self.assertEqual(self.fake.gpuos_kv_fake_slots(), 12 << 32 | 32)
        for active, capacity in [(33, 32), (0, 0), (-1, 4), (1, kv.MAX_SLOTS + 1)]:
            with self.assertRaises(ValueError, msg=(active, capacity)):
                kv.report_slots(active, capacity)
        self.assertEqual(self.fake.gpuos_kv_fake_slots(), 12 << 32 | 32)

    def test_phase(self):
        with kv.admission():
            self.assertEqual(self.fake.gpuos_kv_fake_phase(), kv.PHASE_ADMISSION)
        self.assertEqual(self.fake.gpuos_kv_fake_phase(), kv.PHASE_STEP)
        with self.assertRaises(RuntimeError):
            with kv.admission():
                raise RuntimeError("the prefill failed")
        self.assertEqual(self.fake.gpuos_kv_fake_phase(), kv.PHASE_STEP, "back to steps however it ends")
        with self.assertRaises(ValueError):
            kv.report_phase(2)


class PageAllocatorTest(FakeTestCase):
    def test_lowest_first_mapped_on_demand_and_whole_chunks_released(self):
        # 8 MiB chunks of 4 pages; 6 chunks.
        with kv.Pool(48 * MiB, page_bytes=2 * MiB, chunk_bytes=8 * MiB) as pool:
            alloc = kv.PageAllocator(pool)
            self.assertEqual(alloc.allocate(6), [0, 1, 2, 3, 4, 5])
            self.assertEqual(pool.stats().map_calls, 1)  # one batched call
            self.assertEqual((alloc.mapped_pages, alloc.resident_bytes), (6, 16 * MiB))
            self.assertEqual(alloc.allocate(7), [6, 7, 8, 9, 10, 11, 12])
            alloc.free([1, 2, 9, 10, 11, 12])
            self.assertEqual(alloc.allocate(1), [1])  # the lowest free page, already mapped
            self.assertEqual(pool.stats().map_calls, 2)
            # Chunks: 0 {0,1,3 allocated}, 1 {4..7 allocated}, 2 {8 allocated; 9,10,11 free}, 3 {12 free}.
            self.assertEqual(alloc.pages_to_release(0), [12])        # chunk 2 still has page 8
            alloc.free([8])
            self.assertEqual(alloc.pages_to_release(24 * MiB), [12])  # 32 MiB resident: one chunk less
            self.assertEqual(alloc.pages_to_release(0), [8, 9, 10, 11, 12])
            self.assertEqual(alloc.pages_to_release(40 * MiB), [])
            self.assertEqual(alloc.shrink_to(16 * MiB), 16 * MiB)
            self.assertEqual((pool.stats().resident_bytes, pool.stats().chunks_released), (16 * MiB, 2))
            self.assertFalse(pool.is_mapped(12))
            # Released pages are handed out again (and mapped again) lowest first.
            self.assertEqual(alloc.allocate(3), [2, 8, 9])
            self.assertTrue(pool.is_mapped(8))
            with self.assertRaises(ValueError):
                alloc.free([20])
            with self.assertRaises(ValueError):
                alloc.release([0])
            with self.assertRaises(kv.OutOfMemory):
                alloc.allocate(pool.pages)

    def test_refused_memory_allocates_nothing(self):
        self.fake.gpuos_kv_fake_set_quota(8 * MiB)
        with kv.Pool(32 * MiB, page_bytes=2 * MiB, chunk_bytes=8 * MiB) as pool:
            alloc = kv.PageAllocator(pool)
            self.assertEqual(alloc.allocate(3), [0, 1, 2])
            alloc.free([1])
            with self.assertRaises(kv.OutOfMemory):
                alloc.allocate(4)  # 1, 3, 4, 5: page 4 needs a second chunk
            self.assertEqual((alloc.allocated_pages, alloc.mapped_pages), (2, 3))
            self.assertEqual(alloc.allocate(2), [1, 3])

    def test_adopts_pages_mapped_before(self):
        with kv.Pool(32 * MiB, page_bytes=2 * MiB, chunk_bytes=8 * MiB) as pool:
            pool.map([0, 9])
            alloc = kv.PageAllocator(pool)
            self.assertEqual((alloc.mapped_pages, alloc.resident_bytes), (2, 16 * MiB))
            self.assertEqual(alloc.pages_to_release(0), [0, 9])


class _StubTorch:
    """Just enough of torch for Pool.tensor's own logic (dtype to typestr, the bfloat16 view, the
    device check) without a GPU: as_tensor reads __cuda_array_interface__ like torch does and
    records it."""

    class dtype:
        def __init__(self, name, size):
            self.name, self.size = name, size

        def __str__(self):
            return "torch." + self.name

    class device:
        def __init__(self, kind, index):
            self.kind, self.index = kind, index

        def __eq__(self, other):
            return (self.kind, self.index) == (other.kind, other.index)

    class Tensor:
        def __init__(self, torch, cai, dtype, device):
            self.torch, self.cai, self.dtype, self.device = torch, cai, dtype, device

        def element_size(self):
            return self.dtype.size

        def numel(self):
            n = 1
            for d in self.cai["shape"]:
                n *= d
            return n

        def data_ptr(self):
            return self.cai["data"][0]

        def view(self, dtype):
            assert dtype.size == self.dtype.size
            return _StubTorch.Tensor(self.torch, self.cai, dtype, self.device)

    def __init__(self):
        sizes = {"float16": 2, "bfloat16": 2, "float32": 4, "int16": 2, "int32": 4, "int64": 8, "uint8": 1,
                 "float8_e4m3fn": 1}
        for name, size in sizes.items():
            setattr(self, name, self.dtype(name, size))
        self.of_typestr = {"<f2": self.float16, "<f4": self.float32, "<i2": self.int16, "<i4": self.int32,
                           "<i8": self.int64, "|u1": self.uint8}
        self.current_device = 0
        stub = self

        class cuda:
            class device:
                def __init__(self, index):
                    self.index = index

                def __enter__(self):
                    self.previous, stub.current_device = stub.current_device, self.index

                def __exit__(self, *exc):
                    stub.current_device = self.previous
        self.cuda = cuda

    def empty(self, shape, dtype):
        return self.Tensor(self, {"shape": shape, "data": (0, False)}, dtype, None)

    def as_tensor(self, obj):
        cai = obj.__cuda_array_interface__
        return self.Tensor(self, cai, self.of_typestr[cai["typestr"]], self.device("cuda", self.current_device))


class TensorLogicTest(FakeTestCase):
    def setUp(self):
        super().setUp()
        self.torch = _StubTorch()  # in place of torch, installed or not, for this test only
        real = sys.modules.get("torch")
        sys.modules["torch"] = self.torch
        self.addCleanup(lambda: sys.modules.__setitem__("torch", real) if real else sys.modules.pop("torch"))

    def test_dtypes_offsets_and_devices(self):
        torch = self.torch
        with kv.Pool(64 * MiB, device=0) as pool:
            t = pool.tensor(torch.float16, (4, 8), offset_bytes=4096)
            self.assertEqual((t.dtype, t.cai["typestr"], t.cai["shape"], t.data_ptr()),
                             (torch.float16, "<f2", (4, 8), pool.base + 4096))
            t = pool.tensor(torch.bfloat16, 16)   # no typestr: an int16 view, reinterpreted
            self.assertEqual((t.dtype, t.cai["typestr"]), (torch.bfloat16, "<i2"))
            t = pool.tensor(torch.float8_e4m3fn, 16)
            self.assertEqual((t.dtype, t.cai["typestr"]), (torch.float8_e4m3fn, "|u1"))
            with self.assertRaises(ValueError):
                pool.tensor(torch.float32, (pool.reserved_bytes,))
        with kv.Pool(64 * MiB, device=1) as pool:
            self.assertEqual(pool.tensor(torch.float32, 4).device, torch.device("cuda", 1))
            self.torch.cuda.device = lambda index: _NoDeviceSwitch()  # torch put it elsewhere
            with self.assertRaises(kv.KvError):
                pool.tensor(torch.float32, 4)


class _NoDeviceSwitch:
    def __enter__(self):
        pass

    def __exit__(self, *exc):
        pass


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@unittest.skipIf(_torch_cuda() is None, "needs torch with a GPU")
class TensorTest(unittest.TestCase):
    """Views over a pool on a GPU under gpuos (the fake's host memory is no device memory)."""

    def setUp(self):
        if not kv.available() or os.environ.get("GPUOS_KV_TEST_FAKE"):
            self.skipTest("needs gpuos's real pools")

    def test_views_share_the_pool_memory(self):
        import torch
        with kv.Pool(64 * MiB) as pool:
            pool.map(range(pool.pages))
            for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.int8):
                t = pool.tensor(dtype, (16, 128), offset_bytes=2 * MiB)
                self.assertEqual((t.dtype, t.shape, t.device), (dtype, (16, 128), torch.device("cuda", 0)))
                self.assertEqual(t.data_ptr(), pool.base + 2 * MiB)
            a = pool.tensor(torch.bfloat16, (1024,))
            b = pool.tensor(torch.int16, (1024,))
            a.fill_(1.0)
            self.assertEqual(int(b[0]), 0x3F80)  # bfloat16 1.0, seen through the same bytes
            del a, b
            torch.cuda.synchronize()


if __name__ == "__main__":
    unittest.main()
