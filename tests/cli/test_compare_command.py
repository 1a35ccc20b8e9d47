#!/usr/bin/env python3
"""`zero compare` end to end: the GPT at stages 0-3 on 4 ranks in one job, each from the same
start, in rounds of repetitions: the table (one row per stage, a 95% interval each), exposed
communication never above comm, the verdict and the recommendation, the weights bitwise equal
across stages and repetitions, every measured memory category equal to the plan, the traffic as
ZeRO's analysis orders it, the --json fields, the chart (one bar per stage in both panels) and
the sentence when no PNG is written; --budget ruling stages out; resuming every stage from one
checkpoint; and bad flags refused in one sentence. (--repeats 2 keeps it short; the verdict's
arithmetic is tests/cli/test_compare_verdict.cpp.)
Usage: test_compare_command.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, re, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, one_error, runner, token_file, user_env  # noqa: E402


zero = runner(ZERO)


with tempfile.TemporaryDirectory() as tmp:
    data = token_file(ZERO, tmp, "It was the best of times, it was the worst of times, it was the "
                                 "age of wisdom. " * 80)
    gpt = ["--model", "gpt", "--preset", "gpt-micro", "--device", "cpu", "-n", "4",
           "--global-batch", "8", "--data", data]
    js, svg = os.path.join(tmp, "cmp.json"), os.path.join(tmp, "cmp.svg")
    # gpt-micro's units are below DeepSpeed's default persistence threshold (1e5 elements): with
    # it every unit would stay gathered at stage 3. At 0 each is gathered before use.
    cfg = os.path.join(tmp, "ds.json")
    with open(cfg, "w") as f:
        json.dump({"zero_optimization": {"stage3_param_persistence_threshold": 0}}, f)
    r = zero("compare", *gpt, "--warmup", "1", "--steps", "3", "--repeats", "2", "--json", js,
             "--chart", svg, "--config", cfg)
    check("zero compare -n 4 runs the GPT at every stage", r.returncode == 0, r.stdout + r.stderr)
    if r.returncode != 0:
        finish()
    out = r.stdout
    rows = re.findall(r"^([0-3])\s+[\d.]+\s+[\d.]+\.\.[\d.]+\s+\d+\s+[\d.]+%", out, re.M)
    check("the table has one row per stage, 0 to 3, with tokens/s and MFU", rows == list("0123"), out)
    check("the stages' weights agree bitwise", "bitwise the same at every stage" in out, out)
    check("two rounds, every stage once a round, the second starting one stage later",
          "round 1 of 2: stage 0, stage 1, stage 2, stage 3 (each 1 warm-up + 3 measured steps)" in out
          and "round 2 of 2: stage 1, stage 2, stage 3, stage 0" in out, out)
    table = re.findall(r"^([0-3])\s+([\d.]+)\s+([\d.]+)\.\.([\d.]+)\s+\d+\s+[\d.]+%\s+[\d.]+\s+([\d.]+)"
                       r"\s+[\d.]+\s+([\d.]+)", out, re.M)
    check("the table: each stage's mean inside its 95% interval, exposed never above comm ms",
          len(table) == 4 and all(float(lo) <= float(mean) <= float(hi) and float(exp) <= float(comm)
                                  for _, mean, lo, hi, exp, comm in table), out)
    verdict = [l for l in out.splitlines() if l.startswith(("fastest: ", "recommendation: "))]
    check("the table ends with the verdict and a one-line recommendation naming a stage",
          len(verdict) == 2 and (re.match(r"fastest: stage [0-3], [\d.]+ ms \[", verdict[0]) or
                                 verdict[0].startswith("fastest: no clear winner: the 95% intervals of stages")) and
          re.match(r"recommendation: stage [0-3], ", verdict[1]) is not None, "\n".join(verdict))
    with open(js) as f:
        j = json.load(f)
    stages = j["stages"]
    check("--json: every stage with its step times, split, traffic, memory, checksum",
          [s["stage"] for s in stages] == [0, 1, 2, 3] and
          all(len(s["step_seconds"]) == 6 and len(s["repetition_seconds"]) == 2 and
              s["interval_seconds"][0] <= s["mean_seconds"] <= s["interval_seconds"][1] and
              s["tokens_per_second"] > 0 and
              set(s["split"]) == {"total", "compute", "exposed_comm", "optimizer", "data", "other"}
              for s in stages) and j["weights_agree_bitwise"] is True and j["repeats"] == 2 and
          len({s["checksum"] for s in stages}) == 1, json.dumps(j)[:800])
    check("--json: exposed communication is never above comm, which is never below in-flight time",
          all(s["split"]["exposed_comm"] <= s["comm_seconds"] and
              s["in_flight_seconds"] <= s["comm_seconds"] + 1e-12 for s in stages),
          str([(s["split"]["exposed_comm"], s["comm_seconds"], s["in_flight_seconds"]) for s in stages]))
    v = j["verdict"]
    check("--json: the verdict as the text says it",
          v["recommended"] in {f"stage {k}" for k in range(4)} and
          (v["clear_winner"] == (len(v["tied"]) == 1)) and
          (f"fastest: {v['fastest']}," in out if v["clear_winner"] else "no clear winner" in out), v)
    mismatch = [(s["stage"], k) for s in stages for k in
                ("params", "grads", "master", "optimizer", "buffers", "activations", "peak_total")
                if s["memory_measured"][k] != s["memory_planned"][k]]
    check("every measured memory category equals the plan, at every stage", not mismatch, str(mismatch))
    mem = {s["stage"]: s["memory_measured"] for s in stages}
    check("the fp32 master and Adam moments are sharded from stage 1 (4 ranks: a quarter)",
          all(abs(mem[k]["master"] * 4 - mem[0]["master"]) <= 4 * 64 * 4 * 40 for k in (1, 2, 3)) and
          mem[1]["optimizer"] < mem[0]["optimizer"] / 3, str(mem))
    check("peak memory per rank falls from stage 0 to stages 1-3",
          all(mem[k]["peak_total"] < mem[0]["peak_total"] for k in (1, 2, 3)), str(mem))
    ag = {s["stage"]: s["collectives_per_step"]["all_gather"]["payload_bytes"] for s in stages}
    rs = {s["stage"]: s["collectives_per_step"]["reduce_scatter"]["payload_bytes"] for s in stages}
    check("every stage reduce-scatters the same gradient bytes", len(set(rs.values())) == 1, str(rs))
    check("stage 3 gathers more params than stage 2 (before use, not once after the step)",
          ag[3] > ag[2] and ag[1] == ag[2], str(ag))
    with open(svg) as f:
        text = f.read()
    labels = re.findall(r">stage ([0-3])</text>", text)
    check("--chart: an SVG with a bar per stage in both panels (time split, memory)",
          text.startswith("<svg") and labels == list("01230123") and "exposed communication" in text,
          text[:300])
    check("--chart: each stage's time bar carries its 95% interval as a whisker",
          len(re.findall(r"stage [0-3] 95% interval: [\d.e+-]+\.\.[\d.e+-]+ ms</title></path>", text)) == 4,
          text[:300])
    png = svg[:-4] + ".png"
    has_converter = any(os.access(os.path.join(d, "rsvg-convert"), os.X_OK)
                        for d in os.environ.get("PATH", "").split(":"))
    if has_converter:
        check("--chart: a PNG beside it where rsvg-convert is installed",
              os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", out)
    else:
        check("--chart: a PNG beside it, or a line saying why not",
              os.path.exists(png) or "chart: no PNG beside it: neither rsvg-convert" in out, out)

    # Every stage from one checkpoint.
    ck = os.path.join(tmp, "ck")
    r = zero("train", *gpt, "--stage", "1", "--steps", "2", "--save", ck)
    check("a checkpoint to compare from", r.returncode == 0, r.stderr)
    r = zero("compare", *gpt, "--stages", "3,0", "--warmup", "0", "--steps", "2", "--repeats", "2",
             "--resume", ck)
    check("--resume: the stages start from the checkpoint and still agree",
          r.returncode == 0 and f"from {ck}/step_00000002" in r.stdout and
          "bitwise the same at every stage" in r.stdout and
          re.findall(r"^([0-3])\s+[\d.]+\s+[\d.]+\.\.", r.stdout, re.M) == ["3", "0"], r.stdout + r.stderr)

    # A list of configs: every stage under each, each config's weights agreeing across stages.
    red, hier = os.path.join(tmp, "bf16red.json"), os.path.join(tmp, "hier.json")
    with open(red, "w") as f:
        json.dump({"bf16": {"enabled": True}, "communication_data_type": "bf16"}, f)
    with open(hier, "w") as f:
        json.dump({"bf16": {"enabled": True}, "zero_optimization": {"mics_shard_size": 2}}, f)
    js2 = os.path.join(tmp, "cfg.json")
    r = zero("compare", *gpt, "--stages", "1,3", "--warmup", "0", "--steps", "2", "--repeats", "2",
             "--configs", f"{red},{hier}", "--json", js2)
    check("--configs runs every stage under each config",
          r.returncode == 0 and re.findall(r"^([0-3] \w+)\s+[\d.]+\s+[\d.]+\.\.", r.stdout, re.M) ==
          ["1 bf16red", "3 bf16red", "1 hier", "3 hier"], r.stdout + r.stderr)
    if r.returncode == 0:
        with open(js2) as f:
            c = json.load(f)["stages"]
        ops = {(x["config"], x["stage"]): x["collectives_per_step"] for x in c}
        check("--configs: each config's weights agree across its stages",
              "weights after the run (bf16red): bitwise the same" in r.stdout and
              "weights after the run (hier): bitwise the same" in r.stdout, r.stdout)
        check("--configs: memory equals the plan in every row (a fresh communicator each run)",
              all(x["memory_measured"][k] == x["memory_planned"][k] for x in c
                  for k in ("buffers", "peak_total")), json.dumps(c)[:600])
        check("--configs: hierarchical sharding adds the all-reduce across its groups",
              ops[("hier", 1)]["all_reduce"]["payload_bytes"] > 0 and
              ops[("bf16red", 1)]["all_reduce"]["payload_bytes"] == 0, str(ops))
    check(*one_error("--config with --configs is refused",
                     zero("compare", "--config", red, "--configs", red), "--configs"))
    check(*one_error("a stage outside 0..3 is refused", zero("compare", "--stages", "0,5"), "--stages"))
    check(*one_error("--stage (zero train's) is refused", zero("compare", "--stage", "2"),
                     "--stage is zero train's"))
    check(*one_error("a stage listed twice is refused", zero("compare", "--stages", "1,1"), "twice"))
    check(*one_error("--repeats 0 is refused", zero("compare", "--repeats", "0"), "--repeats"))
    check(*one_error("a --budget without a unit is refused", zero("compare", "--budget", "40"),
                     "--budget"))
    # The MLP has no FLOPs per token: its MFU column says "-", never a made-up 0.0%.
    mlp_js = os.path.join(tmp, "mlp.json")
    mlp = ["-n", "2", "--stages", "0,3", "--layers", "2", "--width", "32", "--global-batch", "8",
           "--warmup", "0", "--steps", "2"]
    r = zero("compare", *mlp, "--repeats", "2", "--json", mlp_js)
    rows = re.findall(r"^([03])\s+[\d.]+\s+[\d.]+\.\.[\d.]+\s+\d+\s+(\S+)\s", r.stdout, re.M)
    check("the MLP's table says '-' for MFU, which it cannot know",
          r.returncode == 0 and rows == [("0", "-"), ("3", "-")], r.stdout + r.stderr)
    if r.returncode == 0:
        with open(mlp_js) as f:
            mlp_stages = json.load(f)["stages"]
        check("--json: the MLP's mfu is null", [s["mfu"] for s in mlp_stages] == [None, None], mlp_stages)
        # --budget between the stages' peaks: stage 0 does not fit, stage 3 does.
        peaks = {s["stage"]: s["memory_measured"]["peak_total_most_of_ranks"] for s in mlp_stages}
        budget = f"{(peaks[0] + peaks[3]) // 2}B"
        r = zero("compare", *mlp, "--repeats", "2", "--budget", budget)
        check("--budget: the recommendation is a stage whose peak fits",
              peaks[3] < peaks[0] and
              re.search(rf"^recommendation: stage 3, .*--budget {budget}", r.stdout, re.M) is not None,
              r.stdout + r.stderr)
    # One run of each stage: no interval ("-"), so no clear winner; nothing fits a 1 KiB budget.
    r = zero("compare", *mlp, "--repeats", "1", "--budget", "1KiB")
    check("--repeats 1: no interval, no clear winner; a budget nothing fits says so",
          re.search(r"^0\s+[\d.]+\s+-\s", r.stdout, re.M) is not None and
          "fastest: no clear winner" in r.stdout and "one run: no interval" in r.stdout and
          "recommendation: none: no row fits --budget 1KiB" in r.stdout, r.stdout + r.stderr)
    # Without a converter that works, the SVG is written and a line says why there is no PNG.
    fake = os.path.join(tmp, "bin")
    os.mkdir(fake)
    for tool in ("rsvg-convert", "convert"):
        with open(os.path.join(fake, tool), "w") as f:
            f.write("#!/bin/sh\nexit 1\n")
        os.chmod(os.path.join(fake, tool), 0o755)
    env = user_env()
    env["PATH"] = fake + ":" + env.get("PATH", "")
    chart = os.path.join(tmp, "nopng.svg")
    r = zero("compare", *mlp, "--repeats", "1", "--chart", chart, env=env)
    check("--chart without a converter: the SVG, no PNG, and one line that says so",
          r.returncode == 0 and os.path.exists(chart) and not os.path.exists(chart[:-4] + ".png") and
          "chart: no PNG beside it: neither rsvg-convert (package librsvg2-bin, which "
          "scripts/install-deps installs) nor ImageMagick's convert ran" in r.stdout, r.stdout + r.stderr)

    # MFU against a peak far below what any step reaches (ZERO_FMA_PEAK, as zero train's test
    # gives it): raised to the fastest step's rate as zero train raises it, said once, never
    # above 100% in the table or the JSON.
    tiny = os.path.join(tmp, "tiny.json")
    r = zero("compare", *gpt[:-6], "-n", "2", "--global-batch", "4", *gpt[-2:], "--stages",
             "0,1", "--warmup", "0", "--steps", "2", "--repeats", "1", "--json", tiny,
             env=user_env(ZERO_FMA_PEAK="1e6 avx2 fma"))
    mfus = [float(m) for m in re.findall(r"^[0-3]\s+[\d.]+\s+-\s+\d+\s+([\d.]+)%", r.stdout, re.M)]
    check("a peak of 1 MFLOP/s: every MFU printed is at most 100%",
          r.returncode == 0 and len(mfus) == 2 and max(mfus) <= 100.0, r.stdout + r.stderr)
    notes = [l for l in r.stdout.splitlines() if l.startswith("zero compare: note:")]
    check("the raised peak is said once, naming the stage and the peak it replaced",
          len(notes) == 1 and "of stage " in notes[0] and "0.00 GFLOP/s" in notes[0] and
          "raised to the fastest step's rate" in r.stdout, notes)
    tj = json.load(open(tiny)) if r.returncode == 0 else {}
    check("--json: every stage's mfu at most 1, against the raised peak",
          tj and all(0 < s["mfu"] <= 1.0 for s in tj["stages"]) and tj["peak_flops"] > 1e6,
          json.dumps(tj)[:800])
finish()
