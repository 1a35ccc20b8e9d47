#!/usr/bin/env python3
"""Acceptance of real DeepSpeed configs (tests/zero/deepspeed_configs, see SOURCES.md there):
each file is run through `zero train --config F --steps 1 -n 2` on a small MLP and must either
train (exit 0) or be refused in one message naming the features zero lacks; at least 70% must
train. Usage: test_deepspeed_configs.py path/to/zero path/to/deepspeed_configs.
Prints one line per file, then the count."""
import json, os, re, subprocess, sys

ZERO, DIR = sys.argv[1], sys.argv[2]
REFUSED = "this configuration needs what zero does not have"


def run(*args, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    return subprocess.run([ZERO, *args], capture_output=True, text=True, timeout=timeout, env=env)


def number(config, key):
    v = config.get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


trained, refused, failed = [], [], []
for name in sorted(f for f in os.listdir(DIR) if f.endswith(".json")):
    path = os.path.join(DIR, name)
    with open(path) as f:
        config = json.load(f)
    # Two ranks, unless the file's own train_batch_size cannot be split in two (it was written
    # for one rank: DeepSpeed would refuse it at two as well).
    batch = number(config, "train_batch_size")
    ranks = "1" if batch is not None and int(batch) % 2 else "2"
    args = ["train", "--config", path, "--steps", "1", "-n", ranks, "--layers", "2", "--width", "16"]
    # What zero train must supply: a global batch only when the file sets none.
    if batch is None and number(config, "train_micro_batch_size_per_gpu") is None:
        args += ["--global-batch", "8"]
    r = run(*args)
    err = r.stderr.strip().splitlines()
    last = err[-1] if err else ""
    if r.returncode == 0:
        trained.append(name)
        print(f"trains   {name} (-n {ranks})")
    elif REFUSED in r.stderr and len([l for l in err if REFUSED in l]) == 1:
        refused.append(name)
        print(f"refused  {name}: {last[last.find(REFUSED):]}")
    else:
        failed.append((name, last or r.stdout[-300:]))
        print(f"FAIL     {name} (exit {r.returncode}): {last or r.stdout[-300:]}")

total = len(trained) + len(refused) + len(failed)
share = len(trained) / total if total else 0
print(f"{len(trained)} of {total} real DeepSpeed configs train ({share:.0%}), {len(refused)} refused "
      f"naming what zero lacks, {len(failed)} failed otherwise")
ok = total >= 20 and not failed and share >= 0.70
sys.exit(0 if ok else 1)
