#!/usr/bin/env python3
"""`zero compare --compress`: wire settings side by side like stages, from the same start. On
gpt-micro at 2 ranks (stages 2 and 3): a row per setting a stage can run, qwZ skipped at stage 2
in one line; the wire bytes in the shard group ordered dense > int8 > int4 > TopK 1%; the two
settings without compression (dense, fp32) ending with the same weights and the same loss bit
for bit, and said so; the first step's loss equal in every row whose forward is dense and not
in qwZ's; a setting's rows agreeing across stages; the error-feedback residual in the row that
has it; memory equal to the plan; --json and the chart. On the MLP at 4 ranks: hpZ's bytes in
its own group. Bad lists refused in one sentence.
Usage: test_compare_compress.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, re, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, one_error, runner, token_file  # noqa: E402


zero = runner(ZERO)


SETTINGS = ["dense", "fp32", "int8", "int4", "topk:0.01", "topk:0.01:noef", "qwZ"]

with tempfile.TemporaryDirectory() as tmp:
    data = token_file(ZERO, tmp, "It was the best of times, it was the worst of times, it was the "
                                 "age of wisdom. " * 80)
    # gpt-micro's units are below the default persistence threshold: at 0 each is gathered
    # before use at stage 3, so qwZ has gathers to compress.
    cfg = os.path.join(tmp, "ds.json")
    with open(cfg, "w") as f:
        json.dump({"zero_optimization": {"stage3_param_persistence_threshold": 0}}, f)
    gpt = ["--model", "gpt", "--preset", "gpt-micro", "--device", "cpu", "-n", "2",
           "--global-batch", "4", "--data", data, "--config", cfg]
    js, svg = os.path.join(tmp, "cmp.json"), os.path.join(tmp, "cmp.svg")
    r = zero("compare", *gpt, "--stages", "2,3", "--warmup", "1", "--steps", "3", "--repeats", "2",
             "--compress", ",".join(SETTINGS), "--json", js, "--chart", svg)
    check("zero compare --compress runs gpt-micro's settings at stages 2 and 3", r.returncode == 0,
          r.stdout + r.stderr)
    if r.returncode != 0:
        finish()
    out = r.stdout
    want = [f"2 {s}" for s in SETTINGS if s != "qwZ"] + [f"3 {s}" for s in SETTINGS]
    rows = re.findall(r"^([23] \S+)\s+[\d.]+\s+[\d.]+\.\.[\d.]+\s+\d+\s+[\d.]+%", out, re.M)
    check("the time table: a row per setting each stage can run, stage by stage", rows == want, out)
    skipped = [l for l in out.splitlines() if l.startswith("zero compare: skipped:")]
    check("qwZ at stage 2 is skipped in one sentence",
          len(skipped) == 1 and "qwZ is not run at stage 2" in skipped[0], "\n".join(skipped))
    wire = re.findall(r"^([23] \S+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d.]+)%", out, re.M)
    check("the wire table: a row per run with the bytes by group", [w[0] for w in wire] == want, out)
    with open(js) as f:
        j = json.load(f)
    st = {f"{s['stage']} {s['setting']}": s for s in j["stages"]}
    check("--json: every row with its setting, its traffic by group, its losses",
          sorted(st) == sorted(want) and j["settings"] == SETTINGS and
          all(set(s["traffic_by_group"]) == {"shard", "replicate", "secondary", "world"} and
              s["wire_bytes"] == sum(g["wire_bytes"] for g in s["traffic_by_group"].values())
              for s in j["stages"]), json.dumps(j)[:800])
    shard = {k: s["traffic_by_group"]["shard"]["wire_bytes"] for k, s in st.items()}
    check("the shard group's wire bytes: dense > int8 > int4 > TopK 1%, at both stages",
          all(shard[f"{g} dense"] > shard[f"{g} int8"] > shard[f"{g} int4"] > shard[f"{g} topk:0.01"]
              for g in (2, 3)), str(shard))
    check("qwZ sends fewer bytes in stage 3's gathers than dense",
          shard["3 qwZ"] < shard["3 dense"], str(shard))
    text_all = {w[0]: int(w[4].replace(",", "")) for w in wire}
    check("the wire table's 'all sent' is the JSON's wire bytes",
          all(text_all[k] == st[k]["wire_bytes"] for k in want), str(text_all))
    # No compression: the same run under two names, bit for bit.
    check("without compression (dense, fp32) the weights and final loss are the same bit for bit",
          len({st[k]["checksum"] for k in ("2 dense", "2 fp32", "3 dense", "3 fp32")}) == 1 and
          len({st[k]["final_loss"] for k in ("2 dense", "2 fp32", "3 dense", "3 fp32")}) == 1 and
          re.search(r"^weights after the run \(dense = fp32\): bitwise the same in every row "
                    r"\(checksum [0-9a-f]{16}\), final loss [\d.]+ bit for bit$", out, re.M), out)
    check("compression changes the final loss (int8, int4, TopK against dense)",
          all(st[f"2 {k}"]["final_loss"] != st["2 dense"]["final_loss"]
              for k in ("int8", "int4", "topk:0.01")), str({k: s["final_loss"] for k, s in st.items()}))
    check("a setting's rows agree bitwise across stages 2 and 3 (the same partitions)",
          all(st[f"2 {k}"]["checksum"] == st[f"3 {k}"]["checksum"] for k in SETTINGS[2:-1]) and
          j["weights_agree_bitwise"] is True and "DIFFERENT" not in out, out)
    first = {k: s["first_loss"] for k, s in st.items()}
    check("same start: the first step's loss bit for bit in every row whose forward is dense",
          len({v for k, v in first.items() if k != "3 qwZ"}) == 1 and j["first_loss_equal"] is True and
          re.search(r"^same start: .* bit for bit in every row but stage 3 qwZ", out, re.M), str(first))
    check("qwZ's first loss is its int8-gathered forward's, not dense's",
          first["3 qwZ"] != first["3 dense"], str(first))
    res = {k: s["residual_bytes"] for k, s in st.items()}
    check("the error-feedback residual is in TopK's row with it (fp32, a whole gradient) only",
          res["2 topk:0.01"] > 0 and res["2 topk:0.01"] % 4 == 0 and
          all(v == 0 for k, v in res.items() if not k.endswith("topk:0.01")), str(res))
    mismatch = [(k, m) for k, s in st.items() for m in ("buffers", "peak_total")
                if s["memory_measured"][m] != s["memory_planned"][m]]
    check("every row's memory equals its plan (the residual included)", not mismatch, str(mismatch))
    with open(svg) as f:
        labels = re.findall(r">([23] [^<]+)</text>", f.read())
    check("--chart: a bar per row in both panels, named by stage and setting",
          labels == want + want, str(labels))

    # hpZ's secondary group: its bytes in their own column (the MLP, 4 ranks).
    mlp = ["-n", "4", "--stages", "3", "--layers", "2", "--width", "64", "--global-batch", "8",
           "--warmup", "0", "--steps", "2", "--repeats", "1", "--config", cfg]
    js2 = os.path.join(tmp, "hpz.json")
    r = zero("compare", *mlp, "--compress", "dense,qwZ+qgZ+hpZ", "--json", js2)
    check("the MLP at 4 ranks runs qwZ+qgZ+hpZ", r.returncode == 0, r.stdout + r.stderr)
    if r.returncode == 0:
        with open(js2) as f:
            h = {s["setting"]: s["traffic_by_group"] for s in json.load(f)["stages"]}
        check("hpZ's backward gathers travel in the secondary group; dense has none",
              h["qwZ+qgZ+hpZ"]["secondary"]["wire_bytes"] > 0 and
              h["dense"]["secondary"]["wire_bytes"] == 0 and
              h["qwZ+qgZ+hpZ"]["shard"]["wire_bytes"] < h["dense"]["shard"]["wire_bytes"], str(h))

    # At the default persistence threshold gpt-micro's units all stay gathered: qwZ has nothing
    # to quantise, starts on dense's loss, and the report says so rather than claiming int8.
    micro = [a for a in gpt if a not in ("--config", cfg)]
    r = zero("compare", *micro, "--stages", "3", "--warmup", "0", "--steps", "1", "--repeats", "1",
             "--compress", "dense,qwZ")
    check("a qwZ row with no sharded unit is named as quantising nothing",
          r.returncode == 0 and re.search(r"^same start: .* bit for bit in every row; stage 3 qwZ "
                                          r"start on dense's loss too: .*quantises nothing",
                                          r.stdout, re.M), r.stdout + r.stderr)

    check(*one_error("a setting that is none is refused, naming it",
                     zero("compare", "--compress", "dense,int3"), "--compress: 'int3' is not a setting"))
    check(*one_error("a setting listed twice is refused", zero("compare", "--compress", "int8,INT8"),
                     "listed twice"))
    check(*one_error("two gradient encodings in one setting are refused",
                     zero("compare", "--compress", "int8+topk"), "two gradient encodings"))
    check(*one_error("a TopK ratio outside (0, 1] is refused",
                     zero("compare", "--compress", "topk:1.5"), "TopK ratio in (0, 1]"))
    check(*one_error("qwZ with no stage 3 listed is refused",
                     zero("compare", "--stages", "1,2", "--compress", "dense,qwZ"),
                     "qwZ is not run at stage 2"))
    check(*one_error("hpZ as large as the job is refused",
                     zero("compare", "-n", "2", "--stages", "3", "--compress", "hpZ:2"),
                     "hpZ's group of 2 ranks"))
    check(*one_error("--compress-grads beside --compress is refused",
                     zero("compare", "--compress-grads", "int8", "--compress", "dense,int4"),
                     "--compress-grads and --compress"))
finish()
