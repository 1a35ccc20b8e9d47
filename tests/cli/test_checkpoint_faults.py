#!/usr/bin/env python3
"""A training job killed (SIGKILL, every process of it) at random moments while it saves a
checkpoint after every step, many times over, each job resuming from what the last one left:
after every kill, every step_* folder is a complete checkpoint (its meta.json names files of the
sizes it says), `latest` names a complete one, and the newest loads: a one-rank job resumes from
it, which reads every element and verifies every checksum. Unfinished saves stay hidden
(.partial-*) and are cleared by the next save.
Usage: test_checkpoint_faults.py path/to/zero. ZERO_CKPT_TRIALS (default 12) kills, within
ZERO_CKPT_SECONDS (default 150) seconds. Prints 'N passed, N failed' and the trials' outcomes."""
import json, os, random, re, signal, subprocess, sys, tempfile, time

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, user_env  # noqa: E402

TRIALS = int(os.environ.get("ZERO_CKPT_TRIALS", "12"))
BUDGET = float(os.environ.get("ZERO_CKPT_SECONDS", "150"))
MODEL = ["--width", "768", "--layers", "4", "--global-batch", "16"]  # 2.4M params: 28 MB a save
rng = random.Random(int(os.environ.get("ZERO_CKPT_SEED", "20261203")))


def session_pids(sid):
    """The live processes of session `sid` (the job: zero, mpirun and the ranks it starts)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                pids.append(int(d))
    return pids


def kill_job(sid):
    """SIGKILL every process of the job at once (mpirun's ranks are in their own process groups,
    so a group kill would leave them writing), and wait until none is left."""
    deadline = time.monotonic() + 30
    while (pids := session_pids(sid)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)
    return not session_pids(sid)


def complete(folder):
    """(step, path) of the step_* folders, and the problems of any that is not complete."""
    found, problems = [], []
    for d in sorted(os.listdir(folder)):
        if not d.startswith("step_"):
            continue
        path = os.path.join(folder, d)
        meta = os.path.join(path, "meta.json")
        if not os.path.isfile(meta):
            problems.append(f"{d} has no meta.json")
            continue
        with open(meta) as f:
            m = json.load(f)
        for fl in m["files"]:
            p = os.path.join(path, fl["name"])
            if not os.path.isfile(p) or os.path.getsize(p) != fl["bytes"]:
                problems.append(f"{d}/{fl['name']} is not the {fl['bytes']} bytes meta.json says")
        found.append((int(d[5:]), path))
    return found, problems


with tempfile.TemporaryDirectory() as tmp:
    ck = os.path.join(tmp, "ck")
    start = time.monotonic()
    trials = inside_save = loaded = 0
    stats = []
    while trials < TRIALS and time.monotonic() - start < BUDGET:
        stage = str(1 + trials % 3)
        resume = ["--resume", ck] if os.path.isdir(ck) and complete(ck)[0] else []
        job = subprocess.Popen([ZERO, "train", "-n", "2", "--stage", stage, *MODEL,
                                "--steps", "1000000", "--save", ck, "--save-every", "1",
                                "--keep", "3", "--log-every", "1000", *resume],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=user_env(), start_new_session=True)
        time.sleep(rng.uniform(1.0, 3.0))  # about 0.7 s to start, then ~10 saves a second
        gone = kill_job(job.pid)  # the job's session id is its first process's pid
        out = job.communicate()[0]
        check(f"kill {trials + 1}: every process of the job is gone", gone, out[-300:])
        trials += 1
        found, problems = complete(ck) if os.path.isdir(ck) else ([], [])
        partial = [d for d in os.listdir(ck) if d.startswith(".partial-")] if os.path.isdir(ck) else []
        inside_save += bool(partial)
        check(f"kill {trials} (stage {stage}): every step_* folder is complete", not problems,
              "\n".join(problems) + out[-500:])
        if not found:
            check(f"kill {trials}: the job had saved nothing yet", "error" not in out, out[-800:])
            continue
        latest_file = os.path.join(ck, "latest")
        latest = open(latest_file).read().strip() if os.path.exists(latest_file) else None
        check(f"kill {trials}: latest names a complete checkpoint",
              latest is None or os.path.isfile(os.path.join(ck, latest, "meta.json")), str(latest))
        newest = found[-1][0]
        r = subprocess.run([ZERO, "train", "-n", "1", "--stage", "0", *MODEL, "--steps",
                            str(newest + 1), "--resume", ck], capture_output=True, text=True,
                           env=user_env(), timeout=120)
        ok = r.returncode == 0 and f"step {newest}" in r.stdout
        loaded += ok
        check(f"kill {trials}: the newest checkpoint (step {newest}) loads and trains on", ok,
              r.stdout[-500:] + r.stderr)
        stats.append((newest, len(partial)))
    check("the kills ran", trials >= min(TRIALS, 3), f"{trials} trials")
    print(f"trials: {trials} kills in {time.monotonic() - start:.0f} s; {inside_save} left an "
          f"unfinished save behind (killed inside a save); the newest complete checkpoint loaded "
          f"after {loaded} of them; newest step after each kill: {[s for s, _ in stats]}")
finish()
