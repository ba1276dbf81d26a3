# SPDX-License-Identifier: Apache-2.0
"""Llama-shaped model configs by parameter count, without torch (llama.py builds the model; the
runners and bench/kv size memory from these on machines without torch)."""
from __future__ import annotations

from typing import Optional

# Shapes per size class (Llama / TinyLlama / Llama-3 style). The layer count is then scaled to hit
# the requested parameter count.
_PRESETS = [
    # (max params in B for this class, shape)
    (2.0, dict(hidden=2048, heads=32, kv_heads=8, ffn=5632, vocab=32000)),
    (5.5, dict(hidden=3072, heads=24, kv_heads=8, ffn=8192, vocab=32000)),
    (1e9, dict(hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000)),
]


def _per_layer_params(c: dict) -> int:
    hd = c["hidden"] // c["heads"]
    attn = c["hidden"] * (c["heads"] + 2 * c["kv_heads"]) * hd + c["heads"] * hd * c["hidden"]
    mlp = 3 * c["hidden"] * c["ffn"]
    return attn + mlp + 2 * c["hidden"]


def param_count(c: dict) -> int:
    return c["layers"] * _per_layer_params(c) + 2 * c["vocab"] * c["hidden"] + c["hidden"]


TINY = dict(hidden=64, heads=8, kv_heads=2, ffn=128, vocab=512, layers=2)


def config_for_params(params_b: float, layers: Optional[int] = None) -> dict:
    """Llama-shaped config with about params_b billion parameters (or an explicit layer count).

    params_b == 0 gives a tiny model for CPU self-tests."""
    if params_b == 0:
        c = dict(TINY)
        if layers:
            c["layers"] = int(layers)
        c["head_dim"] = c["hidden"] // c["heads"]
        c["params"] = param_count(c)
        return c
    if params_b < 0:
        raise ValueError("params_b must be >= 0")
    shape = next(s for limit, s in _PRESETS if params_b <= limit)
    c = dict(shape)
    if layers is None:
        emb = 2 * c["vocab"] * c["hidden"]
        layers = max(1, round((params_b * 1e9 - emb) / _per_layer_params(c)))
    c["layers"] = int(layers)
    c["head_dim"] = c["hidden"] // c["heads"]
    c["params"] = param_count(c)
    return c
