"""What the peer benchmarks share to start their runs: a free loopback port for torch's
rendezvous, and an environment without an enclosing job's launcher variables."""
import os
import socket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env():
    # The launcher's variables of an enclosing job would make zero join it instead of starting
    # its own; OPENBLAS_CORETYPE set by the environment would pin zero's GEMM (docs/blas.md).
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_")) and k != "OPENBLAS_CORETYPE"}
