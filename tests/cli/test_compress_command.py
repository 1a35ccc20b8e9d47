#!/usr/bin/env python3
"""Compressed runs as a user starts them (docs/compression.md): two runs of each encoding give the
same bits, and the four stages give the same bits (their compression partitions coincide); a TopK
run with error feedback resumes bitwise from a checkpoint (and not without its residual); the
plan equals the run to the byte (memory per category, traffic per group); DeepSpeed's
zero_quantized_gradients and zero_quantized_weights change the plan and the weights; bad flags are
one sentence. Usage: test_compress_command.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, checksum, finish, one_error, runner, token_file  # noqa: E402

TEXT = ("Compression trades bytes on the wire for error in the sum; error feedback carries what "
        "was not sent into the next step. ") * 40
CATEGORIES = {"params": "params_bytes", "grads": "grads_bytes", "master": "master_bytes",
              "optimizer": "optimizer_bytes", "buffers": "buffers_bytes",
              "activations": "activations_bytes", "peak total": "peak_bytes"}
GROUPS = {"shard": "shard_group", "replicate": "across_shard_groups", "secondary": "hpz_group",
          "world": "all_ranks"}


zero = runner(ZERO, ZERO_FMA_PEAK="1e10 fixed")


with tempfile.TemporaryDirectory() as tmp:
    nano = ["--model", "gpt", "--preset", "gpt-nano", "--data", token_file(ZERO, tmp, TEXT),
            "--device", "cpu"]
    mlp = ["train", "-n", "2", "--global-batch", "48", "--width", "64", "--layers", "3"]

    # Deterministic, and the same at every stage.
    for enc in (["--compress-grads", "int8"], ["--compress-grads", "int4", "--quant-block", "64"],
                ["--compress-grads", "topk", "--topk-ratio", "0.05"],
                ["--compress-grads", "topk", "--error-feedback", "off"]):
        sums = [checksum(zero(*mlp, "--stage", s, *enc, "--steps", "6").stdout) for s in "0123"]
        again = checksum(zero(*mlp, "--stage", "2", *enc, "--steps", "6").stdout)
        dense = checksum(zero(*mlp, "--stage", "2", "--steps", "6").stdout)
        name = " ".join(enc)
        check(f"{name}: two runs, the same bits", sums[2] is not None and again == sums[2], sums)
        check(f"{name}: stages 0-3 the same bits", len(set(sums)) == 1, sums)
        check(f"{name}: not the dense run's bits", dense is not None and dense != sums[2])
    gpt = [checksum(zero("train", "-n", "2", *nano, "--stage", s, "--compress-grads", "int4",
                         "--steps", "3").stdout) for s in "123"]
    check("the GPT with int4 gradients: stages 1-3 the same bits", gpt[0] and len(set(gpt)) == 1, gpt)
    q = [checksum(zero("train", "-n", "2", *nano, "--stage", "3", "--compress-weights", "int8",
                       "--steps", "3").stdout) for _ in range(2)]
    check("qwZ: two runs, the same bits", q[0] is not None and q[0] == q[1], q)

    # Resume: bitwise with the residual, not without it.
    base = [*mlp, "--stage", "2", "--compress-grads", "topk", "--topk-ratio", "0.1"]
    straight = zero(*base, "--steps", "20")
    ck = os.path.join(tmp, "ck")
    first = zero(*base, "--steps", "10", "--save", ck)
    second = zero(*base, "--steps", "20", "--resume", ck)
    check("TopK with error feedback resumes bitwise (checksum after 10 + 10 steps)",
          checksum(straight.stdout) is not None and
          checksum(straight.stdout) == checksum(second.stdout),
          straight.stdout[-400:] + first.stderr + second.stdout[-400:] + second.stderr)
    folder = os.path.join(ck, "step_00000010")
    check("every rank's residual is in the checkpoint",
          all(os.path.exists(os.path.join(folder, f"residual_rank_{r}.bin")) for r in (0, 1)),
          os.listdir(folder))
    for r in (0, 1):
        os.remove(os.path.join(folder, f"residual_rank_{r}.bin"))
    lost = zero(*base, "--steps", "20", "--resume", ck)
    check("without its residual the resumed run differs, and says the residual starts at zero",
          lost.returncode == 0 and checksum(lost.stdout) != checksum(straight.stdout) and
          "residual starts at zero" in lost.stdout + lost.stderr, lost.stdout[-600:] + lost.stderr)
    with open(os.path.join(folder, "residual_rank_0.bin"), "wb") as f:
        f.write(b"\0" * 12)
    check(*one_error("a residual of the wrong size is refused",
                     zero(*base, "--steps", "20", "--resume", ck), "TopK residual", "rank count"))

    # The plan is the run, to the byte, memory and traffic.
    grid = [["-n", "2", "--stage", "2", "--compress-grads", "topk"],
            ["-n", "2", "--stage", "0", "--compress-grads", "topk", "--error-feedback", "off"],
            ["-n", "2", "--stage", "1", "--compress-grads", "int8", "--quant-block", "100"],
            ["-n", "3", "--stage", "3", "--compress-grads", "topk", "--overlap"],
            ["-n", "4", "--stage", "3", "--compress-weights", "int8", "--hpz", "2",
             "--compress-grads", "int4"],
            ["-n", "4", "--stage", "2", "--shard-size", "2", "--compress-grads", "topk"],
            ["-n", "2", "--stage", "1", "--compress-grads", "topk", "--accum", "2",
             "--micro-batch", "4"]]
    for flags in grid:
        name = " ".join(flags)
        js = os.path.join(tmp, "run.json")
        r = zero("train", *nano, *flags, "--steps", "2", "--json", js)
        p = zero("plan", *[a for a in nano if not a.endswith(".bin") and a != "--data"], *flags,
                 "--json", "-")
        ok = r.returncode == 0 and p.returncode == 0
        check(f"{name}: train and plan run", ok, r.stderr[-800:] + p.stderr[-800:])
        if not ok:
            continue
        with open(js) as f:
            t = json.load(f)
        plan = json.loads(p.stdout)[0]
        measured = {k: v["measured"] for k, v in t["memory_planned_vs_measured"].items()}
        planned = {k: plan[key] for k, key in CATEGORIES.items()}
        check(f"{name}: plan == measured per category, to the byte", planned == measured,
              (planned, measured))
        traffic = {g: plan["traffic_per_step_bytes"][key] for g, key in GROUPS.items()}
        check(f"{name}: plan == measured traffic per group, to the byte",
              traffic == t["comm_bytes_by_group"], (traffic, t["comm_bytes_by_group"]))
        if "--compress-grads" in flags:
            # The reduction is an all-to-all in the shard group: each rank sends (G-1)/G of it.
            G = int(flags[flags.index("--shard-size") + 1] if "--shard-size" in flags else flags[1])
            a2a = plan["collectives_per_step"]["shard_group"]["all_to_all"]
            sent, payload = t["comm_wire_bytes"]["all_to_all"], t["comm_bytes"]["all_to_all"]
            check(f"{name}: the reduction is an all-to-all, as planned",
                  a2a["calls"] > 0 and a2a["payload_bytes"] == payload, (a2a, payload))
            check(f"{name}: each rank sends (G-1)/G of the all-to-all's payload",
                  sent * G == (G - 1) * payload, (sent, payload, G))

    # Over the all-to-all, int8 and int4 send less than the dense bf16 reduction at every rank
    # count, and TopK 1% less still.
    def shard_traffic(n, *flags):
        r = zero("plan", "-n", str(n), "--preset", "gpt-nano", "--stage", "2", *flags, "--json", "-")
        return json.loads(r.stdout)[0]["traffic_per_step_bytes"]["shard_group"] if r.returncode == 0 else None
    for n in (2, 3, 4, 8):
        t = {k: shard_traffic(n, *f) for k, f in
             {"dense": [], "int8": ["--compress-grads", "int8"], "int4": ["--compress-grads", "int4"],
              "topk": ["--compress-grads", "topk", "--topk-ratio", "0.01"]}.items()}
        check(f"-n {n}: dense > int8 > int4 > TopK 1% on the wire", None not in t.values() and
              t["dense"] > t["int8"] > t["int4"] > t["topk"], t)

    # DeepSpeed's ZeRO++ switches act: the plan and the weights change.
    def config(**zo):
        path = os.path.join(tmp, "ds.json")
        with open(path, "w") as f:
            json.dump({"bf16": {"enabled": True}, "zero_optimization": {"stage": 3, **zo}}, f)
        return path
    plain_run = zero("train", "-n", "2", *nano, "--steps", "2", "--config", config())
    plain_plan = zero("plan", "-n", "2", "--preset", "gpt-nano", "--stage", "3", "--config", config(),
                      "--json", "-")
    for key in ("zero_quantized_gradients", "zero_quantized_weights"):
        run = zero("train", "-n", "2", *nano, "--steps", "2", "--config", config(**{key: True}))
        plan = zero("plan", "-n", "2", "--preset", "gpt-nano", "--stage", "3",
                    "--config", config(**{key: True}),
                    "--json", "-")
        ok = run.returncode == 0 and plan.returncode == 0
        check(f"{key}: true changes the weights", ok and checksum(run.stdout) != checksum(plain_run.stdout),
              run.stdout[-300:] + run.stderr + plain_run.stdout[-300:])
        check(f"{key}: true changes the plan's traffic", ok and
              json.loads(plan.stdout)[0]["traffic_per_step_bytes"] !=
              json.loads(plain_plan.stdout)[0]["traffic_per_step_bytes"], plan.stderr)
    check(*one_error("zero_quantized_gradients with TopK is one sentence",
                     zero("train", "-n", "2", *nano, "--steps", "2", "--compress-grads", "topk",
                          "--config", config(zero_quantized_gradients=True)),
                     "zero_quantized_gradients", "set one of them"))

    # Bad flags.
    check(*one_error("--compress-grads names its values", zero(*mlp, "--compress-grads", "int2"),
                     "--compress-grads", "int2"))
    check(*one_error("--topk-ratio must be in (0, 1]", zero(*mlp, "--topk-ratio", "0"),
                     "--topk-ratio"))
    check(*one_error("--error-feedback is on or off", zero(*mlp, "--error-feedback", "yes"),
                     "--error-feedback"))
finish()
