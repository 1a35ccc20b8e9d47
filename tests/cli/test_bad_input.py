#!/usr/bin/env python3
"""Bad input to `zero train` and `zero plan` gets one sentence, never a crash, a hang or a wrong
run; and the config's batch sizes, "auto" values, seed and steps_per_print mean what they mean in
DeepSpeed. Each check reproduces what once went wrong (a SIGFPE, a silent 1-rank run, a wrapped
seed, negative PiB, std::bad_alloc, an hour-long plan, an error printed once per rank).
Usage: test_bad_input.py path/to/zero. Prints 'N passed, N failed'."""
import os, re, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, user_env  # noqa: E402
TINY = ["--layers", "2", "--width", "16"]  # a model that trains in milliseconds




def run(*args, timeout=60):
    env = user_env()
    try:
        return subprocess.run([ZERO, *args], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, -999, e.stdout or "", f"timed out after {timeout} s")


def refused(r, *words):
    """One sentence naming `words` and a non-zero exit by the command itself (no signal), no
    'unexpected error' (a std::exception that escaped: bad_alloc)."""
    return (r.returncode in (1, 2) and all(w in r.stderr for w in words)
            and "unexpected error" not in r.stderr)


def error_lines(r):
    return [l for l in r.stderr.splitlines() if l.strip()]


tmp = tempfile.mkdtemp()


def config(name, text):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


# --- zero train: every numeric flag is range-checked before anything runs -------------------
r = run("train", "-n", "1", "--steps", "1", "--accum", "0", *TINY)
check("--accum 0 is refused, not a SIGFPE", refused(r, "--accum", ">= 1"), (r.returncode, r.stderr))
for n in ("0", "-1"):
    r = run("train", "-n", n, "--steps", "1", *TINY)
    check(f"-n {n} is refused, not a silent 1-rank run", refused(r, "--ranks", n) and "step" not in r.stdout,
          (r.returncode, r.stderr, r.stdout[-300:]))
r = run("train", "--lr", "-1", "--steps", "1", *TINY)
check("--lr -1 is refused", refused(r, "--lr", "-1"), r.stderr)
for v in ("-1", "nan", "inf"):
    r = run("train", "--clip", v, "--steps", "1", *TINY)
    check(f"--clip {v} is refused (0 is the only off)", refused(r, "--clip", v), r.stderr)
for v in ("0", "-5", "nan", "inf"):
    r = run("train", "--timeout", v, "--steps", "1", *TINY)
    check(f"--timeout {v} is refused", refused(r, "--timeout must be", "seconds"), r.stderr)
r = run("train", "--seed", "-1", "--steps", "1", *TINY)
check("--seed -1 is refused, not wrapped to 2^64 - 1", refused(r, "--seed", "-1"), r.stderr)
r = run("train", "--config", "", "--steps", "1", *TINY)
check("--config '' is refused, not ignored", refused(r, "--config", "empty"), r.stderr)
r = run("train", "--steps", "1", "stray", "words", *TINY)
check("stray arguments are named, not ignored", refused(r, "'stray'", "'words'"), r.stderr)
r = run("train", "--steps", "9223372036854775807", *TINY)
check("--steps whose sample indices overflow is refused", refused(r, "--steps"), r.stderr)
r = run("train", "--layers", "2147483647", "--steps", "1")
check("--layers 2147483647 is refused before any layer is built", refused(r, "--layers"), r.stderr)
r = run("train", "--ranks", "4294967297")
check("-n past an int is refused by the flag parser", refused(r, "ranks"), r.stderr)

# --- memory that cannot exist: the figures, before allocating -------------------------------
r = run("train", "--global-batch", "1000000000000", "--steps", "1", *TINY)
check("a global batch no machine holds says what it needs and what is available",
      refused(r, "needs", "available", "--global-batch"), (r.returncode, r.stderr))
r = run("train", "--width", "2147483647", "--steps", "1")
check("a width whose bytes overflow 64 bits is refused", refused(r, "overflows 64-bit byte counts"), r.stderr)
r = run("train", "-n", "2", "--timeout", "5", "--steps", "2", *TINY)
check("--timeout SECONDS is accepted and the run trains", r.returncode == 0 and "step    2" in r.stdout, r.stderr)

# --- did-you-mean for flags, in every subcommand --------------------------------------------
for args, want in ((["train", "--stpes", "1"], "--steps"), (["plan", "--parms", "1e9"], "--params"),
                   (["comm-check", "--mib", "1", "--itres", "2"], "--iters")):
    r = run(*args)
    check(f"{args[0]} {args[1]} suggests {want}", r.returncode == 2 and f"did you mean '{want}'" in r.stderr,
          r.stderr)

