#!/usr/bin/env python3
"""Buckets on a model of many small units: `zero train` with one collective per unit
(--reduce-bucket-size 1 --allgather-bucket-size 1) against DeepSpeed's default buckets (5e8
elements: here the whole model in one reduce-scatter, and at stages 1-2 in one all-gather of the
new params), interleaved A/B/B/A, several repetitions, at stages 1, 2 and 3.

The model is the reference MLP with LAYERS units of width x width + width parameters (default 256
units of 16,512: the issue's "256 units of 16k parameters"), at RANKS ranks. Prints zero's own
s/step (--json, the training loop only) for each arm, the ratio unbucketed / bucketed (min and
median over the repetitions: > 1 means buckets are faster), the reduce-scatter calls per step,
and checks that both arms end with the same params checksum (the weights are bitwise the same).

  python3 bench/buckets.py [--zero build/cli/zero] [--reps 5] [--ranks 4] [--layers 256]
      [--width 128] [--steps 15] [--stages 1 2 3] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ARMS = {"per-unit": 1, "bucketed": 500_000_000}


def run(a, stage, bucket, out):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("OPENBLAS_CORETYPE", None)  # zero picks the CPU's kernel itself
    cmd = [a.zero, "train", "-n", str(a.ranks), "--stage", str(stage), "--layers", str(a.layers),
           "--width", str(a.width), "--steps", str(a.steps), "--global-batch", "64",
           "--reduce-bucket-size", str(bucket), "--allgather-bucket-size", str(bucket), "--log-every", str(a.steps), "--json", out]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(out) as f:
        j = json.load(f)
    steps = j["measured_steps"]
    calls = (j["collectives"]["reduce_scatter"]["calls"] / steps,
             j["collectives"]["all_gather"]["calls"] / steps)
    return j["seconds_per_step"], calls, j["params_checksum"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zero", default=os.path.join(ROOT, "build", "cli", "zero"))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--layers", type=int, default=256)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--stages", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--json")
    a = p.parse_args()
    result = {"ranks": a.ranks, "layers": a.layers, "width": a.width,
              "params_per_unit": a.width * a.width + a.width, "stages": {}}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        for stage in a.stages:
            times = {k: [] for k in ARMS}
            calls, sums = {}, {}
            for rep in range(a.reps):
                order = list(ARMS) if rep % 2 == 0 else list(reversed(ARMS))
                for arm in order:
                    t, c, s = run(a, stage, ARMS[arm], out)
                    times[arm].append(t)
                    calls[arm], sums[arm] = c, s
            ratios = [u / b for u, b in zip(times["per-unit"], times["bucketed"])]
            same = sums["per-unit"] == sums["bucketed"]
            print(f"stage {stage}: per-unit {statistics.median(times['per-unit']) * 1e3:.1f} ms/step "
                  f"({calls['per-unit'][0]:.0f} reduce-scatters, {calls['per-unit'][1]:.0f} all-gathers a step), "
                  f"bucketed {statistics.median(times['bucketed']) * 1e3:.1f} ms/step "
                  f"({calls['bucketed'][0]:.0f}, {calls['bucketed'][1]:.0f}); per-unit / bucketed: min {min(ratios):.2f}, "
                  f"median {statistics.median(ratios):.2f}; weights "
                  f"{'bitwise equal' if same else 'DIFFER'} ({sums['bucketed']})")
            result["stages"][str(stage)] = {"seconds_per_step": times,
                                            "reduce_scatters_and_all_gathers_per_step": calls,
                                            "ratio_min": min(ratios),
                                            "ratio_median": statistics.median(ratios),
                                            "checksums_equal": same}
            if not same:
                sys.exit(f"stage {stage}: the bucketed run's weights differ from the per-unit run's")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
