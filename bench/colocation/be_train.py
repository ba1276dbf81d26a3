#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Best-effort training tenant: a GPT-style transformer trained on random tokens.

bf16 autocast, AdamW (fused), causal flash attention; runs until SIGTERM (or --duration) and logs
(wall time, cumulative steps) after every step to --json (see common.Progress), so the runner can
read steps/s over any window, e.g. the HP tenant's measured window. --ready-file is created after
--warmup-steps steps.

--ddp-gpus 0,1: data-parallel training, one process per listed GPU (a replica of the same model in
DistributedDataParallel over NCCL, rank r on cuda:<gpus[r]>, the ranks meeting at a file store beside
--json). This process only starts and watches the ranks and never touches CUDA, so under `gpuos run`
each rank is its own tenant (they inherit LD_PRELOAD and the GPUOS_* environment; gpuos registers a
process at its first driver call). Rank 0 writes --json (global steps; nccl_version, world_size),
and --ready-file after --warmup-steps; rank r > 0 writes <json>.rank<r>.json. The ranks agree on
stopping after each step (an all-reduce of a stop flag), so SIGTERM or --duration ends all of them
after the same step and none is left waiting in a collective. NVLink multicast stays off in every
rank (NCCL_ENV). The launcher's helpers (parse_gpus ... supervise) need no torch.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

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


# ---------------------------------------------------------------------------------------------
# Data-parallel mode: the launcher (torch-free)

# NVLink multicast off in NCCL, PyTorch and NVSHMEM: a program that uses it can put a shared host's
# GPUs out of service (the device machines' rule). Forced in every rank, whatever the caller set.
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def parse_gpus(text: str) -> List[int]:
    """'0,1' -> [0, 1]: GPU indices (CUDA's numbering in this process), distinct, at least one.
    ValueError on anything else."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p.isdigit() for p in parts):
        raise ValueError(f"bad GPU list {text!r}: comma-separated GPU indices, e.g. 0,1")
    gpus = [int(p) for p in parts]
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"bad GPU list {text!r}: a GPU is listed twice (one rank per GPU)")
    return gpus


def rank_json(json_path: str, rank: int) -> str:
    """Rank 0 writes --json itself (the runner reads it); rank r > 0 <json stem>.rank<r>.json."""
    if rank == 0:
        return json_path
    root, ext = os.path.splitext(json_path)
    return f"{root}.rank{rank}{ext or '.json'}"


def store_path(json_path: str) -> str:
    """The ranks' rendezvous (a torch.distributed FileStore), beside --json; fresh for every launch."""
    return json_path + ".ddp-store"


def rank_argv(args, rank: int, gpus: Sequence[int], store: str, script: str = "") -> List[str]:
    """Command line of rank `rank` (a replica on cuda:<gpus[rank]>) from the launcher's arguments."""
    cmd = [sys.executable, script or os.path.abspath(__file__),
           "--params-m", str(args.params_m), "--seq", str(args.seq), "--batch", str(args.batch),
           "--vocab", str(args.vocab), "--duration", str(args.duration),
           "--warmup-steps", str(args.warmup_steps), "--hold-gib", str(args.hold_gib),
           "--device", f"cuda:{gpus[rank]}", "--json", rank_json(args.json, rank),
           "--ddp-rank", str(rank), "--ddp-world", str(len(gpus)), "--ddp-store", store,
           "--ddp-gpu-list", ",".join(str(g) for g in gpus)]
    if rank == 0 and args.ready_file:
        cmd += ["--ready-file", args.ready_file]
    return cmd


def rank_env(env: Dict[str, str], rank: int, world: int) -> Dict[str, str]:
    """The environment of a rank: the launcher's (LD_PRELOAD, GPUOS_* of `gpuos run` included), NCCL_ENV
    forced, and under gpuos a tenant name per rank (<name>-rank<r>) so `gpuos ps` tells them apart."""
    out = dict(env)
    out.update(NCCL_ENV)
    out["PYTHONUNBUFFERED"] = "1"
    if out.get("GPUOS_TENANT_NAME"):
        out["GPUOS_TENANT_NAME"] = f"{out['GPUOS_TENANT_NAME']}-rank{rank}"
    out.pop("LOCAL_RANK", None)  # torchrun's, if the caller had any: the ranks get theirs as flags
    out.pop("RANK", None)
    out.pop("WORLD_SIZE", None)
    return out


