#!/usr/bin/env python3
"""abort_job prints an error once per node even when the rank that printed it has exited before
a later rank of the same job reaches abort_job (on a loaded machine the launcher can take longer
to end that later rank than the first takes to exit in MPI_Abort): the first leaves a file in the
job's session directory (PMIX_SERVER_TMPDIR), which outlives it. Another job's ranks still print.
Usage: test_abort_once.py path/to/abort_once. Prints 'N passed, N failed'."""
import os, subprocess, sys, tempfile, uuid

ABORT_ONCE = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, user_env  # noqa: E402


def rank(r, job, session, message):
    env = user_env(OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE="2", PMIX_NAMESPACE=job,
                   PMIX_SERVER_TMPDIR=session)
    return subprocess.run([ABORT_ONCE, message], capture_output=True, text=True, timeout=30,
                          env=env)


with tempfile.TemporaryDirectory() as session:
    job = uuid.uuid4().hex
    first = rank(0, job, session, "error seen by every rank")
    check("the first rank to end the job prints its line and exits with the code",
          first.returncode == 3 and first.stderr == "error seen by every rank\n", first)
    later = rank(1, job, session, "error seen by every rank")
    check("a later rank of the same job prints nothing, though the first has exited",
          later.returncode == 3 and later.stderr == "", later)
    other = rank(1, uuid.uuid4().hex, session, "another job's error")
    check("a rank of another job prints its own line",
          other.returncode == 3 and other.stderr == "another job's error\n", other)

finish()
