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

# Offload moves state to the host: its own keys, less on the device.
dev, off = plans("--params", "1e9", "--stage", "2", "-n", "4"), plans("--params", "1e9", "--stage", "2", "-n", "4", "--offload", "cpu")
check("--offload cpu puts bytes on the host and takes them off the device",
      dev and off and off[0]["host_total_bytes"] > 0 and off[0]["total_bytes"] < dev[0]["total_bytes"])
ps = plans("--params", "1e9", "-n", "4", "--offload", "cpu")
check("--offload cpu plans stages 1-3 (stage 0 has no optimizer shard to move)",
      ps is not None and [p["stage"] for p in ps] == [1, 2, 3])

# GPT presets and shapes: activations computed, recomputation keeps fewer.
r = run("--list-presets")
check("--list-presets lists the GPT-2 and GPT-3 sizes",
      r.returncode == 0 and "gpt2-small" in r.stdout and "gpt3-1.3b" in r.stdout, r.stdout + r.stderr)
g = plans("--preset", "gpt2-small", "--stage", "0")
check("gpt2-small has GPT-2's 124M parameters", g is not None and close(g[0]["params"], 124_439_808, 0.01),
      g and g[0]["params"])
check("a GPT has activations", g is not None and g[0]["activations_bytes"] > 0)
rc = plans("--preset", "gpt2-small", "--stage", "0", "--recompute")
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
    (["--params", "1e9", "--optimizer", "lion"], "--optimizer"),
    (["--params", "1e9", "--offload", "nvme"], "--offload"),
    (["--params", "1e9", "--reduce-bucket-size", "lots"], "--reduce-bucket-size"),
    (["--params", "1e9", "--preset", "gpt2-small"], "--params"),
    (["--layers", "12", "--hidden", "768"], "--heads"),
    ([], "--params"),
]
for args, word in bad:
    r = run(*args)
    msg = r.stderr.strip()
    check(f"zero plan {' '.join(args) or '(no model)'} fails naming {word}",
          r.returncode == 1 and word in msg and len(msg.splitlines()) == 1 and msg.startswith("zero plan: error:"),
          (r.returncode, msg))
r = run("--params", "1e9", "--ranks", "many")
check("a non-number for an integer flag is a usage error (exit 2)", r.returncode == 2 and "ranks" in r.stderr, r.stderr)

finish()
