#!/usr/bin/env python3
"""zero's CPU AdamW shard update against PyTorch's and DeepSpeed's, interleaved rep by rep.

    .venv-peers/bin/python bench/peers/adam.py --zero build/bench/adam_bench [--elements 16M,64M]
        [--threads 1,all] [--reps 5] [--json out/peers/adam.json] [--no-deepspeed]

(scripts/bench-peers adam runs this.) For each thread count a worker process (OMP_NUM_THREADS and
torch.set_num_threads set before anything runs) holds one fp32 parameter tensor and its gradient;
each candidate keeps its own exp_avg/exp_avg_sq. Every rep runs each candidate once, in turn:

  zero_adamw, zero_adamw_bf16,   zero's update without and with the bf16 copy of the new p, and
  copy, copy_bf16, copy_bf16_nt  kernels of the same memory traffic, the last with streaming
                                 stores for its 16-bit write (adam_bench, one child process per
                                 rep: --reps 1 after its own warm-up)
  torch_fused                    torch.optim.AdamW(fused=True).step()
  torch_fused_bf16               the same, then p16.copy_(p) into a preallocated bf16 tensor
  torch_foreach                  torch.optim.AdamW(foreach=True)
  torch_single                   torch.optim.AdamW(foreach=False, fused=False), the default on CPU
  deepspeed, deepspeed_bf16      deepspeed.ops.adam.DeepSpeedCPUAdam(adamw_mode=True).step(), and
                                 the same then p16.copy_(p): the installed DeepSpeed's step() has
                                 no 16-bit parameter copy of its own (checked in its cpu_adam.py)

Times are wall-clock seconds of one step; GB/s counts 28 bytes per element (read p, m, v, g,
write p, m, v) or 30 with a 16-bit copy, as adam_bench does. Speedups are the other's time over
zero's: >1 means zero is faster; "of bound" is a copy kernel's time over zero's (1.0: zero runs
as fast as the kernel that only moves its bytes).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

CANDIDATES = ["zero_adamw", "zero_adamw_bf16", "copy", "copy_bf16", "copy_bf16_nt", "torch_fused",
              "torch_fused_bf16", "torch_foreach", "torch_single", "deepspeed", "deepspeed_bf16"]
BYTES = {name: 30 if "bf16" in name else 28 for name in CANDIDATES}
# (zero's, the other's) pairs the summary reports as speedups.
SPEEDUPS = [
    ("zero_adamw_bf16", "deepspeed_bf16"),
    ("zero_adamw_bf16", "torch_fused_bf16"),
    ("zero_adamw", "deepspeed"),
    ("zero_adamw", "torch_fused"),
    ("zero_adamw", "torch_foreach"),
    ("zero_adamw", "torch_single"),
]
BOUND = [("zero_adamw_bf16", "copy_bf16"), ("zero_adamw_bf16", "copy_bf16_nt"),
         ("zero_adamw", "copy")]
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01


def parse_count(s):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:].upper(), 1)
    return int(s[:-1] if mul > 1 else s) * mul


def zero_rep(zero, n, threads):
    """One rep of zero's adam_bench in a child process: {variant: seconds}."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        subprocess.run([zero, "--elements", str(n), "--reps", "1", "--threads", str(threads),
                        "--variants", "adamw,adamw_bf16,copy,copy_bf16,copy_bf16_nt",
                        "--json", path], check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            d = json.load(f)
    finally:
        os.unlink(path)
    v = d["sizes"][0]["variants"]
    names = {"zero_adamw": "adamw", "zero_adamw_bf16": "adamw_bf16", "copy": "copy",
             "copy_bf16": "copy_bf16", "copy_bf16_nt": "copy_bf16_nt"}
    return {ours: v[theirs]["seconds"][0] for ours, theirs in names.items()}, d["path"]


