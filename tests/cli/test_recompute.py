#!/usr/bin/env python3
"""Activation recomputation in `zero train --model gpt` (--recompute, or DeepSpeed's
activation_checkpointing section): the weights are bitwise those of the run without it at every
stage, on several ranks; the activations are fewer, and what was measured is what `zero plan`
planned; the time it costs is measured and reported; the section's keys act, warn or are refused
as docs/config.md says; and `zero plan` takes Korthikanti et al.'s formula only when asked for a
Megatron-style trainer (--activations megatron), never as a side effect of another flag.
Usage: test_recompute.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, runner, token_file  # noqa: E402

TEXT = ("Recomputation trades compute for memory: each block keeps its input, and backward runs "
        "the block's forward again before its own gradients. ") * 40
GPT = ["--model", "gpt", "--preset", "gpt-micro", "--device", "cpu", "--micro-batch", "2"]


zero = runner(ZERO, ZERO_FMA_PEAK="1e10 fixed")


def train(tmp, *flags):
    """zero train's --json summary (None when it failed), and the run itself."""
    js = os.path.join(tmp, "run.json")
    if os.path.exists(js):
        os.remove(js)
    r = zero("train", *GPT, *flags, "--steps", "3", "--json", js)
    if r.returncode != 0:
        return None, r
    with open(js) as f:
        return json.load(f), r


def measured(summary, category):
    return summary["memory_planned_vs_measured"][category]["measured"]


def planned(summary, category):
    return summary["memory_planned_vs_measured"][category]["planned"]


