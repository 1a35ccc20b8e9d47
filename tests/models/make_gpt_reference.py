#!/usr/bin/env python3
"""PyTorch reference numbers for zero's GPT (llm.c's GPT-2), written as a small fixture file.

Run from the repository root, in the venv `scripts/bench-peers venv` makes (CPU-only torch):

    .venv-peers/bin/python tests/models/make_gpt_reference.py            # writes the fixture
    .venv-peers/bin/python tests/models/make_gpt_reference.py --check    # re-reads and verifies it

It writes tests/models/fixtures/gpt_reference.zfx (format "ZFX1", see write_zfx) with:
  * per-op references (layernorm, gelu, matmul, attention, crossentropy, embedding): random
    inputs, a random upstream gradient, outputs and input gradients, computed in float64;
  * the whole tiny model (V=64, T=8, C=16, NH=2, L=2, B=2): initial parameters, tokens, targets,
    the float64 loss and gradients, the same in float32 and under torch.autocast bf16, and a
    3-step float32 AdamW trajectory.
Every input is rounded to float32 first and the references are computed from those float32
values (upcast to float64), so a C++ run on the stored inputs sees exactly the same problem.
It also runs a float64 finite-difference check of the model gradients and prints how far
torch's own float32 and bf16 runs are from the float64 reference (the numbers in README.md).
The C++ test suite only reads the file; it never runs torch.
"""

import argparse
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "gpt_reference.zfx")

V, T, C, NH, L, B = 64, 8, 16, 2, 2, 2
HS = C // NH
EPS = 1e-5
SEED = 20240611

F64, F32 = torch.float64, torch.float32


# ---------------------------------------------------------------------------------------------
# ZFX1: b"ZFX1", uint32 count; per tensor: uint32 name_len, name (utf-8), uint32 ndim,
# int64 dims[ndim], float32 data[prod(dims)]; all little-endian; a scalar is ndim 1, dims [1].

