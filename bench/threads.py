#!/usr/bin/env python3
"""Threads inside a rank, measured interleaved: `zero train` at -n 1 --threads 1, -n 1 --threads 2
and -n 2 (one thread a rank), same model and global batch, fp32 and bf16; each round runs every
cell once in turn, so that load on the machine falls on all cells alike, and the ratios are taken
round by round (median). The weights' checksums must agree between the cells of one precision
(docs/design.md, "Note: threads inside a rank").

Usage: bench/threads.py [--zero build/cli/zero] [--data data/jargon_train.bin]
       [--preset gpt-nano] [--global-batch 16] [--steps 12] [--rounds 3] [--json out.json]
A PyTorch peer (one process, 2 threads) is not run by this script yet; bench/peers/gpt.py runs
the same GPT on gloo."""
import argparse, json, os, re, statistics, subprocess, sys

CELLS = (("n1_t1", ["-n", "1", "--threads", "1"]), ("n1_t2", ["-n", "1", "--threads", "2"]),
         ("n2_t1", ["-n", "2", "--threads", "1"]))


def run(a, precision, flags):
    cmd = [a.zero, "train", "--model", "gpt", "--preset", a.preset, "--data", a.data, "--device",
           "cpu", "--precision", precision, "--global-batch", str(a.global_batch), "--steps",
           str(a.steps), "--log-every", str(a.steps), *flags]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    # The steps after the first (warm-up) at the summary's s/step: tokens/s of the whole run.
    m = re.search(r"summary: .* ([0-9.]+) s/step, checksum ([0-9a-f]+)", r.stdout)
    tokens = re.search(r"global batch (\d+)", r.stdout)
    seq = {"gpt-micro": 64, "gpt-nano": 128}.get(a.preset, 1024)
    return float(tokens.group(1)) * seq / float(m.group(1)), m.group(2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zero", default="build/cli/zero")
    ap.add_argument("--data", default="data/jargon_train.bin")
    ap.add_argument("--preset", default="gpt-nano")
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--json")
    a = ap.parse_args()
    out = {}
    for precision in a.precision.split(","):
        tps = {name: [] for name, _ in CELLS}
        sums = set()
        for _ in range(a.rounds):
            for name, flags in CELLS:
                t, s = run(a, precision, flags)
                tps[name].append(t)
                sums.add(s)
        ratio = lambda x, y: statistics.median(p / q for p, q in zip(tps[x], tps[y]))
        res = {"tokens_per_s": {k: statistics.median(v) for k, v in tps.items()},
               "threads2_over_threads1": ratio("n1_t2", "n1_t1"),
               "threads2_over_ranks2": ratio("n1_t2", "n2_t1"),
               "same_checksum": len(sums) == 1}
        out[precision] = res
        print(f"{precision}: tok/s " + ", ".join(f"{k} {v:.0f}" for k, v in
                                                  res["tokens_per_s"].items()) +
              f"; -n 1 --threads 2 / --threads 1 {res['threads2_over_threads1']:.2f}, "
              f"/ -n 2 {res['threads2_over_ranks2']:.2f}; checksums "
              f"{'equal' if res['same_checksum'] else 'DIFFER'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
