# SPDX-License-Identifier: Apache-2.0
"""A stand-in for the few torch (and bench/colocation/llama.py) calls gpu/tests/mps_cost.py makes,
so its whole flow runs here without a GPU (test/tools/mps_cost_test.py, through run_stub.py).

A virtual GPU clock (us) advances as kernels run: each costs its duration plus a gap before it,
a replay or eager launch LAUNCH_US first, a synchronize HOST_US (the host's turn between steps).
As an MPS client (CUDA_MPS_PIPE_DIRECTORY with a control file in it) every kernel lasts
FAKE_MPS_EXTRA_US longer (default 1.0), except with CUDA_DEVICE_MAX_CONNECTIONS=1 (the stand-in
"fix" the tests look for). CUDA events read the clock; torch.profiler writes each kernel that ran
while it was on as a Chrome-trace "kernel" event carrying its launch's correlation id.
FAKE_CUPTI_OLD=1: graphs captured before the first profiling session stay invisible to it.
"""
import contextlib
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench", "colocation"))
import llama_shapes  # noqa: E402

LAUNCH_US, GAP_US, HOST_US = 5.0, 1.0, 30.0


def _is_mps() -> bool:
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    return bool(pipe) and os.path.exists(os.path.join(pipe, "control"))


class _Gpu:
    t = 0.0
    capturing = None     # ops of the graph being captured
    profiling = None     # trace events while a profiler is on
    corr = 0
    extra = 0.0


GPU = _Gpu()
if _is_mps() and os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1":
    GPU.extra = float(os.environ.get("FAKE_MPS_EXTRA_US", "1.0"))


def _run(ops, visible=True):
    GPU.corr += 1
    GPU.t += LAUNCH_US
    for name, dur in ops:
        d = dur + GPU.extra
        start = GPU.t + GAP_US
        GPU.t = start + d
        if GPU.profiling is not None and visible:
            GPU.profiling.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": start,
                                  "dur": d, "args": {"correlation": GPU.corr, "device": 0, "stream": 7}})


def _launch(name, dur):
    if GPU.capturing is not None:
        GPU.capturing.append((name, dur))
    else:
        _run([(name, dur)])


class Tensor:
    def __init__(self, n=1):
        self.n = n

    def add_(self, v):
        _launch("vectorized_elementwise_kernel<AddFunctor>", 1.5 + self.n * 2e-6)
        return self

    def sum(self):
        _launch("reduce_kernel<sum>", 1.0 + self.n * 1e-6)
        return Tensor(1)

    def copy_(self, other):
        _launch("copy_kernel", 1.0 + self.n * 2e-6)
        return self

    def __getitem__(self, key):
        return self

    def all(self):
        return self

    def item(self):
        return True


class Event:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self, stream=None):
        self.t = GPU.t

    def synchronize(self):
        GPU.t += HOST_US

    def elapsed_time(self, other):
        return (other.t - self.t) / 1e3


class Stream:
    def wait_stream(self, other):
        pass


class CUDAGraph:
    def __init__(self):
        self.ops = []
        self.visible = True

    def replay(self):
        _run(self.ops, self.visible)


@contextlib.contextmanager
def _graph(g, pool=None, stream=None):
    GPU.capturing = []
    try:
        yield
    finally:
        g.ops, GPU.capturing = GPU.capturing, None
        g.visible = not (os.environ.get("FAKE_CUPTI_OLD") == "1" and not _Profile.sessions)


@contextlib.contextmanager
def _stream(s):
    yield


class _Props:
    multi_processor_count = 132


def _synchronize():
    GPU.t += HOST_US


def _clock_rate(device=None):
    raise ModuleNotFoundError("pynvml")


cuda = types.SimpleNamespace(
    Event=Event, Stream=Stream, CUDAGraph=CUDAGraph, graph=_graph, stream=_stream, synchronize=_synchronize,
    current_stream=lambda: Stream(), get_device_properties=lambda d=0: _Props(), get_device_name=lambda d=0: "Fake GPU",
    clock_rate=_clock_rate, empty_cache=lambda: None, graph_pool_handle=lambda: None, init=lambda: None)


class _Profile:
    sessions = 0

    def __init__(self, activities=None):
        self.events = []

    def __enter__(self):
        _Profile.sessions += 1
        GPU.profiling = self.events
        return self

    def __exit__(self, *exc):
        GPU.profiling = None
        return False

    def export_chrome_trace(self, path):
        with open(path, "w") as f:
            json.dump({"schemaVersion": 1, "traceEvents": self.events}, f)


profiler = types.ModuleType("torch.profiler")
profiler.profile = _Profile
profiler.ProfilerActivity = types.SimpleNamespace(CPU="cpu", CUDA="cuda")

torch = types.ModuleType("torch")
torch.__version__ = "0.0-fake"
torch.version = types.SimpleNamespace(cuda="0.0")
torch.cuda = cuda
torch.profiler = profiler
torch.float32, torch.bfloat16, torch.long = "float32", "bfloat16", "long"
torch.zeros = lambda n, device=None, dtype=None: Tensor(n)
torch.ones = lambda n, device=None, dtype=None: Tensor(n)
torch.empty_like = lambda t: Tensor(t.n)
torch.isfinite = lambda t: Tensor(1)


class Engine:
    """Decode step: per layer a norm, four GEMVs, rope and softmax (durations in us)."""
    LAYER = [("rms_norm", 3.0), ("gemv_qkv", 20.0), ("rope", 2.0), ("attn_softmax", 4.0), ("gemv_o", 15.0),
             ("rms_norm", 3.0), ("gemv_gate_up", 50.0), ("gemv_down", 25.0)]

    def __init__(self, cfg, max_slots, prompt_len, max_new, device="cuda", dtype=None, seed=0, max_prefill=8):
        self.cfg = cfg
        self.kcache = Tensor(1)
        self.decode_graphs = {}

    def _decode(self, B):
        for _ in range(self.cfg["layers"]):
            for name, dur in self.LAYER:
                _launch(name, dur)
        _launch("argmax", 6.0)

    def prepare(self, decode_buckets, prefill_buckets, use_graphs=True):
        for b in decode_buckets:
            self._decode(b)
            g = CUDAGraph()
            with _graph(g):
                self._decode(b)
            self.decode_graphs[b] = g


llama = types.ModuleType("llama")
llama.Engine = Engine
llama.config_for_params = llama_shapes.config_for_params
