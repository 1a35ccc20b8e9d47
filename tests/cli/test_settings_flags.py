#!/usr/bin/env python3
"""The settings flags `zero train`, `zero plan` and `zero compare` share are defined once: for each
flag, the same value gives the same Config in `zero plan --json -` and `zero train --steps 2
--json` (their "settings" objects) and the same bytes per category (two steps: the plan's peak is
the steady state's, which the second step reaches); a bad value is the same one
sentence naming the flag in every command; the help of both shows one text and value format.
Usage: test_settings_flags.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, runner  # noqa: E402

MLP = ["--model", "mlp", "--width", "128", "--device", "cpu"]
# plan's JSON key for each of train's measured categories.
CATEGORIES = {"params": "params_bytes", "grads": "grads_bytes", "master": "master_bytes",
              "optimizer": "optimizer_bytes", "buffers": "buffers_bytes",
              "activations": "activations_bytes", "peak total": "peak_bytes"}


zero = runner(ZERO)


def error_line(r, command):
    """The one error line, without its command's prefix; None unless there is exactly one."""
    lines = [l for l in r.stderr.splitlines() if "error" in l.lower()]
    prefix = f"zero {command}: error: "
    if r.returncode == 0 or len(lines) != 1 or not lines[0].startswith(prefix):
        return None
    return lines[0][len(prefix):]


