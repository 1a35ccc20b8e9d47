#!/usr/bin/env python3
"""End-to-end tests of the `zero` command, run as a user runs it (it relaunches itself under
mpirun for -n N). Usage: test_zero_command.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, re, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, user_env  # noqa: E402




def run(*args, timeout=300):
    env = user_env()
    return subprocess.run([ZERO, *args], capture_output=True, text=True, timeout=timeout, env=env)


# zero info
r = run("info", "--json")
check("info --json is JSON with the build facts", r.returncode == 0 and
      {"version", "compiler", "cuda_compiled", "mpi_library", "simd_paths", "gpus"} <= json.loads(r.stdout).keys(),
      r.stderr)
r = run("info")
check("info prints a table", r.returncode == 0 and "MPI" in r.stdout and "SIMD" in r.stdout)

# zero train at every stage through the relaunch, 3 ranks (uneven shards)
tmp = tempfile.mkdtemp()
summaries = {}
for stage in range(4):
    path = os.path.join(tmp, f"s{stage}.json")
    r = run("train", "-n", "3", "--stage", str(stage), "--steps", "20", "--layers", "3",
            "--width", "40", "--global-batch", "24", "--accum", "2", "--json", path, "--log-every", "5")
    check(f"train stage {stage} on 3 ranks succeeds", r.returncode == 0, r.stderr[-2000:])
    if r.returncode == 0:
        summaries[stage] = json.load(open(path))
        check(f"train stage {stage} shows progress and a memory table",
              "step   20" in r.stdout and "memory per rank" in r.stdout and "rank 2" in r.stdout, r.stdout[-800:])

keys = {"stage", "ranks", "steps", "params", "final_loss", "params_checksum", "skipped_steps",
        "memory_bytes", "comm_bytes"}
if len(summaries) == 4:
    s0 = summaries[0]
    check("summary has the documented keys", keys <= s0.keys(), sorted(s0.keys()))
    check("params counts the unpadded parameters", s0["params"] == 3 * (40 * 40 + 40), s0["params"])
    check("memory_bytes has one object per rank with every category",
          len(s0["memory_bytes"]) == 3 and all({"master", "optimizer", "grads", "params", "buffers",
                                                 "peak_total"} <= m.keys() for m in s0["memory_bytes"]))
    check("comm_bytes is split by operation", {"all_reduce", "reduce_scatter", "all_gather"} <= s0["comm_bytes"].keys())
    check("checksum is 16 lowercase hex digits, not all zero",
          re.fullmatch("[0-9a-f]{16}", s0["params_checksum"]) is not None and int(s0["params_checksum"], 16) != 0,
          s0["params_checksum"])
    # The checksum is of the weights: another seed trains other weights.
    other = os.path.join(tmp, "seed2.json")
    r = run("train", "-n", "3", "--stage", "0", "--steps", "20", "--layers", "3", "--width", "40",
            "--global-batch", "24", "--accum", "2", "--json", other, "--log-every", "5", "--seed", "2")
    check("another seed gives another checksum",
          r.returncode == 0 and json.load(open(other))["params_checksum"] != s0["params_checksum"],
          r.stderr[-500:])
    check("stages 0-3 give the same checksum through the command",
          len({s["params_checksum"] for s in summaries.values()}) == 1,
          [s["params_checksum"] for s in summaries.values()])
    check("the loss goes down", s0["final_loss"] < 0.9 * s0["first_loss"], (s0["first_loss"], s0["final_loss"]))
    for stage, s in summaries.items():
        pvm = s.get("memory_planned_vs_measured", {})
        check(f"stage {stage}: the planner's prediction is reported beside the ledger's measurement",
              {"params", "grads", "master", "optimizer", "buffers", "activations", "peak total"} <= pvm.keys(), pvm)
        check(f"stage {stage}: model states planned exactly, peak within 2%",
              all(pvm[k]["planned"] == pvm[k]["measured"] for k in ("params", "grads", "master", "optimizer"))
              and abs(pvm["peak total"]["diff_percent"]) <= 2.0, pvm)
        check(f"stage {stage}: peak total is rank 0's measured peak",
              pvm["peak total"]["measured"] == s["memory_bytes"][0]["peak_total"])
    check("stage 3 holds less master memory per rank than stage 0",
          summaries[3]["memory_bytes"][0]["master"] * 3 == summaries[0]["memory_bytes"][0]["master"])

# bad input: a sentence and a non-zero exit, never a crash
r = run("train", "--stage", "4", "--steps", "1")
check("a bad stage names the key and the allowed values",
      r.returncode != 0 and "--stage (zero_optimization.stage): expected 0..3, got 4" in r.stderr, r.stderr)
r = run("train", "--precision", "fp8")
check("a bad precision is named", r.returncode != 0 and "--precision" in r.stderr, r.stderr)
r = run("train", "--no-such-flag")
check("an unknown flag is named", r.returncode == 2 and "no-such-flag" in r.stderr, r.stderr)
r = run("train", "-n", "3", "--global-batch", "10", "--steps", "1")
check("a global batch that does not divide is explained",
      r.returncode != 0 and "not divisible" in r.stderr and "--global-batch" in r.stderr, r.stderr[-500:])
cfg = os.path.join(tmp, "bad.json")
open(cfg, "w").write('{"zero_optimisation": {"stage": 2}}')
r = run("train", "--config", cfg, "--steps", "1")
check("an unknown config key gets a suggestion", r.returncode != 0 and "did you mean 'zero_optimization'" in r.stderr, r.stderr)
r = run("frobnicate")
check("an unknown command is named", r.returncode == 2 and "frobnicate" in r.stderr)

# comm-check on 2 ranks
r = run("comm-check", "-n", "2", "--mib", "1", "--iters", "2")
check("comm-check finds every collective exact", r.returncode == 0 and "all collectives exact" in r.stdout, r.stdout + r.stderr)

finish()
