#!/usr/bin/env python3
"""Convergence of compressed reductions against dense: gpt-nano on real text, the same start and
data order for every setting, the loss of every step (zero train --log-every 1), a table of the
loss at steps 100, 200, 300 and the end, and for TopK the step at which it reaches dense's final
loss, with and without error feedback (docs/compression.md, "Convergence").

Compression changes only the gradient reduction (and, with qwZ, the weights a gather delivers),
so one machine's MPI transport gives the same curves as a cluster would: the bits do not depend
on the link.

The loss at step s is the mean of the training loss over steps s-W+1..s (W = --window, 20): the
batches are the same for every setting, so the settings share the batch-to-batch noise and
differ by what compression did. "Reaches dense" is the first step at which a setting's windowed
loss is at most dense fp32's windowed loss at its last step; a TopK run that has not reached it
by --steps is extended (constant learning rate: a longer run repeats the shorter one's steps bit
for bit) up to --max-steps.

  python3 bench/compression_curves.py [--zero build/cli/zero] [--ranks 4] [--steps 300]
      [--max-steps 900] [--data /work/main/data/jargon_train.bin] [--csv curves.csv]
      [--only dense-fp32,topk-1%-ef] [--json out.json] [--reuse out.json]
"""
import argparse, csv, json, os, re, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, stage, flags. Stage 2 unless the setting needs stage 3 (qwZ gathers weights).
SETTINGS = [
    ("dense-fp32", 2, []),
    ("dense-bf16", 2, ["--reduce-dtype", "bf16"]),
    ("qgZ-int8", 2, ["--compress-grads", "int8"]),
    ("qgZ-int4", 2, ["--compress-grads", "int4"]),
    ("topk-1%-ef", 2, ["--compress-grads", "topk", "--topk-ratio", "0.01",
                       "--error-feedback", "on"]),
    ("topk-1%-noef", 2, ["--compress-grads", "topk", "--topk-ratio", "0.01",
                         "--error-feedback", "off"]),
    ("qwZ", 3, ["--compress-weights", "int8"]),
    ("qwZ+qgZ+hpZ", 3, ["--compress-weights", "int8", "--compress-grads", "int4", "--hpz", "2"]),
]
STEP = re.compile(r"^step\s+(\d+)\s+loss\s+([-+0-9.eEnaif]+)")


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return e


def train(a, stage, flags, steps):
    """The loss of every step of one run, and its summary line."""
    cmd = [a.zero, "train", "-n", str(a.ranks), "--stage", str(stage), "--model", "gpt",
           "--preset", a.preset, "--data", a.data, "--steps", str(steps), "--log-every", "1",
           *a.extra, *flags]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env())
    if r.returncode != 0:
        sys.exit(f"zero train failed ({' '.join(cmd)}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    losses = {}
    summary = ""
    for line in r.stdout.splitlines():
        m = STEP.match(line.strip())
        if m:
            losses[int(m.group(1))] = float(m.group(2))
        elif line.startswith("summary:"):
            summary = line.strip()
    curve = [losses[s] for s in sorted(losses)]
    if len(curve) != steps:
        sys.exit(f"zero train logged {len(curve)} of {steps} steps ({' '.join(cmd)})")
    return curve, summary, time.time() - t0


def windowed(curve, step, w):
    """Mean loss over steps step-w+1..step (1-based)."""
    lo = max(0, step - w)
    return statistics.fmean(curve[lo:step])


def reach(curve, target, w):
    """First step whose windowed loss is <= target, or None."""
    for s in range(w, len(curve) + 1):
        if windowed(curve, s, w) <= target:
            return s
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zero", default=os.path.join(ROOT, "build/cli/zero"))
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--preset", default="gpt-nano")
    p.add_argument("--data", default="/work/main/data/jargon_train.bin")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--max-steps", type=int, default=900)
    p.add_argument("--window", type=int, default=20)
    p.add_argument("--only", default=None, help="comma-separated setting names")
    p.add_argument("--csv", default=None, help="the loss of every step, a column a setting")
    p.add_argument("--json", default=None, help="the curves and the table, rewritten after each run")
    p.add_argument("--reuse", default=None, help="--json files of earlier runs (comma-separated): their curves are kept")
    p.add_argument("extra", nargs="*", help="more zero train flags (after --)")
    a = p.parse_args()
    chosen = [s for s in SETTINGS if not a.only or s[0] in a.only.split(",")]
    w, N = a.window, a.steps
    print(f"convergence: {a.preset}, {a.ranks} ranks, {N} steps, {os.path.basename(a.data)}; "
          f"loss = mean of the last {w} steps", flush=True)
    curves, summaries = {}, {}
    for path in a.reuse.split(",") if a.reuse else []:
        with open(path) as f:
            old = json.load(f)
        curves.update(old["curves"])
        summaries.update(old.get("summaries", {}))
    for name, stage, flags in chosen:
        if name in curves and len(curves[name]) >= N:
            print(f"  {name:<14} reused: {len(curves[name])} steps", flush=True)
            continue
        # TopK runs longer from the start: the first N steps are the N-step run's.
        steps = N if not name.startswith("topk") else min(a.max_steps, N + N // 2)
        while True:
            curve, summary, secs = train(a, stage, flags, steps)
            curves[name], summaries[name] = curve, summary
            if a.json:  # kept after every run: a long sweep can be stopped and resumed
                with open(a.json, "w") as f:
                    json.dump({"steps": N, "window": w, "curves": curves,
                               "summaries": summaries}, f)
            print(f"  {name:<14} stage {stage}, {steps} steps in {secs:.0f} s: {summary}",
                  flush=True)
            dense = curves.get("dense-fp32")
            if (not name.startswith("topk") or dense is None or steps >= a.max_steps or
                    reach(curve, windowed(dense, N, w), w) is not None):
                break
            steps = min(a.max_steps, 2 * steps)
    dense = curves.get("dense-fp32")
    target = windowed(dense, N, w) if dense else None
    rows = []
    marks = [s for s in (100, 200, 300) if s <= N]
    head = ["setting", "stage"] + [f"loss@{s}" for s in marks] + [f"final@{N}", "reaches dense"]
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for name, stage, _ in chosen:
        c = curves[name]
        at = {s: windowed(c, s, w) for s in marks + [N]}
        r = reach(c, target, w) if target is not None else None
        rows.append({"setting": name, "stage": stage, "loss_at": at, "reaches_dense_at": r,
                     "steps_run": len(c), "summary": summaries[name]})
        reached = (f"step {r} ({100 * (r - N) / N:+.0f}%)" if r else f"not by {len(c)}")
        cells = [name, str(stage)] + [f"{at[s]:.4f}" for s in marks] + [f"{at[N]:.4f}", reached]
        print("| " + " | ".join(cells) + " |")
    if target is not None:
        print(f"\ndense fp32's final loss (mean of steps {N - w + 1}-{N}): {target:.4f}")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["step"] + [n for n, _, _ in chosen])
            for s in range(max(len(c) for c in curves.values())):
                out.writerow([s + 1] + [curves[n][s] if s < len(curves[n]) else ""
                                        for n, _, _ in chosen])
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"steps": N, "window": w, "dense_final": target, "rows": rows,
                       "curves": curves, "summaries": summaries}, f, indent=1)


if __name__ == "__main__":
    main()
