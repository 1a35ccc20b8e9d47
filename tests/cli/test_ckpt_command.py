#!/usr/bin/env python3
"""`zero ckpt info` and `zero ckpt export` as a user runs them, on checkpoints `zero train -n 2
--stage 3 --save` writes: info's text and --json; the exported .safetensors read by a reader
written here from the format's specification, every value compared with the checkpoint's own piece
files read by a reader of meta.json written here too (fp32 bitwise, bf16 rounded to nearest even);
the GPT under Hugging Face GPT-2's names and shapes (c_attn.weight [h, 3h], transposed); every bad
input one sentence; no ranks started; and the export's peak memory against `zero ckpt info`'s,
bounded by the largest parameter plus the buffer, not the model.
Only the standard library (struct, json, array): CI has no numpy.
Usage: test_ckpt_command.py path/to/zero. Prints 'N passed, N failed'."""
import array, json, os, resource, struct, subprocess, sys, tempfile

ZERO = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from checks import check, finish, one_error, runner, token_file, user_env  # noqa: E402

MIB = 1 << 20


zero = runner(ZERO)


# --- safetensors, from the specification ---------------------------------------------------
SIZES = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}


def read_safetensors(path):
    """(metadata, {name: (dtype, shape, bytes)}, header length); raises on anything malformed."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    assert 8 + n <= len(blob), "header past the end"
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    assert all(isinstance(v, str) for v in meta.values())
    tensors, spans = {}, []
    for name, t in header.items():
        numel = 1
        for d in t["shape"]:
            numel *= d
        b, e = t["data_offsets"]
        assert e - b == numel * SIZES[t["dtype"]], name
        spans.append((b, e))
        tensors[name] = (t["dtype"], t["shape"], data[b:e])
    at = 0
    for b, e in sorted(spans):
        assert b == at, "gap or overlap"
        at = e
    assert at == len(data), "bytes after the last tensor"
    return meta, tensors, n


# --- zero's checkpoint, from docs/checkpoints.md --------------------------------------------
def read_checkpoint(folder):
    """(meta, {name: (shape, fp32 master bytes)}) from meta.json and the rank files."""
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    files = [open(os.path.join(folder, x["name"]), "rb").read() for x in meta["files"]]
    parts = {i: [] for i in range(len(meta["params"]))}
    for param, begin, count, fi, offset in meta["pieces"]:
        parts[param].append((begin, files[fi][offset:offset + 4 * count]))  # master comes first
    out = {}
    for i, p in enumerate(meta["params"]):
        blob = b"".join(b for _, b in sorted(parts[i], key=lambda x: x[0]))
        assert len(blob) == 4 * p["numel"], p["name"]
        out[p["name"]] = (p["shape"], blob)
    return meta, out


def bf16_bits(fp32_bytes):
    """Round-to-nearest-even of each fp32 to bf16, from the bit patterns."""
    u = array.array("I")
    u.frombytes(fp32_bytes)
    out = array.array("H")
    for x in u:
        if (x & 0x7FFFFFFF) > 0x7F800000:
            out.append((x >> 16) | 0x40)
        else:
            out.append(((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF)
    return out.tobytes()


def transposed(blob, rows, cols, size=4):
    """[rows, cols] row-major -> [cols, rows]."""
    cells = [blob[i:i + size] for i in range(0, len(blob), size)]
    return b"".join(cells[r * cols + c] for c in range(cols) for r in range(rows))


def newest(folder):
    with open(os.path.join(folder, "latest")) as f:
        return os.path.join(folder, f.read().strip())


def max_rss_kib(*args):
    """Peak resident memory of one `zero` run, KiB, measured in a fresh Python parent (ru_maxrss of
    RUSAGE_CHILDREN is the largest child a process has waited for, so each run gets its own)."""
    code = ("import resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:], capture_output=True)\n"
            "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, ZERO, *args], capture_output=True,
                         text=True, env=user_env(), timeout=300).stdout.split()
    return int(out[0]), int(out[1])


r = zero("train", "--help")
if "--save" not in r.stdout:
    print("SKIP: this `zero train` has no --save flag; nothing to export")
    sys.exit(77)

with tempfile.TemporaryDirectory() as tmp:
    # --- the MLP ----------------------------------------------------------------------------
    mlp = os.path.join(tmp, "mlp")
    r = zero("train", "-n", "2", "--stage", "3", "--steps", "3", "--layers", "3", "--width", "128",
             "--save", mlp, "--save-every", "1", "--device", "cpu")
    check("zero train -n 2 --stage 3 --steps 3 --save writes checkpoints", r.returncode == 0,
          r.stdout + r.stderr)
    if r.returncode != 0:
        finish()
    ck = newest(mlp)
    meta, params = read_checkpoint(ck)

    r = zero("ckpt", "info", mlp, env=user_env(PATH="/nonexistent"))
    out = r.stdout
    check("zero ckpt info runs without mpirun on the PATH (it starts no ranks)", r.returncode == 0,
          out + r.stderr)
    check("info names the newest checkpoint and its step",
          f"checkpoint  {ck}" in out
          and "step      3 optimizer steps applied, 0 skipped" in out, out)
    check("info says how it was saved",
          "by zero " in out and "2 ranks, stage 3, shards over 2 ranks, bf16" in out, out)
    total = sum(p["numel"] for p in meta["params"])
    check("info counts the params and their elements",
          f"params    {len(meta['params'])}, {total} elements" in out, out)
    check("info lists the other complete checkpoints and what latest names",
          "3 complete checkpoints at step 1, 2, 3 (this one); latest names step_00000003" in out,
          out)
    check("info shows the trainer state and the config",
          '"model":"mlp"' in out and "AdamW" in out, out)
    r = zero("ckpt", "info", os.path.join(mlp, "step_00000001"), "--json")
    try:
        j = json.loads(r.stdout)
    except ValueError:
        j = {}
    disk = sum(os.path.getsize(os.path.join(mlp, "step_00000001", f))
               for f in os.listdir(os.path.join(mlp, "step_00000001")))
    check("info --json of a named checkpoint: step, how saved, params, bytes on disk, the folder",
          j.get("step") == 1 and j.get("saved_by", {}).get("ranks") == 2
          and j.get("param_count") == len(meta["params"]) and j.get("elements") == total
          and j.get("disk_bytes") == disk and j.get("trainer", {}).get("model") == "mlp"
          and [c["step"] for c in j.get("folder", {}).get("checkpoints", [])] == [1, 2, 3]
          and j["folder"].get("latest") == "step_00000003", r.stdout + r.stderr)

    f32 = os.path.join(tmp, "mlp.safetensors")
    r = zero("ckpt", "export", mlp, "--out", f32, env=user_env(PATH="/nonexistent"))
    check("zero ckpt export writes the file (no mpirun needed)", r.returncode == 0 and
          os.path.exists(f32) and not os.path.exists(f32 + ".tmp"), r.stdout + r.stderr)
    check("export reports tensors, bytes, seconds, MB/s and the peak buffer",
          f"{len(meta['params'])} tensors" in r.stdout and "MB/s" in r.stdout
          and "peak buffer" in r.stdout and "zero's names" in r.stdout, r.stdout)
    try:
        smeta, tensors, hlen = read_safetensors(f32)
    except Exception as e:  # noqa: BLE001
        smeta, tensors, hlen = {}, {}, 1
        check("the export is a valid safetensors file", False, repr(e))
    check("the header is padded to a multiple of 8 and says format pt", hlen % 8 == 0
          and smeta.get("format") == "pt" and smeta.get("zero.checkpoint_step") == "3", smeta)
    check("the MLP keeps zero's names, in the checkpoint's order, with their shapes",
          list(tensors) == [p["name"] for p in meta["params"]]
          and all(tensors[n][1] == params[n][0] and tensors[n][0] == "F32" for n in tensors),
          list(tensors))
    bad = [n for n in params if tensors.get(n, (0, 0, b""))[2] != params[n][1]]
    check("fp32: every value is bitwise the checkpoint's master weight", not bad, bad)

    bf = os.path.join(tmp, "mlp-bf16.safetensors")
    r = zero("ckpt", "export", mlp, "--out", bf, "--dtype", "bf16")
    _, btensors, _ = read_safetensors(bf) if r.returncode == 0 else ({}, {}, 0)
    bad = [n for n in params if btensors.get(n, (0, 0, b""))[2] != bf16_bits(params[n][1])
           or btensors[n][0] != "BF16"]
    check("bf16: every value is the master weight rounded to nearest, ties to even",
          r.returncode == 0 and not bad, r.stderr + str(bad))

    # --- bad input ---------------------------------------------------------------------------
    check(*one_error("no checkpoint there: one sentence",
                     zero("ckpt", "export", os.path.join(tmp, "none"), "--out", f32),
                     "no such file"))
    check(*one_error("a folder without a checkpoint: one sentence",
                     zero("ckpt", "info", tmp), "holds no complete checkpoint"))
    check(*one_error("an unknown dtype: one sentence",
                     zero("ckpt", "export", mlp, "--out", f32, "--dtype", "fp8"), "--dtype", "fp8"))
    check(*one_error("the output's folder is missing: one sentence",
                     zero("ckpt", "export", mlp, "--out", os.path.join(tmp, "no", "m.safetensors")),
                     "does not exist"))
    check(*one_error("the output is a folder: one sentence",
                     zero("ckpt", "export", mlp, "--out", tmp), "is a folder"))
    check(*one_error("--names hf of the MLP: one sentence",
                     zero("ckpt", "export", mlp, "--out", f32, "--names", "hf"), "no Hugging Face"))
    check(*one_error("an unknown subcommand: one sentence with a suggestion",
                     zero("ckpt", "exprot", mlp), "did you mean 'export'"))
    check(*one_error("no --out: one sentence", zero("ckpt", "export", mlp), "--out"))

    # --- the GPT -----------------------------------------------------------------------------
    data = token_file(ZERO, tmp, "It was the best of times, it was the worst of times. " * 200)
    gpt = os.path.join(tmp, "gpt")
    r2 = zero("train", "--model", "gpt", "--preset", "gpt-micro", "--data", data, "-n", "2",
              "--stage", "3", "--steps", "3", "--global-batch", "8", "--device", "cpu",
              "--save", gpt)
    check("the GPT trains and saves", r2.returncode == 0, r2.stdout + r2.stderr)
    gmeta, gparams = read_checkpoint(newest(gpt))
    hf = os.path.join(tmp, "gpt2.safetensors")
    r = zero("ckpt", "export", gpt, "--out", hf)
    check("the GPT exports with Hugging Face GPT-2 names by default",
          r.returncode == 0 and "Hugging Face GPT-2 names" in r.stdout, r.stdout + r.stderr)
    _, ht, _ = read_safetensors(hf) if r.returncode == 0 else ({}, {}, 0)
    h, L = 64, 2
    want = {"wte.weight": [256, h], "wpe.weight": [64, h], "ln_f.weight": [h], "ln_f.bias": [h]}
    for l in range(L):
        p = f"h.{l}."
        want.update({p + "ln_1.weight": [h], p + "ln_1.bias": [h], p + "ln_2.weight": [h],
                     p + "ln_2.bias": [h], p + "attn.c_attn.weight": [h, 3 * h],
                     p + "attn.c_attn.bias": [3 * h], p + "attn.c_proj.weight": [h, h],
                     p + "attn.c_proj.bias": [h], p + "mlp.c_fc.weight": [h, 4 * h],
                     p + "mlp.c_fc.bias": [4 * h], p + "mlp.c_proj.weight": [4 * h, h],
                     p + "mlp.c_proj.bias": [h]})
    check("GPT-2's names and shapes: c_attn.weight [h, 3h], c_fc [h, 4h], c_proj [4h, h]",
          {n: t[1] for n, t in ht.items()} == want, {n: t[1] for n, t in ht.items()})
    zname = {"ln_1": "ln1", "ln_2": "ln2", "attn.c_attn": "attn.qkv", "attn.c_proj": "attn.proj",
             "mlp.c_fc": "mlp.fc", "mlp.c_proj": "mlp.proj"}

    def zero_name(n):
        if not n.startswith("h."):
            return n
        _, l, rest = n.split(".", 2)
        part, kind = rest.rsplit(".", 1)
        return f"block{l}.{zname[part]}.{kind}"

    bad = []
    for n, (dtype, shape, blob) in ht.items():
        zshape, zblob = gparams[zero_name(n)]
        # GPT-2's Conv1D weights (every 2-D tensor of a block) are [in, out]: zero's transposed.
        expect = transposed(zblob, *zshape) if n.startswith("h.") and len(shape) == 2 else zblob
        if blob != expect:
            bad.append(n)
    check("every GPT-2 tensor is zero's (the 2-D weights of the blocks transposed), bitwise",
          len(ht) == len(gparams) and not bad, bad)
    hb = os.path.join(tmp, "gpt2-bf16.safetensors")
    r = zero("ckpt", "export", gpt, "--out", hb, "--dtype", "bf16")
    _, hbt, _ = read_safetensors(hb) if r.returncode == 0 else ({}, {}, 0)
    qkv = gparams["block1.attn.qkv.weight"]
    check("bf16 GPT-2 c_attn is zero's qkv transposed, then rounded to nearest even",
          hbt.get("h.1.attn.c_attn.weight", (0, 0, b""))[2]
          == bf16_bits(transposed(qkv[1], *qkv[0])), r.stderr)
    zn = os.path.join(tmp, "gpt-zero.safetensors")
    r = zero("ckpt", "export", gpt, "--out", zn, "--names", "zero")
    _, znt, _ = read_safetensors(zn) if r.returncode == 0 else ({}, {}, 0)
    check("--names zero keeps the GPT's own names and layout",
          {n: t[2] for n, t in znt.items()} == {n: b for n, (s, b) in gparams.items()}, r.stderr)

    # --- memory: bounded by the largest parameter and the buffer, not the model -------------
    big = os.path.join(tmp, "big")
    r = zero("train", "-n", "2", "--stage", "3", "--steps", "1", "--layers", "4", "--width",
             "2048", "--global-batch", "8", "--save", big, "--device", "cpu", timeout=600)
    check("a model of 4 x 16 MiB weights trains and saves", r.returncode == 0, r.stdout + r.stderr)
    bmeta, bparams = read_checkpoint(newest(big))
    model = 4 * sum(p["numel"] for p in bmeta["params"])
    largest = 4 * max(p["numel"] for p in bmeta["params"])
    rc0, base = max_rss_kib("ckpt", "info", big)
    out = os.path.join(tmp, "big.safetensors")
    rows = []
    for dtype, buffer_mib in (("fp32", 4), ("bf16", 4), ("fp32", 16)):
        rc, rss = max_rss_kib("ckpt", "export", big, "--out", out, "--dtype", dtype,
                              "--buffer-mib", str(buffer_mib))
        extra = (rss - base) * 1024
        bound = largest + buffer_mib * MIB * (1.5 if dtype == "bf16" else 1) + 1 * MIB + 8 * MIB
        rows.append(f"{dtype} buffer {buffer_mib} MiB: {rss / 1024:.1f} MiB peak RSS, "
                    f"{extra / MIB:+.1f} MiB over info's {base / 1024:.1f} MiB (bound "
                    f"{bound / MIB:.1f} MiB; model {model / MIB:.0f} MiB, largest param "
                    f"{largest / MIB:.0f} MiB)")
        print("     memory: " + rows[-1])
        check(f"export {dtype} with a {buffer_mib} MiB buffer stays below info's peak + the "
              "largest param + the buffer + 9 MiB (the reader's chunk, slack)",
              rc0 == 0 and rc == 0 and extra < bound, rows[-1])
        if dtype == "fp32" and buffer_mib == 4:
            _, bt, _ = read_safetensors(out)
            check("the big fp32 export is bitwise the checkpoint's master weights",
                  all(bt[n][2] == bparams[n][1] for n in bparams) and len(bt) == len(bparams))
finish()