# --- checked before the relaunch: reported once, by this process ----------------------------
bad = config("bad.json", '{"zero_optimization": {"stage": 7}}')
r = run("train", "-n", "3", "--config", bad, "--steps", "1", *TINY)
check("a bad config with -n 3 is reported once, before any rank starts",
      refused(r, "zero_optimization.stage") and len(error_lines(r)) == 1
      and "mpirun" not in r.stderr.lower() and "prterun" not in r.stderr.lower(), r.stderr)
r = run("train", "-n", "3", "--lr", "nan", "--steps", "1", *TINY)
check("a bad flag with -n 3 is reported once", refused(r, "--lr") and len(error_lines(r)) == 1, r.stderr)

# --- one rank shards nothing: a warning ------------------------------------------------------
r = run("train", "--stage", "3", "--steps", "1", *TINY)
check("stage 3 without -n warns that one rank shards nothing",
      r.returncode == 0 and "shards nothing" in r.stderr and "1 rank on" in r.stdout, r.stderr + r.stdout[-300:])
r = run("train", "--stage", "0", "--steps", "1", *TINY)
check("stage 0 at one rank has nothing to warn about", r.returncode == 0 and "shards nothing" not in r.stderr,
      r.stderr)

# --- the config's batch sizes, seed and steps_per_print act in zero train -------------------
def header(r):
    m = re.search(r"global batch (\d+) = (\d+) x (\d+) micro-batches x (\d+)", r.stdout)
    return tuple(int(x) for x in m.groups()) if m else None


both = config("batch.json", '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8}')
r = run("train", "-n", "2", "--config", both, "--steps", "1", *TINY)
check("train_batch_size and micro-batch from the config derive the accumulation (32 = 2 x 2 x 8)",
      r.returncode == 0 and header(r) == (32, 2, 2, 8), (header(r), r.stderr))
r = run("train", "-n", "2", "--config", both, "--micro-batch", "4", "--steps", "1", *TINY)
check("--micro-batch overrides the config's (32 = 2 x 4 x 4)", r.returncode == 0 and header(r) == (32, 2, 4, 4),
      (header(r), r.stderr))
micro_only = config("micro.json", '{"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2}')
r = run("train", "-n", "2", "--config", micro_only, "--steps", "1", *TINY)
check("micro-batch and accumulation alone give the global batch (12 = 2 x 2 x 3), not 64",
      r.returncode == 0 and header(r) == (12, 2, 2, 3), (header(r), r.stderr))
clash = config("clash.json", '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8, '
                             '"gradient_accumulation_steps": 4}')
r = run("train", "-n", "2", "--config", clash, "--steps", "1", *TINY)
check("three batch sizes that disagree are refused", refused(r, "train_batch_size", "32"), r.stderr)
r = run("train", "-n", "3", "--global-batch", "10", "--steps", "1", *TINY)
check("a global batch that does not divide names the flags", refused(r, "not divisible", "--global-batch"),
      r.stderr)

seeded = config("seed.json", '{"seed": 7, "steps_per_print": 3}')
empty = config("empty.json", '{}')  # the same defaults as seed.json otherwise
sums = {}
for name, args in (("config seed 7", ["--config", seeded]), ("--seed 7", ["--config", empty, "--seed", "7"]),
                   ("--seed 8", ["--config", empty, "--seed", "8"])):
    r = run("train", "--steps", "7", *args, *TINY)
    m = re.search(r"checksum ([0-9a-f]{16})", r.stdout)
    sums[name] = m.group(1) if m else None
    if name == "config seed 7":
        steps = re.findall(r"^step +(\d+)", r.stdout, re.M)
        check("steps_per_print 3 prints steps 1, 4, 7 (the last)", steps == ["1", "4", "7"], steps)
check("the config's seed seeds the model as --seed does",
      sums["config seed 7"] is not None and sums["config seed 7"] == sums["--seed 7"] != sums["--seed 8"], sums)

# --- "auto" values: filled as the Trainer would, one line per key, once ---------------------
hf = config("hf.json", """{
  "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
  "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
  "bf16": {"enabled": "auto"},
  "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                        "stage3_prefetch_bucket_size": "auto",
                        "stage3_param_persistence_threshold": "auto"}}""")
