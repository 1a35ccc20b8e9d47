#!/usr/bin/env python3
"""`zero plan` on its own is the plan of the run: for the same flags, `zero plan --json -`'s bytes
per category equal what `zero train --json` measures (rank 0's ledger), to the byte, over a grid
of the GPTs (gpt-nano, gpt-micro) at 1-4 ranks, every stage, micro-batch 1 and 4 and the default
batch, on the host (--device cpu) and on the emulated device (--device emulated: the device code
path on host memory, which trains bitwise what the host trains), and the MLP once. Then the two commands' shared flags: the
same defaults (the batch a GPT run takes), a --device plan refuses nothing train takes, and
"auto" keys and out-of-memory sentences that speak of the model trained.
Usage: test_plan_equals_train.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, runner, token_file  # noqa: E402

TEXT = ("The plan is the run: what each rank holds is counted before anything starts, and the "
        "ledger of the run measures the same bytes at every stage. ") * 40
# plan's JSON key for each of train's measured categories.
CATEGORIES = {"params": "params_bytes", "grads": "grads_bytes", "master": "master_bytes",
              "optimizer": "optimizer_bytes", "buffers": "buffers_bytes",
              "activations": "activations_bytes", "peak total": "peak_bytes"}
# (model flags, ranks, stage, other flags): every stage at micro-batch 1 and 4 at 4 ranks (nano);
# every stage at 2 ranks (micro); 1 and 3 ranks, the default batch and the default device
# (no --device: both commands decide it alike) a few times; the MLP once.
NANO = ["--model", "gpt", "--preset", "gpt-nano"]
MICRO = ["--model", "gpt", "--preset", "gpt-micro"]
CPU = ["--device", "cpu"]
GRID = ([(NANO, 4, s, [*CPU, "--micro-batch", m]) for s in range(4) for m in ("1", "4")] +
        [(MICRO, 2, s, [*CPU, "--micro-batch", "41"[s % 2]]) for s in range(4)] +
        [(NANO, 1, 0, CPU), (NANO, 3, 3, [*CPU, "--micro-batch", "1"]), (MICRO, 3, 1, CPU),
         (MICRO, 1, 2, [*CPU, "--micro-batch", "4"]),
         (NANO, 2, 2, [*CPU, "--micro-batch", "2", "--accum", "2"]),
         (NANO, 4, 1, ["--micro-batch", "4"]), (["--model", "mlp"], 2, 2, CPU)])
# The device path, on the emulated device (host memory standing for a GPU's, MPI posing as its
# communicator): every stage at 4 ranks (nano) and 2 ranks (micro), micro-batch 1 and 4 in turn;
# 1 and 3 ranks once each.
EMULATED = ["--device", "emulated"]
GRID += ([(NANO, 4, s, [*EMULATED, "--micro-batch", "14"[s % 2]]) for s in range(4)] +
         [(MICRO, 2, s, [*EMULATED, "--micro-batch", "41"[s % 2]]) for s in range(4)] +
         [(NANO, 1, 2, [*EMULATED, "--micro-batch", "4"]),
          (MICRO, 3, 3, [*EMULATED, "--micro-batch", "1"])])
# With recomputation (each block keeps only its input): every stage at 4 ranks (nano) and at 1-3
# ranks (micro), micro-batch 1 and 4.
RECOMPUTE = [*CPU, "--recompute"]
GRID += ([(NANO, 4, s, [*RECOMPUTE, "--micro-batch", "14"[s % 2]]) for s in range(4)] +
         [(MICRO, 1 + s % 3, s, [*RECOMPUTE, "--micro-batch", "41"[s % 2]]) for s in range(4)] +
         [(NANO, 2, 3, [*EMULATED, "--recompute", "--micro-batch", "4"])])


zero = runner(ZERO, ZERO_FMA_PEAK="1e10 fixed")


with tempfile.TemporaryDirectory() as tmp:
    data = ["--data", token_file(ZERO, tmp, TEXT)]

    checksums = {}  # (the flags but --device, device): the weights a run ended with
    for model, n, stage, batch in GRID:
        flags = [*model, "-n", str(n), "--stage", str(stage), *batch]
        name = " ".join(flags)
        js = os.path.join(tmp, "run.json")
        gpt = "gpt" in model
        r = zero("train", *flags, *(data if gpt else []), "--steps", "2", "--json", js)
        check(f"zero train {name} runs", r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:])
        if r.returncode != 0:
            continue
        with open(js) as f:
            report = json.load(f)
        measured = {k: v["measured"] for k, v in report["memory_planned_vs_measured"].items()}
        device = batch[batch.index("--device") + 1] if "--device" in batch else "auto"
        same_run = " ".join(f for f in flags if f not in ("--device", device))
        checksums[(same_run, report["device"])] = report["params_checksum"]
        p = zero("plan", *flags, "--json", "-")
        check(f"zero plan {name} plans", p.returncode == 0, p.stderr)
        if p.returncode != 0:
            continue
        plan = json.loads(p.stdout)[0]
        planned = {k: plan[key] for k, key in CATEGORIES.items()}
        check(f"{name}: plan == measured per category, to the byte", planned == measured,
              {k: (planned[k], measured.get(k)) for k in planned if planned[k] != measured.get(k)})

    # The emulated device runs the device code path and computes what the host computes.
    pairs = [(k, checksums.get((k, "cpu"))) for (k, d) in checksums if d == "emulated"]
    check("every emulated-device run was one (its JSON says \"device\": \"emulated\")",
          len(pairs) == sum("emulated" in b for *_, b in GRID), sorted(checksums))
    pairs = [(k, c) for k, c in pairs if c is not None]  # the runs the host grid has too
    check("the emulated device trains bitwise what the host trains (the same checksums)",
          len(pairs) == 8 and all(checksums[(k, "emulated")] == c for k, c in pairs),
          [(k, checksums[(k, "emulated")], c) for k, c in pairs])
    r = zero("train", "--help")
    words = " ".join(r.stdout.split())
    check("zero train --help says what --device emulated is: a test and CI device, never faster",
          "emulated: a test and CI device" in words and "never faster" in words, r.stdout)
    p = zero("plan", *NANO, "-n", "4", "--stage", "2", "--device", "emulated", "--micro-batch",
             "4")
    check("zero plan --device emulated says what it plans: MPI's staging on a device",
          p.returncode == 0 and "device: emulated (host memory standing for a device, with MPI's "
          "staging)" in p.stdout and "MPI reduce-scatter staging" in
          zero("plan", *NANO, "-n", "4", "--stage", "2", "--device", "emulated", "--explain").stdout,
          p.stdout + p.stderr)

    # The same defaults: a GPT run's batch is 16 sequences (rounded up to the ranks), the plan's too.
    p = zero("plan", *NANO, "-n", "4", "--stage", "0", "--json", "-")
    ok = p.returncode == 0 and json.loads(p.stdout)[0]["micro_batch"] == 4
    check("zero plan's default batch for a GPT is zero train's (16 over 4 ranks: micro-batch 4)", ok,
          p.stdout[-300:] + p.stderr)
    p = zero("plan", "--preset", "gpt-nano", "-n", "3", "--stage", "0", "--json", "-")
    ok = p.returncode == 0 and (json.loads(p.stdout)[0]["global_batch"],
                                json.loads(p.stdout)[0]["micro_batch"]) == (18, 6)
    check("the default global batch rounds up to a multiple of the ranks (18 = 6 x 3)", ok,
          p.stdout[-300:] + p.stderr)
    r = zero("train", "--help")
    words = " ".join(r.stdout.split())
    check("zero train --help says the GPT's default global batch",
          r.returncode == 0 and "16 sequences for the GPT" in words and "64 for the MLP" in words,
          r.stdout)
    p = zero("plan", "--preset", "gpt-nano", "--device", "gpu")
    check("zero plan --device names its choices", p.returncode != 0 and "--device" in p.stderr
          and "cpu, cuda, auto or emulated" in p.stderr, p.stderr)
    devices = {}
    for device in ("cpu", "cuda"):
        p = zero("plan", *NANO, "-n", "4", "--stage", "0", "--device", device, "--json", "-")
        devices[device] = json.loads(p.stdout)[0] if p.returncode == 0 else {}
    check("zero plan --device cpu and cuda differ only in the staging the communicator keeps",
          devices["cpu"].get("device") == "cpu" and devices["cuda"].get("device") == "cuda" and
          devices["cpu"]["buffers_bytes"] != devices["cuda"]["buffers_bytes"] and
          devices["cpu"]["model_states_bytes"] == devices["cuda"]["model_states_bytes"],
          (devices["cpu"].get("buffers_bytes"), devices["cuda"].get("buffers_bytes")))

    # "auto" bucket sizes from the model trained: gpt-nano's hidden 128, not the MLP's width 512.
    cfg = os.path.join(tmp, "auto.json")
    with open(cfg, "w") as f:
        json.dump({"train_batch_size": 8, "zero_optimization": {
            "stage": 2, "reduce_bucket_size": "auto"}}, f)
    r = zero("train", *NANO, *data, "-n", "1", "--steps", "1", "--config", cfg, "--device", "cpu")
    check("zero train --model gpt fills an \"auto\" bucket from the GPT's hidden size (128² = 16384)",
          r.returncode == 0 and "reduce_bucket_size = 16384 (was \"auto\")" in r.stdout,
          r.stdout[-800:] + r.stderr[-800:])
    r = zero("train", "-n", "1", "--steps", "1", "--config", cfg, "--device", "cpu")
    check("zero train's MLP fills it from its width (512² = 262144)",
          r.returncode == 0 and "reduce_bucket_size = 262144 (was \"auto\")" in r.stdout,
          r.stdout[-800:] + r.stderr[-800:])
    p = zero("plan", *NANO, "-n", "1", "--config", cfg)
    check("zero plan fills it as zero train does",
          p.returncode == 0 and "reduce_bucket_size = 16384 (was \"auto\")" in p.stderr, p.stderr)

    # Out of memory in the words of the model trained: sequences of a GPT, no --width.
    r = zero("train", "--model", "gpt", "--preset", "gpt2-small", *data, "-n", "1", "--device",
             "cpu", "--micro-batch", "100000", "--steps", "1")
    err = r.stderr
    check("a GPT too big for the host is refused in the GPT's words (sequences, no --width)",
          r.returncode != 0 and "sequences of 1024 tokens" in err and "--width" not in err
          and "width 512" not in err, err)
    r = zero("train", "-n", "1", "--device", "cpu", "--width", "60000", "--layers", "40",
             "--global-batch", "64", "--steps", "1")
    check("the MLP's sentence still names its width", r.returncode != 0 and "width 60000" in
          r.stderr and "--width" in r.stderr, r.stderr)

finish()
