#!/usr/bin/env python3
"""The time model (zero/time_model.hpp, `zero plan --cluster-file`) against `zero compare`'s
measured step times: calibrate a profile of this machine at each rank count, predict every stage,
print predicted / measured.

For each rank count N:
  1. the collective sweep (build/bench/comm_bench: zero's reduce-scatter and all-gather at
     several sizes, the best of --iters each) fitted to t = a + x / B, x = size (N-1)/N: B is the
     bus bandwidth (intra_bandwidth_GBs), a the per-call latency (call_latency_us);
  2. `zero compare -n N` (the GPT, stages 0-3, the same start): the measured steps;
  3. from stage 0's measured step only: the optimizer's bandwidth = owned params x the model's
     bytes per param / its optimizer seconds, and the compute efficiency that makes the model's
     stage-0 step (its predicted communication included) equal the measured median, found by
     bisection (what overlap hides depends on the compute it hides behind): the ranks
     time-share 2 cores at 3 and 4 ranks, so a rank's compute, its waits for slower ranks and its
     data time are one figure, "what a rank does between collectives";
  4. `zero plan --preset ... -n N --cluster-file calibrated.json --json`: the predicted step of
     every stage, set beside the measured median.
Stage 0 is the calibration (its predicted/measured is 1 by construction); stages 1-3 are
predictions: their different traffic, overlap and optimizer shards.

Two emulated nodes (scripts/emulated-cluster, root): --emulated RATE runs the same across the
two namespaces at 4 ranks (2 a node), the inter-node link measured by the sweep across them
(its bus bandwidth times the 4/3 ring-loads a flat group of direct exchange puts on the link)
and predicted with `--algorithm direct` (`--shard-size 2` adds the hierarchical run).

  python3 bench/predict.py [--zero build/cli/zero] [--ranks 2,3,4] [--preset gpt-nano]
      [--global-batch 12] [--steps 12] [--warmup 3] [--reps 3] [--data FILE] [--json out.json]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return e


def mpirun(n, prefix):
    if prefix:
        return prefix
    return ["mpirun", "-q", "--oversubscribe", "-n", str(n), "-x",
            "OMPI_MCA_btl_vader_single_copy_mechanism=none"]


def sweep(a, n, prefix=None):
    """(bus bandwidth B/s, per-call latency s) of zero's reduce-scatter and all-gather at n ranks."""
    cmd = mpirun(n, prefix) + [a.comm_bench, "--sizes", "256K,1M,2M,4M", "--iters", "10",
                               "--dtypes", "f32,bf16", "--no-verify"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env(), check=True).stdout
    xs, ys = [], []
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) < 9 or cells[1] not in ("reduce_scatter", "all_gather"):
            continue
        num, unit = cells[0].split()
        size = float(num) * {"KiB": 1024, "MiB": 1048576, "GiB": 1 << 30}.get(unit, 1)
        xs.append(size * (n - 1) / n)
        ys.append(float(cells[7]) * 1e-6)  # ours, best, seconds
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return 1.0 / slope, max(0.0, my - slope * mx)


def link_loads(per_node, nodes):
    """Ring-loads one group of direct exchange puts on a node's link (zero/time_model.hpp)."""
    k, m = per_node, nodes
    return k * k * (m - 1) / (k * m - 1) if m > 1 else 0.0


def compare(a, n, tmp, prefix=None, extra=()):
    """zero compare with --repeats runs of each stage in rotating rounds: per stage the median of
    every measured step, its min and max, and the mean split."""
    js = os.path.join(tmp, f"cmp{n}{'-'.join(extra)}.json")
    cmd = [a.zero, "compare", "--model", "gpt", "--preset", a.preset, "--data", a.data,
           "--device", "cpu", "--global-batch", str(a.global_batch), "--steps", str(a.steps),
           "--warmup", str(a.warmup), "--repeats", str(a.reps), "--json", js, *extra]
    cmd = prefix + cmd if prefix else cmd + ["-n", str(n)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env())
    if r.returncode != 0:
        sys.exit(f"zero compare failed:\n{r.stdout}\n{r.stderr}")
    with open(js) as f:
        merged = json.load(f)
    for s in merged["stages"]:
        s["median_seconds"] = statistics.median(s["step_seconds"])
    merged["stages"].sort(key=lambda s: s["stage"])
    return merged