def write_zfx(path, tensors):
    out = [b"ZFX1", struct.pack("<I", len(tensors))]
    for name, t in tensors.items():
        t = t.detach().to(F32).contiguous()
        dims = list(t.shape) if t.dim() > 0 else [1]
        nb = name.encode("utf-8")
        out.append(struct.pack("<I", len(nb)))
        out.append(nb)
        out.append(struct.pack("<I", len(dims)))
        out.append(struct.pack("<%dq" % len(dims), *dims))
        out.append(t.reshape(-1).numpy().astype("<f4").tobytes())
    data = b"".join(out)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def read_zfx(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"ZFX1":
        raise ValueError("not a ZFX1 file")
    (count,) = struct.unpack_from("<I", data, 4)
    pos, tensors = 8, {}
    for _ in range(count):
        (nlen,) = struct.unpack_from("<I", data, pos)
        pos += 4
        name = data[pos:pos + nlen].decode("utf-8")
        pos += nlen
        (ndim,) = struct.unpack_from("<I", data, pos)
        pos += 4
        dims = list(struct.unpack_from("<%dq" % ndim, data, pos))
        pos += 8 * ndim
        n = math.prod(dims)
        vals = struct.unpack_from("<%df" % n, data, pos)
        pos += 4 * n
        if name in tensors:
            raise ValueError("duplicate tensor " + name)
        tensors[name] = torch.tensor(vals, dtype=F32).reshape(dims)
    if pos != len(data):
        raise ValueError("%d trailing bytes" % (len(data) - pos))
    return tensors


# ---------------------------------------------------------------------------------------------
# Random inputs: one generator, drawn in a fixed order; every input rounded to float32.

class Rng:
    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def normal(self, shape, std=1.0):
        return (torch.randn(shape, generator=self.g, dtype=F64) * std).to(F32)

    def uniform(self, shape, lo, hi):
        return (lo + (hi - lo) * torch.rand(shape, generator=self.g, dtype=F64)).to(F32)

    def ints(self, shape, hi):
        return torch.randint(0, hi, shape, generator=self.g)


# ---------------------------------------------------------------------------------------------
# The model, written once with torch ops; dtype comes from the parameters. `mm` runs every
# matrix product (so the bf16 run can route them through autocast); everything else is plain.

def attention(qkv, mm=None):
    """qkv [B,T,3C] -> [B,T,C]: q, k, v = columns [0,C), [C,2C), [2C,3C); head h uses dims
    h*HS..(h+1)*HS of each; scores = q k^T / sqrt(HS), causal mask, softmax, times v."""
    mm = mm or torch.matmul
    b, t, _ = qkv.shape
    q, k, v = qkv.split(C, dim=-1)
    q, k, v = (z.reshape(b, t, NH, HS).transpose(1, 2) for z in (q, k, v))  # [B,NH,T,HS]
    att = mm(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    y = mm(att, v)  # [B,NH,T,HS]
    return y.transpose(1, 2).reshape(b, t, C)


def gelu(x):
    return F.gelu(x, approximate="tanh")


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=EPS)


def param_shapes():
    shapes = {"wte.weight": (V, C), "wpe.weight": (T, C)}
    for l in range(L):
        p = "block%d." % l
        shapes.update({
            p + "ln1.weight": (C,), p + "ln1.bias": (C,),
            p + "attn.qkv.weight": (3 * C, C), p + "attn.qkv.bias": (3 * C,),
            p + "attn.proj.weight": (C, C), p + "attn.proj.bias": (C,),
            p + "ln2.weight": (C,), p + "ln2.bias": (C,),
            p + "mlp.fc.weight": (4 * C, C), p + "mlp.fc.bias": (4 * C,),
            p + "mlp.proj.weight": (C, 4 * C), p + "mlp.proj.bias": (C,),
        })
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return shapes


def init_params(rng):
    params = {}
    for name, shape in param_shapes().items():
        if name.endswith(("ln1.weight", "ln2.weight", "ln_f.weight")):
            params[name] = (1.0 + rng.uniform(shape, -0.1, 0.1).double()).to(F32)
        elif name.endswith("bias"):
            params[name] = rng.uniform(shape, -0.1, 0.1)
        elif name.endswith(("attn.proj.weight", "mlp.proj.weight")):
            params[name] = rng.normal(shape, 0.02 / math.sqrt(2 * L))
        else:
            params[name] = rng.normal(shape, 0.02)
    return params


def forward(p, tokens, targets, mm=None, lin=None):
    """Mean cross-entropy loss of the GPT. `lin(x, w, b)` is y = x w^T + b (F.linear)."""
    lin = lin or F.linear
    x = p["wte.weight"][tokens] + p["wpe.weight"][torch.arange(tokens.shape[1])]
    for l in range(L):
        q = lambda n: p["block%d.%s" % (l, n)]
        h = layernorm(x, q("ln1.weight"), q("ln1.bias"))
        h = lin(h, q("attn.qkv.weight"), q("attn.qkv.bias"))
        h = attention(h, mm)
        x = x + lin(h, q("attn.proj.weight"), q("attn.proj.bias"))
        h = layernorm(x, q("ln2.weight"), q("ln2.bias"))
        h = gelu(lin(h, q("mlp.fc.weight"), q("mlp.fc.bias")))
        x = x + lin(h, q("mlp.proj.weight"), q("mlp.proj.bias"))
    x = layernorm(x, p["ln_f.weight"], p["ln_f.bias"])
    logits = lin(x, p["wte.weight"], None)
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="mean")


def loss_and_grads(params, tokens, targets, dtype):
    p = {k: v.detach().to(dtype).clone().requires_grad_(True) for k, v in params.items()}
    loss = forward(p, tokens, targets)
    loss.backward()
    return loss.detach(), {k: v.grad.detach() for k, v in p.items()}


