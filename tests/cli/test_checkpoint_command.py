#!/usr/bin/env python3
"""`zero train --save/--resume` as a user runs it: 20 steps straight equal 10 steps, a save, and a
new job that resumes and does the other 10 (the same losses at every step and the same weights,
bitwise) at every stage and in fp32, bf16 and fp16, for the MLP and the GPT (its data position);
a checkpoint resumed at another rank count and stage; and every bad checkpoint or flag refused
with one sentence before anything trains, the checkpoints already saved untouched.
Usage: test_checkpoint_command.py path/to/zero. Prints 'N passed, N failed'."""
import json, os, re, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, checksum, finish, one_error, runner, token_file  # noqa: E402


zero = runner(ZERO)


def steps(out):
    """{step: the whole line} of a run's per-step lines, without the timing columns."""
    got = {}
    for line in out.splitlines():
        m = re.match(r"step\s+(\d+)\s+(loss \S+\s+grad-norm \S+\s+lr \S+)", line)
        if m:
            got[int(m.group(1))] = m.group(2)
    return got


def resumes_bitwise(tmp, name, base, total=20, half=10, save=()):
    """`base` for `total` steps == `half` steps, save, a new job resuming to `total`."""
    straight = zero(*base, "--steps", str(total))
    ck = os.path.join(tmp, name)
    first = zero(*base, "--steps", str(half), "--save", ck, *save)
    second = zero(*base, "--steps", str(total), "--resume", ck, "--save", ck, *save)
    ok = all(r.returncode == 0 for r in (straight, first, second))
    check(f"{name}: the three runs train", ok, straight.stderr + first.stderr + second.stderr)
    if not ok:
        return None
    a, b = steps(straight.stdout), steps(second.stdout)
    check(f"{name}: steps {half + 1}..{total} of the resumed job equal the straight run's",
          sorted(b) == list(range(half + 1, total + 1)) and all(a[s] == b[s] for s in b),
          f"{a}\n{b}")
    check(f"{name}: the final weights are bitwise the same (checksum)",
          checksum(straight.stdout) is not None and checksum(straight.stdout) == checksum(second.stdout),
          straight.stdout[-600:] + second.stdout[-600:])
    check(f"{name}: the resumed job says where it resumed from",
          f"resumed from {ck}/step_{half:08d}: step {half}" in second.stdout, second.stdout[:800])
    return ck, checksum(second.stdout)