def nccl_version_str(v) -> Optional[str]:
    """torch.cuda.nccl.version() as 'major.minor.patch': a tuple in torch 2.x, an int in older ones
    (major*10000 + minor*100 + patch since NCCL 2.9, major*1000 + minor*100 + patch before)."""
    if v is None:
        return None
    if isinstance(v, (tuple, list)):
        return ".".join(str(x) for x in v)
    if isinstance(v, int):
        major = v // 10000 if v >= 10000 else v // 1000
        rest = v % 10000 if v >= 10000 else v % 1000
        return f"{major}.{rest // 100}.{rest % 100}"
    return str(v)


def _signal_live(procs: Sequence[subprocess.Popen], sig: int) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(sig)
            except OSError:
                pass


def supervise(procs: Sequence[subprocess.Popen], stop, grace_s: float = 15.0, poll_s: float = 0.2) -> List[int]:
    """Waits for every rank; returns their exit codes in rank order.

    A rank that fails would leave its peers waiting in a collective for ever, and SIGTERM (stop.stop)
    may have reached this process alone: either way the live ranks get SIGTERM (they stop after their
    current step), and once any rank has ended, those still alive grace_s later get SIGKILL (a rank
    blocked in a collective with a dead peer cannot act on SIGTERM)."""
    deadline = None
    termed = False
    while True:
        rcs = [p.poll() for p in procs]
        if all(rc is not None for rc in rcs):
            return rcs
        failed = any(rc not in (None, 0) for rc in rcs)
        if (stop.stop or failed) and not termed:
            _signal_live(procs, signal.SIGTERM)
            termed = True
        if deadline is None and (stop.stop or any(rc is not None for rc in rcs)):
            deadline = time.monotonic() + grace_s
        if deadline is not None and time.monotonic() > deadline:
            _signal_live(procs, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(poll_s)


def launch(args, gpus: Sequence[int], stop, script: str = "", grace_s: float = 15.0) -> int:
    """Starts one rank per GPU and waits for them (supervise). A rank that failed is named in rank 0's
    JSON ('error', 'rank_exit_codes'), which is written here if rank 0 wrote none."""
    store = store_path(args.json)
    for p in (store, *(rank_json(args.json, r) for r in range(len(gpus)))):
        try:
            os.unlink(p)  # a FileStore left by an earlier run would hold its stale keys
        except FileNotFoundError:
            pass
    procs = []
    try:
        for r in range(len(gpus)):
            procs.append(subprocess.Popen(rank_argv(args, r, gpus, store, script),
                                          env=rank_env(dict(os.environ), r, len(gpus)),
                                          stdin=subprocess.DEVNULL))
        print(f"[be-train] DDP over GPUs {','.join(map(str, gpus))}: rank pids "
              f"{' '.join(str(p.pid) for p in procs)}", flush=True)
        rcs = supervise(procs, stop, grace_s=grace_s)
    finally:
        _signal_live(procs, signal.SIGKILL)  # only if this process itself is dying
        for p in procs:
            p.wait()
    rcs = [p.returncode for p in procs]
    bad = [(r, rc) for r, rc in enumerate(rcs) if rc != 0]
    doc = common.read_json(args.json)
    if bad or doc is None:
        doc = doc or {"role": "be", "ok": False, "kind": "ddp", "world_size": len(gpus), "gpus": list(gpus)}
        doc["rank_exit_codes"] = rcs
        if bad:
            msgs = []
            for r, rc in bad:  # with the rank's own error where it wrote one (common.Progress.fail)
                own = (common.read_json(rank_json(args.json, r)) or {}).get("error")
                msgs.append(f"rank {r} (GPU {gpus[r]}) exited rc={rc}" + (f": {own}" if own else ""))
            doc["ok"] = False
            doc["error"] = "; ".join(msgs)
        else:
            doc["error"] = "rank 0 wrote no result"
        common.write_json_atomic(args.json, doc)
    try:
        os.unlink(store)
    except FileNotFoundError:
        pass
    return 0 if not bad else 1


# ---------------------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
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
    ap.add_argument("--ddp-gpus", default="",
                    help="data-parallel over these GPUs, one process per GPU (e.g. 0,1; see above)")
    # One rank of --ddp-gpus: set by the launcher (rank_argv).
    ap.add_argument("--ddp-rank", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--ddp-world", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--ddp-store", default="", help=argparse.SUPPRESS)
    ap.add_argument("--ddp-gpu-list", default="", help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.ddp_gpus:
        try:
            gpus = parse_gpus(args.ddp_gpus)
        except ValueError as e:
            ap.error(str(e))
        return launch(args, gpus, common.StopFlag())
    ddp = args.ddp_rank >= 0

    stop = common.StopFlag()
    t_proc = time.perf_counter()
    d, layers, heads = PRESETS[args.params_m]
    meta = {"kind": "train", "config": {"params_m": args.params_m, "d_model": d, "layers": layers,
                                        "heads": heads, "seq": args.seq, "batch": args.batch,
                                        "vocab": args.vocab, "optimizer": "AdamW",
                                        "autocast": "bfloat16"}}
    world = args.ddp_world if ddp else 1
    if ddp:
        gpus = parse_gpus(args.ddp_gpu_list) if args.ddp_gpu_list else []
        meta.update({"kind": "ddp", "rank": args.ddp_rank, "world_size": world, "gpus": gpus})
        meta["config"]["ddp"] = {"world_size": world, "gpus": gpus, "backend": "nccl",
                                 "global_batch": args.batch * world, "nccl_env": dict(NCCL_ENV)}
    prog = common.Progress(args.json, unit="steps/s", per_step=1.0, ready_file=args.ready_file,
                           warm_steps=args.warmup_steps, meta=meta)
    try:
        import torch
        F = torch.nn.functional
        prog.doc["torch"] = torch.__version__
        dev = torch.device(args.device)
        if ddp:
            import torch.distributed as dist
            torch.cuda.set_device(dev)
            prog.doc["device_name"] = torch.cuda.get_device_name(dev)
            try:
                prog.doc["nccl_version"] = nccl_version_str(torch.cuda.nccl.version())
            except (AttributeError, RuntimeError) as e:
                prog.doc["nccl_version"] = f"unknown ({e})"
            dist.init_process_group("nccl", init_method="file://" + os.path.abspath(args.ddp_store),
                                    rank=args.ddp_rank, world_size=world)
            prog.doc["init_s"] = time.perf_counter() - t_proc
        torch.manual_seed(0)
        ballast = common.hold_memory(torch, args.hold_gib, dev)  # noqa: F841 (kept alive)
        model = build_model(torch, d, layers, heads, args.vocab, args.seq).to(dev)
        n_params = sum(p.numel() for p in model.parameters())
        prog.doc["config"]["params"] = n_params
        if ddp:
            model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
            torch.manual_seed(1 + args.ddp_rank)  # each rank its own batches
        try:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=(dev.type == "cuda"))
        except (TypeError, RuntimeError):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        prog.doc["startup_s"] = time.perf_counter() - t_proc
        print(f"[be-train] {n_params / 1e6:.0f}M params, batch {args.batch}x{args.seq}"
              + (f", rank {args.ddp_rank} of {world} on {dev}, NCCL {prog.doc.get('nccl_version')}"
                 if ddp else ""), flush=True)
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        t_end = time.time() + args.duration if args.duration > 0 else float("inf")
        flag = torch.zeros(1, device=dev) if ddp else None
        last = False
        while ddp or (not stop.stop and time.time() < t_end):
            x = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
            y = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, args.vocab).float(), y.view(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if ddp:
                # The ranks agree after every step whether to stop (SIGTERM or --duration at any
                # rank), so all end after the same step: one that stopped alone would leave the others
                # in the next step's all-reduce for ever. item() also waits for the step's work.
                flag.fill_(1.0 if stop.stop or time.time() >= t_end else 0.0)
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                last = flag.item() > 0
            else:
                sync()
            prog.tick()
            if last:
                break
        r = prog.rate_since_ready()
        prog.write(samples_per_step=args.batch * world, tokens_per_step=args.batch * args.seq * world,
                   last_loss=float(loss.item()) if prog.steps else None)
        print(f"[be-train] {prog.steps} steps; {common.fmt(r)} steps/s after warm-up", flush=True)
        if ddp:
            dist.destroy_process_group()
        return 0
    except BaseException as exc:  # noqa: BLE001
        return prog.fail(exc)


if __name__ == "__main__":
    sys.exit(main())
