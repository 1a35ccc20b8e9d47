#!/usr/bin/env python3
"""What `zero train` reports for a comparison with PyTorch or DeepSpeed (docs/benchmarks.md, "The
train report"): samples/s over the steady state (the first step left out), the step time split
into compute, wait, optimizer, data and other that add up to the total, other under 5% of the
step, the collectives of the measured steps, and the per-step history; and the same in text.
Usage: test_train_report.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, user_env  # noqa: E402

STEPS, LAYERS = 30, 4
PARTS = ("compute", "wait", "optimizer", "data", "other")

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "train.json")
    # Big enough that each part is milliseconds, small enough to take a few seconds.
    r = subprocess.run([ZERO, "train", "-n", "2", "--device", "cpu", "--stage", "2", "--layers",
                        str(LAYERS), "--width", "512", "--global-batch", "64", "--steps",
                        str(STEPS), "--log-every", "100", "--json", path],
                       capture_output=True, text=True, timeout=300, env=user_env())
    check("zero train -n 2 --json succeeds", r.returncode == 0, r.stdout + r.stderr)
    if r.returncode != 0:
        finish()
    with open(path) as f:
        j = json.load(f)

out = r.stdout
check("the text says samples/s and that the first step is left out",
      "throughput:" in out and "samples/s" in out and "the first step left out" in out, out)
check("the text splits the step time into its five parts in ms and %",
      "step time (rank 0):" in out and all(f" {p} " in out for p in PARTS) and "%)" in out, out)
check("the text lists the collectives per step", "collectives per step" in out
      and "reduce_scatter" in out and "all_gather" in out, out)
check("the text says what the collectives table's payload, wire and in-flight columns count",
      "(payload: the buffer a collective works on; wire: the bytes this rank itself sent" in out
      and "in flight: from issue to completion" in out, out)

# The memory per rank table: the planned vs measured table's categories in its order, activations
# included, and every row adding up to its peak total.
lines = out.splitlines()
head = next((l for l in lines if l.startswith("memory per rank")), "")
pvm = lines.index(next((l for l in lines if l.startswith("planned vs measured")), lines[0]))
pvm_rows = [l.split()[0] for l in lines[pvm + 2:pvm + 9]]
check("memory per rank has the planned vs measured categories, in its order",
      head.split()[3:] == ["params", "grads", "master", "optimizer", "buffers", "activations",
                           "peak", "total"] and
      pvm_rows == ["params", "grads", "master", "optimizer", "buffers", "activations", "peak"],
      f"{head}\n{pvm_rows}")
check("memory per rank says its rows add up to the peak and what buffers hold",
      "(a row adds up to its peak total; buffers: what else was held at the peak" in out, out)
mem = j.get("memory_bytes", [])
cats = ("params", "grads", "master", "optimizer", "buffers", "activations")
check("--json memory_bytes: every rank's categories, activations included, add up to peak_total",
      len(mem) == 2 and all(all(k in m for k in cats + ("peak_total",)) and
                            sum(m[k] for k in cats) == m["peak_total"] for m in mem) and
      all(m["activations"] > 0 for m in mem), mem)

check("measured_steps leaves the first step out", j.get("measured_steps") == STEPS - 1,
      j.get("measured_steps"))
st = j.get("step_time", {})
check("step_time has total and the five parts", all(k in st for k in ("total",) + PARTS), st)
if all(k in st for k in ("total",) + PARTS):
    check("every part is >= 0 and the total > 0",
          st["total"] > 0 and all(st[p] >= 0 for p in PARTS), st)
    parts = sum(st[p] for p in PARTS)
    check("the parts add up to the total", abs(parts - st["total"]) <= 1e-9 * st["total"],
          f"{parts} vs {st['total']}")
    check("compute and wait are measured (> 0)", st["compute"] > 0 and st["wait"] > 0, st)
    check("other is under 5% of the step", st["other"] < 0.05 * st["total"],
          f"other {st['other']:.6f} s of {st['total']:.6f} s "
          f"({100 * st['other'] / st['total']:.1f}%)")
    sps = j.get("samples_per_second", 0)
    check("samples_per_second is the global batch over the mean step time",
          abs(sps - 64 / st["total"]) <= 1e-6 * sps, f"{sps} vs {64 / st['total']}")

coll = j.get("collectives", {})
ops = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier")
check("collectives has every op with calls, bytes and seconds",
      all(o in coll and all(k in coll[o] for k in ("calls", "payload_bytes", "wire_bytes", "seconds"))
          for o in ops), coll)
if all(o in coll for o in ops):
    check("every collective figure is >= 0",
          all(coll[o][k] >= 0 for o in ops for k in coll[o]), coll)
    # Stage 2: one reduce-scatter per gradient bucket per step, counted over the measured steps
    # only; the model is far below reduce_bucket_size (5e8 elements), so one bucket holds it.
    check("reduce_scatter calls = buckets (1) x measured steps",
          coll["reduce_scatter"]["calls"] == STEPS - 1, coll["reduce_scatter"])
    check("the stage-2 gradients move: payload and seconds > 0",
          coll["reduce_scatter"]["payload_bytes"] > 0 and coll["reduce_scatter"]["seconds"] > 0,
          coll["reduce_scatter"])

hist = j.get("history", [])
check("history has one entry per step, numbered from 1",
      [h.get("step") for h in hist] == list(range(1, STEPS + 1)), hist[:3])
if len(hist) == STEPS:
    check("every history entry has loss, seconds and grad_norm",
          all(all(k in h for k in ("loss", "seconds", "grad_norm")) for h in hist), hist[:3])
    check("history's losses are the run's first and final loss",
          hist[0]["loss"] == j["first_loss"] and hist[-1]["loss"] == j["final_loss"],
          f"{hist[0]} {hist[-1]} {j['first_loss']} {j['final_loss']}")
    check("every step took time and had a finite grad norm > 0",
          all(h["seconds"] > 0 and 0 < h["grad_norm"] < float("inf") for h in hist), hist[:3])
    mean = sum(h["seconds"] for h in hist[1:]) / (STEPS - 1)
    check("step_time.total is the mean of the measured steps' seconds",
          "total" in st and abs(mean - st["total"]) <= 1e-6 * mean, f"{mean} vs {st.get('total')}")

# The fp16 loss scale in the step lines: exact at any size, never a wrapped integer (1e30 once
# printed as -9223372036854775808, 1e-30 as 0). Only the lines are checked, not the run's end.
with tempfile.TemporaryDirectory() as tmp:
    for scale, says in (("1e30", "scale 1e+30"), ("1e-30", "scale 1e-30"), ("0", "scale 65536")):
        cfg = os.path.join(tmp, "fp16.json")
        with open(cfg, "w") as f:
            f.write('{"fp16": {"enabled": true, "loss_scale": %s}}' % scale)
        r = subprocess.run([ZERO, "train", "-n", "1", "--device", "cpu", "--config", cfg,
                            "--steps", "2", "--log-every", "1"],
                           capture_output=True, text=True, timeout=300, env=user_env())
        lines = [l for l in r.stdout.splitlines() if l.startswith("step ") and " loss " in l]
        check(f"fp16 loss_scale {scale}: every step line says '{says}'",
              len(lines) == 2 and all(says + " " in l + " " for l in lines), r.stdout + r.stderr)
        check(f"fp16 loss_scale {scale}: no step line prints a negative scale",
              "scale -" not in r.stdout, r.stdout)

finish()
