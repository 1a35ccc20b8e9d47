#!/usr/bin/env python3
"""Threads inside a rank, measured interleaved (docs/benchmarks.md, "Threads inside a rank").

Cells, each precision: `zero train` at -n 1 --threads 1, -n 1 --threads 2 and -n 2 --threads 1
(same model, same global batch), and PyTorch in its natural mode: one process,
torch.set_num_threads(2), the same GPT and batch (bench/peers/gpt.py's independently written
nanoGPT, its AdamW fused, its clip at 1.0; bf16 = torch.autocast("cpu", torch.bfloat16) over fp32
params, as zero's --precision bf16 keeps fp32 master weights). Each round runs every cell once,
in an order that rotates round by round, so that load on the machine falls on all cells alike;
ratios are taken within a round and reported as the median and the [min, max] over rounds:

  threads2 / threads1   zero -n 1 --threads 2 over --threads 1      (target >= 1.8)
  threads2 / ranks2     zero -n 1 --threads 2 over -n 2              (target within 0.9 .. 1.1)
  zero / torch          zero -n 1 --threads 2 over PyTorch, 2 threads (target >= 1.2)

tokens/s on both sides are steps 2..K (the first step is left out): zero's --json figure, and
bench/peers/gpt.py's worker's. zero's weights must be bitwise equal at --threads 1 and 2 (docs/design.md,
"Note: threads inside a rank"): the checksums are compared (-n 2 sums the gradients of two
ranks, another order of fp32 additions, so its weights are its own).

The PyTorch cell needs the venv of scripts/bench-peers (`scripts/bench-peers venv`): without a
Python that imports torch it is skipped, with one line saying so.
Figures taken while the machine runs other work are not meaningful (both cores are needed).

Usage: bench/threads.py [--zero build/cli/zero] [--data data/jargon_train.bin]
       [--preset gpt-nano] [--global-batch 16] [--steps 12] [--rounds 3] [--precision fp32,bf16]
       [--python .venv-peers/bin/python] [--cells n1_t1,n1_t2,n2_t1,torch_t2] [--json out.json]
--cells runs a subset (gpt2-small's cells take minutes each); a ratio is printed when both of its
cells ran, and the bitwise check when both thread counts did."""
import argparse, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
from launch import clean_env, preset_shape, torch_ranks_json, zero_train_json  # noqa: E402

ZERO_CELLS = (("n1_t1", ["-n", "1", "--threads", "1"]), ("n1_t2", ["-n", "1", "--threads", "2"]),
              ("n2_t1", ["-n", "2", "--threads", "1"]))
PEER = os.path.join(HERE, "peers", "gpt.py")


