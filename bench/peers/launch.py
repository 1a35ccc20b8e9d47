"""What the peer benchmarks share to start their runs: a free loopback port for torch's
rendezvous, an environment without an enclosing job's launcher variables, a preset's shape as
`zero plan --list-presets` prints it, a `zero train` run's --json report, and a PyTorch worker
started once a rank with the report its rank 0 wrote, and what their PyTorch ranks share: the
hidden flags a script passes to itself to run as one, and zero's MLP in PyTorch."""
import argparse
import json
import os
import re
import socket
import subprocess
import tempfile


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env():
    # The launcher's variables of an enclosing job would make zero join it instead of starting
    # its own; OPENBLAS_CORETYPE set by the environment would pin zero's GEMM (docs/blas.md).
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_")) and k != "OPENBLAS_CORETYPE"}


def preset_shape(zero, preset):
    """The GPT preset's layers, hidden, heads, vocab and seq_len, from its line in
    `zero plan --list-presets`: "gpt-nano  4 layers, hidden 128, 4 heads, vocab 256, seq 128"."""
    r = subprocess.run([zero, "plan", "--list-presets"], env=clean_env(), capture_output=True,
                       text=True, timeout=120)
    if r.returncode:
        raise SystemExit(f"zero plan --list-presets failed:\n{r.stderr}")
    for line in r.stdout.splitlines():
        m = re.match(r"\s*(\S+)\s+(\d+) layers, hidden\s+(\d+),\s+(\d+) heads, vocab (\d+), "
                     r"seq (\d+)", line)
        if m and m.group(1) == preset:
            return dict(zip(("layers", "hidden", "heads", "vocab", "seq_len"),
                            map(int, m.groups()[1:])))
    raise SystemExit(f"zero plan --list-presets: no preset '{preset}'\n{r.stdout}")


def zero_train_json(cmd, failed, timeout, env=None):
    """Runs cmd, a `zero train` command line, with --json into a temporary file and returns the
    report it wrote (tokens_per_second, samples_per_second, params_checksum, ...). A failed run
    ends the benchmark with the line `failed` and zero's output."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "z.json")
        r = subprocess.run([*cmd, "--json", out], capture_output=True, text=True,
                           env=clean_env() if env is None else env, timeout=timeout)
        if r.returncode:
            raise SystemExit(f"{failed}:\n{r.stdout}{r.stderr}")
        with open(out) as f:
            return json.load(f)


def torch_ranks_json(worker, ranks, failed, timeout, threads=1):
    """Starts worker (a command line that takes --rank and --out) once a rank, each with its
    threads, on a free loopback port, and returns the JSON its rank 0 wrote to --out. A failed
    rank ends the benchmark with the line `failed` and the end of every rank's stderr."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        env = clean_env()
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   OMP_NUM_THREADS=str(threads))
        procs = [subprocess.Popen([*worker, "--rank", str(r), "--out", out], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for r in range(ranks)]
        errs = [p.communicate(timeout=timeout)[1] for p in procs]
        if any(p.returncode for p in procs):
            raise SystemExit(f"{failed}:\n" + "\n".join(e[-3000:] for e in errs if e))
        with open(out) as f:
            return json.load(f)


def add_worker_flags(ap):
    """The hidden flags a benchmark passes to itself to run as one PyTorch rank: --torch-worker,
    --world, and the --rank and --out that torch_ranks_json adds."""
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)


def tanh_mlp(nn, layers, width):
    """zero's MLP (models/mlp.hpp) in PyTorch, given torch.nn: `layers` Linear(width, width)
    layers with bias, a Tanh between each two."""
    mods = []
    for i in range(layers):
        mods.append(nn.Linear(width, width, bias=True))
        if i + 1 < layers:
            mods.append(nn.Tanh())
    return nn.Sequential(*mods)
