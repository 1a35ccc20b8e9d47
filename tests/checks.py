"""What the suite's end-to-end test scripts share: check() counts and prints one result,
alive() says whether a process still runs, user_env() is the environment of a user's shell (no launcher variables: the test itself may run
under one, and `zero -n N` must relaunch as it would for a user), token_file() makes the token
file a `zero train --data` reads, one_error() judges a refusal, checksum() reads a run's weights
checksum, finish() prints the closing 'N passed, N failed' line and exits
non-zero on any failure."""
import os
import re
import subprocess
import sys

_counts = {"passed": 0, "failed": 0}
LAUNCHER_VARIABLES = ("OMPI_", "PMIX_", "PMI_", "SLURM_", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                      "ZERO_RELAUNCHED")


def check(name, ok, detail=""):
    if ok:
        _counts["passed"] += 1
        print(f"ok   {name}")
    else:
        _counts["failed"] += 1
        print(f"FAIL {name}\n     {detail}")


def user_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARIABLES)}
    env.update(extra)
    return env


def runner(zero, **extra_env):
    """zero(*args, timeout=300, env=None): the binary at the path zero run as a user runs it (in
    user_env(**extra_env), or env), its output captured as text."""
    def run(*args, timeout=300, env=None):
        return subprocess.run([zero, *args], capture_output=True, text=True, timeout=timeout,
                              env=env or user_env(**extra_env))
    return run


def token_file(zero, tmp, text):
    """Writes text to tmp/text.txt, makes it into byte tokens with `zero data` (the binary at the
    path zero), checks that this succeeded and returns the path of the training file."""
    txt = os.path.join(tmp, "text.txt")
    with open(txt, "w") as f:
        f.write(text)
    prefix = os.path.join(tmp, "t")
    r = subprocess.run([zero, "data", txt, "--out", prefix], capture_output=True, text=True,
                       timeout=300, env=user_env())
    check("zero data makes the token files", r.returncode == 0, r.stdout + r.stderr)
    return prefix + "_train.bin"


def one_error(name, r, *words):
    """(name, ok, detail) for check(): failed with one 'error' line on stderr holding every word."""
    lines = [l for l in r.stderr.splitlines() if "error" in l.lower()]
    return (name, r.returncode != 0 and len(lines) == 1 and all(w in lines[0] for w in words),
            r.stdout + r.stderr)


def checksum(out):
    """The weights' checksum a run's summary line ends with, or None."""
    m = re.search(r"checksum ([0-9a-f]{16})", out)
    return m.group(1) if m else None


def alive(pid):
    """True while pid exists and is not a zombie (a zombie has ended; only its parent reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def finish():
    print(f"{_counts['passed']} passed, {_counts['failed']} failed")
    sys.exit(1 if _counts["failed"] else 0)
