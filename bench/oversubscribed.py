#!/usr/bin/env python3
"""How much `zero train` slows down when other processes load the cores, oversubscribed.

Runs `zero train -n RANKS` (default 4 ranks; on this 2-core machine that is 2 ranks per core) on a
small MLP for a fixed number of steps, alternately on an idle machine and with LOAD busy-loop
processes (default: one per core) competing for the cores, several repetitions, interleaved
(A/B/A/B, the order flipping each repetition). Prints s/step (zero's own --json figure: the
training loop only, no startup), the CPU time of the whole job per step (user + system, from
wait4 on mpirun, which reaps the ranks), voluntary / involuntary context switches per step, and
the degradation ratio loaded / unloaded (min and median over the repetitions).

  python3 bench/oversubscribed.py [--zero build/cli/zero] [--zero OTHER/zero ...] [--reps 5]
      [--ranks 4] [--layers 4] [--width 256] [--steps 40] [--global-batch 64] [--load N]
      [--torch-python .venv-peers/bin/python] [--env NAME=VALUE ...] [--json out.json]

Several --zero binaries (e.g. a build of the previous commit) are measured in the same run, so
that their ratios compare like with like. --torch-python runs the same model in PyTorch DDP on
gloo (RANKS processes, one intra-op thread each, like zero's ranks; `layers` square Linear layers
of `width` with bias, tanh between, MSE loss, AdamW, the same global batch) under the same loads,
and prints zero's degradation over PyTorch's (the issue asks for <= 1): from the minima, from the
medians, and paired: each repetition's zero degradation over the same repetition's PyTorch one,
with a distribution-free interval for their median (the runs are noisy; one repetition's pair is
the comparison least moved by the machine's drift).
Every --env NAME=VALUE is set for zero's runs (e.g. OMPI_MCA_btl_vader_single_copy_mechanism=none).
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
from launch import add_worker_flags, tanh_mlp  # noqa: E402


def torch_worker(a):
    """One PyTorch DDP rank (run by --torch-python with --torch-worker)."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world)
    torch.manual_seed(1)
    model = nn.parallel.DistributedDataParallel(tanh_mlp(nn, a.layers, a.width))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    local = a.global_batch // a.world
    g = torch.Generator().manual_seed(100 + a.rank)
    x = torch.rand(local, a.width, generator=g) * 2 - 1
    y = torch.tanh(x.flip(1))  # any fixed target: the data is outside the timed loop, as in zero
    loss_fn = nn.MSELoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        t = torch.tensor([loss.item()])
        dist.all_reduce(t)  # the global loss every step, as zero train reports it (in step())

    step()  # warm-up: DDP builds its buckets on the first backward
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dist.barrier()
    s = (time.perf_counter() - t0) / a.steps
    if a.rank == 0:
        print(json.dumps({"seconds_per_step": s}), flush=True)
    dist.destroy_process_group()


def rusage_of(proc):
    """Waits for proc; returns (returncode, rusage including its reaped descendants)."""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, ru


def run_zero(a, zero, env):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "run.json")
        cmd = [zero, "train", "-n", str(a.ranks), "--layers", str(a.layers), "--width", str(a.width),
               "--steps", str(a.steps), "--global-batch", str(a.global_batch), "--precision",
               "fp32", "--stage", str(a.stage), "--log-every", str(10**9), "--timeout",
               str(a.timeout), "--json", out]
        with open(os.path.join(d, "log"), "w+b") as log:  # a file: a pipe could fill up
            p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=d)
            rc, ru = rusage_of(p)
            log.seek(0)
            text = log.read().decode(errors="replace")
        if rc != 0:
            sys.exit(f"oversubscribed.py: {' '.join(cmd)} failed (exit {rc}):\n{text[-2000:]}")
        with open(out) as f:
            s = json.load(f)["seconds_per_step"]
    return s, ru


