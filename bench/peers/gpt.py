#!/usr/bin/env python3
"""`zero train --model gpt` against the same GPT in PyTorch on gloo, stage by stage (issue 12, item 7).

The model is zero's GPT (docs/gpt.md, models/gpt.hpp), written here as torch modules with the
ops of tests/models/make_gpt_reference.py: token and position embeddings, pre-LayerNorm blocks
(LayerNorm eps 1e-5, causal multi-head attention through one qkv Linear [3C, C] and a proj
Linear, a GELU (tanh) MLP of 4C), a final LayerNorm and the head tied to the token embedding; no
dropout. Attention is F.scaled_dot_product_attention(is_causal=True), what nanoGPT calls
(`--attention math` writes it out as make_gpt_reference.py does). The shape is one of zero's
presets, read from `zero plan --list-presets` (gpt-nano: 4 layers,
hidden 128, 4 heads, seq 128, vocab 256).

Optimizer as zero train sets it (cli/cmd_train.cpp, docs/config.md): AdamW lr 3e-3, betas
(0.9, 0.999), eps 1e-8, weight decay 0.0 (DeepSpeed's default, zero train's), no scheduler,
gradient clipping at global norm 1.0; two parameter groups as models::gpt_param_groups() (no
decay on biases, LayerNorm parameters and embeddings; with weight decay 0 the groups only cost
the bookkeeping). torch's AdamW is fused=True (its fastest CPU kernel; `--adamw default` takes
torch's default, the single-tensor loop on CPU).

The PyTorch equivalent of each ZeRO stage is what a PyTorch user would pick:

  stage 0  DistributedDataParallel
  stage 1  DDP + ZeroRedundancyOptimizer(AdamW)
  stage 2  FSDP SHARD_GRAD_OP, one FSDP unit per transformer block (zero: one unit per block)
  stage 3  FSDP FULL_SHARD, the same units
           (the embeddings, the final LayerNorm and the tied head stay in FSDP's root unit;
           zero has them as two units of their own: wte/wpe and ln_f)

fp32: everything fp32 on both sides (zero: --precision fp32, fp32 compute). bf16: zero runs
--precision bf16 (bf16 working params, bf16 GEMMs with fp32 accumulation, docs/gpt.md); PyTorch
runs forward and backward under torch.autocast("cpu", torch.bfloat16) with fp32 params, at every
stage (`--fsdp-bf16 mixed` instead gives FSDP MixedPrecision(param_dtype=bf16, reduce_dtype=fp32)
at stages 2-3 and no autocast: bf16 gathers, as zero's).

Each rank is one process with one compute thread (zero: one OpenBLAS thread per rank;
torch.set_num_threads(1)). Data: both read the same token file (llm.c format, as `zero data`
writes); zero draws its windows with its sampler, PyTorch draws random windows of seq + 1
tokens each step (throughput does not depend on which tokens). tokens/s over the steady state:
steps 2..K, on rank 0 between two barriers (zero's --json figure: the mean step time of steps
2..K on rank 0). Each PyTorch step all-reduces its loss, as zero train's loop does for its log.
Runs interleave zero and PyTorch, the order flipping each repetition; prints min and median of
the ratios zero / PyTorch, zero's stage 3 / stage 0 and zero's MFU, and writes every
measurement to --json. OPENBLAS_CORETYPE is removed from both sides' environment.

  .venv-peers/bin/python bench/peers/gpt.py --zero build/cli/zero --data out/peers/jargon_train.bin
      [--preset gpt-nano] [--ranks 2,4] [--precision fp32,bf16] [--stages 0,1,2,3]
      [--cases R:P,...] [--global-batch 16] [--steps 10] [--reps 3] [--json out/peers/gpt.json]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch import (add_worker_flags, clean_env, preset_shape, torch_ranks_json,  # noqa: E402
                    zero_train_json)

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
NAMES = {0: "DDP", 1: "DDP+ZeRO-1 opt", 2: "FSDP SHARD_GRAD_OP", 3: "FSDP FULL_SHARD"}


# ---------------------------------------------------------------------------------------------
# The PyTorch side: one process per rank.

def build_model(a):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    C, NH, T, V, L = a.hidden, a.heads, a.seq_len, a.vocab, a.layers
    HS = C // NH

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).split(C, dim=-1)
            q, k, v = (z.reshape(b, t, NH, HS).transpose(1, 2) for z in (q, k, v))
            if a.attention == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # make_gpt_reference.py's attention()
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
                mask = torch.ones(t, t, dtype=torch.bool).tril()
                y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
            return self.proj(y.transpose(1, 2).reshape(b, t, C))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(C, 4 * C)
            self.proj = nn.Linear(4 * C, C)

        def forward(self, x):
            return self.proj(F.gelu(self.fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C, eps=1e-5)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(C, eps=1e-5)
            self.mlp = Mlp()

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C, eps=1e-5)
            for n, p in self.named_parameters():  # zero's init (models/gpt.cpp), nanoGPT's
                if n.endswith("bias"):
                    nn.init.zeros_(p)
                elif p.dim() == 1:
                    nn.init.ones_(p)
                else:
                    std = 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied head
            return F.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1))

    return Gpt(), Block


def param_groups(model, hyper):
    # models::gpt_param_groups(): no decay on biases, LayerNorm parameters and embeddings.
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        plain = n.replace("_fsdp_wrapped_module.", "").replace("module.", "")
        (no_decay if p.dim() < 2 or plain.startswith(("wte.", "wpe.")) else decay).append(p)
    return [{"params": decay, "weight_decay": hyper["wd"]}, {"params": no_decay, "weight_decay": 0.0}]


def torch_worker(a):
    import numpy as np
    import torch
    import torch.distributed as dist

    torch.set_num_threads(a.threads)  # 1 a rank here; bench/threads.py runs one rank of 2
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world)
    torch.manual_seed(1)
    model, Block = build_model(a)
    bf16 = a.precision == "bf16"
    fsdp_mixed = bf16 and a.stage >= 2 and a.fsdp_bf16 == "mixed"
    opt_kw = dict(lr=a.lr, betas=(0.9, 0.999), eps=1e-8)
    if a.adamw == "fused":
        opt_kw["fused"] = True
    hyper = {"wd": a.weight_decay}
    if a.stage in (0, 1):
        model = torch.nn.parallel.DistributedDataParallel(model)
        if a.stage == 0:
            opt = torch.optim.AdamW(param_groups(model, hyper), **opt_kw)
        else:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(param_groups(model, hyper),
                                          optimizer_class=torch.optim.AdamW, **opt_kw)
        clip = lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                            buffer_dtype=torch.bfloat16) if fsdp_mixed else None
        strategy = ShardingStrategy.SHARD_GRAD_OP if a.stage == 2 else ShardingStrategy.FULL_SHARD
        model = FSDP(model, sharding_strategy=strategy, mixed_precision=mp,
                     auto_wrap_policy=ModuleWrapPolicy({Block}), use_orig_params=True,
                     device_id=torch.device("cpu"))  # FSDP1 on CPU must be told so
        opt = torch.optim.AdamW(param_groups(model, hyper), **opt_kw)
        clip = lambda: model.clip_grad_norm_(a.clip)
    autocast = bf16 and not fsdp_mixed

    # The token file: llm.c's header of 256 int32 (magic 20240520, version 1 = uint16 tokens,
    # 2 = uint32, count), or nanoGPT's headerless uint16.
    raw = np.fromfile(a.data, dtype=np.uint8)
    head = raw[:1024].view(np.int32) if raw.size >= 1024 else None
    if head is not None and head[0] == 20240520:
        dt = np.uint16 if head[1] == 1 else np.uint32
        tokens = raw[1024:].view(dt)[: int(head[2])]
    else:
        tokens = raw.view(np.uint16)
    tokens = torch.from_numpy(tokens.astype(np.int64))
    local = a.global_batch // a.world
    g = torch.Generator().manual_seed(100 + a.rank)
    offsets = torch.arange(a.seq_len + 1)

    times = {"forward": 0.0, "backward": 0.0, "clip": 0.0, "optimizer": 0.0, "data": 0.0,
             "loss_allreduce": 0.0}

    def step(acc):
        t = [time.perf_counter()]
        starts = torch.randint(0, tokens.numel() - a.seq_len - 1, (local, 1), generator=g)
        win = tokens[starts + offsets]
        x, y = win[:, :-1].contiguous(), win[:, 1:].contiguous()
        t.append(time.perf_counter())
        opt.zero_grad(set_to_none=True)
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(x, y)
        else:
            loss = model(x, y)
        t.append(time.perf_counter())
        loss.backward()
        t.append(time.perf_counter())
        clip()
        t.append(time.perf_counter())
        opt.step()
        t.append(time.perf_counter())
        l = loss.detach().clone()
        dist.all_reduce(l)
        t.append(time.perf_counter())
        if acc:
            for k, (t0, t1) in zip(("data", "forward", "backward", "clip", "optimizer",
                                    "loss_allreduce"), zip(t, t[1:])):
                times[k] += t1 - t0
        return l.item() / a.world

    first = step(False)  # step 1: left out, as zero leaves it out
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps - 1):
        last = step(True)
    dist.barrier()
    seconds = time.perf_counter() - t0
    if a.rank == 0:
        n = a.steps - 1
        with open(a.out, "w") as f:
            json.dump({"tokens_per_second": a.global_batch * a.seq_len * n / seconds,
                       "seconds_per_step": seconds / n, "first_loss": first, "final_loss": last,
                       "step_time": {k: v / n for k, v in times.items()},
                       "params": sum(p.numel() for p in model.parameters()) if a.stage < 2
                       else None}, f)
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# The driver.

def run_torch(a, ranks, precision, stage):
    return torch_ranks_json(
        [sys.executable, HERE, "--torch-worker", "--world", str(ranks), "--stage", str(stage),
         "--precision", precision, "--data", a.data, "--global-batch", str(a.global_batch),
         "--steps", str(a.steps), "--attention", a.attention, "--adamw", a.adamw,
         "--fsdp-bf16", a.fsdp_bf16, "--lr", str(a.lr), "--clip", str(a.clip),
         "--weight-decay", str(a.weight_decay), "--shape", json.dumps(a.shape)],
        ranks, f"torch stage {stage} {precision} {ranks} ranks failed", 900)


def run_zero(a, ranks, precision, stage):
    j = zero_train_json([a.zero, "train", "--model", "gpt", "--preset", a.preset, "--data", a.data,
                         "-n", str(ranks), "--stage", str(stage), "--precision", precision,
                         "--global-batch", str(a.global_batch), "--steps", str(a.steps),
                         "--log-every", str(a.steps)],
                        f"zero stage {stage} {precision} {ranks} ranks failed", 900)
    return {k: j[k] for k in ("tokens_per_second", "mfu", "flops_per_token", "peak_flops",
                              "step_time", "first_loss", "final_loss", "params",
                              "seconds_per_step")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zero", default="build/cli/zero")
    ap.add_argument("--data", default="out/peers/jargon_train.bin",
                    help="token file (made with `zero data` from the jargon file if missing)")
    ap.add_argument("--preset", default="gpt-nano")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--cases", help="ranks:precision pairs to run, e.g. 2:fp32,2:bf16,4:bf16 "
                    "(instead of every --ranks x --precision)")
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--attention", choices=("sdpa", "math"), default="sdpa")
    ap.add_argument("--adamw", choices=("fused", "default"), default="fused")
    ap.add_argument("--fsdp-bf16", choices=("autocast", "mixed"), default="autocast")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--json")
    add_worker_flags(ap)
    ap.add_argument("--stage", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        a.precision = a.precision.split(",")[0]
        for k, v in json.loads(a.shape).items():
            setattr(a, k, v)
        return torch_worker(a)

    if not os.path.exists(a.data):
        os.makedirs(os.path.dirname(os.path.abspath(a.data)) or ".", exist_ok=True)
        prefix = a.data[:-len("_train.bin")] if a.data.endswith("_train.bin") else a.data
        text = os.path.join(tempfile.mkdtemp(), "jargon.txt")
        with open(text, "wb") as f:
            subprocess.run(["zcat", "/usr/share/doc/jargon-text/jargon.txt.gz"], stdout=f,
                           check=True)
        subprocess.run([a.zero, "data", text, "--out", prefix], env=clean_env(), check=True)
        a.data = prefix + "_train.bin"
    a.shape = preset_shape(a.zero, a.preset)
    if a.global_batch % 4:
        print("note: a global batch that 4 does not divide splits unevenly at 4 ranks",
              file=sys.stderr)

    if a.cases:
        pairs = [(int(c.split(":")[0]), c.split(":")[1]) for c in a.cases.split(",")]
    else:
        pairs = [(int(r), p) for r in a.ranks.split(",") for p in a.precision.split(",")]
    cases = [(r, p, int(s)) for r, p in pairs for s in a.stages.split(",")]
    got = {c: {"zero": [], "torch": []} for c in cases}
    print(f"{a.preset} {a.shape}, global batch {a.global_batch} x seq {a.shape['seq_len']}, "
          f"{a.steps} steps, {a.reps} reps, data {a.data}", flush=True)
    for rep in range(a.reps):
        for c in cases:
            order = (run_zero, run_torch) if rep % 2 == 0 else (run_torch, run_zero)
            for fn in order:
                got[c]["zero" if fn is run_zero else "torch"].append(fn(a, *c))
            z, t = got[c]["zero"][-1], got[c]["torch"][-1]
            print(f"rep {rep + 1}  {c[0]} ranks {c[1]} stage {c[2]}: zero "
                  f"{z['tokens_per_second']:8.1f}  torch {t['tokens_per_second']:8.1f} tokens/s  "
                  f"ratio {z['tokens_per_second'] / t['tokens_per_second']:.2f}  (loss zero "
                  f"{z['final_loss']:.3f} torch {t['final_loss']:.3f})", flush=True)

    print(f"\nzero / PyTorch, tokens/s ({a.preset}, global batch {a.global_batch} x "
          f"{a.shape['seq_len']}, {a.steps} steps, {a.reps} reps; medians of tokens/s, min / "
          f"median of the per-rep ratios)")
    print(f"{'ranks':>5} {'prec':>5} {'stage':>5} {'peer':<19} {'zero':>8} {'torch':>8} "
          f"{'min':>6} {'median':>6} {'zeroMFU':>8} {'torchMFU':>8}")
    summary = []
    for c in cases:
        zs = [z["tokens_per_second"] for z in got[c]["zero"]]
        ts = [t["tokens_per_second"] for t in got[c]["torch"]]
        ratios = [z / t for z, t in zip(zs, ts)]
        mfu = [z["mfu"] for z in got[c]["zero"]]
        # torch's MFU: zero's FLOP count against the peak zero measured in the same rep.
        tmfu = [t * z["flops_per_token"] / z["peak_flops"] for t, z in zip(ts, got[c]["zero"])]
        row = {"ranks": c[0], "precision": c[1], "stage": c[2], "peer": NAMES[c[2]],
               "zero_tokens_per_second": zs, "torch_tokens_per_second": ts,
               "ratio_min": min(ratios), "ratio_median": statistics.median(ratios),
               "zero_mfu": mfu, "torch_mfu_same_count": tmfu,
               "zero_step_time": [z["step_time"] for z in got[c]["zero"]],
               "torch_step_time": [t["step_time"] for t in got[c]["torch"]],
               "zero_final_loss": [z["final_loss"] for z in got[c]["zero"]],
               "torch_final_loss": [t["final_loss"] for t in got[c]["torch"]]}
        summary.append(row)
        print(f"{c[0]:>5} {c[1]:>5} {c[2]:>5} {NAMES[c[2]]:<19} {statistics.median(zs):8.0f} "
              f"{statistics.median(ts):8.0f} {row['ratio_min']:6.2f} {row['ratio_median']:6.2f} "
              f"{100 * statistics.median(mfu):7.1f}% {100 * statistics.median(tmfu):7.1f}%")
    s30 = []
    for r, p in pairs:
        k0, k3 = (r, p, 0), (r, p, 3)
        if k0 in got and k3 in got:
            rs = [z3["tokens_per_second"] / z0["tokens_per_second"]
                  for z3, z0 in zip(got[k3]["zero"], got[k0]["zero"])]
            s30.append({"ranks": r, "precision": p, "min": min(rs), "median": statistics.median(rs)})
            print(f"zero stage 3 / stage 0, {r} ranks {p}: min {min(rs):.2f} median "
                  f"{statistics.median(rs):.2f}")
    # PyTorch's autocast bf16 can be slower than its fp32 (on a CPU without bf16 GEMM
    # instructions): zero's bf16 against torch's fp32 too, per rep of the same loop.
    bf_fp = []
    for r, p in pairs:
        if p != "bf16" or (r, "fp32") not in pairs:
            continue
        for s in a.stages.split(","):
            kb, kf = (r, "bf16", int(s)), (r, "fp32", int(s))
            rs = [zb["tokens_per_second"] / tf["tokens_per_second"]
                  for zb, tf in zip(got[kb]["zero"], got[kf]["torch"])]
            tb = [tb["tokens_per_second"] / tf["tokens_per_second"]
                  for tb, tf in zip(got[kb]["torch"], got[kf]["torch"])]
            bf_fp.append({"ranks": r, "stage": int(s), "zero_bf16_over_torch_fp32_min": min(rs),
                          "zero_bf16_over_torch_fp32_median": statistics.median(rs),
                          "torch_bf16_over_torch_fp32_median": statistics.median(tb)})
            print(f"{r} ranks stage {s}: zero bf16 / torch fp32 min {min(rs):.2f} median "
                  f"{statistics.median(rs):.2f}; torch bf16 / torch fp32 median "
                  f"{statistics.median(tb):.2f}")
    z0 = got[cases[0]]["zero"][0]
    print(f"(MFU: {z0['flops_per_token'] / 1e6:.2f} MFLOP/token, zero's count, against zero's "
          f"measured FMA peak of min(ranks, cores) cores; torchMFU uses the same count and peak)")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "cases": summary, "stage3_over_stage0": s30,
                       "bf16_vs_torch_fp32": bf_fp}, f, indent=1)


if __name__ == "__main__":
    main()