with tempfile.TemporaryDirectory() as tmp:
    cfg = os.path.join(tmp, "ds.json")
    with open(cfg, "w") as f:
        json.dump({"zero_optimization": {"reduce_bucket_size": 40000, "overlap_comm": True,
                                         "mics_shard_size": 1}}, f)
    auto = os.path.join(tmp, "auto.json")
    with open(auto, "w") as f:
        json.dump({"zero_optimization": {"reduce_bucket_size": "auto"}}, f)
    # (flag values, ranks, stage): every shared settings flag, in the formats a user writes.
    CASES = [(["--precision", "fp32"], 2, 1), (["--precision", "fp16"], 2, 2),
             (["--reduce-dtype", "bf16"], 2, 2), (["--overlap"], 2, 2),
             (["--reduce-bucket-size", "2e4"], 2, 2), (["--reduce-bucket-size", "20000"], 2, 0),
             (["--allgather-bucket-size", "30K"], 2, 1),
             (["--prefetch-bucket-size", "1e5", "--persistence-threshold", "0"], 2, 3),
             (["--max-live-parameters", "40000", "--persistence-threshold", "0"], 2, 3),
             (["--shard-size", "1"], 2, 2), (["--shard-size", "0"], 2, 2),
             (["--hpz", "2", "--persistence-threshold", "0"], 4, 3),
             (["--config", cfg], 2, 2), (["--config", cfg, "--reduce-bucket-size", "5e4"], 2, 2),
             (["--config", auto, "--reduce-bucket-size", "5e4"], 2, 2)]
    for flags, n, stage in CASES:
        name = " ".join(f if f not in (cfg, auto) else os.path.basename(f) for f in flags)
        run = [*MLP, "-n", str(n), "--stage", str(stage), *flags]
        js = os.path.join(tmp, "train.json")
        r = zero("train", *run, "--steps", "2", "--json", js)
        p = zero("plan", *run, "--json", "-")
        if r.returncode != 0 or p.returncode != 0:
            check(f"{name}: zero train and zero plan take it", False, r.stderr + p.stderr)
            continue
        with open(js) as f:
            trained = json.load(f)
        planned = json.loads(p.stdout)[0]
        check(f"{name}: the same Config in zero plan and zero train",
              planned["settings"] == trained["settings"],
              (planned["settings"], trained["settings"]))
        measured = {k: v["measured"] for k, v in trained["memory_planned_vs_measured"].items()}
        plan_bytes = {k: planned[key] for k, key in CATEGORIES.items()}
        check(f"{name}: the standalone plan equals the run, per category", plan_bytes == measured,
              {k: (plan_bytes[k], measured[k]) for k in plan_bytes if plan_bytes[k] != measured[k]})

    # The flags set what they name (not only the same in both).
    settings = {}
    for flags in (["--reduce-bucket-size", "2e4"], ["--shard-size", "2"], ["--overlap"],
                  ["--config", auto, "--reduce-bucket-size", "5e4"], ["--config", cfg]):
        p = zero("plan", *MLP, "-n", "4", "--stage", "2", *flags, "--json", "-")
        settings[flags[0] + (" auto" if auto in flags else "")] = (
            json.loads(p.stdout)[0]["settings"] if p.returncode == 0 else {})
    check("each flag sets its key, over the file and over its \"auto\" fill",
          settings["--reduce-bucket-size"].get("reduce_bucket_size") == 20000 and
          settings["--shard-size"].get("mics_shard_size") == 2 and
          settings["--overlap"].get("overlap_comm") is True and
          settings["--config auto"].get("reduce_bucket_size") == 50000 and
          settings["--config"].get("mics_shard_size") == 1 and
          settings["--config"].get("reduce_bucket_size") == 40000, settings)

    # A bad value: one sentence naming the flag, the same in every command.
    BAD = [(["--reduce-bucket-size", "abc"], "--reduce-bucket-size"),
           (["--reduce-bucket-size", "0"], "--reduce-bucket-size"),
           (["--allgather-bucket-size", "-3"], "--allgather-bucket-size"),
           (["--prefetch-bucket-size", "lots"], "--prefetch-bucket-size"),
           (["--max-live-parameters", "-1"], "--max-live-parameters"),
           (["--persistence-threshold", "1e99"], "--persistence-threshold"),
           (["--precision", "fp8"], "--precision"), (["--reduce-dtype", "int8"], "--reduce-dtype"),
           (["--shard-size", "-1"], "--shard-size"), (["--shard-size", "3"], "--shard-size"),
           (["--hpz", "0"], "--hpz"), (["--hpz", "3"], "--hpz"), (["--config", ""], "--config")]
    for flags, flag in BAD:
        lines = {c: error_line(zero(c, *MLP, "-n", "4", *flags), c)
                 for c in ("train", "plan", "compare")}
        check(f"{' '.join(flags)}: one sentence naming {flag}, the same in train, plan and compare",
              lines["train"] is not None and flag in lines["train"] and
              lines["train"] == lines["plan"] == lines["compare"], lines)

    # --stage: one definition; zero plan also takes "all" (its default), which a run cannot.
    t, p = (zero(c, *MLP, "--stage", "5") for c in ("train", "plan"))
    check("--stage 5: the same sentence in both, plan's adding \"or all\"",
          error_line(t, "train") == "--stage (zero_optimization.stage): expected 0..3, got 5" and
          error_line(p, "plan") == "--stage (zero_optimization.stage): expected 0..3 or all, got 5",
          t.stderr + p.stderr)
    t = zero("train", *MLP, "--stage", "all")
    check("zero train --stage all: one sentence saying it is zero plan's, and what a run takes",
          (error_line(t, "train") or "").startswith("--stage all is zero plan's") and
          "0, 1, 2 or 3" in t.stderr, t.stderr)

    # One help text and value format: each flag's line reads the same in both commands' --help.
    helps = {c: " ".join(zero(c, "--help").stdout.split()) for c in ("train", "plan")}
    for text in ("--reduce-bucket-size COUNT gradient elements reduced per collective",
                 "--shard-size G hierarchical sharding", "--hpz H stage 3, ZeRO++ hpZ",
                 "--precision P bf16 (default), fp16 or fp32",
                 "--prefetch-bucket-size COUNT stage 3", "--config FILE DeepSpeed-style",
                 "--stage S", "ZeRO stage 0, 1, 2 or 3 (zero_optimization"):
        check(f"--help of both commands: '{text}'", all(text in h for h in helps.values()),
              [h[h.find(text.split()[0]):][:200] for h in helps.values()])
finish()