def run_torch(a, env):
    port = str(29500 + os.getpid() % 1000)
    procs = []
    for r in range(a.ranks):
        e = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1")
        cmd = [a.torch_python, os.path.abspath(__file__), "--torch-worker", "--rank", str(r),
               "--world", str(a.ranks), "--layers", str(a.layers), "--width", str(a.width),
               "--steps", str(a.steps), "--global-batch", str(a.global_batch)]
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    s = None
    total = None
    for r, p in enumerate(procs):
        rc, ru = rusage_of(p)
        text = p.stdout.read().decode(errors="replace")
        if rc != 0:
            sys.exit(f"oversubscribed.py: PyTorch rank {r} failed (exit {rc}):\n{text[-2000:]}")
        if r == 0:
            s = json.loads(text.strip().splitlines()[-1])["seconds_per_step"]
        total = ru if total is None else Sum(total, ru)
    return s, total


class Sum:
    """Adds two rusages' fields used here."""

    def __init__(self, x, y):
        for k in ("ru_utime", "ru_stime", "ru_nvcsw", "ru_nivcsw"):
            setattr(self, k, getattr(x, k) + getattr(y, k))


def paired_ratios(zero_rows, torch_rows):
    """Per repetition: zero's loaded/idle over PyTorch's, both measured in that repetition (the
    machine's drift between repetitions cancels in the pair)."""
    def deg(r, i):
        return r["loaded"][i]["s_per_step"] / r["idle"][i]["s_per_step"]
    return [deg(zero_rows, i) / deg(torch_rows, i) for i in range(len(zero_rows["idle"]))]


def median_interval(xs, alpha=0.10):
    """A distribution-free interval for the median: order statistics x(k) and x(n+1-k), k the
    largest with P(Binomial(n, 1/2) < k) <= alpha/2 (or k = 1, the range, when n is too small).
    Returns (low, high, its exact coverage)."""
    n = len(xs)
    ys = sorted(xs)
    cdf = []  # cdf[j] = P(B <= j)
    acc = 0.0
    for j in range(n + 1):
        acc += math.comb(n, j) / 2**n
        cdf.append(acc)
    k = 1
    while k + 1 <= (n + 1) // 2 and cdf[k] <= alpha / 2:  # P(B < k+1) = cdf[k]
        k += 1
    return ys[k - 1], ys[n - k], 1 - 2 * cdf[k - 1]


