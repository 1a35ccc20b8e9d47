#!/usr/bin/env python3
"""Compressed reductions on two emulated nodes (scripts/emulated-cluster: 4 ranks, 2 a node, a
tbf-shaped link between them): per link rate and stage, each setting's measured step time, its
bytes by group and the time model's prediction (`zero plan --cluster-file`), predicted/measured.

Settings: dense fp32, dense bf16 reduction, qgZ int8 and int4, TopK 1% with and without error
feedback, and at stage 3 qwZ and qwZ+qgZ+hpZ (docs/compression.md). Each is `zero train --json`
across the two nodes; its step is the median of its steps after --warmup, and with --reps R the
median over R runs, taken in rounds: round r runs every setting once, in an order rotated by r,
so that a slow spell of the machine falls on different settings and no stage's calibration rests
on one run.

The profile is bench/predict.py's: in a node the link of a 2-rank sweep on this machine; across
the nodes the link read from a 4-rank sweep across them (times the 4/3 ring-loads of direct
exchange); the compute (forward and backward, as that run measured it) and the optimizer's
bandwidth from dense fp32's measured split at the same stage, so every row, dense's included,
is a prediction of its step; compression's per-value rates (quantise, dequantise, TopK's selection and sort)
from build/bench/codec_bench run as 4 processes at once on this machine, as the ranks run
(docs/time.md, "Encoding and decoding"). The codec column is the model's share of each step.

At the end: the step-rate ratio of stage 3 qwZ+qgZ+hpZ over dense bf16 at each rate (the issue's
2x target at 200 Mb/s), measured and predicted. Communication's share of a step grows as each
rank's tokens fall: --global-batch 4 (one sequence a rank) is where compression matters most.

  scripts/emulated-cluster up
  python3 bench/compression_cluster.py [--rates 1gbit,200mbit] [--stages 2,3] [--steps 10]
      [--warmup 3] [--reps 3] [--global-batch 12] [--only dense-fp32,qgZ-int4] [--json out.json]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import predict  # noqa: E402  (the sweep, the profile and the plan)

SETTINGS = [  # name, stages, flags
    ("dense-fp32", (2, 3), []),
    ("dense-bf16", (2, 3), ["--reduce-dtype", "bf16"]),
    ("qgZ-int8", (2, 3), ["--compress-grads", "int8"]),
    ("qgZ-int4", (2, 3), ["--compress-grads", "int4"]),
    ("topk-1%-ef", (2, 3), ["--compress-grads", "topk", "--topk-ratio", "0.01",
                            "--error-feedback", "on"]),
    ("topk-1%-noef", (2, 3), ["--compress-grads", "topk", "--topk-ratio", "0.01",
                              "--error-feedback", "off"]),
    ("qwZ", (3,), ["--compress-weights", "int8"]),
    ("qwZ+qgZ+hpZ", (3,), ["--compress-weights", "int8", "--compress-grads", "int4",
                           "--hpz", "2"]),
]
NODE = ("--ranks-per-node", "2")


def train(a, stage, flags, tmp, tag):
    """zero train across the two nodes: (median step seconds, its --json)."""
    js = os.path.join(tmp, f"train-{tag}.json")
    cmd = [os.path.join(ROOT, "scripts", "emulated-cluster"), "run", a.zero, "train",
           "--model", "gpt", "--preset", a.preset, "--data", a.data, "--device", "cpu",
           "--global-batch", str(a.global_batch), "--steps", str(a.warmup + a.steps),
           "--stage", str(stage), "--log-every", "1000", "--json", js, *flags]
    r = subprocess.run(cmd, capture_output=True, text=True, env=predict.env())
    if r.returncode != 0:
        sys.exit(f"zero train failed ({' '.join(cmd)}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    with open(js) as f:
        j = json.load(f)
    steps = [h["seconds"] for h in j["history"] if h["step"] > a.warmup]
    return statistics.median(steps), j


def measured_split(j):
    """zero compare's shape of one measured run, for predict.calibrate."""
    return {"peak_flops": j.get("peak_flops", 0.0),
            "stages": [{"stage": 0, "median_seconds": j["median"],
                        "split": {"optimizer": j["step_time"]["optimizer"]}}]}


def calibrate(a, stage, dense, intra, inter, lat, tmp, codec):
    """predict.calibrate's profile from dense fp32's run at `stage`: its compute is the run's own
    measured forward and backward (`step_time.compute`), not solved for from its step. Where the
    step is bound by communication, what overlap hides grows with the compute and the model's
    step is flat in it, so solving is ill-conditioned: at global batch 4 and 200 Mb/s it fitted
    77 ms of compute where the run measured 30, and over-priced every setting that sends less."""
    saved = predict.plan

    def at_stage(a_, n, profile, tmp_, extra=()):  # predict.calibrate reads the entry "0"
        p = saved(a_, n, profile, tmp_, tuple(extra) + ("--stage", str(stage)))
        return {0: p[stage]}

    predict.plan = at_stage
    try:
        return predict.calibrate(a, 4, measured_split(dense), intra, lat, tmp, nodes=2,
                                 inter=inter, extra=NODE, codec=codec,
                                 compute=dense["step_time"]["compute"])
    finally:
        predict.plan = saved