def loss_and_grads_bf16(params, tokens, targets):
    """bf16 emulation: the matrices (2-D parameters) rounded to bf16 (LayerNorm parameters and
    biases stay fp32, as in kernels/cpu/gpt_ops.hpp), every matrix product under
    torch.autocast("cpu", bfloat16) -- its inputs rounded to bf16, fp32 accumulation, its output
    rounded to bf16 and widened back to fp32 at once -- and everything else (LayerNorm, GELU,
    softmax, residual stream, loss, gradients) in fp32."""
    p = {k: (v.bfloat16().float() if v.dim() == 2 else v.clone()).detach().requires_grad_(True)
         for k, v in params.items()}

    def mm(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.matmul(a, b)
        assert y.dtype == torch.bfloat16
        return y.float()

    def lin(x, w, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = F.linear(x, w, b)  # autocast rounds the bias to bf16 here too
        assert y.dtype == torch.bfloat16
        return y.float()

    loss = forward(p, tokens, targets, mm=mm, lin=lin)
    loss.backward()
    return loss.detach(), {k: v.grad.detach() for k, v in p.items()}


def decays(name):
    """AdamW weight decay: the 2-D weights except the embeddings (wte, tied to the head; wpe)."""
    return len(param_shapes()[name]) == 2 and not name.startswith(("wte", "wpe"))


def adamw_trajectory(params, tokens, targets, steps=3, dtype=F32):
    p = {k: v.detach().to(dtype).clone().requires_grad_(True) for k, v in params.items()}
    groups = [
        {"params": [v for k, v in p.items() if decays(k)], "weight_decay": 0.1},
        {"params": [v for k, v in p.items() if not decays(k)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = forward(p, tokens, targets)
        loss.backward()
        losses.append(loss.detach().item())
        opt.step()
    return torch.tensor(losses, dtype=F64), {k: v.detach() for k, v in p.items()}


# ---------------------------------------------------------------------------------------------
# Per-op references, float64 (inputs float32-exact).

def op_layernorm(rng, out):
    x = rng.normal((B, T, C), 1.5) + rng.uniform((B, T, 1), -1.0, 1.0)  # rows with offsets
    w = (1.0 + rng.uniform((C,), -0.3, 0.3).double()).to(F32)
    b = rng.uniform((C,), -0.3, 0.3)
    dout = rng.normal((B, T, C))
    xd, wd, bd = (z.double().requires_grad_(True) for z in (x, w, b))
    y = layernorm(xd, wd, bd)
    y.backward(dout.double())
    mean = xd.detach().mean(-1)
    var = ((xd.detach() - mean[..., None]) ** 2).mean(-1)  # biased
    rstd = 1.0 / torch.sqrt(var + EPS)
    manual = (xd.detach() - mean[..., None]) * rstd[..., None] * wd.detach() + bd.detach()
    assert torch.allclose(manual, y.detach(), rtol=0, atol=1e-13)
    out.update({"layernorm.x": x, "layernorm.w": w, "layernorm.b": b, "layernorm.dout": dout,
                "layernorm.out": y, "layernorm.mean": mean, "layernorm.rstd": rstd,
                "layernorm.dx": xd.grad, "layernorm.dw": wd.grad, "layernorm.db": bd.grad})


def op_gelu(rng, out):
    x = rng.uniform((B, T, 4 * C), -6.0, 6.0)
    x.view(-1)[:8] = torch.tensor([-6.0, -3.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 6.0])
    dout = rng.normal((B, T, 4 * C))
    xd = x.double().requires_grad_(True)
    y = gelu(xd)
    y.backward(dout.double())
    z = xd.detach()
    manual = 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    assert torch.allclose(manual, y.detach(), rtol=0, atol=1e-14)
    out.update({"gelu.x": x, "gelu.dout": dout, "gelu.out": y, "gelu.dx": xd.grad})


def op_matmul(rng, out):
    x = rng.normal((B, T, C))
    w = rng.normal((3 * C, C), 0.2)
    b = rng.uniform((3 * C,), -0.1, 0.1)
    dout = rng.normal((B, T, 3 * C))
    xd, wd, bd = (z.double().requires_grad_(True) for z in (x, w, b))
    y = F.linear(xd, wd, bd)
    y.backward(dout.double())
    out.update({"matmul.x": x, "matmul.w": w, "matmul.b": b, "matmul.dout": dout,
                "matmul.out": y, "matmul.dx": xd.grad, "matmul.dw": wd.grad, "matmul.db": bd.grad})


def op_attention(rng, out):
    qkv = rng.normal((B, T, 3 * C))
    dout = rng.normal((B, T, C))
    qd = qkv.double().requires_grad_(True)
    y = attention(qd)
    y.backward(dout.double())
    # independent check against torch's fused attention
    q, k, v = (z.reshape(B, T, NH, HS).transpose(1, 2) for z in qd.detach().split(C, -1))
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
    assert torch.allclose(sdpa, y.detach(), rtol=0, atol=1e-13)
    out.update({"attention.qkv": qkv, "attention.dout": dout, "attention.out": y,
                "attention.dqkv": qd.grad})


def op_crossentropy(rng, out):
    logits = rng.normal((B, T, V), 2.0)
    targets = rng.ints((B, T), V)
    ld = logits.double().requires_grad_(True)
    loss = F.cross_entropy(ld.reshape(-1, V), targets.reshape(-1), reduction="mean")
    loss.backward()
    manual = (ld.detach().softmax(-1) - F.one_hot(targets, V).double()) / (B * T)
    assert torch.allclose(manual, ld.grad, rtol=0, atol=1e-15)
    out.update({"crossentropy.logits": logits, "crossentropy.targets": targets,
                "crossentropy.loss": loss.reshape(1), "crossentropy.dlogits": ld.grad})


def op_embedding(rng, out):
    tokens = rng.ints((B, T), V)
    tokens[0, 3] = tokens[0, 1]  # repeats, within a row and across rows
    tokens[1, 0] = tokens[0, 1]
    tokens[1, 6] = tokens[1, 2]
    wte = rng.normal((V, C), 0.5)
    wpe = rng.normal((T, C), 0.5)
    dout = rng.normal((B, T, C))
    ed, pd = wte.double().requires_grad_(True), wpe.double().requires_grad_(True)
    y = ed[tokens] + pd[torch.arange(T)]
    y.backward(dout.double())
    out.update({"embedding.tokens": tokens, "embedding.wte": wte, "embedding.wpe": wpe,
                "embedding.dout": dout, "embedding.out": y, "embedding.dwte": ed.grad,
                "embedding.dwpe": pd.grad})


# ---------------------------------------------------------------------------------------------

def rel(a, ref):
    """max |a - ref| / max |ref| over one tensor (a normwise max relative error)."""
    a, ref = a.double(), ref.double()
    return ((a - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def finite_difference(params, tokens, targets, grads, rng, per_tensor=3, h=1e-4):
    """Central differences in float64 at the largest-|grad| element and a random element of
    every parameter; error = |fd - g| / max|grad of that tensor| (rounding in the float64 loss
    is ~1e-16 * 4 / h, so relative to the tiny gradients an elementwise ratio is noise)."""
    p = {k: v.double() for k, v in params.items()}
    worst, where = 0.0, ""
    with torch.no_grad():
        for name, g in grads.items():
            g = g.reshape(-1)
            idx = [int(g.abs().argmax())]
            idx += [int(i) for i in torch.randint(0, g.numel(), (per_tensor - 1,), generator=rng.g)]
            for i in idx:
                flat = p[name].view(-1)
                orig = flat[i].item()
                flat[i] = orig + h
                lp = forward(p, tokens, targets).item()
                flat[i] = orig - h
                lm = forward(p, tokens, targets).item()
                flat[i] = orig
                fd = (lp - lm) / (2 * h)
                err = abs(fd - g[i].item()) / g.abs().max().item()
                if err > worst:
                    worst, where = err, "%s[%d]" % (name, i)
    return worst, where


def compute(verbose=True):
    say = print if verbose else (lambda *a, **k: None)
    torch.manual_seed(SEED)
    rng = Rng(SEED)
    out = {}
    op_layernorm(rng, out)
    op_gelu(rng, out)
    op_matmul(rng, out)
    op_attention(rng, out)
    op_crossentropy(rng, out)
    op_embedding(rng, out)

    params = init_params(rng)
    tokens = rng.ints((B, T), V)
    targets = rng.ints((B, T), V)
    for k, v in params.items():
        out["model.param." + k] = v
    out["model.tokens"] = tokens
    out["model.targets"] = targets

    loss64, g64 = loss_and_grads(params, tokens, targets, F64)
    loss32, g32 = loss_and_grads(params, tokens, targets, F32)
    lossbf, gbf = loss_and_grads_bf16(params, tokens, targets)
    out["model.loss"] = loss64.reshape(1)
    for k, v in g64.items():
        out["model.grad." + k] = v
    out["model.fp32.loss"] = loss32.reshape(1)
    for k, v in g32.items():
        out["model.fp32.grad." + k] = v
    out["model.bf16.loss"] = lossbf.reshape(1)
    for k, v in gbf.items():
        out["model.bf16.grad." + k] = v

    losses, after = adamw_trajectory(params, tokens, targets, dtype=F32)
    out["model.adamw.loss"] = losses
    for k, v in after.items():
        out["model.adamw.param." + k] = v

    say("torch %s, threads %d" % (torch.__version__, torch.get_num_threads()))
    say("model loss: fp64 %.9f  fp32 %.9f  bf16 %.9f  (ln V = %.6f)"
        % (loss64, loss32, lossbf, math.log(V)))
    say("loss rel err vs fp64: fp32 %.2e  bf16 %.2e"
        % (abs(loss32 - loss64) / loss64, abs(lossbf - loss64) / loss64))
    say("gradient max|err|/max|ref| vs fp64 (per parameter):")
    say("  %-24s %10s %10s %10s" % ("parameter", "max|g64|", "fp32", "bf16"))
    w32 = wbf = 0.0
    for k in g64:
        r32, rbf = rel(g32[k], g64[k]), rel(gbf[k], g64[k])
        w32, wbf = max(w32, r32), max(wbf, rbf)
        say("  %-24s %10.3e %10.2e %10.2e" % (k, g64[k].abs().max(), r32, rbf))
    say("  %-24s %10s %10.2e %10.2e" % ("(worst)", "", w32, wbf))

    losses64, after64 = adamw_trajectory(params, tokens, targets, dtype=F64)
    say("adamw (3 steps, fp32 stored) losses %s" % ", ".join("%.9f" % x for x in losses))
    say("adamw fp32 vs an fp64 run: losses max rel %.2e; params max |diff| %.2e, "
        "max |diff|/lr %.2e"
        % ((losses - losses64).abs().max() / losses64.abs().max(),
           max((after[k].double() - after64[k]).abs().max().item() for k in after),
           max((after[k].double() - after64[k]).abs().max().item() for k in after) / 1e-2))

    fd_err, fd_where = finite_difference(params, tokens, targets, g64, rng)
    say("finite-difference check (fp64, central, h=1e-4, %d elements): "
        "max |fd - g| / max|g| %.2e at %s" % (3 * len(g64), fd_err, fd_where))
    if fd_err > 1e-6:
        raise SystemExit("finite-difference check failed")
    return out


def check(path, fresh, exact):
    """Re-read `path` and compare it with `fresh` (this run's tensors): the same names in the
    same order, the same shapes, finite values. Just after writing (exact) every value must come
    back bit for bit. Against a committed file (--check) the float64-derived references and the
    inputs must agree to 1e-5 of each tensor's max; the fp32, bf16 and AdamW runs depend on the
    CPU's kernels (oneDNN's bf16 paths differ between CPUs), so their differences are printed."""
    stored = read_zfx(path)
    if list(stored) != list(fresh):
        raise SystemExit("check: tensor names/order differ from what the script makes")
    worst = {"reference": 0.0, "fp32/bf16/adamw": 0.0}
    for k, v in fresh.items():
        ref, s = v.detach().to(F32), stored[k]
        if list(s.shape) != (list(ref.shape) if ref.dim() else [1]):
            raise SystemExit("check: %s shape %s, expected %s" % (k, list(s.shape), list(ref.shape)))
        if not torch.isfinite(s).all():
            raise SystemExit("check: %s not finite" % k)
        ref = ref.reshape(s.shape)
        if exact and not torch.equal(s, ref):
            raise SystemExit("check: %s does not round-trip" % k)
        kind = "fp32/bf16/adamw" if k.startswith(("model.fp32.", "model.bf16.", "model.adamw.")) \
            else "reference"
        d = ((s - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
        worst[kind] = max(worst[kind], d)
    print("check: %s: %d tensors, %d bytes; max rel diff vs this run: references and inputs "
          "%.2e, fp32/bf16/adamw runs %.2e" % (path, len(stored), os.path.getsize(path),
                                               worst["reference"], worst["fp32/bf16/adamw"]))
    if worst["reference"] > 1e-5:
        raise SystemExit("check: stored references differ from this run")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="re-read the fixture and verify it")
    ap.add_argument("--out", default=FIXTURE)
    args = ap.parse_args()
    torch.set_num_threads(1)  # one fixed reduction order
    fresh = compute(verbose=True)
    if not args.check:
        n = write_zfx(args.out, fresh)
        print("wrote %s: %d tensors, %d bytes" % (args.out, len(fresh), n))
    check(args.out, fresh, exact=not args.check)
    if args.check:
        names = ", ".join(fresh)
        print("tensors:", names if len(names) < 4000 else names[:4000] + "...")


if __name__ == "__main__":
    sys.exit(main())
