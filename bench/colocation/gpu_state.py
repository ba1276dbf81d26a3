# SPDX-License-Identifier: Apache-2.0
"""The GPU's SM clock, temperature and power while a mode runs (nvidia-smi, one sample a period).

A mode that follows a busy one may find the GPU hotter and its clock lower, which would read as a
cost of the later mode's sharing; these figures beside each mode's latency tell the two apart.
nvidia-smi queries read NVML only; at one sample a second they load neither the GPU nor the CPU.
"""
from __future__ import annotations

import shutil
import statistics
import subprocess
from typing import List, Optional

QUERY = "clocks.sm,temperature.gpu,power.draw"


def parse(text: str) -> Optional[dict]:
    """Figures from `nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits` lines; None if
    none parsed. Lines that are not three numbers ("[N/A]", a partial last line) are skipped."""
    cols: List[List[float]] = [[], [], []]
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            values = [float(p) for p in parts]
        except ValueError:
            continue
        for c, v in zip(cols, values):
            c.append(v)
    if not cols[0]:
        return None

    def stats(xs: List[float]) -> dict:
        return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}

    return {"samples": len(cols[0]), "sm_mhz": stats(cols[0]), "temp_c": stats(cols[1]),
            "power_w": stats(cols[2])}


def describe(state: Optional[dict]) -> Optional[str]:
    """One line for a mode's notes."""
    if not state:
        return None
    sm, t, p = state["sm_mhz"], state["temp_c"], state["power_w"]
    return (f"GPU during the mode ({state['samples']} samples): SM clock median {sm['median']:.0f} MHz "
            f"(min {sm['min']:.0f}), {t['min']:.0f}-{t['max']:.0f} C, power median {p['median']:.0f} W")


class Sampler:
    """nvidia-smi in loop mode for one GPU, from start() to stop(); does nothing without nvidia-smi
    or with period_ms 0."""

    def __init__(self, log_path: str, period_ms: int, gpu_index: int = 0, binary: str = "nvidia-smi") -> None:
        self.log_path = log_path
        self.period_ms = period_ms
        self.gpu_index = gpu_index
        self.binary = binary
        self.proc: Optional[subprocess.Popen] = None
        self.log = None

    def start(self) -> None:
        if self.period_ms <= 0 or shutil.which(self.binary) is None:
            return
        self.log = open(self.log_path, "w")
        try:
            self.proc = subprocess.Popen(
                [self.binary, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", f"-i={self.gpu_index}",
                 f"-lms={self.period_ms}"], stdout=self.log, stderr=subprocess.DEVNULL)
        except OSError:
            self.log.close()
            self.log = None

    def stop(self) -> Optional[dict]:
        if self.proc is None:
            return None
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self.log.close()
        self.log = None
        with open(self.log_path) as f:
            return parse(f.read())
