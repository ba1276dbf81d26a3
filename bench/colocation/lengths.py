# SPDX-License-Identifier: Apache-2.0
"""Request lengths for hp_server.py (torch-free): every request's prompt and output length, either
fixed (--prompt / --out-tokens, the suite's 128 / 32) or drawn from a published production trace.

--lengths azure-conv / azure-code: the Azure LLM inference trace 2023, the production sample that
Splitwise characterizes (Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase
Splitting", ISCA 2024, section III, Fig. 3: input and output token CDFs of its "conversation" and
"coding" services). The paper's text gives the medians: conversation 1020 prompt / 129 generated
tokens, coding ~1500 prompt / 13 generated. The quantiles below are the released trace's own
(Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_conv.csv, 19366 requests, and
AzureLLMInferenceTrace_code.csv, 8819 requests; columns ContextTokens, GeneratedTokens; repository
commit b469a113cedca53ddc3bdea71a143dc4b7d8700c), linear-interpolated percentiles:

  conversation  prompt  p1 29  p5 181  p10 207  p25 396  p50 1020  p75 1189  p90 2735  p95 4083  p99 4142  max 14050 (mean 1155)
                output  p1 16  p5 41   p10 54   p25 85   p50 129   p75 395   p90 424   p95 451   p99 601   max 1000  (mean 211)
  coding        prompt  p1 17  p5 75   p10 147  p25 578  p50 1469  p75 2745  p90 5188  p95 7303  p99 7436  max 7437  (mean 2048)
                output  p1 6   p5 6    p10 7    p25 9    p50 13    p75 24    p90 55    p95 90    p99 252   max 1899  (mean 28)

The draw: the inverse of the empirical CDF through these points, log-linear between neighbouring
points (u uniform in [0, 1)), rounded; so every cited percentile, the median included, is the
distribution's own. A lognormal matched to the median and p90 misses the tails badly (coding's
prompts stop at 7437, the model's context; a lognormal through p50 and p90 puts p99 near 14500).
Prompt and output are drawn independently (the trace's joint shape is not kept) and clipped to
[1, max_prompt] and [2, max_out] (the server's KV cache is max_prompt + max_out per slot; at 4096
and 1024, 2.1% of conversation prompts and 14.1% of coding prompts are clipped to 4096, <0.1% of
outputs to 1024). Each request's draw comes from its own stream seeded by (kind, seed, what), so
one seed replays the same requests in every mode, beside the arrivals drawn from the same seed.
"""
from __future__ import annotations

import math
import random
from typing import Dict, List, Sequence, Tuple

CHOICES = ("fixed", "azure-conv", "azure-code")

# (cumulative probability, tokens): the trace's percentiles (docstring), p0 = its minimum.
Table = Tuple[Tuple[float, int], ...]
AZURE_2023: Dict[str, Dict[str, Table]] = {
    "azure-conv": {
        "prompt": ((0.0, 2), (0.01, 29), (0.05, 181), (0.10, 207), (0.25, 396), (0.50, 1020),
                   (0.75, 1189), (0.90, 2735), (0.95, 4083), (0.99, 4142), (1.0, 14050)),
        "output": ((0.0, 7), (0.01, 16), (0.05, 41), (0.10, 54), (0.25, 85), (0.50, 129),
                   (0.75, 395), (0.90, 424), (0.95, 451), (0.99, 601), (1.0, 1000)),
    },
    "azure-code": {
        "prompt": ((0.0, 3), (0.01, 17), (0.05, 75), (0.10, 147), (0.25, 578), (0.50, 1469),
                   (0.75, 2745), (0.90, 5188), (0.95, 7303), (0.99, 7436), (1.0, 7437)),
        "output": ((0.0, 6), (0.01, 6), (0.05, 6), (0.10, 7), (0.25, 9), (0.50, 13),
                   (0.75, 24), (0.90, 55), (0.95, 90), (0.99, 252), (1.0, 1899)),
    },
}
# The medians Splitwise's text states (section III), beside the trace's (the tests check both).
SPLITWISE_MEDIANS = {"azure-conv": {"prompt": 1020, "output": 129},
                     "azure-code": {"prompt": 1500, "output": 13}}

# The server's defaults for drawn lengths: the largest prompt and output (the KV cache's length per
# slot is their sum), and the most prompt tokens one prefill step takes (a batch of prompts is
# padded to its longest's bucket; bucket x prompts <= this).
MAX_PROMPT = 4096
MAX_OUT = 1024
PREFILL_TOKENS = 8192
MIN_PROMPT_BUCKET = 128


def quantile(table: Table, u: float) -> float:
    """The table's inverse CDF at u in [0, 1]: log-linear between its points."""
    if u <= table[0][0]:
        return float(table[0][1])
    for (p0, v0), (p1, v1) in zip(table, table[1:]):
        if u <= p1:
            if p1 == p0 or v0 == v1:
                return float(v1)
            f = (u - p0) / (p1 - p0)
            return math.exp(math.log(v0) + f * (math.log(v1) - math.log(v0)))
    return float(table[-1][1])


