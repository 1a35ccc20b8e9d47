#!/usr/bin/env python3
"""A rank that dies ends the job with one line naming it (docs/design.md, "Note: the failure
path"): `zero train -n 3` with one rank killed by SIGKILL or SIGTERM ends within seconds, non-zero,
with one line naming the rank, its pid and host, the signal and its usual cause, and no rank left
behind; Ctrl-C to the launcher's process group ends it with one line too; a launcher killed
outright still ends its ranks. A stand-in mpirun (this script, run as `mpirun`) prints Open MPI
4.1's own reports of a rank's early exit, to check how the launcher reads them. And `-n` above the
cores prints one note on stdout. Usage: test_dead_rank.py path/to/zero. Prints 'N passed, N failed'."""
import os, signal, socket, stat, subprocess, sys, tempfile, time, uuid

HERE = os.path.dirname(os.path.abspath(__file__))

# As a stand-in mpirun: print what FAKE_MPIRUN_CASE says Open MPI would, and exit with its status.
if "FAKE_MPIRUN_CASE" in os.environ:
    BOX = "-" * 74
    case = os.environ["FAKE_MPIRUN_CASE"]
    out = sys.stderr
    if case == "exit":
        out.write("zero-launch: rank 2 pid 4242 host nodeb\n")
        out.write(f"{BOX}\nPrimary job  terminated normally, but 1 process returned\na non-zero "
                  f"exit code. Per user-direction, the job has been aborted.\n{BOX}\n")
        out.write(f"{BOX}\nmpirun detected that one or more processes exited with non-zero "
                  "status, thus causing\nthe job to be terminated. The first process to do so "
                  f"was:\n\n  Process name: [[27930,1],2]\n  Exit code:    3\n{BOX}\n")
        sys.exit(3)
    if case == "improper":
        out.write(f"{BOX}\nmpirun has exited due to process rank 1 with PID 0 on\nnode nodea "
                  "exiting improperly. There are three reasons this could occur:\n"
                  f"(the rest of Open MPI's explanation)\n{BOX}\n")
        sys.exit(1)
    if case == "trouble":
        out.write(f"{BOX}\nThere are not enough slots available in the system to satisfy the 3\n"
                  f"slots that were requested by the application:\n{BOX}\n")
        sys.exit(1)
    if case == "silent":
        sys.exit(5)
    if case == "errors":  # zero's own line from two nodes, then the abort's banner
        line = "zero comm-check: error: rank 0: something every rank saw\n"
        out.write(line + line.replace("rank 0", "rank 2"))
        out.write(f"{BOX}\nMPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\nwith "
                  f"errorcode 1.\n{BOX}\n[nodea:01234] [[1,0],0] ORTE_ERROR_LOG: Data unpack\n")
        sys.exit(1)
    sys.exit(99)

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(HERE, ".."))
from checks import alive, check, finish, user_env  # noqa: E402

HOST = socket.gethostname()
CORES = len(os.sched_getaffinity(0))
TRAIN = ["train", "-n", "3", "--global-batch", "48", "--stage", "3", "--steps", "1000000",
         "--timeout", "10"]