def plan(a, n, profile, tmp, extra=()):
    js = os.path.join(tmp, f"plan{n}.json")
    # zero's MPI transport: every rank sends each peer its block (docs/time.md, "Which link").
    cmd = [a.zero, "plan", "--preset", a.preset, "-n", str(n), "--micro-batch",
           str(a.global_batch // n), "--cluster-file", profile, "--algorithm", "direct",
           "--json", js, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env())
    if r.returncode != 0:
        sys.exit(f"zero plan failed:\n{r.stdout}\n{r.stderr}")
    with open(js) as f:
        return {p["stage"]: p for p in json.load(f)}


def calibrate(a, n, measured, bus, latency, tmp, nodes=1, inter=None, extra=(), codec=None,
              compute=None):
    """A profile of this machine at n ranks from the sweep and stage 0's measured split; `codec`:
    bench/codec_bench's profile keys (compression's per-value rates), if measured; `compute`:
    the run's own measured forward and backward seconds, taken as they are instead of solved for."""
    s0 = next(s for s in measured["stages"] if s["stage"] == 0)
    # The ranks share the cores: one rank's peak is the cores' measured peak over the ranks.
    peak = measured["peak_flops"] / n if measured["peak_flops"] > 0 else 1e11
    # A first plan on any profile gives 6 Psi T and the bytes the optimizer moves.
    base = os.path.join(tmp, "base.json")
    with open(base, "w") as f:
        json.dump({"name": "probe", "base": "h200", "gpus_per_node": n // nodes}, f)
    stage0 = plan(a, n, base, tmp, extra)[0]
    probe = stage0["time"]
    flops_per_rank = probe["flops_per_step"] / n
    owned = stage0["master_bytes"] / 4  # the fp32 master: the params this rank updates
    opt_bw = owned * probe["optimizer_bytes_per_param"] / max(s0["split"]["optimizer"], 1e-9)
    prof = {"name": f"this machine, {n} ranks", "base": "h200",
            "peak_tflops": peak / 1e12, "compute_efficiency": 1.0,
            "memory_GiB": 24, "hbm_bandwidth_GBs": opt_bw / 1e9, "hbm_efficiency": 1.0,
            "gpus_per_node": n // nodes, "intra_bandwidth_GBs": bus / 1e9,
            "inter_bandwidth_GBs": (inter or bus) / 1e9, "intra_latency_us": 0.0,
            "inter_latency_us": 0.0, "call_latency_us": latency * 1e6,
            "sources": "bench/predict.py: comm_bench sweep and zero compare's stage 0 on this machine"}
    prof.update(codec or {})
    path = os.path.join(tmp, f"profile{n}.json")

    def step(compute):  # the model's stage-0 step with `compute` seconds of forward and backward
        prof["compute_efficiency"] = min(1.0, flops_per_rank / (peak * compute))
        with open(path, "w") as f:
            json.dump(prof, f)
        return plan(a, n, path, tmp, extra)[0]["time"]["step_seconds"]

    # The compute that makes the model's step equal the measured median. What overlap hides
    # depends on the compute it hides behind, so the compute is not the median less one plan's
    # exposed communication: the step grows with the compute (by 1 less what more of it hides),
    # and bisection finds where it meets the median.
    if compute is not None:
        step(compute)
        return path, prof
    target = s0["median_seconds"]
    lo, hi = flops_per_rank / peak, max(target, flops_per_rank / peak)
    if step(lo) < target:
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if step(mid) < target else (lo, mid)
            if hi - lo < 1e-6 * target:
                break
        step(hi)
    return path, prof


def report(label, n, predicted, measured, rows):
    for s in measured["stages"]:
        p = predicted[s["stage"]]["time"]["step_seconds"]
        m = s["median_seconds"]
        rows.append({"case": label, "ranks": n, "stage": s["stage"], "predicted": p, "measured": m,
                     "ratio": p / m, "spread": [s["min_seconds"], s["max_seconds"]],
                     "exposed_measured": s["split"]["exposed_comm"],
                     "exposed_predicted": predicted[s["stage"]]["time"]["comm_exposed_seconds"]})
        print(f"  {label:<22} {n:>2} ranks  stage {s['stage']}  predicted {1e3 * p:8.2f} ms  "
              f"measured {1e3 * m:8.2f} ms (min {1e3 * s['min_seconds']:.2f}, max "
              f"{1e3 * s['max_seconds']:.2f})  predicted/measured {p / m:5.2f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zero", default=os.path.join(ROOT, "build/cli/zero"))
    p.add_argument("--comm-bench", default=os.path.join(ROOT, "build/bench/comm_bench"))
    p.add_argument("--ranks", default="2,3,4")
    p.add_argument("--preset", default="gpt-nano")
    p.add_argument("--global-batch", type=int, default=12)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=3, help="zero compare --repeats")
    p.add_argument("--data", default=None)
    p.add_argument("--emulated", default=None, help="a tbf rate (e.g. 1gbit): two emulated nodes")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="zero-predict-")
    if not a.data:
        prefix = os.path.join(tmp, "jargon")
        text = subprocess.run(["zcat", "/usr/share/doc/jargon-text/jargon.txt.gz"], capture_output=True,
                              check=True).stdout
        subprocess.run([a.zero, "data", "-", "--out", prefix], input=text, check=True,
                       capture_output=True)
        a.data = prefix + "_train.bin"
    rows = []
    print(f"time model vs zero compare: {a.preset}, global batch {a.global_batch}, {a.warmup} "
          f"warm-up + {a.steps} measured steps")
    if a.emulated:
        # Two nodes of 2 ranks: in a node the link of this machine's 2-rank sweep, between the
        # nodes the veth (its bus bandwidth from a 4-rank sweep across them). Calibrated on the
        # flat run's stage 0; the hierarchical run (shard groups of a node, replicas across) is
        # predicted with the same profile.
        ec = os.path.join(ROOT, "scripts", "emulated-cluster")
        run = [ec, "run"]
        intra, _ = sweep(a, 2)
        for rate in a.emulated.split(","):
            subprocess.run([ec, "shape", "--rate", rate], check=True, capture_output=True)
            bus, lat = sweep(a, 4, run)
            # The sweep's flat group sends from both ranks of a node across: with direct
            # exchange k^2 (m-1) / (km-1) = 4/3 ring-loads on the link (zero/time_model.hpp,
            # link_loads), so the link itself runs 4/3 faster than the bus bandwidth read.
            inter = bus * link_loads(2, 2)
            node = ("--ranks-per-node", "2")
            flat = compare(a, 4, tmp, run)
            prof, cal = calibrate(a, 4, flat, intra, lat, tmp, nodes=2, inter=inter, extra=node)
            print(f"  {rate}: across the nodes {bus / 1e9:.3f} GB/s bus, the link {inter / 1e9:.3f} "
                  f"GB/s, call {lat * 1e6:.0f} us; "
                  f"in a node {intra / 1e9:.2f} GB/s; compute efficiency "
                  f"{cal['compute_efficiency']:.3f}")
            report(f"2 nodes {rate} flat", 4, plan(a, 4, prof, tmp, node), flat, rows)
            hier = compare(a, 4, tmp, run, ("--shard-size", "2"))
            report(f"2 nodes {rate} hier", 4,
                   plan(a, 4, prof, tmp, node + ("--shard-size", "2")), hier, rows)
    else:
        for n in [int(x) for x in a.ranks.split(",")]:
            bus, lat = sweep(a, n)
            measured = compare(a, n, tmp)
            prof, cal = calibrate(a, n, measured, bus, lat, tmp)
            print(f"  calibrated at {n} ranks: bus {bus / 1e9:.2f} GB/s, call {lat * 1e6:.0f} us, "
                  f"compute efficiency {cal['compute_efficiency']:.3f} of {cal['peak_tflops'] * 1e3:.1f} "
                  f"GFLOP/s, optimizer {cal['hbm_bandwidth_GBs']:.1f} GB/s")
            report("one machine", n, plan(a, n, prof, tmp), measured, rows)
    worst = max(abs(r["ratio"] - 1) for r in rows)
    print(f"worst |predicted/measured - 1| = {worst:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