def worker(a):
    import torch
    torch.set_num_threads(a.threads)
    p = torch.nn.Parameter(torch.rand(a.n) * 2 - 1)
    g = (torch.rand(a.n) - 0.5) * 2e-3
    p16 = torch.empty(a.n, dtype=torch.bfloat16)
    p.grad = g
    kw = dict(lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    opts = {
        "torch_fused": torch.optim.AdamW([p], fused=True, **kw),
        "torch_foreach": torch.optim.AdamW([p], foreach=True, **kw),
        "torch_single": torch.optim.AdamW([p], foreach=False, fused=False, **kw),
    }
    opts["torch_fused_bf16"] = opts["torch_fused"]
    info = {"torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    if not a.no_deepspeed:
        import deepspeed
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        t0 = time.perf_counter()
        opts["deepspeed"] = DeepSpeedCPUAdam([p], adamw_mode=True, **kw)  # builds its op once
        opts["deepspeed_bf16"] = opts["deepspeed"]
        info["deepspeed"] = deepspeed.__version__
        info["deepspeed_load_s"] = time.perf_counter() - t0
    names = [c for c in CANDIDATES if c.startswith(("zero", "copy")) or c in opts]

    def run(name):
        o = opts[name]
        t0 = time.perf_counter()
        o.step()
        if name.endswith("_bf16"):
            p16.copy_(p)
        return time.perf_counter() - t0

    for name in opts:  # warm up: state allocation, first touch, DeepSpeed's first call
        run(name)
    times = {name: [] for name in names}
    for rep in range(a.reps):
        z, info["zero_path"] = zero_rep(a.zero, a.n, a.threads)
        for name in names:
            times[name].append(z[name] if name in z else run(name))
        print("  rep %d/%d done" % (rep + 1, a.reps), file=sys.stderr, flush=True)
    with open(a.out, "w") as f:
        json.dump({"info": info, "times": times}, f)


def summarize(n, times):
    out = {"elements": n, "candidates": {}, "speedups": {}, "of_bound": {}}
    for name, ts in times.items():
        out["candidates"][name] = {
            "seconds": ts, "min_s": min(ts), "median_s": statistics.median(ts),
            "gbps_best": BYTES[name] * n / min(ts) / 1e9,
            "gbps_median": BYTES[name] * n / statistics.median(ts) / 1e9}

    def ratio(key, a, b):
        if a in times and b in times:
            out[key]["%s_vs_%s" % (a, b)] = {
                "min": min(times[b]) / min(times[a]),
                "median": statistics.median(times[b]) / statistics.median(times[a])}
    for a, b in SPEEDUPS:
        ratio("speedups", a, b)
    for a, b in BOUND:
        ratio("of_bound", a, b)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zero", default="build/bench/adam_bench", help="zero's adam_bench")
    ap.add_argument("--elements", default="16M,64M")
    ap.add_argument("--threads", default="1,all", help="thread counts; all = os.cpu_count()")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--no-deepspeed", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        a.threads = int(a.threads)
        return worker(a)

    sizes = [parse_count(s) for s in a.elements.split(",")]
    threads = [os.cpu_count() if t == "all" else int(t) for t in a.threads.split(",")]
    threads = list(dict.fromkeys(threads))
    result = {"bench": "adam_peers", "reps": a.reps, "lr": LR, "betas": BETAS, "eps": EPS,
              "weight_decay": WD, "cpu": platform.processor() or platform.machine(), "runs": []}
    try:
        with open("/proc/cpuinfo") as f:
            result["cpu"] = next(line.split(":", 1)[1].strip() for line in f
                                 if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    for t in threads:
        for n in sizes:
            print("threads %d, %d elements (%dM): %d reps" % (t, n, n >> 20, a.reps),
                  file=sys.stderr, flush=True)
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
                path = f.name
            env = dict(os.environ, OMP_NUM_THREADS=str(t), MKL_NUM_THREADS=str(t))
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--zero", a.zero,
                   "--threads", str(t), "--n", str(n), "--reps", str(a.reps), "--out", path]
            if a.no_deepspeed:
                cmd.append("--no-deepspeed")
            subprocess.run(cmd, check=True, env=env)
            with open(path) as f:
                w = json.load(f)
            os.unlink(path)
            run = summarize(n, w["times"])
            run.update(threads=t, info=w["info"])
            result["runs"].append(run)
            print_run(run)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
        print("wrote", a.json)
    return 0


def print_run(run):
    n, info = run["elements"], run["info"]
    print("\n%dM elements, %d thread%s (zero path %s; torch %s%s)" % (
        n >> 20, run["threads"], "" if run["threads"] == 1 else "s", info.get("zero_path"),
        info.get("torch"), ", deepspeed " + info["deepspeed"] if "deepspeed" in info else ""))
    print("  %-17s %9s %9s %8s %8s" % ("", "ms min", "ms median", "GB/s", "GB/s med"))
    for name, c in run["candidates"].items():
        print("  %-17s %9.2f %9.2f %8.2f %8.2f" % (name, c["min_s"] * 1e3, c["median_s"] * 1e3,
                                                 c["gbps_best"], c["gbps_median"]))
    for key in ("speedups", "of_bound"):
        for name, r in run[key].items():
            print("  %-8s %-40s min %.3f median %.3f" % (key, name, r["min"], r["median"]))


if __name__ == "__main__":
    sys.exit(main())
