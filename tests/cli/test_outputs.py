#!/usr/bin/env python3
"""Every file the `zero` command writes at a path the user gives (train --json/--plot, compare
--json/--chart, plan --json/--plot, ckpt export --out, data --out) is written only if it is new or
a regular file: a FIFO (with no reader: opening it would block), a folder or a device is refused
within seconds in one error line, non-zero status, and is left as it was; a symlink is followed
(docs/checkpoints.md, "Where outputs go"): one to a regular file writes that file and stays a
link, one to a device is refused. `plan --json -` still writes to stdout.
Usage: test_outputs.py path/to/zero. Prints 'N passed, N failed'."""
import os, stat, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, user_env  # noqa: E402

DEVICE = "/dev/null"  # written by nothing here when the command is right
TIMEOUT = 60  # seconds: a single small step; a blocked open() would never end


def zero(*args):
    try:
        return subprocess.run([ZERO, *args], capture_output=True, text=True, timeout=TIMEOUT,
                              env=user_env(), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(e.cmd, None, "", f"(still running after {TIMEOUT} s)")


def kind(path):
    try:
        m = os.lstat(path).st_mode
    except FileNotFoundError:
        return "absent"
    for test, name in ((stat.S_ISFIFO, "fifo"), (stat.S_ISDIR, "folder"), (stat.S_ISCHR, "chr"),
                       (stat.S_ISLNK, "link"), (stat.S_ISREG, "file")):
        if test(m):
            return name
    return "other"


def refused(name, r, path, *words):
    lines = [l for l in r.stderr.splitlines() if "error" in l.lower()]
    check(name, r.returncode not in (0, None) and len(lines) == 1 and path in lines[0] and
          all(w in lines[0] for w in words), f"status {r.returncode}: {r.stdout}{r.stderr}")


with tempfile.TemporaryDirectory() as tmp:
    small = ["--layers", "2", "--width", "16", "--device", "cpu"]
    ck = os.path.join(tmp, "ck")
    r = zero("train", *small, "--steps", "1", "--save", ck)
    check("zero train --save writes a checkpoint to export", r.returncode == 0, r.stdout + r.stderr)
    text = os.path.join(tmp, "in.txt")
    with open(text, "w") as f:
        f.write("a few words of text for byte tokens\n" * 40)

    # Each output: the arguments that write it at P, and the file P names (data --out is a prefix).
    outputs = [
        ("train --json", lambda p: ["train", *small, "--steps", "1", "--json", p], ""),
        ("train --plot", lambda p: ["train", *small, "--steps", "1", "--plot", p], ""),
        ("compare --json", lambda p: ["compare", *small, "--steps", "1", "--warmup", "0",
                                      "--stages", "0", "--json", p], ""),
        ("compare --chart", lambda p: ["compare", *small, "--steps", "1", "--warmup", "0",
                                       "--stages", "0", "--chart", p], ""),
        ("plan --json", lambda p: ["plan", "--params", "1M", "--json", p], ""),
        ("plan --plot", lambda p: ["plan", "--params", "1M", "--plot", p], ""),
        ("ckpt export --out", lambda p: ["ckpt", "export", ck, "--out", p], ""),
        ("data --out", lambda p: ["data", text, "--out", p], "_train.bin"),
    ]
    for i, (flag, args, suffix) in enumerate(outputs):
        base = os.path.join(tmp, f"out{i}")
        # A FIFO with no reader: refused, not opened (an open for writing would block).
        fifo = base + "-fifo"
        os.mkfifo(fifo + suffix)
        r = zero(*args(fifo))
        refused(f"{flag} at a FIFO ends at once with one sentence", r, fifo, "FIFO", "not a file")
        check(f"{flag}: the FIFO is still a FIFO", kind(fifo + suffix) == "fifo", kind(fifo + suffix))
        # A folder.
        folder = base + "-folder"
        os.mkdir(folder + suffix)
        r = zero(*args(folder))
        refused(f"{flag} at a folder is refused", r, folder, "folder")
        check(f"{flag}: the folder is still a folder", kind(folder + suffix) == "folder")
        # A device, named directly and through a symlink.
        if not suffix:
            r = zero(*args(DEVICE))
            refused(f"{flag} {DEVICE} is refused", r, DEVICE, "character device", "not a file")
            check(f"{flag}: {DEVICE} is still a character device", kind(DEVICE) == "chr")
        link = base + "-devlink"
        os.symlink(DEVICE, link + suffix)
        r = zero(*args(link))
        refused(f"{flag} at a symlink to {DEVICE} is refused", r, link, "symlink to " + DEVICE,
                "character device")
        check(f"{flag}: the symlink is still a link and {DEVICE} a character device",
              kind(link + suffix) == "link" and kind(DEVICE) == "chr")
        # A symlink to a regular file: followed; the file is written and the link stays.
        target = base + "-target" + suffix
        with open(target, "w") as f:
            f.write("old")
        link = base + "-filelink"
        os.symlink(os.path.basename(target), link + suffix)
        r = zero(*args(link))
        with open(target, "rb") as f:
            written = f.read()
        check(f"{flag} through a symlink to a regular file writes that file, the link stays",
              r.returncode == 0 and kind(link + suffix) == "link" and written != b"old" and
              len(written) > 3, f"status {r.returncode}, {kind(link + suffix)}: {r.stderr}")
        check(f"{flag} leaves no temporary", not any(n.endswith(".tmp") for n in os.listdir(tmp)),
              str(os.listdir(tmp)))

    # stdout stays an output.
    r = zero("plan", "--params", "1M", "--json", "-")
    check("plan --json - writes the JSON to stdout", r.returncode == 0 and
          r.stdout.lstrip().startswith("["), r.stdout[:200] + r.stderr)
finish()
