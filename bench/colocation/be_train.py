#!/usr/bin/env python3
"""Best-effort training tenant: a GPT-style transformer trained on random tokens.

bf16 autocast, AdamW (fused), causal flash attention; runs until SIGTERM (or --duration) and logs
(wall time, cumulative steps) after every step to --json (see common.Progress), so the runner can
read steps/s over any window, e.g. the HP tenant's measured window. --ready-file is created after
--warmup-steps steps.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# name: (d_model, layers, heads) -- GPT-2 family shapes
PRESETS = {125: (768, 12, 12), 350: (1024, 24, 16), 760: (1536, 24, 16), 1300: (2048, 24, 16)}


def build_model(torch, d: int, layers: int, heads: int, vocab: int, seq: int):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.lnf = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.lnf(x))

    return GPT()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params-m", type=int, default=350, choices=sorted(PRESETS), help="model size class (M params)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--duration", type=float, default=0.0, help="seconds (0: until SIGTERM)")
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--ready-file", default="")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", required=True)
    ap.add_argument("--hold-gib", type=float, default=0.0,
                    help="extra GiB held in device memory for the process's life (oversubscription runs)")
    args = ap.parse_args()

    stop = common.StopFlag()
    t_proc = time.perf_counter()
    d, layers, heads = PRESETS[args.params_m]
    meta = {"kind": "train", "config": {"params_m": args.params_m, "d_model": d, "layers": layers,
                                        "heads": heads, "seq": args.seq, "batch": args.batch,
                                        "vocab": args.vocab, "optimizer": "AdamW",
                                        "autocast": "bfloat16"}}
    prog = common.Progress(args.json, unit="steps/s", per_step=1.0, ready_file=args.ready_file,
                           warm_steps=args.warmup_steps, meta=meta)
    try:
        import torch
        F = torch.nn.functional
        prog.doc["torch"] = torch.__version__
        dev = torch.device(args.device)
        torch.manual_seed(0)
        ballast = common.hold_memory(torch, args.hold_gib, dev)  # noqa: F841 (kept alive)
        model = build_model(torch, d, layers, heads, args.vocab, args.seq).to(dev)
        n_params = sum(p.numel() for p in model.parameters())
        prog.doc["config"]["params"] = n_params
        try:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=(dev.type == "cuda"))
        except (TypeError, RuntimeError):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        prog.doc["startup_s"] = time.perf_counter() - t_proc
        print(f"[be-train] {n_params / 1e6:.0f}M params, batch {args.batch}x{args.seq}", flush=True)
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        t_end = time.time() + args.duration if args.duration > 0 else float("inf")
        while not stop.stop and time.time() < t_end:
            x = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
            y = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, args.vocab).float(), y.view(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()
            prog.tick()
        r = prog.rate_since_ready()
        prog.write(samples_per_step=args.batch, tokens_per_step=args.batch * args.seq,
                   last_loss=float(loss.item()) if prog.steps else None)
        print(f"[be-train] {prog.steps} steps; {common.fmt(r)} steps/s after warm-up", flush=True)
        return 0
    except BaseException as exc:  # noqa: BLE001
        return prog.fail(exc)


if __name__ == "__main__":
    sys.exit(main())
