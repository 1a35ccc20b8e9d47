#!/usr/bin/env python3
"""What a checkpoint costs `zero train`: the loop's stall per save, each rank's write bandwidth
against the disk's own (dd with fsync, measured in the same run), and the training time with
saves in the background, with saves in the loop (--save-sync) and without saves, interleaved
(A/B/C, the order rotating each repetition).

  python3 bench/checkpoint.py [--zero build/cli/zero] [--ranks 2] [--stage 3] [--width 2048]
      [--layers 4] [--steps 12] [--every 3] [--reps 3] [--dir /tmp] [--json out.json]

The model is the MLP (layers x width^2 weights): width 2048, 4 layers = 16.8M params, 201 MB of
fp32 master + Adam moments a checkpoint. dd writes the same bytes a rank writes, with
conv=fsync, as each rank's save does, R of them at once as the R ranks write at once. Bandwidth of
a save = R x rank 0's piece file / the time rank 0's writer thread took to write and fsync it.
"""
import argparse, json, os, re, shutil, statistics, subprocess, sys, tempfile, time


def dd(folder, mbytes, writers):
    """MB/s of `writers` dd processes at once, each writing mbytes with fsync (as the ranks do)."""
    paths = [os.path.join(folder, f"dd{i}.bin") for i in range(writers)]
    t = time.monotonic()
    procs = [subprocess.Popen(["dd", "if=/dev/zero", f"of={p}", "bs=1M", f"count={mbytes}",
                               "conv=fsync"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for p in paths]
    for p in procs:
        p.wait()
    s = time.monotonic() - t
    for p in paths:
        os.remove(p)
    return writers * mbytes * 1048576 / s / 1e6


def train(a, folder, mode, rep):
    js = os.path.join(folder, f"{mode}-{rep}.json")
    ck = os.path.join(folder, f"ck-{mode}-{rep}")
    args = [a.zero, "train", "-n", str(a.ranks), "--stage", str(a.stage), "--width", str(a.width),
            "--layers", str(a.layers), "--steps", str(a.steps), "--log-every", "1000",
            "--json", js]
    if mode != "none":
        args += ["--save", ck, "--save-every", str(a.every), "--keep", "1"]
    if mode == "sync":
        args += ["--save-sync"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"zero train failed:\n{r.stdout}\n{r.stderr}")
    with open(js) as f:
        j = json.load(f)
    shutil.rmtree(ck, ignore_errors=True)
    total = sum(h["seconds"] for h in j["history"])
    return j, total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zero", default="build/cli/zero")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--stage", type=int, default=3)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--every", type=int, default=3)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    folder = tempfile.mkdtemp(dir=a.dir, prefix="zero-ckpt-bench-")
    rows = {"none": [], "background": [], "sync": []}
    stalls, copies, bws, dds = [], [], [], []
    order = ["none", "background", "sync"]
    try:
        for rep in range(a.reps):
            for mode in order[rep % 3:] + order[:rep % 3]:
                j, total = train(a, folder, mode, rep)
                rows[mode].append(total)
                for s in j.get("checkpoints", []):
                    if mode == "background":
                        stalls.append(s["loop_stall_seconds"])
                        copies.append(s["copy_seconds"])
                    # every rank writes its own file at the same time: the disk sees ranks x this
                    bws.append(a.ranks * s["bytes_rank0"] / s["write_seconds"] / 1e6)
                    mb = s["bytes_rank0"] // 1048576 + 1
            dds.append(dd(folder, mb, a.ranks))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    med = statistics.median
    per_rank_mb = mb
    step = med(rows["none"]) / a.steps
    print(f"zero checkpoint benchmark: {a.ranks} ranks, stage {a.stage}, MLP {a.layers} x {a.width}, "
          f"{a.steps} steps, a save every {a.every}, {a.reps} reps interleaved; {per_rank_mb} MB "
          f"a rank a save")
    print(f"  disk ({a.ranks} dd at once, bs=1M conv=fsync, {per_rank_mb} MB each): min {min(dds):.0f}  "
          f"median {med(dds):.0f} MB/s")
    print(f"  the ranks' saves (write + fsync, {a.ranks} x rank 0's rate): min {min(bws):.0f}  median "
          f"{med(bws):.0f} MB/s = {med(bws) / med(dds):.2f} of dd (median/median)")
    print(f"  loop stall a save (background): median {1e3 * med(stalls):.1f} ms, most "
          f"{1e3 * max(stalls):.1f} ms (the copy to host: median {1e3 * med(copies):.1f} ms); "
          f"a step without saves takes {1e3 * step:.1f} ms")
    for mode in ("background", "sync"):
        ratio = [x / y for x, y in zip(rows[mode], rows["none"])]
        print(f"  training time with saves ({mode}) / without: min {min(ratio):.3f}  median "
              f"{med(ratio):.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"dd_mb_s": dds, "save_mb_s": bws, "stall_s": stalls, "copy_s": copies,
                       "train_seconds": rows, "args": vars(a)}, f, indent=1)


if __name__ == "__main__":
    main()