def run_zero(a, precision, flags):
    cmd = [a.zero, "train", "--model", "gpt", "--preset", a.preset, "--data", a.data,
           "--device", "cpu", "--precision", precision, "--global-batch", str(a.global_batch),
           "--steps", str(a.steps), "--log-every", str(a.steps), *flags]
    env = dict(clean_env(), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("OMP_NUM_THREADS", None)
    j = zero_train_json(cmd, f"{' '.join(cmd)} failed", 3600, env)
    return j["tokens_per_second"], j.get("params_checksum")


def torch_python(a):
    """The Python that runs the PyTorch cell, or None with the reason."""
    py = a.python or os.path.join(ROOT, ".venv-peers", "bin", "python")
    if not os.path.exists(py):
        return None, f"no {py} (make it with scripts/bench-peers venv, or pass --python)"
    r = subprocess.run([py, "-c", "import torch, numpy"], capture_output=True, text=True)
    if r.returncode:
        return None, f"{py} cannot import torch and numpy: {r.stderr.strip().splitlines()[-1]}"
    return py, None


def run_torch(a, py, precision):
    return torch_ranks_json(
        [py, PEER, "--torch-worker", "--world", "1", "--stage", "0",
         "--threads", str(a.torch_threads), "--precision", precision, "--data", a.data,
         "--global-batch", str(a.global_batch), "--steps", str(a.steps),
         "--attention", "sdpa", "--adamw", "fused", "--fsdp-bf16", "autocast",
         "--lr", "3e-3", "--clip", "1.0", "--weight-decay", "0.0", "--shape", json.dumps(a.shape)],
        1, "the PyTorch cell failed", 3600, threads=a.torch_threads)["tokens_per_second"]


def summary(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zero", default=os.path.join(ROOT, "build", "cli", "zero"))
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "jargon_train.bin"))
    ap.add_argument("--preset", default="gpt-nano")
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--python", help="the Python with torch (default .venv-peers/bin/python)")
    ap.add_argument("--torch-threads", type=int, default=2)
    ap.add_argument("--cells", default="n1_t1,n1_t2,n2_t1,torch_t2",
                    help="the cells to run, a subset of the default")
    ap.add_argument("--json")
    a = ap.parse_args()
    known = [name for name, _ in ZERO_CELLS] + ["torch_t2"]
    a.cells = a.cells.split(",")
    unknown = [c for c in a.cells if c not in known]
    if unknown or not a.cells:
        sys.exit(f"--cells: unknown cell {', '.join(unknown) or '(none)'}; the cells are "
                 f"{', '.join(known)}")
    if a.steps < 2:
        sys.exit("--steps must be at least 2 (the first step is left out of tokens/s)")
    a.shape = preset_shape(a.zero, a.preset)
    py, why = torch_python(a) if "torch_t2" in a.cells else (None, "not in --cells")
    if py is None:
        print(f"PyTorch cell skipped: {why}")
    print(f"{a.preset} {a.shape}, global batch {a.global_batch}, {a.steps} steps, "
          f"{a.rounds} rounds; tokens/s")
    cells = [(name, "zero", flags) for name, flags in ZERO_CELLS if name in a.cells]
    if py:
        cells.append(("torch_t2", "torch", None))
    out = {}
    for precision in a.precision.split(","):
        tps = {name: [] for name, _, _ in cells}
        sums = {name: set() for name, _, _ in cells}
        for rnd in range(a.rounds):
            k = rnd % len(cells)
            line = []
            for name, kind, flags in cells[k:] + cells[:k]:
                if kind == "zero":
                    t, s = run_zero(a, precision, flags)
                    sums[name].add(s)
                else:
                    t = run_torch(a, py, precision)
                tps[name].append(t)
                line.append(f"{name} {t:8.1f}")
            print(f"{precision} round {rnd + 1}: " + "  ".join(line), flush=True)

        res = {"tokens_per_s": {k: summary(v) for k, v in tps.items()}}
        for key, x, y in (("threads2_over_threads1", "n1_t2", "n1_t1"),
                          ("threads2_over_ranks2", "n1_t2", "n2_t1"),
                          ("zero_threads2_over_torch_threads2", "n1_t2", "torch_t2")):
            if x in tps and y in tps:
                res[key] = summary([p / q for p, q in zip(tps[x], tps[y])])
        both = sums.get("n1_t1", set()), sums.get("n1_t2", set())
        if all(both):
            res["same_checksum"] = len(both[0] | both[1]) == 1
        out[precision] = res
        print(f"{precision}: median tok/s " + ", ".join(
            f"{k} {v['median']:.0f}" for k, v in res["tokens_per_s"].items()))
        for key, label, target in (
                ("threads2_over_threads1", "zero --threads 2 / --threads 1", ">= 1.8"),
                ("threads2_over_ranks2", "zero -n 1 --threads 2 / -n 2", "0.9 .. 1.1"),
                ("zero_threads2_over_torch_threads2", "zero --threads 2 / PyTorch 2 threads",
                 ">= 1.2")):
            if key in res:
                r = res[key]
                print(f"  {label:38s} median {r['median']:.2f}  [{r['min']:.2f}, "
                      f"{r['max']:.2f}]  (target {target})")
        if "same_checksum" in res:
            print(f"  zero's weights at --threads 1 and 2: "
                  f"{'bitwise equal' if res['same_checksum'] else 'DIFFER'} "
                  f"({', '.join(sorted(map(str, both[0] | both[1])))})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    if not all(r.get("same_checksum", True) for r in out.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
