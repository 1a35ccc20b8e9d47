#!/usr/bin/env python3
"""OpenBLAS's core kernels as the `zero` command fixes them (docs/blas.md): with OPENBLAS_CORETYPE
unset, zero runs this CPU's best kernels; a user's OPENBLAS_CORETYPE and ZERO_NO_BLAS_FIX=1 are
respected; the re-exec never loops and keeps argv and the exit code; a program that links libzero
without the fix gets one warning line at its first gemm. Where OpenBLAS detects this CPU right,
its misdetection is reproduced with OPENBLAS_CORETYPE=Prescott plus ZERO_BLAS_FIX_AS_DETECTED=1.
Exits 77 where the BLAS is not OpenBLAS or the CPU has no kernels better than SSE3's.
Usage: test_blas.py path/to/zero path/to/test_kernels_blas_core. Prints 'N passed, N failed'."""
import json, os, subprocess, sys

ZERO, CORE_TEST = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, user_env  # noqa: E402

OURS = ("OPENBLAS_CORETYPE", "ZERO_NO_BLAS_FIX", "ZERO_BLAS_FIX_APPLIED", "ZERO_BLAS_FIX_AS_DETECTED")
# OpenBLAS's own detection made wrong on purpose: what Debian 12's 0.3.21 does on Emerald Rapids.
MISDETECTED = {"OPENBLAS_CORETYPE": "Prescott", "ZERO_BLAS_FIX_AS_DETECTED": "1"}


def env(**extra):
    e = {k: v for k, v in user_env().items() if k not in OURS}
    e.update(extra)
    return e


def info(**extra):
    r = subprocess.run([ZERO, "info", "--json"], capture_output=True, text=True, timeout=60,
                       env=env(**extra))
    if r.returncode != 0:
        check(f"zero info --json with {extra} succeeds", False, r.stderr)
        return None
    return json.loads(r.stdout)


detected = info(ZERO_NO_BLAS_FIX="1")
if detected is None:
    finish()
if not detected.get("blas_library", "").startswith("OpenBLAS"):
    print(f"skip: the BLAS is {detected.get('blas_library')!r}, not OpenBLAS")
    sys.exit(77)
best = detected["blas_core_best"]
if not best:
    print("skip: this CPU has no OpenBLAS kernels above SSE3's; nothing to fix")
    sys.exit(77)
print(f"OpenBLAS detects {detected['blas_core']}; this CPU's best: {best}")
check("zero info names the library, the running core, its source and the best core",
      detected["blas"] == f"OpenBLAS ({detected['blas_core']})"
      and detected["blas_core_source"] == "detected", detected)

# As a user starts zero: whatever OpenBLAS detected, zero runs the best class of kernels.
plain = info()
if plain is not None:
    if detected["blas_warning"]:
        check(f"OpenBLAS's misdetection ({detected['blas_core']}) is fixed: zero runs {best}",
              plain["blas_core"] == best and plain["blas_core_source"] == "zero"
              and not plain["blas_warning"], plain)
    else:
        check("OpenBLAS detects this CPU right: zero leaves it alone",
              plain["blas_core"] == detected["blas_core"]
              and plain["blas_core_source"] == "detected" and not plain["blas_warning"], plain)

# The misdetection reproduced: zero re-executes itself with OPENBLAS_CORETYPE set.
fixed = info(**MISDETECTED)
if fixed is not None:
    check(f"Prescott picked by OpenBLAS: zero re-executes with OPENBLAS_CORETYPE={best}",
          fixed["blas_core"] == best and fixed["blas_core_source"] == "zero"
          and not fixed["blas_warning"], fixed)

off = info(ZERO_NO_BLAS_FIX="1", **MISDETECTED)
if off is not None:
    check("ZERO_NO_BLAS_FIX=1: no re-exec, and zero info warns naming the fix",
          off["blas_core"] == "Prescott" and best in off["blas_warning"]
          and "ZERO_NO_BLAS_FIX" in off["blas_warning"], off)

user = info(OPENBLAS_CORETYPE="Prescott")
if user is not None:
    check("a user's OPENBLAS_CORETYPE is respected, and zero info says it is weaker",
          user["blas_core"] == "Prescott" and user["blas_core_source"] == "user"
          and "is set in the environment" in user["blas_warning"], user)

# zero train on kernels the environment chose weaker: one warning line, from rank 0 only.
train = subprocess.run([ZERO, "train", "-n", "2", "--steps", "1", "--layers", "1", "--width", "16"],
                       capture_output=True, text=True, timeout=120, env=env(OPENBLAS_CORETYPE="Prescott"))
said = [l for l in train.stderr.splitlines() if "OPENBLAS_CORETYPE=Prescott" in l]
check("zero train on a weaker OPENBLAS_CORETYPE from the environment says so once",
      train.returncode == 0 and len(said) == 1 and said[0].startswith("zero train: warning: ")
      and best in said[0], train.stderr)

# The marker says this process is already the re-exec: whatever else, never exec again.
loop = info(ZERO_BLAS_FIX_APPLIED=best, **MISDETECTED)
if loop is not None:
    check("an inherited ZERO_BLAS_FIX_APPLIED stops a second re-exec (no loop)",
          loop["blas_core"] == "Prescott", loop)

text = subprocess.run([ZERO, "info"], capture_output=True, text=True, timeout=60,
                      env=env(ZERO_NO_BLAS_FIX="1", **MISDETECTED))
check("zero info's table names the kernels and this CPU's best, and warns",
      f"Prescott (detected by OpenBLAS); this CPU's best: {best}" in text.stdout
      and "BLAS warning" in text.stdout, text.stdout)

# The re-executed process gets the same argv and gives its exit code back.
plan = ["plan", "--params", "7.5e9", "-n", "64", "--json", "-"]
a = subprocess.run([ZERO, *plan], capture_output=True, text=True, timeout=60,
                   env=env(ZERO_NO_BLAS_FIX="1", **MISDETECTED))
b = subprocess.run([ZERO, *plan], capture_output=True, text=True, timeout=60,
                   env=env(**MISDETECTED))
check("the re-exec keeps argv: zero plan prints the same with and without it",
      a.returncode == 0 and a.stdout == b.stdout and b.returncode == 0, b.stderr)
bad = subprocess.run([ZERO, "trian"], capture_output=True, text=True, timeout=60,
                     env=env(**MISDETECTED))
check("the re-exec keeps the exit code: an unknown command still exits 2 with its message",
      bad.returncode == 2 and "did you mean 'train'?" in bad.stderr, bad.stderr)

# A program linking libzero that does not call fix_blas_coretype: one warning, at the first gemm.
def first_gemm(**extra):
    return subprocess.run([CORE_TEST, "[gemm-warning]"], capture_output=True, text=True,
                          timeout=60, env=env(**extra))


warned = first_gemm(**MISDETECTED)
lines = [l for l in warned.stderr.splitlines() if l.startswith("zero: warning: OpenBLAS runs")]
check("a library user on weak kernels gets one warning line at its first gemm, naming the fix",
      warned.returncode == 0 and len(lines) == 1 and f"OPENBLAS_CORETYPE={best}" in lines[0]
      and "fix_blas_coretype" in lines[0], warned.stderr)
quiet = [first_gemm(ZERO_NO_BLAS_FIX="1", **MISDETECTED), first_gemm(OPENBLAS_CORETYPE="Prescott")]
check("no warning when the user chose the core or turned the fix off",
      all(r.returncode == 0 and "zero: warning" not in r.stderr for r in quiet),
      [r.stderr for r in quiet])

finish()