with tempfile.TemporaryDirectory() as tmp:
    data = ["--data", token_file(ZERO, tmp, TEXT)]

    # Bitwise: the same weights with and without recomputation, at every stage, 2 and 3 ranks.
    for stage, ranks in ((0, 2), (1, 3), (2, 2), (3, 3)):
        where = f"stage {stage}, {ranks} ranks"
        plain, r0 = train(tmp, *data, "-n", str(ranks), "--stage", str(stage))
        again, r1 = train(tmp, *data, "-n", str(ranks), "--stage", str(stage), "--recompute")
        check(f"{where}: both runs train", plain is not None and again is not None,
              (r0.stderr + r1.stderr)[-1500:])
        if plain is None or again is None:
            continue
        check(f"{where}: the weights are bitwise equal with --recompute (checksum)",
              plain["params_checksum"] == again["params_checksum"],
              (plain["params_checksum"], again["params_checksum"]))
        check(f"{where}: the losses are equal too", plain["history"] and
              [h["loss"] for h in plain["history"]] == [h["loss"] for h in again["history"]])
        check(f"{where}: fewer activations with --recompute, measured == planned",
              measured(again, "activations") < measured(plain, "activations") and
              measured(again, "activations") == planned(again, "activations"),
              (measured(plain, "activations"), measured(again, "activations"),
               planned(again, "activations")))
        rc = again["step_time"]["recompute"]
        check(f"{where}: the recomputation's time is measured, a share of compute",
              0 < rc <= again["step_time"]["compute"] and
              0 < again["recompute_share_of_compute"] <= 1 and
              plain["step_time"]["recompute"] == 0 and plain["recompute_share_of_compute"] == 0,
              (again["step_time"], again.get("recompute_share_of_compute")))
        if stage == 3:
            out = r1.stdout
            check("the text says it recomputes and what recomputation cost",
                  "bf16 compute, recompute)" in out and "of compute, recomputation" in out and
                  "% of compute)" in out, out[-2000:])

    # DeepSpeed's activation_checkpointing: present, it turns recomputation on; its keys as
    # docs/config.md says.
    def config(name, section, **top):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            json.dump({"train_batch_size": 4, "bf16": {"enabled": True}, **top,
                       **({} if section is None else {"activation_checkpointing": section})}, f)
        return path

    defaults = config("defaults.json", {
        "partition_activations": False, "cpu_checkpointing": False,
        "contiguous_memory_optimization": False, "number_checkpoints": None,
        "synchronize_checkpoint_boundary": False, "profile": False})
    by_flag, _ = train(tmp, *data, "-n", "2", "--stage", "2", "--config",
                       config("plain.json", None), "--recompute")
    by_config, r = train(tmp, *data, "-n", "2", "--stage", "2", "--config", defaults)
    check("activation_checkpointing at DeepSpeed's defaults trains, silently",
          by_config is not None and "warning" not in r.stderr, r.stderr[-1500:])
    check("activation_checkpointing turns on recomputation: the run of --recompute, bit for bit",
          by_flag is not None and by_config is not None and
          by_config["params_checksum"] == by_flag["params_checksum"] and
          measured(by_config, "activations") == measured(by_flag, "activations") and
          by_config["step_time"]["recompute"] > 0,
          by_config and by_flag and (by_config["params_checksum"], by_flag["params_checksum"]))
    p = zero("plan", *GPT, "-n", "2", "--stage", "2", "--config", defaults, "--json", "-")
    check("zero plan reads the section as zero train does (recompute, the same activations)",
          p.returncode == 0 and by_config is not None and
          json.loads(p.stdout)[0]["activations_bytes"] == measured(by_config, "activations") and
          json.loads(p.stdout)[0]["activations_from"].endswith(", recompute)"), p.stderr)

    inert = config("inert.json", {
        "partition_activations": True, "contiguous_memory_optimization": True,
        "number_checkpoints": 2, "synchronize_checkpoint_boundary": True, "profile": True,
        "unknown_knob": 1})
    r = zero("train", *GPT, *data, "-n", "1", "--steps", "1", "--config", inert)
    warnings = [line for line in r.stderr.splitlines() if "warning" in line]
    for key in ("partition_activations", "contiguous_memory_optimization", "number_checkpoints",
                "synchronize_checkpoint_boundary", "profile"):
        check(f"activation_checkpointing.{key} set: one warning saying it has no effect",
              r.returncode == 0 and
              sum(f"activation_checkpointing.{key}" in w and "no effect" in w
                  for w in warnings) == 1, r.stderr[-2000:])
    check("an unknown key in the section is ignored with a warning, as DeepSpeed ignores it",
          any("'unknown_knob'" in w and "ignored" in w for w in warnings), r.stderr[-2000:])

    cpu = config("cpu.json", {"cpu_checkpointing": True})
    r = zero("train", *GPT, *data, "-n", "1", "--steps", "1", "--config", cpu)
    check("cpu_checkpointing true is refused in one sentence naming the key",
          r.returncode != 0 and "activation_checkpointing.cpu_checkpointing" in r.stderr and
          "host memory" in r.stderr and r.stderr.count("error") == 1, r.stderr)
    p = zero("plan", *GPT, "--config", cpu)
    check("... by zero plan too", p.returncode != 0 and "cpu_checkpointing" in p.stderr, p.stderr)
    r = zero("train", "--model", "mlp", "-n", "1", "--steps", "1", "--config", defaults,
             "--device", "cpu")
    check("with the MLP the section warns that it has no effect (nothing to recompute)",
          r.returncode == 0 and "activation_checkpointing has no effect on the MLP" in r.stderr,
          r.stderr[-1500:])
    r = zero("train", "--model", "mlp", "-n", "1", "--steps", "1", "--recompute")
    check("--recompute is the GPT's", r.returncode != 0 and "--recompute is for --model gpt" in
          r.stderr, r.stderr)

    # zero plan: zero's trainer by default, with and without recomputation; Korthikanti only
    # for a Megatron-style trainer, by name.
    def plan(*flags):
        p = zero("plan", "--preset", "gpt2-xl", "-n", "8", "--stage", "3", "--micro-batch", "1",
                 *flags, "--json", "-")
        return json.loads(p.stdout)[0] if p.returncode == 0 else p.stderr

    ours, ours_rc = plan(), plan("--recompute")
    meg, meg_rc = plan("--activations", "megatron"), plan("--activations", "megatron",
                                                          "--recompute")
    check("the default is zero's trainer, with and without --recompute, and says so",
          isinstance(ours, dict) and isinstance(ours_rc, dict) and
          ours["activations_from"] == "zero's GPT trainer (bf16 compute)" and
          ours_rc["activations_from"] == "zero's GPT trainer (bf16 compute, recompute)" and
          ours_rc["activations_bytes"] < ours["activations_bytes"], (ours, ours_rc))
    check("--activations megatron is Korthikanti et al.'s, for a Megatron-style trainer",
          isinstance(meg, dict) and isinstance(meg_rc, dict) and
          "Megatron-style" in meg["activations_from"] and "Korthikanti" in meg_rc["activations_from"]
          and meg["activations_bytes"] != ours["activations_bytes"] and
          meg_rc["activations_bytes"] < meg["activations_bytes"], (meg, meg_rc))
    check("--activations zero is the default spelt out",
          plan("--activations", "zero") == ours)
    untied = plan("--untied")
    check("--untied does not switch the activation model: zero's trainer has no untied head, "
          "said in a sentence", isinstance(untied, str) and "--untied" in untied and
          "--activations megatron" in untied, untied)
    check("--untied --activations megatron plans the Megatron-style trainer",
          isinstance(plan("--untied", "--activations", "megatron"), dict))
    p = zero("plan", "--params", "7B", "--activations", "megatron")
    check("--params with --activations megatron is refused: no model to compute them from",
          p.returncode != 0 and "--activations BYTES" in p.stderr, p.stderr)
    p = zero("plan", "--model", "mlp", "--activations", "megatron")
    check("--model mlp with --activations megatron is refused: a GPT's formula",
          p.returncode != 0 and "GPT" in p.stderr, p.stderr)
    p = zero("plan", "--preset", "gpt2-xl", "-n", "8", "--stage", "3", "--micro-batch", "1")
    check("the text's activations: line names the model it used",
          p.returncode == 0 and "activations: " in p.stdout and
          "zero's GPT trainer (bf16 compute)" in p.stdout.split("activations: ")[1].split("\n")[0],
          p.stdout[:600])

finish()
