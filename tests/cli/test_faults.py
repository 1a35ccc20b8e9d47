#!/usr/bin/env python3
"""The `zero` command when a job goes wrong, as a user sees it: a stalled rank ends the job with
one whole error line and no mpirun banner, a mistyped command gets a did-you-mean, and a launcher
whose task count MPI does not see (srun without PMI, torchrun) is refused with a sentence saying
how to launch. Usage: test_faults.py path/to/zero. Prints 'N passed, N failed'."""
import os, re, signal, subprocess, sys, time, uuid

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import alive, check, finish, user_env  # noqa: E402






def run(*args, timeout=60, **extra):
    return subprocess.run([ZERO, *args], capture_output=True, text=True, timeout=timeout,
                          env=user_env(**extra))


def environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return {}


def rank_pids(marker):
    """{rank: pid} of the zero processes of the job started with ZERO_FAULT_TEST=marker."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        env = environ(int(d))
        if env.get(b"ZERO_FAULT_TEST") == marker.encode() and b"OMPI_COMM_WORLD_RANK" in env:
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if not f.read().split(b"\0")[0].endswith(b"zero"):
                        continue
            except OSError:
                continue
            found[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(d)
    return found


# A mistyped command.
r = run("trian")
check("a mistyped command gets a did-you-mean",
      r.returncode == 2 and "unknown command 'trian'; did you mean 'train'?" in r.stderr, r.stderr)
r = run("comm-chek")
check("a mistyped comm-check gets a did-you-mean",
      "did you mean 'comm-check'?" in r.stderr, r.stderr)
r = run("frobnicate")
check("a command close to none gets no suggestion",
      r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr and
      "did you mean" not in r.stderr, r.stderr)

# srun without PMI support: each task is a singleton MPI job while srun announced 2 tasks.
for variables in ({"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0"},
                  {"SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0"}):
    r = run("comm-check", "--mib", "1", "--iters", "1", **variables)
    check(f"a task of srun without PMI ({', '.join(variables)}) is refused, saying how to launch",
          r.returncode == 1 and "srun started 2 tasks" in r.stderr and
          "MPI sees a job of 1 rank" in r.stderr and "srun --mpi=pmix" in r.stderr and
          "all collectives exact" not in r.stdout, r.stdout + r.stderr)
# sbatch sets SLURM_NTASKS in the batch script itself, where a singleton run is legitimate.
r = run("comm-check", "--mib", "1", "--iters", "1", SLURM_NTASKS="2")
check("SLURM_NTASKS outside an srun step (a batch script) is not a launcher",
      r.returncode == 0 and "all collectives exact" in r.stdout, r.stdout + r.stderr)

# torchrun's variables.
# (Inside a job: the check after MPI starts; with -n: before relaunching anything.)
for args in (("comm-check", "--mib", "1", "--iters", "1"), ("comm-check", "-n", "2")):
    r = run(*args, WORLD_SIZE="2", RANK="0", LOCAL_RANK="0")
    check(f"zero {' '.join(args)} under torchrun's variables says zero launches with mpirun/srun",
          r.returncode == 1 and "WORLD_SIZE=2 is set (torchrun's variables)" in r.stderr and
          f"zero {args[0]} -n 2" in r.stderr and "srun --mpi=pmix" in r.stderr and
          r.stderr.count("\n") == 1, r.stdout + r.stderr)
r = run("comm-check", "--mib", "1", "--iters", "1", WORLD_SIZE="1", RANK="0")
check("WORLD_SIZE=1 alone changes nothing", r.returncode == 0, r.stdout + r.stderr)

# --timeout is checked.
r = run("comm-check", "--timeout", "0")
check("comm-check --timeout 0 is refused with a sentence",
      r.returncode == 1 and "--timeout must be a positive number of seconds, got 0" in r.stderr,
      r.stderr)

def threads(pid):
    """The names of pid's threads ('zero-comm' is a communicator's communication thread)."""
    names = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/comm") as f:
                    names.append(f.read().strip())
            except OSError:
                pass
    except OSError:
        pass
    return names


def stalled_rank(name, ready, expected):
    """Starts comm-check on 3 ranks, SIGSTOPs rank 1 once ready(pids) holds, and checks that the
    job ends within the timeout plus a few seconds with one whole error line that matches
    expected(stopped rank's thread names), no mpirun banner, and no process left behind."""
    marker = uuid.uuid4().hex
    p = subprocess.Popen([ZERO, "comm-check", "-n", "3", "--timeout", "2", "--mib", "1",
                          "--iters", "1000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=user_env(ZERO_FAULT_TEST=marker))
    pids, deadline = {}, time.monotonic() + 60
    while not (len(pids) == 3 and ready(pids)) and time.monotonic() < deadline and \
            p.poll() is None:
        time.sleep(0.02)
        pids = rank_pids(marker)
    check(f"{name}: comm-check -n 3 starts 3 ranks", len(pids) == 3 and ready(pids), pids)
    if len(pids) != 3:
        p.kill()
        p.wait()
        return
    os.kill(pids[1], signal.SIGSTOP)
    stopped = time.monotonic()
    where = threads(pids[1])  # frozen now: where it stopped
    try:
        out, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        out, err = "", "(still running after 20 s: killed by the test)"
    seconds = time.monotonic() - stopped
    for pid in pids.values():  # whatever happened, leave nothing behind
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    if p.poll() is None:
        p.kill()
        p.wait()
    lines = [l for l in err.splitlines() if l.strip()]
    check(f"{name}: comm-check ends non-zero", p.returncode not in (0, None), p.returncode)
    check(f"{name}: it ends within the timeout plus a few seconds", seconds < 8, f"{seconds:.1f} s")
    check(f"{name}: one whole error line, no mpirun banner",
          len(lines) == 1 and lines[0].startswith("zero comm-check: error: rank ") and
          re.search(expected(where), lines[0]) is not None, f"threads of rank 1: {where}\n{err}")
    time.sleep(1.0)
    check(f"{name}: no rank is left behind", not any(alive(pid) for pid in pids.values()), pids)


# The job's ranks are past MPI startup once each has its communication thread.
def communicating(pids):
    return all("zero-comm" in threads(pid) for pid in pids.values())


# A rank that stalls in the timed loop (SIGSTOP from outside, as a stuck node would): the error
# names it, as having not arrived, or as the peer a rank waited for in the middle of a collective
# (in a ring, rank 0 may wait for rank 2, which waits for rank 1).
NAMED = (r"timed out after 2 s.*(?:ranks? (?:[0-9,]*,)?1(?:,[0-9,]*)? ha(?:s|ve) not|waiting for "
         r"[a-z_ ]+ rank [12] \(every rank had reached this collective)")
stalled_rank("a rank stalled in the timed loop", communicating, lambda where: NAMED)

# A rank that stalls as soon as it exists, most likely in MPI startup (MPI_Init has no timeout:
# the runtime's startup watchdog ends the job), else while the communicator is created, else in
# the loop: whichever its threads say.
STARTUP = r"MPI startup \(MPI_Init_thread\) did not finish within 2 s"
CREATE = r"make_mpi_communicator: timed out after 2 s"
stalled_rank("a rank stalled at start", lambda pids: True,
             lambda where: NAMED if "zero-comm" in where else f"{STARTUP}|{CREATE}")

finish()
