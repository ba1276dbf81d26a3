#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Best-effort offline batch inference: large-batch, prefill-heavy generation with the Llama model.

Each batch prefills --batch prompts of --prompt tokens (one CUDA graph) and decodes --gen tokens
(one CUDA graph per step) with the same engine as hp_server.py. Throughput is tokens/s, counting
prompt and generated tokens (batch * (prompt + gen) per batch). Logs progress to --json after
every batch (see common.Progress) until SIGTERM or --duration.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params-b", type=float, default=1.0)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--duration", type=float, default=0.0, help="seconds (0: until SIGTERM)")
    ap.add_argument("--warmup-steps", type=int, default=2, help="batches before --ready-file")
    ap.add_argument("--ready-file", default="")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-graphs", action="store_true")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()

    stop = common.StopFlag()
    t_proc = time.perf_counter()
    per_batch = args.batch * (args.prompt + args.gen)
    meta = {"kind": "infer", "config": {"params_b": args.params_b, "batch": args.batch,
                                        "prompt": args.prompt, "gen": args.gen,
                                        "tokens_per_batch": per_batch}}
    prog = common.Progress(args.json, unit="tokens/s", per_step=per_batch, ready_file=args.ready_file,
                           warm_steps=args.warmup_steps, meta=meta)
    try:
        import torch
        import llama
        prog.doc["torch"] = torch.__version__
        cfg = llama.config_for_params(args.params_b, args.layers)
        prog.doc["config"]["model"] = cfg
        eng = llama.Engine(cfg, max_slots=args.batch, prompt_len=args.prompt, max_new=args.gen,
                           device=args.device, seed=2, max_prefill=args.batch,
                           dtype=torch.bfloat16 if args.device.startswith("cuda") else torch.float32)
        eng.prepare([args.batch], [args.batch], use_graphs=not args.no_graphs)
        prog.doc["startup_s"] = time.perf_counter() - t_proc
        print(f"[be-infer] {cfg['params'] / 1e9:.2f}B, batch {args.batch}, prompt {args.prompt}, "
              f"gen {args.gen}, graphs={eng.use_graphs}", flush=True)
        sync = torch.cuda.synchronize if eng.device.type == "cuda" else (lambda: None)
        t_end = time.time() + args.duration if args.duration > 0 else float("inf")
        while not stop.stop and time.time() < t_end:
            eng.prefill(0, args.batch)
            for _ in range(args.gen - 1):
                eng.decode(args.batch)
            sync()
            prog.tick()
        r = prog.rate_since_ready()
        prog.write()
        print(f"[be-infer] {prog.steps} batches; {common.fmt(r)} tokens/s after warm-up", flush=True)
        return 0
    except BaseException as exc:  # noqa: BLE001
        return prog.fail(exc)


if __name__ == "__main__":
    sys.exit(main())
