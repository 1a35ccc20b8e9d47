#!/usr/bin/env python3
"""`zero data` as a user runs it: a text file into llm.c GPT-2 shards of byte tokens, read back
here with struct (header fields, file sizes, every byte), the validation split, standard input,
and bad input refused in one line with a non-zero exit. No ranks: the file runs in a second.
Usage: test_data_command.py path/to/zero. Prints 'N passed, N failed'."""
import os, struct, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish  # noqa: E402

TEXT = ("It was the best of times, it was the worst of times.\n" * 37
        + "Caf\u00e9 \u2014 na\u00efve bytes above 127 stay bytes.\n").encode()


def run(*args, stdin=None):
    return subprocess.run([ZERO, "data", *args], capture_output=True, input=stdin, timeout=60)


def shard(path):
    """(magic, version, count, tokens, file size) of an llm.c shard."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, count = struct.unpack_from("<3i", data)
    return magic, version, count, list(struct.unpack_from(f"<{(len(data) - 1024) // 2}H", data, 1024)), len(data)


def refused(r, *words):
    """A non-zero exit, with one line on stderr that holds every word."""
    err = r.stderr.decode().strip()
    return r.returncode != 0 and len(err.splitlines()) == 1 and all(w in err for w in words)


with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, "book.txt")
    with open(src, "wb") as f:
        f.write(TEXT)
    prefix = os.path.join(tmp, "book")
    n = len(TEXT)
    n_val = int(n * 0.25)

    r = run(src, "--out", prefix, "--val-fraction", "0.25")
    out = r.stdout.decode()
    check("zero data INPUT --out PREFIX succeeds", r.returncode == 0 and r.stderr == b"", r.stderr)
    check("one summary line per file, with its path and token count",
          out.splitlines() == [f"wrote {prefix}_train.bin: {n - n_val} tokens",
                               f"wrote {prefix}_val.bin: {n_val} tokens"], out)
    if r.returncode == 0:
        train, val = shard(prefix + "_train.bin"), shard(prefix + "_val.bin")
        check("the header is llm.c's GPT-2 magic and version 1", train[:2] == val[:2] == (20240520, 1),
              (train[:2], val[:2]))
        check("the header counts the tokens", train[2] == n - n_val and val[2] == n_val, (train[2], val[2]))
        check("each file is the 1024-byte header and 2 bytes per token",
              train[4] == 1024 + 2 * (n - n_val) and val[4] == 1024 + 2 * n_val, (train[4], val[4]))
        check("the tokens are the text's bytes: train the first 75%, val the last 25%",
              train[3] == list(TEXT[:n - n_val]) and val[3] == list(TEXT[n - n_val:]))
        check("bytes above 127 are tokens above 127 (byte level, vocabulary 256)",
              max(train[3] + val[3]) > 127 and max(train[3] + val[3]) < 256)
        check("no temporary file is left", sorted(os.listdir(tmp)) == ["book.txt", "book_train.bin", "book_val.bin"],
              os.listdir(tmp))

    r = run(src, "--out", prefix + "10")
    check("the default split is 10%", r.returncode == 0 and shard(prefix + "10_val.bin")[2] == int(n * 0.1),
          r.stderr)

    r = run(src, "--out", os.path.join(tmp, "all"), "--val-fraction", "0")
    check("--val-fraction 0 writes only the training file, all the bytes",
          r.returncode == 0 and not os.path.exists(os.path.join(tmp, "all_val.bin"))
          and shard(os.path.join(tmp, "all_train.bin"))[3] == list(TEXT)
          and len(r.stdout.decode().splitlines()) == 1, r.stderr)

    r = run("-", "--out", os.path.join(tmp, "pipe"), "--val-fraction", "0", stdin=TEXT)
    check("INPUT '-' reads standard input (zcat FILE.gz | zero data - ...)",
          r.returncode == 0 and shard(os.path.join(tmp, "pipe_train.bin"))[3] == list(TEXT), r.stderr)

    r = run("--help")
    check("--help shows the usage and the flags", r.returncode == 0 and b"usage: zero data INPUT" in r.stdout
          and b"--val-fraction" in r.stdout and b"zcat" in r.stdout, r.stdout)
    r = run(src, "--out", os.path.join(tmp, "made", "deeper", "book"))
    check("a missing folder of PREFIX is made (--out data/book in a fresh checkout)",
          r.returncode == 0 and os.path.exists(os.path.join(tmp, "made", "deeper", "book_train.bin")),
          r.stderr)

    # Bad input: one sentence naming what is wrong, a non-zero exit, nothing written.
    missing = os.path.join(tmp, "missing.txt")
    empty = os.path.join(tmp, "empty.txt")
    open(empty, "wb").close()
    tiny = os.path.join(tmp, "tiny.txt")
    with open(tiny, "wb") as f:
        f.write(b"abc")
    bad = os.path.join(tmp, "bad")
    cases = [
        ([missing, "--out", bad], ["zero data: error:", missing, "No such file or directory"]),
        ([empty, "--out", bad], ["zero data: error:", empty, "is empty"]),
        ([tmp, "--out", bad], ["zero data: error:", tmp, "Is a directory"]),
        ([src, "--out", bad, "--val-fraction", "1"], ["--val-fraction", "less than 1", "got 1"]),
        ([src, "--out", bad, "--val-fraction", "-0.1"], ["--val-fraction", "got -0.1"]),
        ([src, "--out", bad, "--val-fraction", "1.5"], ["--val-fraction", "got 1.5"]),
        ([src, "--out", bad, "--val-fraction", "nan"], ["--val-fraction", "got nan"]),
        ([tiny, "--out", bad], ["zero data: error:", tiny, "3 bytes", "--val-fraction 0.1"]),
        ([src], ["--out PREFIX is required"]),
        (["--out", bad], ["zero data INPUT --out PREFIX"]),
        ([src, "--out", os.path.join(src, "x")], ["cannot make the folder", src]),
        ([src, "--out", bad, "--val-fractoin", "0.2"], ["did you mean '--val-fraction'?"]),
        ([src, src, "--out", bad], ["too many positional options"]),
    ]
    for args, words in cases:
        r = run(*args)
        check(f"zero data {' '.join(os.path.basename(a) for a in args)}: one line with {words[-1]!r}",
              refused(r, *words), (r.returncode, r.stderr.decode()))
    check("nothing was written for the bad input",
          not any(name.startswith(("bad", "no-such-dir")) for name in os.listdir(tmp)), os.listdir(tmp))

finish()
