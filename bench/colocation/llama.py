# SPDX-License-Identifier: Apache-2.0
"""A Llama-shaped decoder with random bf16 weights and a static-shape serving engine.

Used by hp_server.py (latency-critical serving) and be_infer.py (offline batch inference).

Model: RMSNorm, rotary embeddings, grouped-query attention over a preallocated KV cache, SwiGLU
MLP. Weights are random (the numbers it produces mean nothing; the work it does is real).

Engine: all state is static so each step can be captured once as a CUDA graph and replayed:
  kcache/vcache [layers, slots, kv_heads, max_seq, head_dim]   the KV cache, one row per slot
  tok [slots], pos [slots]                                     next input token / write position
Active requests always occupy slots 0..n_active-1 (the host compacts on exit with move_slot), so
a decode step for bucket B simply runs rows 0..B-1; rows >= n_active are padding and only touch
their own (free) slots. A prefill of k prompts writes slots base..base+k-1 (base = n_active) and
seeds tok/pos for them, so requests join the next decode step without host round trips.

Lengths per request (prompt_buckets, hp_server.py --lengths azure-*): a prefill graph per (k,
prompt bucket P) pads its k prompts to P and reads each one's last real token (p_len: the prompts'
lengths, set before the replay), so each request's decode starts at its own length; a decode graph
per (B, context bucket C) attends over the first C positions only (C above every active row's
position), so a step costs what its longest request needs, not the whole cache. Without
prompt_buckets (one prompt length P, one context S) the steps are those of before, kernel for kernel.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

# The configs (torch-free, so runners without torch size memory from the same shapes).
from llama_shapes import TINY, config_for_params, param_count  # noqa: E402,F401


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary embedding; cos/sin broadcast against x[..., :head_dim/2]."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q, k, v: [batch, heads, seq, head_dim]; causal self-attention (flash kernel on the GPU)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Engine:
    """Static-shape Llama decoder engine (see module docstring)."""

    def __init__(self, cfg: dict, max_slots: int, prompt_len: int, max_new: int,
                 device: str = "cuda", dtype=torch.bfloat16, seed: int = 0,
                 max_prefill: int = 8, prompt_buckets: Optional[Sequence[int]] = None,
                 ctx_buckets: Optional[Sequence[int]] = None, prefill_tokens: int = 0) -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        self.L = cfg["layers"]
        self.D = cfg["hidden"]
        self.H = cfg["heads"]
        self.K = cfg["kv_heads"]
        self.hd = cfg["head_dim"]
        self.G = self.H // self.K
        self.F = cfg["ffn"]
        self.V = cfg["vocab"]
        self.P = int(prompt_len)
        self.T = int(max_new)
        # Lengths per request: prompts padded to a bucket (the largest is P), decode over a context
        # bucket; else one prompt length P and the whole cache S, as before.
        self.variable = prompt_buckets is not None
        if self.variable:
            self.prompt_buckets = sorted(set(int(p) for p in prompt_buckets))
            self.P = self.prompt_buckets[-1]
        else:
            self.prompt_buckets = [self.P]
        self.S = self.P + self.T          # max sequence per slot
        self.ctx_buckets = (sorted(set(int(c) for c in ctx_buckets or () if c < self.S) | {self.S})
                            if self.variable else [self.S])
        self.slots = int(max_slots)
        self.max_prefill = int(max_prefill)
        self.prefill_tokens = int(prefill_tokens) or self.max_prefill * self.P
        if self.H % self.K:
            raise ValueError("heads must be a multiple of kv_heads")
        if self.max_prefill > self.slots:
            raise ValueError("max_prefill > slots")

        g = torch.Generator(device="cpu")
        g.manual_seed(seed)
        dev, dt = self.device, dtype

        def rnd(*shape, scale=0.02):
            # Generate on the device (fast for billions of parameters); seeded for repeatability.
            t = torch.empty(*shape, device=dev, dtype=dt)
            t.normal_(0.0, scale)
            return t

        torch.manual_seed(seed)
        D, H, K, hd, Fd, V, L = self.D, self.H, self.K, self.hd, self.F, self.V, self.L
        self.embed = rnd(V, D)
        self.wqkv = [rnd(D, (H + 2 * K) * hd) for _ in range(L)]
        self.wo = [rnd(H * hd, D) for _ in range(L)]
        self.wgu = [rnd(D, 2 * Fd) for _ in range(L)]
        self.wdown = [rnd(Fd, D) for _ in range(L)]
        self.ln1 = [torch.ones(D, device=dev, dtype=dt) for _ in range(L)]
        self.ln2 = [torch.ones(D, device=dev, dtype=dt) for _ in range(L)]
        self.lnf = torch.ones(D, device=dev, dtype=dt)
        self.lm = rnd(D, V)

        self.kcache = torch.zeros(L, self.slots, K, self.S, hd, device=dev, dtype=dt)
        self.vcache = torch.zeros(L, self.slots, K, self.S, hd, device=dev, dtype=dt)
        self.tok = torch.zeros(self.slots, device=dev, dtype=torch.long)
        self.pos = torch.zeros(self.slots, device=dev, dtype=torch.long)
        self.p_tok = torch.randint(0, V, (self.max_prefill, self.P), generator=g).to(dev)
        self.p_base = torch.zeros(1, device=dev, dtype=torch.long)
        # Each prompt's length in the next prefill (variable lengths): its last real token's logits.
        self.p_len = torch.ones(self.max_prefill, device=dev, dtype=torch.long)
        self.ar_slots = torch.arange(self.slots, device=dev)
        self.ar_S = torch.arange(self.S, device=dev)
        self.ar_P = torch.arange(self.P, device=dev)

        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.outer(torch.arange(self.S, dtype=torch.float32), inv)   # [S, hd/2]
        self.cos = ang.cos().to(dev, dt)
        self.sin = ang.sin().to(dev, dt)
        self.scale = 1.0 / math.sqrt(hd)

        # Keyed by batch bucket (one length), else by (batch bucket, context / prompt bucket).
        self.decode_graphs: Dict[object, "torch.cuda.CUDAGraph"] = {}
        self.prefill_graphs: Dict[object, "torch.cuda.CUDAGraph"] = {}
        self.decode_buckets: List[int] = []
        self.prefill_buckets: List[int] = []
        self.use_graphs = False

    # ---------------------------------------------------------------------------------------
    # The two steps (pure tensor work on static state; captured as graphs)

    def _decode(self, B: int, C: Optional[int] = None) -> None:
        """One decode step for rows 0..B-1: write K/V at pos, attend over the first C positions
        (default the whole cache S; every active row's pos < C), emit the next token."""
        H, K, G, hd = self.H, self.K, self.G, self.hd
        C = self.S if C is None else C
        pos = self.pos[:B].clamp(max=self.S - 1)                      # padding rows stay in range
        x = F.embedding(self.tok[:B], self.embed)                       # [B, D]
        cos = self.cos[pos][:, None, :]                                 # [B, 1, hd/2]
        sin = self.sin[pos][:, None, :]
        valid = self.ar_S[None, :C] <= pos[:, None]                     # [B, C]
        bias = torch.zeros(B, C, device=self.device, dtype=torch.float32)
        bias = bias.masked_fill(~valid, float("-inf"))[:, None, None, :]  # [B, 1, 1, S]
        rows = self.ar_slots[:B]
        for l in range(self.L):
            h = _rms(x, self.ln1[l])
            qkv = h @ self.wqkv[l]
            q = qkv[:, : H * hd].view(B, H, hd)
            k = qkv[:, H * hd:(H + K) * hd].view(B, K, hd)
            v = qkv[:, (H + K) * hd:].view(B, K, hd)
            q = _rope(q, cos, sin)
            k = _rope(k, cos, sin)
            kc, vc = self.kcache[l], self.vcache[l]                     # [slots, K, S, hd]
            kc[rows, :, pos] = k                                        # -> [B, K, hd]
            vc[rows, :, pos] = v
            kb, vb = (kc[:B], vc[:B]) if C == self.S else (kc[:B, :, :C], vc[:B, :, :C])
            qg = q.view(B, K, G, hd)
            sc = torch.matmul(qg, kb.transpose(-1, -2)).float() * self.scale + bias
            p = torch.softmax(sc, dim=-1).to(self.dtype)                # [B, K, G, C]
            o = torch.matmul(p, vb).reshape(B, H * hd)
            x = x + o @ self.wo[l]
            h = _rms(x, self.ln2[l])
            gu = h @ self.wgu[l]
            x = x + (F.silu(gu[:, : self.F]) * gu[:, self.F:]) @ self.wdown[l]
        logits = _rms(x, self.lnf) @ self.lm                            # [B, V]
        self.tok[:B].copy_(logits.argmax(dim=-1))
        self.pos[:B].add_(1)

    def _prefill(self, k: int, P: Optional[int] = None) -> None:
        """Prefill k prompts of length P (default the one prompt length) into slots
        p_base..p_base+k-1; seed their tok/pos. Variable lengths: prompt i is p_len[i] <= P tokens
        (padded to P), its first token comes from position p_len[i] - 1 and its decode starts there."""
        H, K, G, hd = self.H, self.K, self.G, self.hd
        P = self.P if P is None else P
        idx = self.p_base + self.ar_slots[:k]                           # [k]
        x = F.embedding(self.p_tok[:k] if P == self.P else self.p_tok[:k, :P], self.embed)  # [k, P, D]
        cos = self.cos[:P][None, :, None, :]
        sin = self.sin[:P][None, :, None, :]
        ar_P = self.ar_P if P == self.P else self.ar_P[:P]
        for l in range(self.L):
            h = _rms(x, self.ln1[l])
            qkv = h @ self.wqkv[l]                                      # [k, P, (H+2K)hd]
            q = qkv[..., : H * hd].view(k, P, H, hd)
            kk = qkv[..., H * hd:(H + K) * hd].view(k, P, K, hd)
            vv = qkv[..., (H + K) * hd:].view(k, P, K, hd)
            q = _rope(q, cos, sin)
            kk = _rope(kk, cos, sin)
            self.kcache[l][idx[:, None], :, ar_P[None, :]] = kk         # -> [k, P, K, hd]
            self.vcache[l][idx[:, None], :, ar_P[None, :]] = vv
            kt = kk.transpose(1, 2)[:, :, None].expand(k, K, G, P, hd).reshape(k, H, P, hd)
            vt = vv.transpose(1, 2)[:, :, None].expand(k, K, G, P, hd).reshape(k, H, P, hd)
            o = _causal_attention(q.transpose(1, 2), kt, vt)           # [k, H, P, hd]
            o = o.transpose(1, 2).reshape(k, P, H * hd)
            x = x + o @ self.wo[l]
            h = _rms(x, self.ln2[l])
            gu = h @ self.wgu[l]
            x = x + (F.silu(gu[..., : self.F]) * gu[..., self.F:]) @ self.wdown[l]
        if self.variable:
            n = self.p_len[:k]
            logits = _rms(x[self.ar_slots[:k], n - 1], self.lnf) @ self.lm  # [k, V]
            self.tok.index_copy_(0, idx, logits.argmax(dim=-1))
            self.pos.index_copy_(0, idx, n)
            return
        logits = _rms(x[:, -1], self.lnf) @ self.lm                    # [k, V]
        self.tok.index_copy_(0, idx, logits.argmax(dim=-1))
        self.pos.index_fill_(0, idx, P)

    # ---------------------------------------------------------------------------------------
    # Capture and replay

    def decode_shapes(self) -> List[object]:
        """The decode graphs' keys: batch buckets, or (batch, context bucket) pairs."""
        if not self.variable:
            return list(self.decode_buckets)
        return [(b, c) for b in self.decode_buckets for c in self.ctx_buckets]

    def prefill_shapes(self) -> List[object]:
        """The prefill graphs' keys: batch buckets, or (prompts, prompt bucket) pairs whose tokens fit
        prefill_tokens (one prompt of any bucket always)."""
        if not self.variable:
            return list(self.prefill_buckets)
        first = self.prefill_buckets[0]
        return [(k, p) for p in self.prompt_buckets for k in self.prefill_buckets
                if k == first or k * p <= self.prefill_tokens]

    def _run_decode(self, key) -> None:
        if self.variable:
            self._decode(*key)
        else:
            self._decode(key)

    def _run_prefill(self, key) -> None:
        if self.variable:
            self._prefill(*key)
        else:
            self._prefill(key)

    def prepare(self, decode_buckets: Sequence[int], prefill_buckets: Sequence[int],
                use_graphs: bool = True) -> None:
        """Warm up every bucket and (use_graphs) capture one CUDA graph per bucket (per bucket and
        length bucket with lengths per request)."""
        self.decode_buckets = sorted(set(int(b) for b in decode_buckets))
        self.prefill_buckets = sorted(set(int(b) for b in prefill_buckets))
        if not self.decode_buckets or not self.prefill_buckets:
            raise ValueError("need at least one decode and one prefill bucket")
        if self.decode_buckets[-1] > self.slots:
            raise ValueError("decode bucket larger than slots")
        if self.prefill_buckets[-1] > self.max_prefill:
            raise ValueError("prefill bucket larger than max_prefill")
        self.use_graphs = use_graphs and self.device.type == "cuda"
        self.p_base.zero_()
        self.p_len.fill_(1)  # a length every prompt bucket holds (the warm-up reads it)
        dec, pre = self.decode_shapes(), self.prefill_shapes()
        self._prefill_keys = set(pre)
        if not self.use_graphs:
            for key in dec:
                self._run_decode(key)
            for key in pre:
                self._run_prefill(key)
            self.reset()
            return
        # Warm-up on a side stream (cuBLAS handles/workspaces, attention kernels), then capture.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                for key in dec:
                    self._run_decode(key)
                for key in pre:
                    self._run_prefill(key)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        for key in sorted(dec, reverse=True):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                self._run_decode(key)
            self.decode_graphs[key] = g
        # Largest first (by tokens), so the shared pool is sized once by the largest.
        for key in sorted(pre, key=lambda k: (k[0] * k[1], k) if self.variable else (k, k), reverse=True):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                self._run_prefill(key)
            self.prefill_graphs[key] = g
        torch.cuda.synchronize()
        self.reset()

    def reset(self) -> None:
        self.tok.zero_()
        self.pos.zero_()
        self.p_base.zero_()

    @staticmethod
    def _bucket(buckets: Sequence[int], n: int) -> int:
        for b in buckets:
            if b >= n:
                return b
        raise ValueError(f"{n} exceeds the largest bucket {buckets[-1]}")

    def decode(self, n_active: int, max_pos: Optional[int] = None):
        """Enqueue one decode step for slots 0..n_active-1. Returns the bucket used (with lengths
        per request: (bucket, context), the context the smallest above max_pos, the largest
        position of the active rows)."""
        b = self._bucket(self.decode_buckets, n_active)
        if self.variable:
            key: object = (b, self._bucket(self.ctx_buckets, (self.S - 1 if max_pos is None else max_pos) + 1))
        else:
            key = b
        if self.use_graphs:
            self.decode_graphs[key].replay()
        else:
            self._run_decode(key)
        return key

    def prefill(self, base: int, m: int, lens: Optional[Sequence[int]] = None):
        """Enqueue a prefill of m prompts into slots base..base+m-1. Returns the bucket used (with
        lengths per request: (bucket, prompt bucket), the prompts' lengths `lens`).

        REQUIRES: base + bucket <= slots (padding rows write the slots just above)."""
        k = self._bucket(self.prefill_buckets, m)
        if base + k > self.slots:
            raise ValueError(f"prefill base {base} + bucket {k} > slots {self.slots}")
        self.p_base.fill_(base)
        key: object = k
        if self.variable:
            lens = list(lens) if lens is not None else [self.P] * m
            if len(lens) != m or min(lens) < 1 or max(lens) > self.P:
                raise ValueError(f"prefill of {m} prompts needs {m} lengths in 1..{self.P}: {lens}")
            key = (k, self._bucket(self.prompt_buckets, max(lens)))
            if key not in self._prefill_keys:
                raise ValueError(f"no prefill graph for {k} prompts of {key[1]} tokens "
                                 f"(prefill_tokens {self.prefill_tokens})")
            # Padding rows (m..k-1) get length 1: they only fill their own free slots.
            self.p_len[:k].copy_(torch.tensor(lens + [1] * (k - m), dtype=torch.long))
        if self.use_graphs:
            self.prefill_graphs[key].replay()
        else:
            self._run_prefill(key)
        return key

    def move_slot(self, src: int, dst: int, length: Optional[int] = None) -> None:
        """Copy slot src's KV rows and tok/pos into slot dst (compaction when a request leaves);
        length: only its first `length` positions (what it has written), else the whole row."""
        if length is None or length >= self.S:
            self.kcache[:, dst].copy_(self.kcache[:, src])
            self.vcache[:, dst].copy_(self.vcache[:, src])
        else:
            self.kcache[:, dst, :, :length].copy_(self.kcache[:, src, :, :length])
            self.vcache[:, dst, :, :length].copy_(self.vcache[:, src, :, :length])
        self.tok[dst:dst + 1].copy_(self.tok[src:src + 1])
        self.pos[dst:dst + 1].copy_(self.pos[src:src + 1])