def start_load(n):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_load(procs):
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zero", action="append", help="zero executable (repeatable)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--stage", type=int, default=0)
    ap.add_argument("--load", type=int, default=os.cpu_count(),
                    help="busy-loop processes in the loaded runs (default: one per core)")
    ap.add_argument("--timeout", type=float, default=120, help="zero train --timeout")
    ap.add_argument("--torch-python", help="a python with torch: also run PyTorch gloo DDP")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for zero's runs")
    ap.add_argument("--json", help="write every measurement here")
    add_worker_flags(ap)  # internal: one PyTorch rank
    a = ap.parse_args()
    if a.torch_worker:
        return torch_worker(a)
    if a.reps < 1 or a.ranks < 1 or a.steps < 1 or a.load < 1:
        sys.exit("oversubscribed.py: --reps, --ranks, --steps and --load must be >= 1")
    if a.global_batch % a.ranks:
        sys.exit(f"oversubscribed.py: --global-batch {a.global_batch} is not a multiple of "
                 f"--ranks {a.ranks}")
    zeros = [os.path.abspath(z) for z in (a.zero or [os.path.join(ROOT, "build", "cli", "zero")])]
    for z in zeros:
        if not os.access(z, os.X_OK):
            sys.exit(f"oversubscribed.py: --zero {z} is not an executable file")
    if a.torch_python and not os.access(a.torch_python, os.X_OK):
        sys.exit(f"oversubscribed.py: --torch-python {a.torch_python} is not an executable file")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for kv in a.env:
        if "=" not in kv:
            sys.exit(f"oversubscribed.py: --env {kv!r} is not NAME=VALUE")
        k, v = kv.split("=", 1)
        env[k] = v

    variants = [(f"zero:{z}", lambda z=z: run_zero(a, z, env)) for z in zeros]
    if a.torch_python:
        variants.append(("torch-ddp-gloo", lambda: run_torch(a, dict(os.environ))))
    rows = {name: {"idle": [], "loaded": []} for name, _ in variants}
    print(f"{a.ranks} ranks on {os.cpu_count()} cores, {a.layers} x {a.width}, batch "
          f"{a.global_batch}, {a.steps} steps; loaded = {a.load} busy-loop processes; "
          f"{a.reps} reps, interleaved", flush=True)
    for rep in range(a.reps):
        order = ["idle", "loaded"] if rep % 2 == 0 else ["loaded", "idle"]
        for name, fn in (variants if rep % 2 == 0 else variants[::-1]):
            for cond in order:
                load = start_load(a.load) if cond == "loaded" else []
                try:
                    time.sleep(0.2 if load else 0)
                    s, ru = fn()
                finally:
                    stop_load(load)
                m = {"s_per_step": s, "cpu_per_step": (ru.ru_utime + ru.ru_stime) / a.steps,
                     "user": ru.ru_utime, "sys": ru.ru_stime,
                     "vcsw_per_step": ru.ru_nvcsw / a.steps, "ivcsw_per_step": ru.ru_nivcsw / a.steps}
                rows[name][cond].append(m)
                print(f"  rep {rep + 1} {name:<40} {cond:<6} {s * 1e3:9.2f} ms/step  cpu "
                      f"{m['cpu_per_step'] * 1e3:8.2f} ms/step (sys {ru.ru_stime / a.steps * 1e3:.2f})"
                      f"  csw vol {m['vcsw_per_step']:.0f} invol {m['ivcsw_per_step']:.0f} /step",
                      flush=True)

    def med(xs):
        return statistics.median(xs)

    print("\n| variant | idle ms/step (min / med) | loaded ms/step (min / med) | loaded/idle "
          "(min / med) | cpu ms/step idle / loaded | vol csw/step idle / loaded |")
    print("|---|---:|---:|---:|---:|---:|")
    ratios = {}
    for name, _ in variants:
        i = [m["s_per_step"] for m in rows[name]["idle"]]
        l = [m["s_per_step"] for m in rows[name]["loaded"]]
        # Each repetition's own loaded/idle pair: the ratio measured within one repetition.
        per_rep = [x / y for x, y in zip(l, i)]
        ratios[name] = (min(l) / min(i), med(per_rep))
        ci = med([m["cpu_per_step"] for m in rows[name]["idle"]])
        cl = med([m["cpu_per_step"] for m in rows[name]["loaded"]])
        vi = med([m["vcsw_per_step"] for m in rows[name]["idle"]])
        vl = med([m["vcsw_per_step"] for m in rows[name]["loaded"]])
        print(f"| {name} | {min(i) * 1e3:.2f} / {med(i) * 1e3:.2f} | {min(l) * 1e3:.2f} / "
              f"{med(l) * 1e3:.2f} | {ratios[name][0]:.2f} / {ratios[name][1]:.2f} | "
              f"{ci * 1e3:.1f} / {cl * 1e3:.1f} | {vi:.0f} / {vl:.0f} |")
    paired_all = ({name: paired_ratios(rows[name], rows["torch-ddp-gloo"])
                   for name, _ in variants[:-1]} if a.torch_python else {})
    if a.torch_python:
        t = ratios["torch-ddp-gloo"]
        for name, _ in variants[:-1]:
            z = ratios[name]
            print(f"{name}: degradation / PyTorch's = {z[0] / t[0]:.2f} (from mins), "
                  f"{z[1] / t[1]:.2f} (medians of per-rep ratios); the goal is <= 1")
            paired = paired_all[name]
            lo, hi, cover = median_interval(paired)
            below = sum(r <= 1 for r in paired)
            print(f"  paired, each repetition's own: {' '.join(f'{r:.2f}' for r in sorted(paired))}"
                  f"; median {med(paired):.2f}, {cover:.0%} interval for the median "
                  f"[{lo:.2f}, {hi:.2f}]; {below} of {len(paired)} <= 1")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": rows, "ratios": ratios, "paired": paired_all},
                      f, indent=1)


if __name__ == "__main__":
    main()
