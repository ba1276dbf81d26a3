# SPDX-License-Identifier: Apache-2.0
"""Shared helpers for the co-location suite: percentiles, JSON I/O, timing, rate windows.

Importable without torch or a GPU (the runner and the report use it on any machine).
"""
from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import subprocess
import tempfile
import time
from typing import Iterable, Optional, Sequence, Tuple


# ---------------------------------------------------------------------------------------------
# Issue #40's method: HP alone measured several times, interleaved with the other modes, and a
# bound met only if the upper end of its 95% confidence interval is within it.

METHOD_MIN_EXCLUSIVE_RUNS = 5
METHOD_MIN_WINDOW_S = 60.0
# Issue #56's method v2 (method_v2.py): a headline claim needs this many included pairs per mode.
V2_MIN_PAIRS = 3

# run_matrix.py --exclusive-repeats N: HP alone N times at the same rate, interleaved with the other
# modes. The first is exclusive-hp itself (it calibrates); the others are exclusive-hp-r2 ..
# exclusive-hp-rN, which the plan adds (never named in --modes).
REPEAT_PREFIX = "exclusive-hp-r"


def repeat_name(k: int) -> str:
    """The k-th exclusive-hp run's mode name (k = 1: exclusive-hp)."""
    return "exclusive-hp" if k == 1 else f"{REPEAT_PREFIX}{k}"


def is_repeat(name: str) -> bool:
    """exclusive-hp-r<k>, k >= 2: an added exclusive-hp run of --exclusive-repeats."""
    k = name[len(REPEAT_PREFIX):] if name.startswith(REPEAT_PREFIX) else ""
    return k.isdigit() and not k.startswith("0") and int(k) >= 2


def exclusive_runs(names: Sequence[str]) -> list:
    """The exclusive-hp runs among mode names that form the exclusive reference: exclusive-hp and its
    repeats, in order (exclusive-hp-again is not one: it is the drift figure)."""
    return [n for n in names if n == "exclusive-hp" or is_repeat(n)]


# Student t's two-sided 95% quantile t(0.975, df) for df = 1..30.
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042]


