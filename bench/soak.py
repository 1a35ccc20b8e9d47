#!/usr/bin/env python3
"""Soak: a long run of small `zero train` steps whose ranks' resident memory (RSS) is sampled as
it goes, to show that a run's memory does not grow with its step count (docs/benchmarks.md,
"Memory over a long run"). Prints each rank's RSS near the start, the middle and the end (the last sample before
the final step's line: the summary and its files come after), and the slope of RSS against the step (least squares over the samples after the first tenth of the
run) in bytes per step. Not a test: a million steps take minutes.

Usage: bench/soak.py [--zero build/cli/zero] [--steps 1000000] [-n 2] [--every 0.25]
"""
import argparse, os, re, subprocess, sys, tempfile, threading, time


def children():
    """pid -> [child pids], from /proc."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def ranks(root):
    """The rank processes under `root`: `zero` processes without a `zero` below them (the
    launcher, when it relaunched under mpirun, has its ranks below it)."""
    kids, out = children(), []

    def below(pid):
        return [c for k in kids.get(pid, []) for c in [k] + below(k)]

    for pid in [root] + below(root):
        if comm(pid) == "zero" and not any(comm(c) == "zero" for c in below(pid)):
            out.append(pid)
    return sorted(out)


def slope(points):
    """Least-squares slope of y against x."""
    n = len(points)
    if n < 2:
        return float("nan")
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else float("nan")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--zero", default=os.path.join(here, "..", "build", "cli", "zero"))
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("-n", type=int, default=2, help="ranks")
    p.add_argument("--every", type=float, default=0.25, help="seconds between samples")
    a = p.parse_args()
    log_every = max(1, a.steps // 200)
    with tempfile.TemporaryDirectory() as tmp:
        # The smallest model zero trains: one MLP layer of width 8, one sample a rank a step; the
        # --json and --plot files make rank 0 keep its per-step record, as a user's run would.
        cmd = [a.zero, "train", "-n", str(a.n), "--device", "cpu", "--precision", "fp32",
               "--layers", "1", "--width", "8", "--global-batch", str(a.n), "--steps",
               str(a.steps), "--log-every", str(log_every), "--json",
               os.path.join(tmp, "soak.json"), "--plot", os.path.join(tmp, "soak.svg")]
        print("$", " ".join(cmd), flush=True)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        state = {"step": 0, "tail": []}

        def read():
            for line in proc.stdout:
                m = re.match(r"step\s+(\d+)\s+loss", line)
                if m:
                    state["step"] = int(m.group(1))
                state["tail"] = (state["tail"] + [line])[-20:]

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        samples = {}  # rank pid -> [(step, rss)]
        t0 = time.time()
        while proc.poll() is None:
            step = state["step"]
            if step > 0:
                for pid in ranks(proc.pid):
                    r = rss(pid)
                    if r is not None:
                        samples.setdefault(pid, []).append((step, r))
            time.sleep(a.every)
        reader.join()
        seconds = time.time() - t0
        if proc.returncode != 0:
            sys.exit("zero train failed:\n" + "".join(state["tail"]))
        with open(os.path.join(tmp, "soak.json")) as f:
            import json
            j = json.load(f)
    print(f"{a.steps} steps on {a.n} rank(s) in {seconds:.0f} s; the json's history holds "
          f"{len(j.get('history', []))} steps (history_stride {j.get('history_stride', 1)})")
    print(f"{'rank (pid)':>12} {'start':>10} {'middle':>10} {'end':>10} {'slope':>14}")
    for i, (pid, pts) in enumerate(sorted(samples.items())):
        # Up to the last step line: after it come the summary, --json and --plot, whose
        # buffers are the report's, not the run's.
        pts = [(s, r) for s, r in pts if 0 < s < a.steps]
        if not pts:
            continue
        at = lambda frac: min(pts, key=lambda p: abs(p[0] - frac * a.steps))[1]
        steady = [(s, r) for s, r in pts if s >= a.steps // 10]
        mib = lambda b: f"{b / 2**20:.2f} MiB"
        print(f"{i:>5} ({pid:>5}) {mib(at(0)):>10} {mib(at(0.5)):>10} {mib(pts[-1][1]):>10} "
              f"{slope(steady):>8.4f} B/step")


if __name__ == "__main__":
    main()
