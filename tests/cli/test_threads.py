#!/usr/bin/env python3
"""Threads inside a rank (docs/design.md, "Note: threads inside a rank"): `zero train` gives the
same weights (checksum) at --threads 1, 2 and 3, in fp32 and bf16, and as two ranks of one thread;
the run line and `zero info` say the count and who chose it (--threads over the config key over
OMP_NUM_THREADS over cores / ranks); a bad count is one sentence.
Usage: test_threads.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, re, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, checksum, finish, token_file, user_env  # noqa: E402

TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was "
        "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity. ") * 60


def zero(*args, timeout=300, **extra):
    env = {k: v for k, v in user_env().items() if k != "OMP_NUM_THREADS"}
    env.update(extra)
    return subprocess.run([ZERO, *args], capture_output=True, text=True, timeout=timeout, env=env)


with tempfile.TemporaryDirectory() as tmp:
    base = ["train", "--model", "gpt", "--preset", "gpt-micro", "--device", "cpu",
            "--global-batch", "8", "--data", token_file(ZERO, tmp, TEXT), "--steps", "4",
            "--log-every", "4"]
    for precision in ("fp32", "bf16"):
        sums = {}
        for threads in ("1", "2", "3"):
            r = zero(*base, "-n", "1", "--precision", precision, "--threads", threads)
            check(f"{precision} --threads {threads}: trains", r.returncode == 0, r.stdout + r.stderr)
            sums[threads] = checksum(r.stdout)
            check(f"{precision} --threads {threads}: the run line says it",
                  f"zero train: {threads} thread{'s' if threads != '1' else ''} a rank (--threads)"
                  in r.stdout, r.stdout)
        r = zero(*base, "-n", "2", "--precision", precision)
        check(f"{precision}: two ranks default to one thread each (2 cores or fewer)"
              if os.cpu_count() <= 2 else f"{precision}: two ranks train", r.returncode == 0
              and ("1 thread a rank" in r.stdout or os.cpu_count() > 2), r.stdout + r.stderr)
        check(f"{precision}: the same weights at 1, 2 and 3 threads",
              sums["1"] is not None and len(set(sums.values())) == 1, sums)

    # Stage 3 with gradient accumulation (4 micro-batches): the gathers, the buckets' copies and
    # fills and the accumulation run through the pool too.
    sums = {}
    for threads in ("1", "3"):
        r = zero(*base, "-n", "1", "--precision", "fp32", "--stage", "3", "--micro-batch", "2",
                 "--threads", threads)
        check(f"stage 3, 4 micro-batches, --threads {threads}: trains", r.returncode == 0,
              r.stdout + r.stderr)
        sums[threads] = checksum(r.stdout)
    check("stage 3 with accumulation: the same weights at 1 and 3 threads",
          sums["1"] is not None and len(set(sums.values())) == 1, sums)

    cfg = os.path.join(tmp, "c.json")
    with open(cfg, "w") as f:
        json.dump({"threads": 3}, f)
    r = zero(*base, "-n", "1", "--config", cfg, OMP_NUM_THREADS="2")
    check("the config key threads wins over OMP_NUM_THREADS",
          "3 threads a rank (config key threads)" in r.stdout, r.stdout + r.stderr)
    r = zero(*base, "-n", "1", "--config", cfg, "--threads", "2")
    check("--threads wins over the config key", "2 threads a rank (--threads)" in r.stdout,
          r.stdout + r.stderr)
    r = zero(*base, "-n", "1", OMP_NUM_THREADS="2")
    check("OMP_NUM_THREADS is read when nothing else is given",
          "2 threads a rank (OMP_NUM_THREADS)" in r.stdout, r.stdout + r.stderr)

    for bad, extra, words in ((["--threads", "0"], {}, "--threads must be from 1 to 1024"),
                              ([], {"OMP_NUM_THREADS": "4,2"}, "OMP_NUM_THREADS='4,2'")):
        r = zero(*base, "-n", "1", *bad, **extra)
        lines = [l for l in r.stderr.splitlines() if "error" in l.lower() and "libgomp" not in l]
        check(f"{words}: one sentence", r.returncode != 0 and len(lines) == 1 and words in lines[0],
              r.stdout + r.stderr)

r = zero("info", "--json", OMP_NUM_THREADS="3")
info = json.loads(r.stdout) if r.returncode == 0 else {}
check("zero info reports the threads, who chose them and the libraries' counts in effect",
      info.get("threads") == 3 and info.get("threads_source") == "OMP_NUM_THREADS"
      and info.get("kernel_threads") == 3 and info.get("blas_threads") == 1
      and info.get("onednn_threads") == 1, r.stdout + r.stderr)
r = zero("info")
check("zero info's table has a Threads row", re.search(r"\n  Threads +\d+ thread", r.stdout)
      is not None, r.stdout)
finish()
