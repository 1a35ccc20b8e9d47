#!/usr/bin/env python3
"""`zero plan` as a user runs it: the JSON per stage, the ZeRO paper's figures, the inverse
answers (fewest ranks, largest model) checked against the forward plan, --explain, --plot and
the one-line errors. Pure arithmetic, no mpirun: the whole file runs in a few seconds.
Usage: test_plan_command.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, subprocess, sys, tempfile
import xml.etree.ElementTree as ET

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish  # noqa: E402
KEYS = {"stage", "params_bytes", "grads_bytes", "master_bytes", "optimizer_bytes",
        "model_states_bytes", "buffers_bytes", "activations_bytes", "total_bytes", "host_total_bytes"}




def run(*args):
    return subprocess.run([ZERO, "plan", *args], capture_output=True, text=True, timeout=60)


def plans(*args):
    """The JSON array of `zero plan ... --json -`, or None (and a failed check) on an error."""
    r = run(*args, "--json", "-")
    if r.returncode != 0:
        check(f"zero plan {' '.join(args)} succeeds", False, r.stderr)
        return None
    return json.loads(r.stdout)


def close(a, b, rel):
    return abs(a - b) <= rel * abs(b)


# The ZeRO paper (Rajbhandari et al. 2020), Figure 1: Ψ = 7.5B, N = 64, K = 12, 2-byte
# gradients. Exact formula values; the paper rounds them to 120, 31.4, 16.6 and 1.9 GB.
PSI, N = 7.5e9, 64
paper = {0: (16 * PSI, 120.0), 1: ((4 + 12 / N) * PSI, 31.4), 2: ((2 + 14 / N) * PSI, 16.6),
         3: (16 * PSI / N, 1.9)}
ps = plans("--params", "7.5e9", "-n", "64", "--reduce-dtype", "bf16")
if ps is not None:
    check("--stage all gives one object per stage, in order", [p["stage"] for p in ps] == [0, 1, 2, 3],
          [p.get("stage") for p in ps])
    check("every object has the documented keys", all(KEYS <= p.keys() for p in ps),
          [sorted(KEYS - p.keys()) for p in ps])
    check("model states = params + grads + master + optimizer",
          all(p["model_states_bytes"] == p["params_bytes"] + p["grads_bytes"] + p["master_bytes"]
              + p["optimizer_bytes"] for p in ps))
    check("total = model states + buffers + activations",
          all(p["total_bytes"] == p["model_states_bytes"] + p["buffers_bytes"] + p["activations_bytes"]
              for p in ps))
    for p in ps:
        exact, rounded = paper[p["stage"]]
        got = p["model_states_bytes"]
        check(f"stage {p['stage']} model states match the ZeRO paper ({rounded} GB)",
              close(got, exact, 0.01) and round(got / 1e9, 1) == rounded, f"{got / 1e9:.3f} GB")
    check("params are counted unpadded", all(p["params"] == 7_500_000_000 for p in ps), ps[0].get("params"))
    check("no host memory without offload", all(p["host_total_bytes"] == 0 for p in ps))

ps = plans("--params", "13B", "--stage", "2", "-n", "8")
check("--stage 2 gives one object, stage 2", ps is not None and [p["stage"] for p in ps] == [2])

# Parameter counts: the same model in every spelling.
a, b = plans("--params", "1.3e9", "--stage", "0"), plans("--params", "1300M", "--stage", "0")
check("7.5e9 and 1300M spellings agree", a and b and a[0]["params"] == b[0]["params"] == 1_300_000_000)

# The reduce dtype: fp32 by default (the engine's), so stage 0 holds more than 16 bytes/param.
ps = plans("--params", "1e9", "--stage", "0")
check("the default fp32 reduce holds more than bf16's 16 bytes/param",
      ps is not None and ps[0]["model_states_bytes"] + ps[0]["buffers_bytes"] > 16e9)

# SGD with momentum keeps one fp32 buffer where Adam keeps two.
adam, sgd = plans("--params", "1e9", "--stage", "0"), plans("--params", "1e9", "--stage", "0", "--optimizer", "sgd")
check("SGD's optimizer state is half of Adam's",
      adam and sgd and close(sgd[0]["optimizer_bytes"] * 2, adam[0]["optimizer_bytes"], 0.001))

# Offload moves state to the host on a GPU: its own keys, less on the device. CPU ranks hold it
# in host memory already: the same bytes, and a line saying so.
gpu = ("--params", "1e9", "--stage", "2", "-n", "4", "--device", "cuda")
dev, off = plans(*gpu), plans(*gpu, "--offload", "cpu")
check("--offload cpu puts bytes on the host and takes them off the device",
      dev and off and off[0]["host_total_bytes"] > 0 and off[0]["total_bytes"] < dev[0]["total_bytes"])
cpu = ("--params", "1e9", "--stage", "2", "-n", "4", "--device", "cpu")
dev, off = plans(*cpu), plans(*cpu, "--offload", "cpu")
r = run(*cpu, "--offload", "cpu")
check("--offload cpu on CPU ranks plans the same bytes and says why",
      dev and off and off[0]["host_total_bytes"] == 0 and off[0]["total_bytes"] == dev[0]["total_bytes"]
      and "in host memory already" in r.stderr, r.stderr)
ps = plans("--params", "1e9", "-n", "4", "--offload", "cpu")
check("--offload cpu plans stages 1-3 (stage 0 has no optimizer shard to move)",
      ps is not None and [p["stage"] for p in ps] == [1, 2, 3])

# The time model counts offload's PCIe transfers and its optimizer on host memory.
timed = ("--params", "1e9", "--stage", "2", "-n", "8", "--cluster", "h200", "--tokens-per-step", "1M")
t0, t1 = plans(*timed), plans(*timed, "--offload", "cpu")
check("--offload cpu with --cluster adds the PCIe transfers to the step",
      t0 and t1 and t0[0]["time"]["offload_seconds"] == 0 and t1[0]["time"]["offload_seconds"] > 0
      and t1[0]["time"]["step_seconds"] > t0[0]["time"]["step_seconds"])

# GPT presets and shapes: activations computed, recomputation keeps fewer.
r = run("--list-presets")
check("--list-presets lists the GPT-2 and GPT-3 sizes",
      r.returncode == 0 and "gpt2-small" in r.stdout and "gpt3-1.3b" in r.stdout, r.stdout + r.stderr)
g = plans("--preset", "gpt2-small", "--stage", "0", "--micro-batch", "1")
check("gpt2-small has GPT-2's 124M parameters", g is not None and close(g[0]["params"], 124_439_808, 0.01),
      g and g[0]["params"])
check("a GPT has activations", g is not None and g[0]["activations_bytes"] > 0)
rc = plans("--preset", "gpt2-small", "--stage", "0", "--micro-batch", "1", "--recompute")
check("--recompute keeps fewer activations",
      g and rc and rc[0]["activations_bytes"] < g[0]["activations_bytes"])
mb = plans("--preset", "gpt2-small", "--stage", "0", "--micro-batch", "4")
check("--micro-batch 4 holds more activations", g and mb and mb[0]["activations_bytes"] > g[0]["activations_bytes"])
own = plans("--layers", "12", "--hidden", "768", "--heads", "12", "--stage", "0")
check("--layers/--hidden/--heads with the defaults is gpt2-small", g and own and own[0]["params"] == g[0]["params"])

# The inverse answers agree with the forward plan.
budget = "80GiB"
ps = plans("--params", "7.5e9", "-n", "64", "--budget", budget)
if ps is not None:
    check("a budget adds fits, fewest_ranks and largest_model_params",
          all({"budget_bytes", "fits", "fewest_ranks", "largest_model_params"} <= p.keys() for p in ps))
    check("stage 0 never fits 120 GB into 80 GiB, at any rank count",
          ps[0]["fits"] is False and ps[0]["fewest_ranks"] is None, ps[0].get("fewest_ranks"))
    for p in ps[1:]:
        s, k = p["stage"], p["fewest_ranks"]
        if k is None:
            check(f"stage {s} fits at some rank count", False)
            continue
        at = plans("--params", "7.5e9", "-n", str(k), "--stage", str(s), "--budget", budget)
        below = (plans("--params", "7.5e9", "-n", str(k - 1), "--stage", str(s), "--budget", budget)
                 if k > 1 else [{"fits": False}])
        check(f"stage {s}: fits at the fewest ranks ({k}) and not at one fewer",
              at and below and at[0]["fits"] is True and below[0]["fits"] is False)
        big = p["largest_model_params"]
        fit = plans("--params", str(big), "-n", "64", "--stage", str(s), "--budget", budget)
        over = plans("--params", str(int(big * 1.01)), "-n", "64", "--stage", str(s), "--budget", budget)
        check(f"stage {s}: the largest model ({big / 1e9:.1f}B) fits at 64 ranks and 1% more does not",
              fit and over and fit[0]["fits"] is True and over[0]["fits"] is False)
    check("the largest model grows with the stage",
          [p["largest_model_params"] for p in ps] == sorted(p["largest_model_params"] for p in ps))

# The table for people.
r = run("--params", "7.5e9", "-n", "64", "--budget", "80GB")
check("the table names the stages and the budget's answers",
      r.returncode == 0 and all(w in r.stdout for w in ("stage 3", "fits", "fewest ranks", "largest model")),
      r.stdout + r.stderr)

# --explain shows every term of the formula with its value.
ps = plans("--params", "7.5e9", "-n", "64", "--stage", "3")
r = run("--params", "7.5e9", "-n", "64", "--stage", "3", "--explain")
check("--explain shows each term's formula", r.returncode == 0 and ps and ps[0]["terms"] and
      all(t["formula"] in r.stdout for t in ps[0]["terms"]), r.stdout[-1500:])

# --json FILE and --plot FILE.
tmp = tempfile.mkdtemp()
path, svg = os.path.join(tmp, "plan.json"), os.path.join(tmp, "plan.svg")
r = run("--preset", "gpt3-1.3b", "-n", "16", "--budget", "80GiB", "--json", path, "--plot", svg)
check("--json FILE writes the file and still prints the table",
      r.returncode == 0 and os.path.exists(path) and len(json.load(open(path))) == 4 and "stage 3" in r.stdout,
      r.stderr)
if r.returncode == 0:
    ns = "{http://www.w3.org/2000/svg}"
    root = ET.parse(svg).getroot()
    lines = root.findall(f".//{ns}polyline")
    check("--plot writes an SVG with one polyline per stage", root.tag == f"{ns}svg" and len(lines) == 4)
    check("each line has a point per rank count 1..64", all(len(l.get("points").split()) == 7 for l in lines),
          [len(l.get("points").split()) for l in lines])
    budget_line = [l for l in root.iter(f"{ns}line") if l.get("id") == "budget"]
    check("--plot draws the budget as a dashed line", len(budget_line) == 1 and budget_line[0].get("stroke-dasharray"))
    texts = " ".join(t.text or "" for t in root.iter(f"{ns}text"))
    check("--plot labels its axes in human units", "GiB" in texts and "ranks" in texts, texts[:300])

# --config: the settings come from a DeepSpeed file, flags override them.
cfg = os.path.join(tmp, "ds.json")
open(cfg, "w").write('{"bf16": {"enabled": true}, "communication_data_type": "bf16", '
                     '"zero_optimization": {"stage": 2}}')
a = plans("--params", "7.5e9", "-n", "64", "--config", cfg, "--stage", "1")
b = plans("--params", "7.5e9", "-n", "64", "--reduce-dtype", "bf16", "--stage", "1")
check("--config gives the same plan as the same flags", a and b and a[0]["model_states_bytes"] == b[0]["model_states_bytes"])
c = plans("--params", "7.5e9", "-n", "64", "--config", cfg, "--stage", "1", "--precision", "fp32")
check("a flag overrides the config", c and c[0]["precision"] == "fp32" and c[0]["params_bytes"] == 2 * b[0]["params_bytes"])

# Bad input: one line naming the flag and the value, a non-zero exit.
bad = [
    (["--params=-5"], "--params"),
    (["--params", "13X"], "--params"),
    (["--preset", "gpt5"], "gpt3-1.3b"),
    (["--params", "1e9", "--budget", "80"], "--budget"),
    (["--params", "1e9", "--stage", "5"], "--stage"),
    (["--params", "1e9", "--ranks", "0"], "--ranks"),
    (["--params", "1e9", "-n", "8", "--shard-size", "3"], "--shard-size"),
    (["--params", "1e9", "--precision", "fp8"], "--precision"),
    (["--params", "1e9", "--optimizer", "adagrad"], "--optimizer"),
    (["--params", "1e9", "--offload", "nvme"], "--offload"),
    (["--params", "1e9", "--reduce-bucket-size", "lots"], "--reduce-bucket-size"),
    (["--params", "1e9", "--preset", "gpt2-small"], "--params"),
    (["--layers", "12", "--hidden", "768"], "--heads"),
    ([], "--params"),
]

# The time model (docs/time.md) and the classic case study (docs/compare.md): a 13B model on 8
# A100s over PCIe, then 64 GPUs on InfiniBand.
GB = 1e9
case = ["--params", "13B", "--tokens-per-step", "1M"]
ps = plans(*case, "-n", "8", "--cluster", "a100-pcie", "--precision", "fp32", "--stage", "0")
if ps is not None:
    t = ps[0]["time"]
    rs, ag = t["ops"]["reduce_scatter"], t["ops"]["all_gather"]
    check("fp32 gradients of 13B parameters are a 52 GB all-reduce (reduce-scatter + all-gather)",
          close(rs["payload_bytes"], 52 * GB, 0.001) and close(ag["payload_bytes"], 52 * GB, 0.001),
          (rs["payload_bytes"], ag["payload_bytes"]))
    check("it takes 2 x 7/8 x 52 GB / 25 GB/s = 3.64 s on 8 PCIe A100s",
          close(rs["seconds"] + ag["seconds"], 2 * 7 / 8 * 52 / 25, 0.01), rs["seconds"] + ag["seconds"])
    check("pure fp32 Adam holds 16 bytes per parameter: 208 GB does not fit 80 GiB",
          close(ps[0]["model_states_bytes"], 16 * 13e9, 0.001) and t["fits"] is False)
    check("the time JSON has what the table shows",
          {"comm_seconds", "comm_exposed_seconds", "compute_seconds", "optimizer_seconds", "step_seconds",
           "tokens_per_second", "mfu", "memory_bytes", "fits", "fastest_that_fits"} <= t.keys(), sorted(t))
    check("step = compute + exposed comm + optimizer",
          close(t["step_seconds"], t["compute_seconds"] + t["comm_exposed_seconds"] + t["optimizer_seconds"], 1e-9))
    check("the compute is 6 x 13e9 x 1M FLOP over 8 GPUs at half of 312 TFLOP/s",
          close(t["compute_seconds"], 6 * 13e9 * 1e6 / 8 / (0.5 * 312e12), 1e-9), t["compute_seconds"])
mixed = plans(*case, "-n", "8", "--cluster", "a100-pcie", "--precision", "bf16", "--reduce-dtype", "bf16")
if mixed is not None:
    check("mixed-precision Adam is 16 bytes per parameter too (2 + 2 + 12), not half of fp32's",
          close(mixed[0]["model_states_bytes"], 16 * 13e9, 0.001))
    check("bf16 gradients halve the all-reduce: 26 GB each way",
          close(mixed[0]["time"]["ops"]["reduce_scatter"]["payload_bytes"], 26 * GB, 0.001)
          and close(mixed[0]["time"]["ops"]["all_gather"]["payload_bytes"], 26 * GB, 0.002))
    check("on 8 x 80 GiB: stage 0 does not fit, stages 1-3 do",
          [p["time"]["fits"] for p in mixed] == [False, True, True, True], [p["time"]["fits"] for p in mixed])
    check("fits = the planner's peak within the profile's 80 GiB",
          all(p["time"]["memory_budget_bytes"] == 80 * 2**30 and p["time"]["memory_bytes"] == p["peak_bytes"]
              and p["time"]["fits"] == (p["peak_bytes"] <= 80 * 2**30) for p in mixed))
    small = plans(*case, "-n", "8", "--cluster", "a100-pcie", "--reduce-dtype", "bf16", "--budget", "40GiB")
    check("--budget replaces the profile's memory", small and
          [p["time"]["fits"] for p in small] == [p["peak_bytes"] <= 40 * 2**30 for p in small] == [False, False, False, True],
          small and [(p["peak_bytes"] / 2**30, p["time"]["fits"]) for p in small])
    moved = [sum(op["payload_bytes"] for op in p["collectives_per_step"]["shard_group"].values()) for p in mixed]
    check("stage 3 moves 1.5x the bytes of stage 2, stage 2 those of stage 0",
          close(moved[3] / moved[2], 1.5, 0.001) and close(moved[2], moved[0], 0.001), moved)
    winners = [p["stage"] for p in mixed if p["time"]["fastest_that_fits"]]
    fitting = [p for p in mixed if p["time"]["fits"]]
    check("exactly one stage wins: the fastest that fits",
          len(winners) == 1 and min(fitting, key=lambda p: p["time"]["step_seconds"])["stage"] == winners[0], winners)
ib = plans(*case, "-n", "64", "--cluster", "a100-sxm", "--precision", "fp32", "--stage", "0")
pcie64 = plans(*case, "-n", "64", "--cluster", "a100-pcie", "--precision", "fp32", "--stage", "0")
if ib and pcie64:
    def grad_seconds(p):
        return p[0]["time"]["ops"]["reduce_scatter"]["seconds"] + p[0]["time"]["ops"]["all_gather"]["seconds"]
    # 66 calls of 63 ring steps, 7 across nodes: 8.4 + 56 x 3.4 + 7 x 9.6 = 266 us each.
    check("64 GPUs over 8 x 200 Gb/s per node: 2 x 63/64 x 52 GB / 160 GB/s = 0.64 s + latency",
          close(grad_seconds(ib), 2 * 63 / 64 * 52 / 160 + 66 * 266e-6, 0.001), grad_seconds(ib))
    check("64 GPUs over one 200 Gb/s port per node: 2 x 63/64 x 52 GB / 20 GB/s = 5.1 s",
          close(grad_seconds(pcie64), 2 * 63 / 64 * 52 / 20, 0.01), grad_seconds(pcie64))
r = run(*case, "-n", "64", "--cluster", "a100-sxm")
check("the table shows comm, compute, step, tokens/s, MFU, memory, fits and the winner",
      r.returncode == 0 and all(w in r.stdout for w in ("comm, exposed", "compute", "tokens/s", "MFU",
                                                         "memory per GPU", "fits 80.00 GiB", "fastest that fits: stage")),
      r.stdout[-2500:] + r.stderr)
g = plans("--preset", "gpt3-1.3b", "-n", "8", "--micro-batch", "2", "--accum", "2", "--cluster", "h100-sxm")
check("a GPT's tokens per step are ranks x micro-batch x accumulation x sequence",
      g is not None and g[0]["time"]["tokens_per_step"] == 8 * 2 * 2 * 2048, g and g[0]["time"]["tokens_per_step"])
ovl = plans(*case, "-n", "8", "--cluster", "h200", "--stage", "2", "--overlap")
plain = plans(*case, "-n", "8", "--cluster", "h200", "--stage", "2")
check("--overlap hides gradient reduction: less exposed comm, the same comm",
      ovl and plain and ovl[0]["time"]["comm_exposed_seconds"] < plain[0]["time"]["comm_exposed_seconds"]
      and close(ovl[0]["time"]["comm_seconds"], plain[0]["time"]["comm_seconds"], 1e-9))
r = run("--list-clusters")
check("--list-clusters lists the four profiles with their sources",
      r.returncode == 0 and all(n in r.stdout for n in ("a100-pcie", "a100-sxm", "h100-sxm", "h200"))
      and r.stdout.count("sources:") == 4, r.stdout + r.stderr)

# A profile file: a calibrated one overrides a base; a bad one is refused naming the key.
good = os.path.join(tmp, "calibrated.json")
open(good, "w").write('{"base": "h200", "intra_bandwidth_GBs": 100, "compute_efficiency": 0.4}')
cal = plans(*case, "-n", "8", "--cluster-file", good, "--stage", "2")
base = plans(*case, "-n", "8", "--cluster", "h200", "--stage", "2")
check("a calibrated profile's bandwidth and efficiency change the time",
      cal and base and cal[0]["time"]["comm_seconds"] > 3 * base[0]["time"]["comm_seconds"]
      and cal[0]["time"]["compute_seconds"] > base[0]["time"]["compute_seconds"])
bad_files = [
    ('{"base": "h200", "intra_bandwidth_GBs": -3}', "intra_bandwidth_GBs"),
    ('{"base": "h200", "peak_tflop": 900}', "peak_tflops"),
    ('{"base": "h200", "hbm_efficiency": 2}', "hbm_efficiency"),
    ('{"base": "h200", "gpus_per_node": "eight"}', "gpus_per_node"),
    ('{"base": "b200"}', "base"),
    ('{"peak_tflops": 989}', "memory_GiB"),
    ('{"base": "h200",', "not valid JSON"),
]
for text, word in bad_files:
    f = os.path.join(tmp, "bad.json")
    open(f, "w").write(text)
    r = run(*case, "--cluster-file", f)
    msg = r.stderr.strip()
    check(f"a cluster file {text} is refused naming {word}",
          r.returncode == 1 and word in msg and "bad.json" in msg and len(msg.splitlines()) == 1, (r.returncode, msg))
bad += [
    (["--params", "1e9", "--cluster", "tpu"], "--cluster"),
    (["--params", "1e9", "--cluster", "h200"], "--tokens-per-step"),
    (["--preset", "gpt2-small", "--cluster", "h200", "--tokens-per-step", "1M"], "--tokens-per-step"),
    (["--params", "1e9", "--tokens-per-step", "1M"], "--cluster"),
    (["--params", "1e9", "--cluster", "h200", "--tokens-per-step", "1M", "--algorithm", "star"], "--algorithm"),
    (["--params", "1e9", "--cluster", "h200", "--cluster-file", "x.json"], "--cluster-file"),
    (["--params", "1e9", "--cluster-file", "/nonexistent.json", "--tokens-per-step", "1M"], "/nonexistent.json"),
    (["--params", "1e9", "-n", "16", "--ranks-per-node", "4", "--cluster", "h200", "--tokens-per-step", "1M"],
     "--ranks-per-node"),
]

bad += [
    (["--params", "1e9", "--micro-batch", "4"], "--micro-batch"),
    (["--params", "1e9", "--global-batch", "64"], "--global-batch"),
    (["--params", "1e9", "--model", "gpt"], "--model"),
    (["--model", "tpu"], "--model"),
    (["--model", "mlp", "--preset", "gpt-nano"], "--preset"),
    (["--preset", "gpt-nano", "--width", "64"], "--width"),
    (["--preset", "gpt-nano", "--device", "tpu"], "--device"),
    (["--preset", "gpt-nano", "--compute", "fp8"], "--compute"),
    (["--preset", "gpt-nano", "--precision", "fp32", "--compute", "bf16"], "--compute"),
]

# A plan states what it assumed: a bare count's units and activations (none unless given), the
# device, and the batch; the "fits" verdicts say it.
ps = plans("--params", "7B", "-n", "64", "--stage", "3", "--budget", "80GiB", "--device", "cuda")
if ps is not None:
    p = ps[0]
    check("--params: the JSON states its units, activations and device",
          (p.get("units"), p.get("activations_from"), p.get("device"), p.get("activations_bytes")) ==
          (32, "none assumed", "cuda", 0), p)
    check("--params: the fits verdict says what it assumed",
          "32 equal units" in p.get("fits_assuming", "") and "activations 0 B" in p["fits_assuming"],
          p.get("fits_assuming"))
r = run("--params", "7B", "-n", "64", "--stage", "3", "--budget", "80GiB")
check("--params: the text says its units and its activation assumption, and the fits line both",
      r.returncode == 0 and "in 32 equal units (--units)" in r.stdout and
      "activations: 0 B per rank, none assumed" in r.stdout and
      "fits: assuming 32 equal units (--units), activations 0 B" in r.stdout, r.stdout + r.stderr)
ps = plans("--params", "7B", "-n", "64", "--stage", "3", "--units", "48", "--activations", "2GiB",
           "--budget", "80GiB")
check("--units and --activations are what the plan assumes, and says",
      ps is not None and (ps[0]["units"], ps[0]["activations_bytes"], ps[0]["activations_from"]) ==
      (48, 2 << 30, "given (--activations)") and "48 equal units" in ps[0]["fits_assuming"],
      ps and ps[0])
g = plans("--preset", "gpt-nano", "-n", "4", "--stage", "0")
check("a GPT's plan says its activations are zero's trainer's, and its batch",
      g is not None and g[0]["activations_from"] == "zero's GPT trainer (bf16 compute)" and
      (g[0]["global_batch"], g[0]["micro_batch"], g[0]["accumulation"]) == (16, 4, 1), g and g[0])
g = plans("--preset", "gpt-nano", "-n", "4", "--stage", "0", "--recompute")
check("with --recompute the plan's activations are still zero's trainer's (recomputing)",
      g is not None and g[0]["activations_from"] == "zero's GPT trainer (bf16 compute, recompute)",
      g and g[0])
g = plans("--preset", "gpt-nano", "-n", "4", "--stage", "0", "--activations", "megatron")
check("--activations megatron plans a Megatron-style trainer: Korthikanti et al.'s formula",
      g is not None and "Megatron-style" in g[0]["activations_from"] and
      "Korthikanti" in g[0]["activations_from"], g and g[0])
m = plans("--model", "mlp", "-n", "2", "--stage", "2")
check("--model mlp plans zero train's MLP (4 layers of width 512, 64 samples)",
      m is not None and m[0]["units"] == 4 and m[0]["params"] == 4 * (512 * 512 + 512) and
      m[0]["global_batch"] == 64, m and m[0])
r = run("--model", "gpt", "--preset", "gpt-nano", "-n", "4", "--stage", "1", "--optimizer", "muon",
        "--cluster", "h100-sxm")
check("--optimizer muon prints Newton-Schulz's FLOPs, its busiest / mean (balanced: 1.071 for "
      "gpt-nano at 4 ranks) and its time",
      r.returncode == 0 and "Newton-Schulz FLOPs" in r.stdout and
      "busiest / mean               1.071" in r.stdout and "  Newton-Schulz " in r.stdout, r.stdout)
r = run("--model", "gpt", "--preset", "gpt-nano", "-n", "4", "--stage", "1")
check("AdamW's plan has no Newton-Schulz rows", r.returncode == 0 and "Newton-Schulz" not in r.stdout,
      r.stdout)

for args, word in bad:
    r = run(*args)
    msg = r.stderr.strip()
    check(f"zero plan {' '.join(args) or '(no model)'} fails naming {word}",
          r.returncode == 1 and word in msg and len(msg.splitlines()) == 1 and msg.startswith("zero plan: error:"),
          (r.returncode, msg))
r = run("--params", "1e9", "--ranks", "many")
check("a non-number for an integer flag is a usage error (exit 2)", r.returncode == 2 and "ranks" in r.stderr, r.stderr)

finish()