def t975(df: int) -> float:
    """t(0.975, df): the table to df = 30, then Cornish-Fisher's expansion around z (within 1e-4)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def mean_ci95(vals: Sequence[float]) -> dict:
    """{n, values, mean, sd, half, ci95} of N runs' values: the mean, the sample standard deviation,
    and the 95% confidence interval of the mean, mean +- t(0.975, N-1) x sd / sqrt(N) (Student t:
    the runs taken as independent draws of a normal quantity). N < 2: sd, half and ci95 None."""
    v = [float(x) for x in vals]
    n = len(v)
    out = {"n": n, "values": v, "mean": sum(v) / n if n else None, "sd": None, "half": None, "ci95": None}
    if n >= 2:
        m = out["mean"]
        out["sd"] = math.sqrt(sum((x - m) ** 2 for x in v) / (n - 1))
        out["half"] = t975(n - 1) * out["sd"] / math.sqrt(n)
        out["ci95"] = [m - out["half"], m + out["half"]]
    return out


def ratio_ci95(value: Optional[float], ref: dict) -> Optional[list]:
    """The 95% interval of value / ref's mean that comes from ref's spread alone: [value / (mean + half),
    value / (mean - half)], ref a mean_ci95 of the exclusive runs. It covers the uncertainty of the
    exclusive reference (where the true mean of HP alone lies, from N runs), with `value` (one
    co-located run) taken as measured: that run's own run-to-run spread is not in it. None without an
    interval (N < 2) or a value; the upper end None (unbounded) when mean - half <= 0."""
    if value is None or not ref or ref.get("half") is None or not ref.get("mean"):
        return None
    m, h = ref["mean"], ref["half"]
    return [value / (m + h), value / (m - h) if m - h > 0 else None]


# ---------------------------------------------------------------------------------------------
# Percentiles

def percentile(sorted_vals: Sequence[float], q: float) -> Optional[float]:
    """Linear-interpolated percentile (q in [0, 100]) of an already sorted sequence; None if empty."""
    n = len(sorted_vals)
    if n == 0:
        return None
    if n == 1:
        return float(sorted_vals[0])
    pos = (q / 100.0) * (n - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return float(sorted_vals[lo]) * (1.0 - frac) + float(sorted_vals[hi]) * frac


def stats(vals: Iterable[float]) -> dict:
    """{n, p50, p90, p99, max, mean} of the values (None fields when empty)."""
    s = sorted(vals)
    if not s:
        return {"n": 0, "p50": None, "p90": None, "p99": None, "max": None, "mean": None}
    return {
        "n": len(s),
        "p50": percentile(s, 50),
        "p90": percentile(s, 90),
        "p99": percentile(s, 99),
        "max": float(s[-1]),
        "mean": float(sum(s) / len(s)),
    }


def cdf_points(vals: Iterable[float], max_points: int = 2000) -> list:
    """Sorted values downsampled to at most max_points quantiles (keeps min and max): enough for a CDF plot."""
    s = sorted(vals)
    n = len(s)
    if n <= max_points:
        return [round(float(v), 4) for v in s]
    out = []
    for i in range(max_points):
        idx = round(i * (n - 1) / (max_points - 1))
        out.append(round(float(s[idx]), 4))
    return out


# ---------------------------------------------------------------------------------------------
# Arrivals, the load step and per-window latency

def poisson_arrivals(rate: float, t0: float, duration: float, n_max: int, seed: int,
                     step: Optional[Sequence[float]] = None) -> list:
    """Arrival times (perf_counter seconds) of a Poisson process starting at t0.

    Stops at n_max arrivals if n_max > 0, else at t0 + duration. step = (at_s, rate2): from
    t0 + at_s on the rate is rate2. Gaps are memoryless, so a gap that crosses the step is cut
    there and drawn anew at rate2: the process is exactly Poisson on each side."""
    rng = random.Random(seed)
    out = []
    t = t0
    t_step = t0 + step[0] if step else float("inf")
    while True:
        gap = rng.expovariate(rate if t < t_step else step[1])
        if t < t_step <= t + gap:
            t = t_step
            continue
        t += gap
        if n_max > 0:
            if len(out) >= n_max:
                break
        elif t > t0 + duration:
            break
        out.append(t)
    return out


def parse_load_step(text: str) -> tuple:
    """'T:R2' -> (T, R2, False): at T s into the measured window the rate becomes R2 req/s.
    'T:Kx' -> (T, K, True): it becomes K times the starting rate (for a server that learns its
    rate from its own calibration). ValueError on anything else."""
    at, sep, r = text.partition(":")
    factor = r.endswith("x")
    try:
        at_s, val = float(at), float(r[:-1] if factor else r)
    except ValueError:
        raise ValueError(f"bad load step {text!r}: T:R2 (seconds:req/s) or T:Kx") from None
    if not sep or not (math.isfinite(at_s) and at_s >= 0) or not (math.isfinite(val) and val > 0):
        raise ValueError(f"bad load step {text!r}: T >= 0 seconds, R2 > 0 req/s (or K > 0)")
    return at_s, val, factor


def load_step_for(text: str, rate: float) -> Optional[tuple]:
    """(at_s, rate2 req/s) of a --load-step value at starting rate `rate`; None for ''."""
    if not text:
        return None
    at_s, val, factor = parse_load_step(text)
    return at_s, val * rate if factor else val


def request_windows(log: dict, t_from: float, width: float = 1.0) -> list:
    """Latency per `width`-s window by arrival, from t_from on (seconds since the window start).

    log: hp_server's request_log (columns arrival_s, ttft_ms, tpot_ms; None latencies = request
    unfinished at the drain deadline). One {t_s, requests (finished), unfinished, ttft_p99_ms,
    tpot_p99_ms} per window up to the last arrival; with a few dozen requests a window's p99 is
    about its max."""
    arr = log.get("arrival_s") or []
    ttft = log.get("ttft_ms") or []
    tpot = log.get("tpot_ms") or []
    if not arr or max(arr) < t_from:
        return []
    n_win = int((max(arr) - t_from) // width) + 1
    wins = [([], [], [0]) for _ in range(n_win)]
    for a, f, p in zip(arr, ttft, tpot):
        k = int((a - t_from) // width)
        if not 0 <= k < n_win:
            continue
        if f is None:
            wins[k][2][0] += 1
            continue
        wins[k][0].append(f)
        if p is not None:
            wins[k][1].append(p)
    out = []
    for k, (f, p, unf) in enumerate(wins):
        out.append({"t_s": round(t_from + k * width, 3), "requests": len(f), "unfinished": unf[0],
                    "ttft_p99_ms": stats(f)["p99"], "tpot_p99_ms": stats(p)["p99"]})
    return out


# ---------------------------------------------------------------------------------------------
# Mode names

def slo_budget(policy: str) -> Optional[float]:
    """B of a gpuos mode's policy part 'slo-B' (the guaranteed tenant's --max-slowdown); None for
    any other policy; ValueError for a B that gpuos run would refuse (a number above 1, at most 100,
    at most three decimals: common/slowdown.h)."""
    if not policy.startswith("slo-"):
        return None
    try:
        b = float(policy[4:])
    except ValueError:
        raise ValueError(f"bad latency budget in {policy!r}: slo-B with B a number above 1, "
                         "e.g. slo-1.25") from None
    if not math.isfinite(b) or round(b * 1000) <= 1000 or b > 100:
        raise ValueError(f"bad latency budget in {policy!r}: B must be above 1 and at most 100 "
                         "(a slowdown, as gpuos run --max-slowdown takes it), e.g. slo-1.25")
    return b


VARIANT_RE = re.compile(r"^[a-z0-9][a-z0-9_]{0,31}$")


def split_variant(name: str) -> Tuple[str, Optional[str]]:
    """A gpuos mode name may end with @<variant>: the same mode under gpuosd's config <variant>
    (run_matrix.py --variant), beside the default one in the same run. ('gpuos-time-slo-1.25@iv100')
    -> ('gpuos-time-slo-1.25', 'iv100'); a name without '@' -> (name, None)."""
    base, sep, variant = name.partition("@")
    return base, (variant if sep else None)


# run_matrix.py --paired-seeds (issue #56's method v2): a mode replayed with arrival seed s is named
# <mode>+s<s> (exclusive-hp+s2, mps-prio1-t25+s2, gpuos-space-slo-1.5@nog+s2).
SEED_SUFFIX_RE = re.compile(r"^(?P<base>.+)\+s(?P<seed>0|[1-9][0-9]*)$")


def seed_name(base: str, seed: int) -> str:
    """The mode name of `base` replayed with arrival seed `seed` (method v2's pairs)."""
    return f"{base}+s{int(seed)}"


def split_seed(name: str) -> Tuple[str, Optional[int]]:
    """('mps-prio1-t25+s2') -> ('mps-prio1-t25', 2); a name without a seed suffix -> (name, None)."""
    m = SEED_SUFFIX_RE.match(name)
    return (m.group("base"), int(m.group("seed"))) if m else (name, None)


def run_modes(summary: dict) -> list:
    """A summary's mode rows, less a paired run's per-seed rows (`<mode>+s<seed>`): each mode's own
    row holds them, over the pairs (method v2)."""
    return [r for r in summary.get("modes", []) if split_seed(r["mode"])[1] is None]


def mode_budget(name: str) -> Optional[float]:
    """B of a mode named gpuos-<kind>-slo-B[@variant][+s<seed>]; None for every other mode."""
    parts = split_variant(split_seed(name)[0])[0].split("-", 2)
    if len(parts) != 3 or parts[0] != "gpuos":
        return None
    return slo_budget(parts[2])


# ---------------------------------------------------------------------------------------------
# JSON

def write_json_atomic(path: str, obj) -> None:
    """Write JSON to path via a temp file + rename, so a reader never sees a half-written file."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=False)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: str):
    """Parsed JSON at path, or None if missing / unreadable / malformed."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def hold_memory(torch, gib: float, device) -> list:
    """Ballast for memory-oversubscription runs: gib GiB in 1 GiB tensors, written once and kept
    (the footprint of a KV cache or a dataset cache that is rarely touched)."""
    chunks = []
    left = int(gib * 2**30)
    while left > 0:
        n = min(left, 2**30)
        chunks.append(torch.ones(n // 4, dtype=torch.int32, device=device))
        left -= n
    return chunks


def touch(path: str) -> None:
    with open(path, "a"):
        pass


# ---------------------------------------------------------------------------------------------
# Time

class WallClock:
    """Maps a monotonic perf_counter timeline onto wall-clock (time.time) seconds.

    Latencies are measured with perf_counter; windows are exchanged between processes as wall
    times (all processes run on one host, so time.time() is a shared clock)."""

    def __init__(self) -> None:
        self.perf0 = time.perf_counter()
        self.wall0 = time.time()

    def wall(self, perf_t: float) -> float:
        return self.wall0 + (perf_t - self.perf0)


def sleep_until(perf_deadline: float, spin_s: float = 0.0005) -> None:
    """Sleep until perf_counter() >= perf_deadline; the last spin_s are busy-waited for precision."""
    while True:
        rem = perf_deadline - time.perf_counter()
        if rem <= 0:
            return
        if rem > spin_s:
            time.sleep(rem - spin_s)


def wait_for_file(path: str, timeout_s: float, poll_s: float = 0.02) -> bool:
    """True once path exists; False after timeout_s."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if os.path.exists(path):
            return True
        time.sleep(poll_s)
    return os.path.exists(path)


class StopFlag:
    """Set by SIGTERM/SIGINT; long-running loops poll it and then write their final result."""

    def __init__(self) -> None:
        self.stop = False
        signal.signal(signal.SIGTERM, self._handler)
        signal.signal(signal.SIGINT, self._handler)

    def _handler(self, signum, frame) -> None:  # noqa: ARG002
        self.stop = True


# ---------------------------------------------------------------------------------------------
# Progress samples (best-effort tenants) and the rate over a window

def count_at(samples: Sequence[Sequence[float]], t: float) -> Optional[float]:
    """Cumulative count at wall time t, linearly interpolated between (wall_t, count) samples.

    None if t lies outside the sampled span (the tenant was not measured there)."""
    if not samples or t < samples[0][0] or t > samples[-1][0]:
        return None
    lo, hi = 0, len(samples) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if samples[mid][0] <= t:
            lo = mid
        else:
            hi = mid
    t0, c0 = samples[lo]
    t1, c1 = samples[hi]
    if t1 <= t0:
        return float(c1)
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0)


def rate_over(samples: Sequence[Sequence[float]], t0: float, t1: float) -> Optional[float]:
    """Average rate (count per second) over wall window [t0, t1]; None if not fully covered."""
    if t1 <= t0:
        return None
    a = count_at(samples, t0)
    b = count_at(samples, t1)
    if a is None or b is None:
        return None
    return (b - a) / (t1 - t0)


def fmt(v) -> str:
    """Number for a table cell: '-' for None, about three significant digits."""
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    a = abs(v)
    if isinstance(v, int) or a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


class Progress:
    """Progress log of a best-effort tenant: (wall time, cumulative count) after every step.

    Written atomically to json_path every `every_s` seconds and on finish(), so the runner can
    compute the rate over any window (rate_over) even if the tenant is killed. ready_file is
    created once `warm_steps` steps are done (the co-runner's measured window may start then)."""

    def __init__(self, json_path: str, unit: str, per_step: float, ready_file: str = "",
                 warm_steps: int = 3, every_s: float = 1.0, meta: Optional[dict] = None) -> None:
        self.json_path = json_path
        self.ready_file = ready_file
        self.warm_steps = warm_steps
        self.every_s = every_s
        self.steps = 0
        self.count = 0.0
        self.per_step = per_step
        self.ready_t = None
        self.samples = []
        self.doc = {"role": "be", "ok": True, "unit": unit, "pid": os.getpid()}
        self.doc.update(meta or {})
        self._last_write = 0.0
        self.samples.append([time.time(), 0.0])

    def tick(self, n: int = 1) -> None:
        """Record n completed steps (call after the GPU work is known to be finished)."""
        now = time.time()
        self.steps += n
        self.count += n * self.per_step
        self.samples.append([now, self.count])
        if self.ready_t is None and self.steps >= self.warm_steps:
            self.ready_t = now
            if self.ready_file:
                touch(self.ready_file)
        if now - self._last_write >= self.every_s:
            self.write()

    def rate_since_ready(self) -> Optional[float]:
        if self.ready_t is None or len(self.samples) < 2:
            return None
        return rate_over(self.samples, self.ready_t, self.samples[-1][0])

    def write(self, **extra) -> None:
        self._last_write = time.time()
        self.doc.update(extra)
        self.doc.update({"steps": self.steps, "count": self.count, "ready_t": self.ready_t,
                         "rate_since_ready": self.rate_since_ready(), "samples": self.samples})
        write_json_atomic(self.json_path, self.doc)

    def fail(self, exc: BaseException) -> int:
        """Record a crash of the workload (error and traceback in the JSON, traceback on stderr);
        returns the exit status to use."""
        import sys
        import traceback
        self.doc["ok"] = False
        self.doc["error"] = f"{type(exc).__name__}: {exc}"
        self.doc["traceback"] = traceback.format_exc()[-4000:]
        print(self.doc["traceback"], file=sys.stderr, flush=True)
        self.write()
        return 1


def commit_of(repo: str) -> Optional[str]:
    """The commit a run measured: $GPUOS_COMMIT when set (a copy of the tree whose .git is not the
    one built from), else `git rev-parse HEAD` of repo (with "-dirty" for uncommitted changes)."""
    env = os.environ.get("GPUOS_COMMIT")
    if env:
        return env
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _hash_files(paths):
    """A sha256 fed the files' contents in the order given; None if one is unreadable."""
    import hashlib
    h = hashlib.sha256()
    try:
        for p in paths:
            with open(p, "rb") as f:
                h.update(f.read())
    except OSError:
        return None
    return h


def config_sha256(paths, settings: dict) -> Optional[str]:
    """What two runs must share to be compared: one sha256 over the gpuosd config files' contents (in
    the order given; none: gpuosd's defaults) and the run's own settings (JSON, keys sorted). None if
    a file is unreadable."""
    import json
    h = _hash_files(paths)
    if h is None:
        return None
    h.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return h.hexdigest()


# A config file larger than this is named in config_texts, not copied (gpuosd configs are a few
# hundred bytes).
MAX_CONFIG_TEXT = 16384


def config_texts(paths) -> dict:
    """Each config file's text by its path (None: unreadable or over MAX_CONFIG_TEXT), so that a
    summary says what ran after a trial config is gone from the tree."""
    out = {}
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                text = f.read(MAX_CONFIG_TEXT + 1)
            out[p] = text if len(text) <= MAX_CONFIG_TEXT else None
        except (OSError, UnicodeDecodeError):
            out[p] = None
    return out


def files_sha256(paths) -> Optional[str]:
    """One sha256 over the files' contents, in the order given (None: no files, or one unreadable)."""
    h = _hash_files(paths) if paths else None
    return h.hexdigest() if h is not None else None
