#!/usr/bin/env python3
"""`zero train --model gpt` end to end, as a user runs it: a text made into byte tokens by `zero
data`, the GPT trained at 2 ranks and stage 3 with the loss falling, tokens/s and MFU reported,
the plan equal to the ledger, the same weights at stage 0 and 3, the --json history; and every
bad input (no data, a wrong preset, a file that is not tokens, tokens past the vocabulary, flags of
the other model) refused with one sentence before anything trains.
Usage: test_train_gpt.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, re, struct, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, runner, token_file, user_env  # noqa: E402

TEXT = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was "
        "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity. ") * 60


zero = runner(ZERO)


def one_error(r):
    """The run failed with exactly one 'error' line on stderr."""
    lines = [l for l in r.stderr.splitlines() if "error" in l.lower()]
    return r.returncode != 0 and len(lines) == 1, r.stdout + r.stderr


with tempfile.TemporaryDirectory() as tmp:
    data = token_file(ZERO, tmp, TEXT)

    common = ["train", "--model", "gpt", "--preset", "gpt-micro", "--device", "cpu", "-n", "2",
              "--global-batch", "8", "--lr", "0.01"]
    base = common + ["--data", data]
    runs = {}
    for stage in ("0", "3"):
        js = os.path.join(tmp, f"s{stage}.json")
        svg = os.path.join(tmp, f"s{stage}.svg")
        r = zero(*base, "--stage", stage, "--steps", "25", "--log-every", "5", "--json", js,
                 "--plot", svg)
        check(f"stage {stage}: trains", r.returncode == 0, r.stdout + r.stderr)
        if r.returncode != 0:
            finish()
        with open(js) as f:
            runs[stage] = (r.stdout, json.load(f))

    out, j = runs["3"]
    with open(os.path.join(tmp, "s3.svg")) as f:
        svg = f.read()
    points = re.search(r"<polyline[^>]*points='([^']*)'", svg)
    check("--plot writes an SVG with the loss at every step",
          svg.startswith("<svg") and points is not None and len(points.group(1).split()) == 25,
          svg[:300])
    check("without a terminal there is no progress bar", "ETA" not in out and "\r" not in out, out)
    check("the header names the GPT, its shape and the data file",
          "gpt gpt-micro (2 layers, hidden 64, 4 heads, seq 64, vocab 256" in out and data in out,
          out)
    check("the GPT's AdamW groups are in force and said",
          "none on biases, LayerNorm and embeddings" in out, out)
    check("the loss falls (repeated text: below 60% of the first step's)",
          j["final_loss"] < 0.6 * j["first_loss"], (j["first_loss"], j["final_loss"]))
    check("the first loss is near ln 256 = 5.55 (an untrained byte model)",
          4.5 < j["first_loss"] < 6.5, j["first_loss"])
    check("every step line shows tokens/s and MFU",
          len(re.findall(r"tok/s  MFU [\d.]+%", out)) >= 5, out)
    h = j["history"]
    check("each history entry splits its step into compute, wait, optimizer, data and other, "
          "adding up to its seconds",
          all(abs(sum(e[k] for k in ("compute", "wait", "optimizer", "data", "other"))
                  - e["seconds"]) <= 1e-9 + 1e-9 * e["seconds"] for e in h), h[:2])
    m = re.search(r"(\d+) tokens/s, MFU ([\d.]+)%", out)
    check("the summary shows tokens/s and an MFU in (0, 100)",
          m is not None and 0 < float(m.group(2)) < 100, out)
    check("--json has tokens_per_second, flops_per_token, peak_flops and mfu",
          j.get("tokens_per_second", 0) > 0 and j.get("flops_per_token", 0) > 0
          and j.get("peak_flops", 0) > 0 and 0 < j.get("mfu", 0) < 1, j)
    check("tokens/s = samples/s x seq_len",
          abs(j["tokens_per_second"] - 64 * j["samples_per_second"]) < 1e-6 * j["tokens_per_second"],
          (j["tokens_per_second"], j["samples_per_second"]))
    pvm = j["memory_planned_vs_measured"]
    check("planned == measured in every category, activations included",
          all(v["planned"] == v["measured"] for v in pvm.values()), pvm)
    check("the history has every step's loss", len(j["history"]) == 25, len(j["history"]))
    check("stage 0 and stage 3 give the same weights",
          runs["0"][1]["params_checksum"] == j["params_checksum"],
          (runs["0"][1]["params_checksum"], j["params_checksum"]))

    # The default AdamW groups act: the same weights as a config that spells them out, other
    # weights than a config that decays every parameter.
    def checksum_with(groups):
        cfg = {"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {
            "lr": 0.01, "weight_decay": 0.1}}}
        if groups is not None:
            cfg["param_groups"] = groups
        path = os.path.join(tmp, "cfg.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        js = os.path.join(tmp, "groups.json")
        r = zero("train", "--model", "gpt", "--preset", "gpt-micro", "--device", "cpu", "-n", "2",
                 "--data", data, "--steps", "3", "--config", path, "--json", js)
        if r.returncode != 0:
            return r.stdout + r.stderr
        with open(js) as f:
            return json.load(f)["params_checksum"]
    spelled = [{"params": ["*.bias", "*.ln1.weight", "*.ln2.weight", "ln_f.weight", "wte.weight",
                           "wpe.weight"], "weight_decay": 0}]
    default, same, every = checksum_with(None), checksum_with(spelled), checksum_with(
        [{"params": ["*"], "weight_decay": 0.1}])
    check("the GPT's default AdamW groups act (= spelled out in a config, != decay on all)",
          default == same and default != every, (default, same, every))

    # Real text: the Jargon File (Debian's jargon-text, public domain; scripts/install-deps
    # installs it), as the README's first command trains on it.
    jargon = "/usr/share/doc/jargon-text/jargon.txt.gz"
    if os.path.exists(jargon):
        import gzip
        with gzip.open(jargon, "rb") as f, open(os.path.join(tmp, "jargon.txt"), "wb") as out_f:
            out_f.write(f.read())
        r = zero("data", os.path.join(tmp, "jargon.txt"), "--out", os.path.join(tmp, "jargon"))
        js = os.path.join(tmp, "jargon.json")
        r2 = zero(*common, "--data", os.path.join(tmp, "jargon_train.bin"), "--stage", "3",
                  "--steps", "40", "--log-every", "100", "--json", js)
        ok = r.returncode == 0 and r2.returncode == 0
        check("the Jargon File: zero data and zero train succeed", ok, r.stderr + r2.stdout + r2.stderr)
        if ok:
            with open(js) as f:
                jj = json.load(f)
            check("on real English text the loss falls below 70% of the first step's in 40 steps",
                  jj["final_loss"] < 0.7 * jj["first_loss"], (jj["first_loss"], jj["final_loss"]))
    else:
        print(f"note: {jargon} is missing (package jargon-text): the real-text run is left out")

    # On a terminal: a progress bar with the elapsed time and the ETA under the step lines.
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen([ZERO, *base, "--steps", "6", "--log-every", "100"], stdout=slave,
                         stderr=subprocess.PIPE, env=user_env())
    os.close(slave)
    tty_out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        tty_out += chunk
    p.wait(timeout=120)
    os.close(master)
    tty_text = tty_out.decode(errors="replace")
    check("on a terminal a progress bar shows steps done, elapsed time and the ETA",
          p.returncode == 0 and re.search(r"\[=+>? *\] \d+/6 +\d+:\d\d elapsed, ETA \d+:\d\d",
                                          tty_text) is not None, tty_text[-600:])

    # Bad input: one sentence each, naming what is wrong.
    r = zero("train", "--model", "gpt", "--preset", "gpt-micro")
    ok, why = one_error(r)
    check("--model gpt without --data: one sentence naming --data", ok and "--data" in r.stderr, why)
    r = zero("train", "--model", "gpt", "--preset", "gpt-huge", "--data", data)
    ok, why = one_error(r)
    check("an unknown preset: one sentence listing the known ones",
          ok and "gpt-huge" in r.stderr and "gpt-nano" in r.stderr, why)
    r = zero("train", "--model", "gpt", "--data", data, "--width", "64")
    ok, why = one_error(r)
    check("an MLP flag with the GPT is refused", ok and "--width" in r.stderr, why)
    r = zero("train", "--data", data)
    ok, why = one_error(r)
    check("--data without --model gpt is refused", ok and "--data" in r.stderr, why)
    missing = os.path.join(tmp, "nope.bin")
    r = zero(*common, "--steps", "1", "--data", missing)
    ok, why = one_error(r)
    check("a missing data file: one sentence naming it", ok and missing in r.stderr, why)
    odd = os.path.join(tmp, "odd.bin")
    with open(odd, "wb") as f:
        f.write(b"abc")
    r = zero(*common, "--steps", "1", "--data", odd)
    ok, why = one_error(r)
    check("a file of an odd byte count: one sentence naming it", ok and odd in r.stderr, why)
    big = os.path.join(tmp, "big.bin")  # a raw uint16 file with a token past gpt-micro's 256
    with open(big, "wb") as f:
        f.write(struct.pack("<1000H", *([7] * 500 + [300] + [7] * 499)))
    r = zero(*common, "--steps", "1", "--data", big)
    ok, why = one_error(r)
    check("a token past the vocabulary: one sentence naming the file, the token and the vocab",
          ok and big in r.stderr and "300" in r.stderr and "256" in r.stderr, why)
    r = zero(*base, "--steps", "1", "--precision", "fp32", "--compute", "bf16")
    ok, why = one_error(r)
    check("bf16 compute with fp32 params is refused", ok and "--compute" in r.stderr, why)

finish()