def rank_pids(marker):
    """{rank: pid} of the ranks of the job started with ZERO_FAULT_TEST=marker."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if env.get(b"ZERO_FAULT_TEST") == marker.encode() and b"OMPI_COMM_WORLD_RANK" in env:
            found[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(d)
    return found


def training(pids):
    """True once every rank has its communication thread: the job is past MPI startup."""
    def names(pid):
        try:
            return [open(f"/proc/{pid}/task/{t}/comm").read().strip()
                    for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return []
    return len(pids) == 3 and all("zero-comm" in names(pid) for pid in pids.values())


def start_job(**popen):
    marker = uuid.uuid4().hex
    p = subprocess.Popen([ZERO, *TRAIN], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=user_env(ZERO_FAULT_TEST=marker), **popen)
    pids, deadline = {}, time.monotonic() + 60
    while not training(pids) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
        pids = rank_pids(marker)
    return p, pids


def end_job(p, pids, since):
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        out, err = "", "(still running after 30 s: killed by the test)"
    seconds = time.monotonic() - since
    time.sleep(1.0)
    left = [pid for pid in pids.values() if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    if p.poll() is None:
        p.kill()
        p.wait()
    return out, [l for l in err.splitlines() if l.strip()], seconds, left


def dead_rank(sig, words):
    name = signal.Signals(sig).name
    p, pids = start_job()
    check(f"{name}: zero train -n 3 starts 3 ranks", training(pids), pids)
    if not training(pids):
        end_job(p, pids, time.monotonic())
        return
    os.kill(pids[1], sig)
    out, lines, seconds, left = end_job(p, pids, time.monotonic())
    named = f"zero train: error: rank 1 of 3 (pid {pids[1]} on host {HOST}) was killed by " \
            f"signal {int(sig)} ({name}), {words}"
    check(f"{name}: the job ends with one line naming the rank, its pid and host, the signal "
          "and its cause", len(lines) == 1 and lines[0].startswith(named), "\n".join(lines))
    check(f"{name}: the exit status is 128 + the signal", p.returncode == 128 + int(sig),
          p.returncode)
    check(f"{name}: within a few seconds", seconds < 6, f"{seconds:.1f} s")
    check(f"{name}: no rank is left behind", not left, left)


dead_rank(signal.SIGKILL, "usually the kernel's out-of-memory killer")
dead_rank(signal.SIGTERM, "usually a scheduler ending the job")

# Ctrl-C: SIGINT to the launcher's process group (a terminal sends it to the foreground group).
p, pids = start_job(start_new_session=True)
check("Ctrl-C: zero train -n 3 starts 3 ranks", training(pids), pids)
if training(pids):
    os.killpg(p.pid, signal.SIGINT)
    out, lines, seconds, left = end_job(p, pids, time.monotonic())
    check("Ctrl-C: one line says the job was interrupted",
          lines == ["zero train: interrupted by SIGINT (Ctrl-C): the job's 3 ranks were ended"],
          "\n".join(lines))
    check("Ctrl-C: exit status 130", p.returncode == 130, p.returncode)
    check("Ctrl-C: within a few seconds, no rank left behind", seconds < 6 and not left,
          f"{seconds:.1f} s, left {left}")
else:
    end_job(p, pids, time.monotonic())

# The launcher killed outright (SIGKILL, which it cannot pass on): mpirun ends the ranks.
p, pids = start_job()
if training(pids):
    p.kill()
    since = time.monotonic()
    while any(alive(pid) for pid in pids.values()) and time.monotonic() - since < 10:
        time.sleep(0.05)
    seconds = time.monotonic() - since
    check("a launcher killed with SIGKILL leaves no rank behind",
          not any(alive(pid) for pid in pids.values()), f"{seconds:.1f} s")
end_job(p, pids, time.monotonic())

# Open MPI's reports of a rank's end, from a stand-in mpirun.
with tempfile.TemporaryDirectory() as bin_dir:
    fake = os.path.join(bin_dir, "mpirun")
    with open(fake, "w") as f:
        f.write(f"#!/bin/sh\nexec {sys.executable} {os.path.abspath(__file__)} \"$@\"\n")
    os.chmod(fake, stat.S_IRWXU)

    def fake_run(case):
        env = user_env(FAKE_MPIRUN_CASE=case)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        r = subprocess.run([ZERO, "comm-check", "-n", "3", "--iters", "1"], capture_output=True,
                           text=True, timeout=60, env=env)
        return r.returncode, [l for l in r.stderr.splitlines() if l.strip()]

    code, lines = fake_run("exit")
    check("a rank that exits non-zero without an error line is named, with its host and pid",
          code == 3 and lines == ["zero comm-check: error: rank 2 of 3 (pid 4242 on host nodeb) "
                                  "exited with status 3 without an error line (a program that "
                                  "called exit, or a crash that printed nothing); the job was "
                                  "ended"], f"{code}: {lines}")
    code, lines = fake_run("improper")
    check("a rank that exits 0 before the others is named (pid unknown without its announcement)",
          code == 1 and len(lines) == 1 and lines[0].startswith(
              "zero comm-check: error: rank 1 of 3 (pid unknown on host nodea) exited (status 0) "
              "before the other ranks finished"), f"{code}: {lines}")
    code, lines = fake_run("trouble")
    check("Open MPI's other reports pass through whole",
          code == 1 and len(lines) == 4 and "not enough slots" in lines[1], f"{code}: {lines}")
    code, lines = fake_run("silent")
    check("a job that ends non-zero with no word from anyone gets one line",
          code == 5 and lines == ["zero comm-check: error: the job ended with status 5 and "
                                  "neither mpirun nor a rank said why"], f"{code}: {lines}")
    code, lines = fake_run("errors")
    check("zero's error line from several nodes is shown once; the abort's banners are not",
          code == 1 and lines == ["zero comm-check: error: rank 0: something every rank saw"],
          f"{code}: {lines}")

# More ranks than cores: one note, on stdout.
r = subprocess.run([ZERO, "comm-check", "-n", str(CORES + 1), "--mib", "1", "--iters", "1"],
                   capture_output=True, text=True, timeout=120, env=user_env())
notes = [l for l in r.stdout.splitlines() if " note: " in l]
check(f"-n {CORES + 1} on {CORES} cores prints one note on stdout that the timings mean little",
      r.returncode == 0 and notes == [
          f"zero comm-check: note: {CORES + 1} ranks on {CORES} core{'s' if CORES > 1 else ''}: "
          "the ranks take turns on the cores, so the times (and the rates and MFU made from "
          "them) measure that sharing more than the training"] and
      r.stdout.startswith(notes[0]) and not r.stderr.strip(), r.stdout + r.stderr)
if CORES >= 2:
    r = subprocess.run([ZERO, "comm-check", "-n", "2", "--mib", "1", "--iters", "1"],
                       capture_output=True, text=True, timeout=120, env=user_env())
    check(f"-n 2 on {CORES} cores prints no note", r.returncode == 0 and " note: " not in r.stdout,
          r.stdout + r.stderr)

finish()