with tempfile.TemporaryDirectory() as tmp:
    mlp = ["train", "-n", "2", "--global-batch", "48", "--width", "64", "--layers", "3"]
    for stage in ("0", "1", "2", "3"):
        resumes_bitwise(tmp, f"mlp-stage{stage}-bf16", mlp + ["--stage", stage])
    resumes_bitwise(tmp, "mlp-stage3-fp32", mlp + ["--stage", "3", "--precision", "fp32"])
    resumes_bitwise(tmp, "mlp-stage2-fp16-accum2",
                    mlp + ["--stage", "2", "--precision", "fp16", "--accum", "2"])
    resumes_bitwise(tmp, "mlp-stage1-sync-save", mlp + ["--stage", "1"], save=["--save-sync"])

    # The GPT: the data position (a shuffled order per epoch) continues where it stopped.
    data = token_file(ZERO, tmp, "It was the best of times, it was the worst of times, it was the "
                                 "age of wisdom. " * 80)
    gpt = ["train", "--model", "gpt", "--preset", "gpt-micro", "--device", "cpu", "-n", "2",
           "--global-batch", "8", "--data", data]
    gpt_ck, gpt_sum = resumes_bitwise(tmp, "gpt-stage3-bf16", gpt + ["--stage", "3"], total=8, half=4)

    # --init from an export: the weights are the checkpoint's (lr 0 keeps them through a step),
    # under Hugging Face's names; a file of another shape is refused before anything trains.
    st = os.path.join(tmp, "gpt.safetensors")
    r = zero("ckpt", "export", gpt_ck, "--out", st)
    check("zero ckpt export writes the GPT's safetensors", r.returncode == 0, r.stdout + r.stderr)
    r = zero(*gpt, "--stage", "1", "--steps", "1", "--lr", "0", "--init", st)
    check("--init starts from the exported weights, bitwise (checksum after a step at lr 0)",
          r.returncode == 0 and "initial weights from" in r.stdout and checksum(r.stdout) == gpt_sum,
          r.stdout[-600:] + r.stderr)
    nano = [a if a != "gpt-micro" else "gpt-nano" for a in gpt]
    check(*one_error("--init of a file of another model shape names the tensor",
                     zero(*nano, "--steps", "1", "--init", st), st, "tensor 'wte.weight'"))
    check(*one_error("--init and --resume together are refused",
                     zero(*gpt, "--steps", "9", "--init", st, "--resume", gpt_ck), "--init and --resume"))

    # Another rank count and stage: the checkpoint of 2 ranks at stage 3 trains on at 3 ranks,
    # stage 1, and at 4 ranks, stage 0, both from the same weights.
    ck = os.path.join(tmp, "mlp-stage3-bf16")
    for n, stage in (("3", "1"), ("4", "0"), ("1", "2")):
        r = zero("train", "-n", n, "--stage", stage, "--global-batch", "48", "--width", "64",
                 "--layers", "3", "--steps", "22", "--resume", ck)
        s = steps(r.stdout)
        check(f"a 2-rank stage-3 checkpoint trains on at {n} ranks, stage {stage}",
              r.returncode == 0 and sorted(s) == [21, 22] and
              "saved by 2 ranks at stage 3" in r.stdout, r.stdout[-800:] + r.stderr)

    # --json says what was saved; --keep keeps the newest.
    keep = os.path.join(tmp, "keep")
    js = os.path.join(tmp, "keep.json")
    r = zero(*mlp, "--steps", "6", "--save", keep, "--save-every", "2", "--keep", "2", "--json", js)
    kept = sorted(d for d in os.listdir(keep) if d.startswith("step_")) if r.returncode == 0 else []
    check("--save-every 2 --keep 2 leaves the two newest and latest names the last",
          kept == ["step_00000004", "step_00000006"] and
          open(os.path.join(keep, "latest")).read().strip() == "step_00000006", f"{kept} {r.stderr}")
    if r.returncode == 0:
        with open(js) as f:
            j = json.load(f)
        saves = j.get("checkpoints", [])
        check("--json lists each save with its stall and write time",
              [s["step"] for s in saves] == [2, 4, 6] and
              all(s["bytes_rank0"] > 0 and s["write_seconds"] > 0 for s in saves), str(saves))

    # Bad flags and checkpoints: one sentence, before anything trains, nothing saved is lost.
    def untouched(folder):
        return sorted((d, sorted(os.listdir(os.path.join(folder, d))))
                      for d in os.listdir(folder) if d.startswith("step_"))

    before = untouched(ck)
    check(*one_error("--save into a folder of a later run is refused",
                     zero(*mlp, "--steps", "30", "--save", ck), "--save", "already holds",
                     "--resume"))
    check(*one_error("--resume at --steps has nothing to train",
                     zero(*mlp, "--steps", "20", "--resume", ck), "nothing to train"))
    check(*one_error("--save-every without --save is refused",
                     zero(*mlp, "--steps", "5", "--save-every", "2"), "--save-every needs --save"))
    check(*one_error("--resume of a missing folder is refused",
                     zero(*mlp, "--steps", "25", "--resume", os.path.join(tmp, "nowhere")),
                     "no such file or folder"))
    check(*one_error("--resume of a folder without checkpoints is refused",
                     zero(*mlp, "--steps", "25", "--resume", tmp), "holds no complete checkpoint"))
    other = ["train", "-n", "2", "--global-batch", "48", "--width", "32", "--layers", "3"]
    check(*one_error("--resume into a model of another shape names the param",
                     zero(*other, "--steps", "25", "--resume", ck), "param 'layer0.weight'",
                     "[64, 64] in the checkpoint but [32, 32]"))
    check(*one_error("--resume of an MLP checkpoint into the GPT is refused",
                     zero(*gpt, "--steps", "25", "--resume", ck), "checkpoint is of the mlp"))
    # A corrupt piece: refused once, naming the file; the run does not start.
    bad = os.path.join(tmp, "corrupt")
    r = zero(*mlp, "--steps", "2", "--save", bad)
    piece = os.path.join(bad, "step_00000002", "rank_00001.bin")
    with open(piece, "r+b") as f:
        f.seek(40)
        byte = f.read(1)
        f.seek(40)
        f.write(bytes([byte[0] ^ 0x10]))
    r = zero(*mlp, "--steps", "4", "--resume", bad)
    check(*one_error("a corrupt piece is refused once, naming the file and the param", r, piece,
                     "do not match their checksum", "param 'layer0.weight'"))
    check("a refused --resume trains nothing", "step    3" not in r.stdout, r.stdout)
    check("refused runs leave the saved checkpoints as they were", untouched(ck) == before,
          f"{before}\n{untouched(ck)}")

    # A real full disk: a 1 MiB tmpfs (root only; skipped where mount is not allowed). Each save
    # of this model is ~150 KB, so one of them fills it: that save fails on every rank, naming the
    # file; the run stops; the checkpoints before it load.
    small = os.path.join(tmp, "small")
    os.makedirs(small)
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", small], capture_output=True).returncode == 0
    if not mounted:
        print("skip a real full disk: mounting a tmpfs needs root (and a mount namespace that allows it)")
    else:
        try:
            r = zero(*mlp, "--steps", "30", "--save", small, "--save-every", "1")
            err = [l for l in r.stderr.splitlines() if "error" in l]
            check("a full disk fails the save once, naming the file",
                  r.returncode != 0 and len(err) == 1 and "disk is full" in err[0] and
                  ".partial-step_" in err[0], r.stdout[-400:] + r.stderr)
            done = sorted(d for d in os.listdir(small) if d.startswith("step_"))
            r2 = zero(*mlp, "--steps", "31", "--resume", small) if done else None
            check("the checkpoints saved before the disk filled load",
                  len(done) >= 2 and r2 is not None and r2.returncode == 0 and
                  f"resumed from {small}/{done[-1]}" in r2.stdout, f"{done} {r2 and r2.stderr}")
        finally:
            subprocess.run(["umount", small])

finish()