def codec_rates(a, tmp):
    """codec_bench's profile keys, run as 4 processes at once (as the 4 ranks share the cores):
    per key the median over the processes."""
    out = os.path.join(tmp, "codec")
    os.makedirs(out, exist_ok=True)
    cmd = predict.mpirun(4, None) + ["sh", "-c", f'exec "{a.codec_bench}" --reps 7 --json '
                                     f'"{out}/rank$OMPI_COMM_WORLD_RANK.json"']
    subprocess.run(cmd, capture_output=True, text=True, env=predict.env(), check=True)
    runs = []
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name)) as f:
            runs.append(json.load(f))
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def measure_stage(a, rate, stage, chosen, tmp):
    """Every setting of `chosen` at one rate and stage, --reps times in rotated rounds: per
    setting (median seconds, the median run's --json, every run's seconds)."""
    runs = {name: [] for name, _, _ in chosen}
    for r in range(a.reps):
        for name, _, flags in chosen[r % len(chosen):] + chosen[:r % len(chosen)]:
            runs[name].append(train(a, stage, flags, tmp, f"{rate}-{stage}-{name}-{r}"))
    out = {}
    for name, got in runs.items():
        got.sort(key=lambda x: x[0])
        secs, j = got[len(got) // 2]
        j["median"] = secs
        out[name] = (secs, j, [x[0] for x in got])
    return out


def target(rows):
    """The step-rate ratio of stage 3 qwZ+qgZ+hpZ over dense bf16, per rate."""
    for rate in dict.fromkeys(r["rate"] for r in rows):
        at = {r["setting"]: r for r in rows if r["rate"] == rate and r["stage"] == 3}
        if "dense-bf16" in at and "qwZ+qgZ+hpZ" in at:
            d, z = at["dense-bf16"], at["qwZ+qgZ+hpZ"]
            print(f"{rate}: stage 3 qwZ+qgZ+hpZ against dense bf16: step rate "
                  f"{d['measured'] / z['measured']:.2f}x measured "
                  f"({1e3 * d['measured']:.0f} / {1e3 * z['measured']:.0f} ms), "
                  f"{d['predicted'] / z['predicted']:.2f}x predicted")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zero", default=os.path.join(ROOT, "build/cli/zero"))
    p.add_argument("--comm-bench", default=os.path.join(ROOT, "build/bench/comm_bench"))
    p.add_argument("--codec-bench", default=os.path.join(ROOT, "build/bench/codec_bench"))
    p.add_argument("--preset", default="gpt-nano")
    p.add_argument("--data", default="/work/main/data/jargon_train.bin")
    p.add_argument("--global-batch", type=int, default=12,
                   help="sequences a step over the 4 ranks (4: one a rank, communication-bound)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=3,
                   help="runs per setting, in rotated rounds; the median is kept")
    p.add_argument("--rates", default="1gbit,200mbit")
    p.add_argument("--stages", default="2,3")
    p.add_argument("--only", default=None, help="comma-separated setting names")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    if a.reps < 1 or a.global_batch < 4 or a.global_batch % 4:
        sys.exit("--reps must be >= 1 and --global-batch a multiple of the 4 ranks")
    tmp = tempfile.mkdtemp(prefix="zero-ccluster-")
    ec = os.path.join(ROOT, "scripts", "emulated-cluster")
    chosen = [s for s in SETTINGS if not a.only or s[0] in a.only.split(",") or
              s[0] == "dense-fp32"]
    intra, _ = predict.sweep(a, 2)
    codec = codec_rates(a, tmp)
    rows = []
    print(f"compressed steps on 2 emulated nodes: {a.preset}, 4 ranks (2 a node), global batch "
          f"{a.global_batch}, median of {a.steps} steps after {a.warmup}, {a.reps} run(s) in "
          f"rotated rounds")
    print("codec, ns a value at 4 processes: " +
          ", ".join(f"{k[:-3]} {v:.2f}" for k, v in codec.items()))
    for rate in a.rates.split(","):
        subprocess.run([ec, "shape", "--rate", rate], check=True, capture_output=True)
        bus, lat = predict.sweep(a, 4, [ec, "run"])
        inter = bus * predict.link_loads(2, 2)
        print(f"{rate}: the link {inter / 1e9:.4f} GB/s (bus {bus / 1e9:.4f}), call "
              f"{lat * 1e6:.0f} us; in a node {intra / 1e9:.2f} GB/s", flush=True)
        print("| link | stage | setting | measured | predicted | pred/meas | codec | shard B/step "
              "| replicate | hpZ | wire B/step |\n|---|---|---|---|---|---|---|---|---|---|---|")
        for stage in [int(s) for s in a.stages.split(",")]:
            at_stage = [c for c in chosen if stage in c[1]]
            measured = measure_stage(a, rate, stage, at_stage, tmp)
            profile, _ = calibrate(a, stage, measured["dense-fp32"][1], intra, inter, lat, tmp,
                                   codec)
            for name, _, flags in at_stage:
                secs, j, every = measured[name]
                plan = predict.plan(a, 4, profile, tmp, NODE + ("--stage", str(stage), *flags))
                t = plan[stage]["time"]
                pred = t["step_seconds"]
                g = j["comm_bytes_by_group"]
                wire = sum(j["comm_wire_bytes"].values())
                rows.append({"rate": rate, "stage": stage, "setting": name, "measured": secs,
                             "predicted": pred, "ratio": pred / secs,
                             "codec_predicted": t["codec_seconds"], "bytes_by_group": g,
                             "wire_bytes": wire, "all_measured": every,
                             "final_loss": j["final_loss"]})
                print(f"| {rate} | {stage} | {name} | {1e3 * secs:.0f} ms | {1e3 * pred:.0f} ms | "
                      f"{pred / secs:.2f} | {1e3 * t['codec_seconds']:.1f} ms | {g['shard']:,} | "
                      f"{g['replicate']:,} | {g['secondary']:,} | {wire:,} |", flush=True)
    worst = max(abs(r["ratio"] - 1) for r in rows)
    print(f"worst |predicted/measured - 1| = {worst:.2f}")
    target(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"codec": codec, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
