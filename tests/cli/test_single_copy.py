#!/usr/bin/env python3
"""How `zero train -n N` has Open MPI copy between the ranks of a node (cli/launch.cpp): two
copies unless the user's OMPI_MCA_btl_vader_single_copy_mechanism says otherwise, and `zero info`
saying whether the one copy by cross-memory attach (CMA) would work here (probed here
independently: a forked child reads its parent's memory with process_vm_readv, through ctypes).
Where it would, a run with it trains to the same bits as the default. `zero info` also names the
send pipeline zero sets for Open MPI (comm::mpi_transport_defaults) and who chose each value.
Usage: test_single_copy.py path/to/zero. Prints 'N passed, N failed'."""
import ctypes
import json
import os
import re
import subprocess
import sys

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, user_env  # noqa: E402

VAR = "OMPI_MCA_btl_vader_single_copy_mechanism"


def env(**extra):
    e = {k: v for k, v in user_env().items() if k != VAR}
    e.update(extra)
    return e


def cma_permitted():
    """A forked child reads a word of this process, as a rank reads a sibling's message."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            if int(f.read().strip() or 0) != 0:
                return False
    except OSError:
        pass
    libc = ctypes.CDLL(None, use_errno=True)

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    word = ctypes.c_uint64(0x1234_5678_9ABC_DEF0)
    pid = os.fork()
    if pid == 0:
        got = ctypes.c_uint64(0)
        local = IoVec(ctypes.cast(ctypes.byref(got), ctypes.c_void_p), 8)
        remote = IoVec(ctypes.cast(ctypes.byref(word), ctypes.c_void_p), 8)
        n = libc.process_vm_readv(os.getppid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        os._exit(0 if n == 8 and got.value == word.value else 1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def info(**extra):
    r = subprocess.run([ZERO, "info", "--json"], capture_output=True, text=True, timeout=60,
                       env=env(**extra))
    check(f"zero info --json {extra or ''} succeeds", r.returncode == 0, r.stderr)
    return json.loads(r.stdout)["mpi_single_copy"] if r.returncode == 0 else ""


permitted = cma_permitted()
print(f"this machine {'permits' if permitted else 'forbids'} cross-memory attach")
said = info()
check("zero info says the launcher copies twice, and whether one copy works on this machine",
      said.startswith("none (two copies); " + ("one copy works here" if permitted
                                                 else "this machine forbids")), said)
check("zero info says when the user's variable decides",
      info(**{VAR: "none"}) == f"none (set by {VAR})")

text = subprocess.run([ZERO, "info"], capture_output=True, text=True, timeout=60, env=env()).stdout
check("zero info's table has the row under the MPI row",
      re.search(r"\n  MPI .*\n  MPI copies    none \(two copies\); ", text) is not None, text)

# The send pipeline MpiRuntime sets before MPI_Init (comm::mpi_transport_defaults), unless the
# environment sets its own (tests/comm/test_runtime.cpp checks what MPI then runs with).
DEPTH = "OMPI_MCA_pml_ob1_send_pipeline_depth"


def sends(**extra):
    r = subprocess.run([ZERO, "info", "--json"], capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in env(**extra).items()
                            if k not in (DEPTH, "OMPI_MCA_btl_vader_max_send_size")
                            or k in extra})
    return json.loads(r.stdout).get("mpi_send_pipeline", "") if r.returncode == 0 else ""


if "Open MPI" in text:
    check("zero info names zero's send pipeline", sends() ==
          "pml_ob1_send_pipeline_depth=64 (zero's default), "
          "btl_vader_max_send_size=131072 (zero's default)", sends())
    check("zero info says when the user's variable decides the send pipeline",
          sends(**{DEPTH: "5"}).startswith(f"pml_ob1_send_pipeline_depth=5 (set by {DEPTH}), "),
          sends(**{DEPTH: "5"}))
    check("zero info's table has the send pipeline under the copies",
          re.search(r"\n  MPI copies .*\n  MPI sends     pml_ob1_send_pipeline_depth=", text)
          is not None, text)


def checksum(**extra):
    cmd = [ZERO, "train", "-n", "3", "--layers", "3", "--width", "96", "--steps", "6",
           "--global-batch", "24", "--stage", "3", "--precision", "fp32", "--log-every", "100"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env(**extra))
    m = re.search(r"checksum ([0-9a-f]{16})", r.stdout)
    check(f"zero train -n 3 {extra or '(launcher default)'} succeeds",
          r.returncode == 0 and m is not None, r.stdout[-1500:] + r.stderr[-1500:])
    return m.group(1) if m else None


default = checksum()
if permitted:
    one_copy = checksum(**{VAR: "cma"})
    check("one copy (CMA) trains to the same bits as the launcher's two copies",
          default is not None and default == one_copy, (default, one_copy))
finish()
