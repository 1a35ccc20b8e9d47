#!/usr/bin/env python3
"""A/B timing of `zero train` between two builds, interleaved (A B A B ...), so that a busy
machine slows both alike. Prints each build's min and median seconds per step (the JSON's
seconds_per_step, every step included, which builds without the train report also write) and
the ratio B/A of each.
Usage: bench/train_ab.py ZERO_A ZERO_B [--reps 5] [-- zero train flags]
Default flags: -n 2 --device cpu --stage 2 --layers 8 --width 1024 --global-batch 64 --steps 10."""
import json, os, statistics, subprocess, sys, tempfile

args = sys.argv[1:]
flags = ["-n", "2", "--device", "cpu", "--stage", "2", "--layers", "8", "--width", "1024",
         "--global-batch", "64", "--steps", "10", "--log-every", "1000"]
if "--" in args:
    i = args.index("--")
    args, flags = args[:i], args[i + 1:]
reps = 5
if "--reps" in args:
    i = args.index("--reps")
    reps = int(args[i + 1])
    del args[i:i + 2]
if len(args) != 2:
    sys.exit(__doc__)
env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
times = {a: [] for a in args}
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "t.json")
    for _ in range(reps):
        for zero in args:
            subprocess.run([zero, "train", *flags, "--json", path], check=True, env=env,
                           stdout=subprocess.DEVNULL)
            with open(path) as f:
                j = json.load(f)
            times[zero].append(j["seconds_per_step"])
            if "step_time" in j:
                st = j["step_time"]
                print(f"  {zero}: " + "  ".join(f"{k} {1e3 * v:.2f} ms" for k, v in st.items()))
a, b = (times[z] for z in args)
for z in args:
    print(f"{z}: min {1e3 * min(times[z]):.2f} ms/step, median {1e3 * statistics.median(times[z]):.2f}")
print(f"B/A: min {min(b) / min(a):.3f}, median {statistics.median(b) / statistics.median(a):.3f}")
