#!/usr/bin/env python3
"""`zero train`'s memory table with ZeRO-Offload (docs/offload.md): on the emulated device an
offload config's run prints host rows (params, grads, master, optimizer, buffers, peak) beside the
device's in its planned vs measured table, each measured equal to planned, and --json carries them
under memory_planned_vs_measured, equal to `zero plan --json`'s host_*_bytes for the same flags;
at stages 1-3, with param offload at stage 3. A run without offload, and an offload config on CPU
ranks (whose state is in host memory already), print no host rows.
Usage: test_offload_memory.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, runner, token_file  # noqa: E402

TEXT = ("Offload keeps the optimizer's state in host memory and moves the gradients down and the "
        "new params up, and the ledger counts both spaces. ") * 40
HOST_ROWS = {"host params": "host_params_bytes", "host grads": "host_grads_bytes",
             "host master": "host_master_bytes", "host optimizer": "host_optimizer_bytes",
             "host buffers": "host_buffers_bytes", "host peak": "host_total_bytes"}
NANO = ["--model", "gpt", "--preset", "gpt-nano", "--micro-batch", "2"]


zero = runner(ZERO, ZERO_FMA_PEAK="1e10 fixed")


def config(tmp, stage, optimizer, params=False):
    path = os.path.join(tmp, f"offload-{stage}{optimizer}{params}.json")
    z = {"stage": stage, "offload_optimizer": {"device": optimizer, "pin_memory": True}}
    if params:
        z["offload_param"] = {"device": "cpu"}
    with open(path, "w") as f:
        json.dump({"zero_optimization": z}, f)
    return path


def printed_rows(stdout):
    """The planned vs measured table's rows: name -> (planned, measured), as printed."""
    rows, inside = {}, False
    for line in stdout.splitlines():
        if line.startswith("planned vs measured"):
            inside = True
        elif inside and not line.strip():
            break
        elif inside and line.startswith("  ") and not line.strip().startswith("category"):
            cells = line.strip().rsplit(None, 5)  # name, planned (2 words), measured (2), diff
            rows[cells[0]] = (" ".join(cells[1:3]), " ".join(cells[3:5]))
    return rows


with tempfile.TemporaryDirectory() as tmp:
    data = ["--data", token_file(ZERO, tmp, TEXT)]

    for stage, params in ((1, False), (2, False), (3, False), (3, True)):
        flags = [*NANO, "-n", "2", "--stage", str(stage), "--device", "emulated", "--config",
                 config(tmp, stage, "cpu", params)]
        name = f"stage {stage}, optimizer offload{' and param offload' if params else ''}"
        js = os.path.join(tmp, "run.json")
        r = zero("train", *flags, *data, "--steps", "2", "--json", js)
        check(f"{name}: zero train runs on the emulated device", r.returncode == 0,
              r.stdout[-1500:] + r.stderr[-1500:])
        if r.returncode != 0:
            continue
        with open(js) as f:
            table = json.load(f)["memory_planned_vs_measured"]
        host = {k: table.get(k) for k in HOST_ROWS}
        check(f"{name}: --json has the host rows", all(v is not None for v in host.values()),
              sorted(table))
        if not all(v is not None for v in host.values()):
            continue
        check(f"{name}: host measured == planned, per category",
              all(v["planned"] == v["measured"] for v in host.values()), host)
        check(f"{name}: the master, the optimizer state (and the grads) are on the host",
              host["host master"]["measured"] > 0 and host["host optimizer"]["measured"] > 0 and
              (host["host grads"]["measured"] > 0) == (stage > 1) and
              (host["host params"]["measured"] > 0) == params and
              table["master"]["measured"] == 0 and table["optimizer"]["measured"] == 0, table)
        parts = sum(host[k]["measured"] for k in HOST_ROWS if k != "host peak")
        check(f"{name}: the host rows add up to the host peak",
              parts == host["host peak"]["measured"], host)
        shown = printed_rows(r.stdout)
        check(f"{name}: the printed table has each host row, planned equal to measured",
              all(k in shown and shown[k][0] == shown[k][1] for k in HOST_ROWS) and
              "params" in shown, shown)
        p = zero("plan", *flags, "--json", "-")
        check(f"{name}: zero plan plans", p.returncode == 0, p.stderr)
        if p.returncode == 0:
            plan = json.loads(p.stdout)[0]
            got = {k: host[k]["measured"] for k in HOST_ROWS}
            want = {k: plan[key] for k, key in HOST_ROWS.items()}
            check(f"{name}: the host rows equal zero plan's host_*_bytes, to the byte",
                  got == want, (got, want))

    for device, offload, why in (("emulated", "none", "a run without offload"),
                                 ("cpu", "cpu", "an offload config on CPU ranks")):
        js = os.path.join(tmp, "run.json")
        r = zero("train", *NANO, "-n", "2", "--device", device, "--config",
                 config(tmp, 2, offload), *data, "--steps", "1", "--json", js)
        ok = r.returncode == 0
        if ok:
            with open(js) as f:
                table = json.load(f)["memory_planned_vs_measured"]
            ok = not any(k.startswith("host") for k in table) and "host" not in printed_rows(
                r.stdout)
        check(f"{why} prints no host rows", ok, r.stdout[-1500:] + r.stderr[-1500:])

finish()