r = run("train", "-n", "2", "--config", hf, "--steps", "1", "--lr", "0.01", *TINY)
out = r.stdout
check("an HF config with auto values trains", r.returncode == 0 and header(r) == (64, 2, 1, 32), (r.stderr, out[-500:]))
check("auto lr is filled from --lr, one line", out.count("filled optimizer.params.lr = 0.01 (was \"auto\")") == 1, out[:1500])
check("auto clipping and precision are zero train's defaults",
      "filled gradient_clipping = 1 (was" in out and "filled bf16.enabled = true (was" in out, out[:1500])
check("auto buckets follow HF's rules with the width as hidden size (16)",
      "filled zero_optimization.reduce_bucket_size = 256 (was" in out
      and "filled zero_optimization.stage3_prefetch_bucket_size = 230 (was" in out
      and "filled zero_optimization.stage3_param_persistence_threshold = 160 (was" in out, out[:1500])
check("auto batch sizes are reported as resolved",
      "filled train_batch_size = 64 (was" in out and "filled train_micro_batch_size_per_gpu = 32 (was" in out,
      out[:1500])

# --- zero plan --------------------------------------------------------------------------------
def plan(*args, timeout=60):
    return run("plan", *args, timeout=timeout)


r = plan("--params", "1e18")
check("plan --params 1e18 is refused as too large, not negative PiB",
      refused(r, "too large") and "-" not in r.stdout, (r.stderr, r.stdout[-300:]))
r = plan("--params", "1e18", "-n", "1024", "--stage", "3")
check("plan --params 1e18 at stage 3 over 1024 ranks fits 64 bits and plans", r.returncode == 0, r.stderr)
r = plan("--layers", "2147483647", "--hidden", "2147483647", "--heads", "1")
check("plan of a GPT with 2^31 layers of hidden 2^31 says it is too large, no bad_alloc",
      refused(r, "too large", "parameters"), r.stderr)
r = plan("--layers", "2147483647", "--hidden", "8", "--heads", "1")
check("plan of 2^31 small layers is refused before building them", refused(r, "layers"), r.stderr)
r = plan("--params", "1e9", "--accum", "4294967297")
check("plan --accum 4294967297 is refused, not truncated to 1", refused(r, "4294967297"), (r.stderr, r.stdout[:300]))
r = plan("--params", "1e6", "--accum", "2147483647", "--stage", "3", timeout=30)
check("plan with 2^31 - 1 micro-batches answers at once", r.returncode == 0 and "accumulation 2147483647" in r.stdout,
      r.stderr)
# 1e9 params move gigabytes per micro-batch: 2^31 - 1 of them pass what a 64-bit count holds.
r = plan("--params", "1e9", "--accum", "2147483647", "--stage", "3", timeout=30)
check("plan whose step would move past 2^63 bytes is refused, not wrapped",
      refused(r, "too large to plan", "gradient_accumulation_steps"), (r.stderr, r.stdout[-300:]))
r = plan("--params", "1e6", "--units", "1000000", timeout=60)
check("plan of a million units answers in seconds (the planner is linear in units)",
      r.returncode == 0 and "predicted peak" in r.stdout, r.stderr)
r = plan("--params", "1e9", "--units", "2000000")
check("plan of more units than the planner handles says so", refused(r, "units", "at most"), r.stderr)
r = plan("--params", "1e9", "-n", "1073741824", "--plot", os.path.join(tmp, "p.svg"))
check("plan --plot at 2^30 ranks does not overflow the rank axis", r.returncode == 0, r.stderr)
r = plan("--params", "1e9", "stray")
check("plan names a stray argument", refused(r, "'stray'"), r.stderr)
r = plan("--params", "1e9", "--config", "")
check("plan --config '' is refused", refused(r, "--config", "empty"), r.stderr)

import json
cfg16 = config("b16.json", '{"train_batch_size": 16}')
a = plan("--preset", "gpt2-small", "-n", "2", "--stage", "0", "--config", cfg16, "--json", "-")
b = plan("--preset", "gpt2-small", "-n", "2", "--stage", "0", "--precision", "fp32", "--micro-batch", "8",
         "--json", "-")
check("plan takes the micro-batch DeepSpeed's rule derives from the config (16 / 2 ranks = 8)",
      a.returncode == 0 and b.returncode == 0
      and json.loads(a.stdout)[0]["activations_bytes"] == json.loads(b.stdout)[0]["activations_bytes"],
      (a.stderr, b.stderr))
r = plan("--preset", "gpt2-small", "-n", "2", "--stage", "3", "--config", hf)
check("plan fills auto buckets from the GPT's hidden size (768)",
      r.returncode == 0 and "filled zero_optimization.reduce_bucket_size = 589824 (was" in r.stderr, r.stderr)

finish()
