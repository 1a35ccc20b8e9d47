#!/usr/bin/env python3
"""`zero train` against the same model in PyTorch on gloo, stage by stage (issue 10, "train").

The model is zero's reference MLP (models/mlp.hpp): `layers` square Linear layers of `width` with
bias, tanh between, MSE loss, AdamW, one global batch per step split over the ranks. The PyTorch
equivalent of each ZeRO stage is what a PyTorch user would pick:

  stage 0  DistributedDataParallel
  stage 1  DDP + ZeroRedundancyOptimizer(AdamW)
  stage 2  FSDP SHARD_GRAD_OP, one FSDP unit per Linear (zero: one unit per layer)
  stage 3  FSDP FULL_SHARD, the same units

fp32: everything fp32 on both sides. bf16: zero keeps bf16 working params and computes in fp32
(its default); PyTorch DDP / ZeRO-1 run under torch.autocast("cpu", torch.bfloat16) and FSDP with
MixedPrecision(param_dtype=bf16, reduce_dtype=fp32), so their GEMMs run in bf16 (oneDNN, on this
CPU's AVX512-BF16 when it has it): the peers' bf16 is what their users get, not zero's.

Each rank is one process with one compute thread (zero: one OpenBLAS thread per rank;
torch.set_num_threads(1)). samples/s over the steady state: steps 2..N (zero's own --json figure
leaves out step 1 too). zero makes its samples inside the timed step (its 'data' part, a few per
cent); PyTorch's batch is made once, before the loop. Runs interleave zero and PyTorch, the order
flipping each repetition, and zero's stage 0 and stage 3 runs of a repetition are adjacent too;
prints min and median of the ratios zero / PyTorch and zero's stage 3 / stage 0, and writes every
measurement to --json.

  .venv-peers/bin/python bench/peers/train.py --zero build/cli/zero [--ranks 2,4]
      [--precision fp32,bf16] [--stages 0,1,2,3] [--layers 8] [--width 1024]
      [--global-batch 64] [--steps 12] [--reps 3] [--json out/peers/train.json]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch import add_worker_flags, tanh_mlp, torch_ranks_json, zero_train_json  # noqa: E402

HERE = os.path.abspath(__file__)


def torch_worker(a):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world)
    torch.manual_seed(1)
    model = tanh_mlp(nn, a.layers, a.width)
    bf16 = a.precision == "bf16"
    if a.stage in (0, 1):
        model = nn.parallel.DistributedDataParallel(model)
        if a.stage == 0:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                          lr=1e-3)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                            buffer_dtype=torch.bfloat16) if bf16 else None
        strategy = ShardingStrategy.SHARD_GRAD_OP if a.stage == 2 else ShardingStrategy.FULL_SHARD
        model = FSDP(model, sharding_strategy=strategy, mixed_precision=mp,
                     auto_wrap_policy=ModuleWrapPolicy({nn.Linear}), use_orig_params=True,
                     device_id=torch.device("cpu"))  # FSDP1 on CPU must be told so
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    local = a.global_batch // a.world
    g = torch.Generator().manual_seed(100 + a.rank)
    x = torch.rand(local, a.width, generator=g) * 2 - 1
    y = torch.tanh(x.flip(1))
    loss_fn = nn.MSELoss()
    autocast = bf16 and a.stage in (0, 1)

    def step():
        opt.zero_grad(set_to_none=True)
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
        else:
            out = model(x)
        loss = loss_fn(out.float(), y)
        loss.backward()
        opt.step()

    step()  # step 1: left out, as zero leaves it out
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps - 1):
        step()
    dist.barrier()
    seconds = time.perf_counter() - t0
    if a.rank == 0:
        with open(a.out, "w") as f:
            json.dump({"samples_per_second": a.global_batch * (a.steps - 1) / seconds}, f)
    dist.destroy_process_group()


def run_torch(a, ranks, precision, stage):
    return torch_ranks_json(
        [sys.executable, HERE, "--torch-worker", "--world", str(ranks), "--stage", str(stage),
         "--precision", precision, "--layers", str(a.layers), "--width", str(a.width),
         "--global-batch", str(a.global_batch), "--steps", str(a.steps)],
        ranks, f"torch stage {stage} {precision} {ranks} ranks failed", 600)["samples_per_second"]


def run_zero(a, ranks, precision, stage):
    return zero_train_json([a.zero, "train", "-n", str(ranks), "--stage", str(stage),
                            "--precision", precision, "--layers", str(a.layers),
                            "--width", str(a.width), "--global-batch", str(a.global_batch),
                            "--steps", str(a.steps), "--log-every", str(a.steps)],
                           f"zero stage {stage} {precision} {ranks} ranks failed",
                           600)["samples_per_second"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zero", default="build/cli/zero")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    add_worker_flags(ap)
    ap.add_argument("--stage", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        a.precision = a.precision.split(",")[0]
        return torch_worker(a)

    stages = [int(s) for s in a.stages.split(",")]
    groups = [(int(r), p) for r in a.ranks.split(",") for p in a.precision.split(",")]
    cases = [(r, p, s) for r, p in groups for s in stages]
    got = {c: {"zero": [], "torch": []} for c in cases}
    for rep in range(a.reps):
        for r, p in groups:
            # Each stage's zero and PyTorch runs side by side, which goes first flipping each
            # rep; zero's stage 0 and stage 3 runs also side by side (torch 0, zero 0, zero 3,
            # torch 3, reversed on odd reps), so that their ratio compares runs seconds apart.
            runs = []
            for s in stages:
                if s == 3 and 0 in stages:
                    continue
                if s == 0 and 3 in stages:
                    pair = [(run_torch, 0), (run_zero, 0), (run_zero, 3), (run_torch, 3)]
                    runs += pair if rep % 2 == 0 else pair[::-1]
                else:
                    order = [(run_zero, s), (run_torch, s)]
                    runs += order if rep % 2 == 0 else order[::-1]
            for fn, s in runs:
                got[(r, p, s)]["zero" if fn is run_zero else "torch"].append(fn(a, r, p, s))
            for s in stages:
                z, t = got[(r, p, s)]["zero"][-1], got[(r, p, s)]["torch"][-1]
                print(f"rep {rep + 1}  {r} ranks {p} stage {s}: zero {z:8.1f}  torch "
                      f"{t:8.1f} samples/s  ratio {z / t:.2f}", flush=True)

    names = {0: "DDP", 1: "DDP+ZeRO-1 opt", 2: "FSDP SHARD_GRAD_OP", 3: "FSDP FULL_SHARD"}
    print(f"\nzero / PyTorch, samples/s ({a.layers} x {a.width}, global batch {a.global_batch}, "
          f"{a.steps} steps, {a.reps} reps; min / median of the per-rep ratios)")
    print(f"{'ranks':>5} {'prec':>5} {'stage':>5} {'peer':<20} {'zero':>9} {'torch':>9} "
          f"{'min':>6} {'median':>6}")
    summary = []
    for c in cases:
        zs, ts = got[c]["zero"], got[c]["torch"]
        ratios = [z / t for z, t in zip(zs, ts)]
        row = {"ranks": c[0], "precision": c[1], "stage": c[2], "peer": names[c[2]],
               "zero_samples_per_second": zs, "torch_samples_per_second": ts,
               "ratio_min": min(ratios), "ratio_median": statistics.median(ratios)}
        summary.append(row)
        print(f"{c[0]:>5} {c[1]:>5} {c[2]:>5} {names[c[2]]:<20} {statistics.median(zs):9.1f} "
              f"{statistics.median(ts):9.1f} {row['ratio_min']:6.2f} {row['ratio_median']:6.2f}")
    s30 = []
    for r in a.ranks.split(","):
        for p in a.precision.split(","):
            k0, k3 = (int(r), p, 0), (int(r), p, 3)
            if k0 in got and k3 in got:
                rs = [z3 / z0 for z3, z0 in zip(got[k3]["zero"], got[k0]["zero"])]
                s30.append({"ranks": int(r), "precision": p, "min": min(rs),
                            "median": statistics.median(rs)})
                print(f"zero stage 3 / stage 0, {r} ranks {p}: min {min(rs):.2f} median "
                      f"{statistics.median(rs):.2f}")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "cases": summary, "stage3_over_stage0": s30}, f, indent=1)


if __name__ == "__main__":
    main()