class Lengths:
    """Per-request (prompt, output) lengths of one kind, deterministic per (kind, seed, stream)."""

    def __init__(self, kind: str, prompt: int = 128, out_tokens: int = 32,
                 max_prompt: int = MAX_PROMPT, max_out: int = MAX_OUT) -> None:
        if kind not in CHOICES:
            raise ValueError(f"unknown lengths {kind!r}: one of {', '.join(CHOICES)}")
        self.kind = kind
        self.fixed = kind == "fixed"
        if self.fixed:
            self.max_prompt, self.max_out = int(prompt), int(out_tokens)
        else:
            if max_prompt < MIN_PROMPT_BUCKET or max_out < 2:
                raise ValueError(f"max prompt >= {MIN_PROMPT_BUCKET} and max output >= 2 needed")
            self.max_prompt, self.max_out = int(max_prompt), int(max_out)

    def draw(self, n: int, seed: int, stream: str = "window") -> List[Tuple[int, int]]:
        """n (prompt, output) pairs: the first n of (kind, seed, stream)'s sequence (so a longer
        draw starts with a shorter one's). Streams: "window" (the measured window), "warmup",
        "calibration", "calib-replay" (method v2's calibration replay)."""
        if self.fixed:
            return [(self.max_prompt, self.max_out)] * n
        t = AZURE_2023[self.kind]
        rng = random.Random(f"{self.kind}:{seed}:{stream}")
        out = []
        for _ in range(n):
            p = int(round(quantile(t["prompt"], rng.random())))
            o = int(round(quantile(t["output"], rng.random())))
            out.append((min(max(p, 1), self.max_prompt), min(max(o, 2), self.max_out)))
        return out

    def stream(self, seed: int, stream: str):
        """An endless iterator of (prompt, output) pairs (the closed-loop calibration's)."""
        if self.fixed:
            while True:
                yield (self.max_prompt, self.max_out)
        t = AZURE_2023[self.kind]
        rng = random.Random(f"{self.kind}:{seed}:{stream}")
        while True:
            p = int(round(quantile(t["prompt"], rng.random())))
            o = int(round(quantile(t["output"], rng.random())))
            yield (min(max(p, 1), self.max_prompt), min(max(o, 2), self.max_out))

    # --- the server's shapes -----------------------------------------------------------------

    def prompt_buckets(self) -> List[int]:
        """Prefill lengths a prompt is padded to: powers of two from 128 up to max_prompt (and
        max_prompt itself); fixed: the one prompt length."""
        if self.fixed:
            return [self.max_prompt]
        return pow2_buckets(MIN_PROMPT_BUCKET, self.max_prompt)

    def context(self) -> int:
        """The KV cache's length per slot (S)."""
        return self.max_prompt + self.max_out if self.fixed else self.prompt_buckets()[-1] + self.max_out

    def ctx_buckets(self) -> List[int]:
        """Context lengths decode steps attend over (each step the smallest one above every active
        request's position); fixed: the whole cache, as before."""
        if self.fixed:
            return [self.context()]
        return pow2_buckets(2 * MIN_PROMPT_BUCKET, self.context())


def pow2_buckets(lo: int, hi: int) -> List[int]:
    """lo, 2 lo, 4 lo, ... below hi, then hi."""
    out, b = [], lo
    while b < hi:
        out.append(b)
        b *= 2
    return out + [hi]


def bucket_of(buckets: Sequence[int], n: int) -> int:
    """The smallest bucket >= n (ValueError past the largest)."""
    for b in buckets:
        if b >= n:
            return b
    raise ValueError(f"{n} exceeds the largest bucket {buckets[-1]}")


def prefill_graphs(prefill_buckets: Sequence[int], prompt_buckets: Sequence[int], tokens: int) -> List[Tuple[int, int]]:
    """The (prompts, prompt bucket) prefill shapes the server captures: k prompts padded to P with
    k x P <= tokens (one prompt of any bucket always)."""
    return [(k, p) for p in prompt_buckets for k in prefill_buckets if k == min(prefill_buckets) or k * p <= tokens]


def prefill_take(lens: Sequence[int], limit: int, prefill_buckets: Sequence[int],
                 prompt_buckets: Sequence[int], tokens: int) -> int:
    """How many of the waiting prompts (lens, in arrival order) one prefill step takes: at most
    `limit`, first come first served, while a captured shape holds them (the bucket of their count
    x the bucket of their longest <= tokens, or one prompt alone)."""
    m, longest = 0, 0
    for n in lens[:limit]:
        lo = max(longest, n)
        k = bucket_of(prefill_buckets, m + 1) if m + 1 <= prefill_buckets[-1] else None
        if k is None or (m > 0 and k * bucket_of(prompt_buckets, lo) > tokens):
            break
        m, longest = m + 1, lo
    return max(m, 1) if lens else 0


def kv_gib(cfg: dict, slots: int, context: int, bytes_per: int = 2) -> float:
    """The KV cache a server with `slots` rows of `context` tokens holds (GiB, bf16)."""
    return 2 * cfg["layers"] * slots * cfg["kv_heads"] * context * cfg["head_dim"] * bytes_per / 2**30
