#!/usr/bin/env python3
"""zero train at its edges. Runs that apply no update end non-zero (docs/config.md, "Runs that
apply no update"): a static
fp16 loss scale that flushes every gradient to zero, and a learning rate that leaves only skipped
steps, each end with one sentence and exit status 1 after the summary, whose line counts the
steps; the checkpoints saved before the end stay. A run of --steps 1000000000 starts (its
per-step record is bounded, not reserved for every step) and the rule stops it. MFU is never
above 100%: against a peak below what the steps reach, the peak is raised, said once.
Usage: test_train_edges.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, re, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, token_file, user_env  # noqa: E402

SMALL = ["--device", "cpu", "--layers", "2", "--width", "64", "--global-batch", "4",
         "--log-every", "1000"]


def train(*args):
    return subprocess.run([ZERO, "train"] + SMALL + list(args), capture_output=True, text=True,
                          timeout=300, env=user_env())


def errors(r):
    return [l for l in r.stderr.splitlines() if "error" in l]


def summary(r):
    return next((l for l in r.stdout.splitlines() if l.startswith("summary:")), "")


with tempfile.TemporaryDirectory() as tmp:
    tiny = os.path.join(tmp, "tiny_scale.json")
    with open(tiny, "w") as f:
        f.write('{"fp16": {"enabled": true, "loss_scale": 1e-30}}')
    stop20 = os.path.join(tmp, "tiny_scale_20.json")
    with open(stop20, "w") as f:
        f.write('{"fp16": {"enabled": true, "loss_scale": 1e-30}, '
                '"max_consecutive_skipped_steps": 20}')

    # Every gradient flushed to zero: 5 steps, none with an update.
    js = os.path.join(tmp, "tiny.json")
    r = train("-n", "1", "--config", tiny, "--steps", "5", "--json", js)
    check("fp16 loss_scale 1e-30: exit status 1", r.returncode == 1, r.stdout + r.stderr)
    e = errors(r)
    check("fp16 loss_scale 1e-30: one sentence naming the steps and the loss scale",
          len(e) == 1 and "5 of the run's 5 steps applied no update" in e[0]
          and "loss_scale 1e-30" in e[0], r.stderr)
    check("fp16 loss_scale 1e-30: the summary counts the steps with zero gradients",
          "(0 skipped, 5 with every gradient zero)" in summary(r), summary(r))
    if os.path.exists(js):
        with open(js) as f:
            j = json.load(f)
        check("fp16 loss_scale 1e-30: --json written, no_update_steps 5",
              j.get("no_update_steps") == 5 and j.get("steps") == 5, j.get("no_update_steps"))
    else:
        check("fp16 loss_scale 1e-30: --json written", False, r.stdout + r.stderr)

    # --steps 1000000000: starts at once (nothing reserved per step) and stops at the 20th step in
    # a row without an update, keeping the checkpoints saved before.
    ck = os.path.join(tmp, "ck")
    js = os.path.join(tmp, "long.json")
    r = train("-n", "1", "--config", stop20, "--steps", "1000000000", "--save", ck,
              "--save-every", "5", "--keep", "10", "--json", js)
    check("--steps 1000000000: no allocation failure", "bad_alloc" not in r.stderr, r.stderr)
    check("--steps 1000000000 with zero gradients: exit status 1", r.returncode == 1,
          r.stdout + r.stderr)
    e = errors(r)
    check("the 20th step in a row without an update stops the run, in one sentence",
          len(e) == 1 and "steps 1-20 applied no update" in e[0] and "stops at step 20" in e[0],
          r.stderr)
    check("the summary says the 20 steps it ran", "in 20 steps (0 skipped, 20 with every "
          "gradient zero)" in summary(r), summary(r))
    saved = sorted(d for d in os.listdir(ck) if d.startswith("step_")) if os.path.isdir(ck) else []
    check("the checkpoints saved before the stop stay (steps 5, 10, 15)",
          saved == ["step_00000005", "step_00000010", "step_00000015"], saved)
    if os.path.exists(js):
        with open(js) as f:
            j = json.load(f)
        check("the stopped run's --json holds its 20 steps",
              [h["step"] for h in j.get("history", [])] == list(range(1, 21))
              and j.get("history_stride") == 1, j.get("history", [])[:2])
    else:
        check("the stopped run's --json is written", False, r.stdout + r.stderr)

    # A learning rate that sends the weights to infinity: one update, then only skips.
    ck = os.path.join(tmp, "lr")
    for n in ("1", "2"):
        r = train("-n", n, "--precision", "fp32", "--lr", "1e30", "--steps", "10", "--save", ck + n)
        check(f"-n {n} --lr 1e30: exit status non-zero", r.returncode != 0, r.stdout + r.stderr)
        e = errors(r)
        check(f"-n {n} --lr 1e30: one sentence, most steps skipped, the learning rate named",
              len(e) == 1 and "9 of the run's 10 steps applied no update" in e[0]
              and "non-finite gradient" in e[0] and "learning rate" in e[0], r.stderr)
        check(f"-n {n} --lr 1e30: the summary says 9 skipped", "in 10 steps (9 skipped)"
              in summary(r), summary(r))
        check(f"-n {n} --lr 1e30: the final checkpoint is kept",
              os.path.isdir(os.path.join(ck + n, "step_00000010")),
              os.listdir(ck + n) if os.path.isdir(ck + n) else "no folder")

    # Half of the steps skipped is not more than half: a 2-step run at lr 1e30 trains.
    r = train("-n", "1", "--precision", "fp32", "--lr", "1e30", "--steps", "2")
    check("--lr 1e30 --steps 2 (1 of 2 skipped): exit status 0", r.returncode == 0,
          r.stdout + r.stderr)

    # MFU against a peak far below what any step reaches (ZERO_FMA_PEAK: what the launcher hands
    # the ranks): raised to the fastest step's rate, said once, never above 100%.
    data = token_file(ZERO, tmp, "the quick brown fox jumps over the lazy dog. " * 400)
    r = subprocess.run([ZERO, "train", "-n", "1", "--device", "cpu", "--model", "gpt", "--preset",
                        "gpt-nano", "--data", data, "--global-batch", "2",
                        "--steps", "4", "--log-every", "1"], capture_output=True, text=True,
                       timeout=300, env=user_env(ZERO_FMA_PEAK="1e6 avx2 fma"))
    check("gpt with a peak of 1 MFLOP/s: exit status 0", r.returncode == 0, r.stdout + r.stderr)
    mfus = [float(m) for m in re.findall(r"MFU ([0-9.]+)%", r.stdout)]
    check("every MFU printed is at most 100%", len(mfus) == 5 and max(mfus) <= 100.0, mfus)
    notes = [l for l in r.stdout.splitlines() if l.startswith("zero train: note:")]
    check("the raised peak is said once, naming the step and the peak it replaced",
          len(notes) == 1 and "step 1 " in notes[0] and "0.00 GFLOP/s" in notes[0], notes)

finish()
