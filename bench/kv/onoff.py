# SPDX-License-Identifier: Apache-2.0
"""Bursty ON/OFF Poisson arrivals (no torch; unit-tested in test_kv_logic.py).

A server's load alternates between an ON rate and an OFF rate with period period_s. At time t
(seconds from the window start) the server is ON when

    frac(t / period_s - phase) < on_fraction

so phase (a fraction of the period, 0 <= phase < 1) shifts its ON window: with n servers,
phase k/n and on_fraction 1/n give windows that follow one another (anti-correlated: one server
is ON at a time, and the others are OFF). Within each ON or OFF stretch arrivals are Poisson at
that stretch's rate; a gap that crosses a boundary is cut there and drawn anew (memoryless), so
the process is exactly Poisson on every stretch. Everything comes from one seed.
"""
from __future__ import annotations

import math
import random
from typing import List


def is_on(t: float, period_s: float, phase: float, on_fraction: float) -> bool:
    x = t / period_s - phase
    return (x - math.floor(x)) < on_fraction


def next_boundary(t: float, period_s: float, phase: float, on_fraction: float) -> float:
    """The first time > t where the ON/OFF state may change."""
    x = t / period_s - phase
    k = math.floor(x)
    frac = x - k
    nxt = k + (on_fraction if frac < on_fraction else 1.0)
    b = (nxt + phase) * period_s
    if b <= t:                      # floating-point rounding at a boundary: step just past it
        b = t + 1e-9 * period_s
    return b


def onoff_arrivals(on_rate: float, off_rate: float, period_s: float, phase: float,
                   duration_s: float, seed: int, on_fraction: float = 0.5, t0: float = 0.0) -> List[float]:
    """Sorted arrival times in [t0, t0 + duration_s) (t measured from t0 for the ON/OFF clock)."""
    if period_s <= 0 or duration_s < 0:
        raise ValueError("period_s must be > 0 and duration_s >= 0")
    if on_rate < 0 or off_rate < 0:
        raise ValueError("rates must be >= 0")
    if not 0.0 < on_fraction <= 1.0:
        raise ValueError("on_fraction must be in (0, 1]")
    rng = random.Random(seed)
    out: List[float] = []
    t = 0.0
    while t < duration_s:
        on = is_on(t, period_s, phase, on_fraction)
        rate = on_rate if on else off_rate
        end = duration_s if on_fraction >= 1.0 else min(duration_s, next_boundary(t, period_s, phase, on_fraction))
        if rate <= 0:
            t = end
            continue
        gap = rng.expovariate(rate)
        if t + gap >= end:
            t = end                 # cut at the boundary; redraw at the next stretch's rate
            continue
        t += gap
        out.append(t0 + t)
    return out


def on_share(arrivals: List[float], t0: float, period_s: float, phase: float, on_fraction: float) -> float:
    """Fraction of the arrivals that fall in ON stretches (1.0 for no arrivals)."""
    if not arrivals:
        return 1.0
    n = sum(1 for a in arrivals if is_on(a - t0, period_s, phase, on_fraction))
    return n / len(arrivals)
