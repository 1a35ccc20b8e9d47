#!/usr/bin/env python3
"""Writes tests/zero/fixtures/optimizer_reference.hpp: the fp32 master weights that Lion, LAMB and
Muon (with AdamW on the biases) leave after a few steps on one rank, computed here from the published definitions in plain Python
(no numpy, no torch), for tests/zero/test_optimizers.cpp to compare the sharded engine with.

Every fp32 operation is done in Python's double and rounded once to fp32 (f32 below). For +, -,
*, / and sqrt that is the correctly rounded fp32 result (a double has more than 2 x 24 + 2 bits,
so the double rounding never differs), which is what the engine's kernels compute one IEEE
operation at a time (no FMA). The formulas and their order are those of kernels/lion_math.hpp
(Chen et al. 2023, Algorithm 2; DeepSpeed's FusedLion but sign(0) = 0) and kernels/lamb_math.hpp
(DeepSpeed's FusedLamb, csrc/lamb/fused_lamb_cuda_kernel.cu). LAMB's per-parameter norms are
math.fsum of the exact double squares (the correctly rounded sum); the engine sums the same
squares in another order, which may change the last bits of the double sum and, rarely, the fp32
trust ratio by one ulp: the test says where it allows that. Muon's Newton-Schulz products add
each output element's terms in index order, one fp32 multiply and add at a time, exactly as
kernels/cpu/optimizers.cpp does, so its reference is bitwise (docs/optimizers.md).

Usage: make_optimizer_reference.py > tests/zero/fixtures/optimizer_reference.hpp"""
import math
import struct

MASK = (1 << 64) - 1

# The model: (unit, name, shape), the order of the engine's params.
PARAMS = [("a", "a.w", (8, 12)), ("a", "a.b", (8,)), ("b", "b.w", (10, 10)), ("b", "b.b", (10,)),
          ("c", "c.w", (5, 7))]
STEPS = 5
BIAS_GLOB_LR_SCALE = 0.5  # param_groups [{"params": ["*.b"], "weight_decay": 0, "lr_scale": 0.5}]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def mix(x):
    """splitmix64's output function of x + the golden gamma."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def value(seed, i, scale):
    """An fp32-exact value in [-scale, scale) (scale a power of two); 1 in 16 is exactly 0."""
    z = mix(((seed << 32) | i) & MASK)
    if z & 15 == 0:
        return 0.0
    return ((z >> 40) - (1 << 23)) * 2.0 ** -23 * scale


def numel(shape):
    return math.prod(shape)


def init(q):
    return [value(1000 + q, i, 0.5) for i in range(numel(PARAMS[q][2]))]


def grad(step, q):
    return [value(7919 * (step + 1) + q, i, 0.25) for i in range(numel(PARAMS[q][2]))]


def group(q, lr, wd):
    """The param's lr and weight decay: biases are in the no-decay, half-lr group."""
    return (lr * BIAS_GLOB_LR_SCALE, 0.0) if PARAMS[q][1].endswith(".b") else (lr, wd)


def lion(lr, wd, b1, b2):
    ps = [init(q) for q in range(len(PARAMS))]
    ms = [[0.0] * len(p) for p in ps]
    for s in range(STEPS):
        for q, (p, m) in enumerate(zip(ps, ms)):
            glr, gwd = group(q, lr, wd)
            decay, lr32 = f32(1.0 - glr * gwd), f32(glr)
            beta1, omb1, beta2, omb2 = f32(b1), f32(1.0 - b1), f32(b2), f32(1.0 - b2)
            for i, g in enumerate(grad(s, q)):
                c = f32(f32(beta1 * m[i]) + f32(omb1 * g))
                step = -lr32 if c > 0 else (lr32 if c < 0 else 0.0)
                p[i] = f32(f32(p[i] * decay) + step)
                m[i] = f32(f32(beta2 * m[i]) + f32(omb2 * g))
    return ps


def lamb(lr, wd, b1, b2, eps, max_coeff, min_coeff):
    ps = [init(q) for q in range(len(PARAMS))]
    ms = [[0.0] * len(p) for p in ps]
    vs = [[0.0] * len(p) for p in ps]
    beta1, omb1, beta2, omb2, eps32 = f32(b1), f32(1.0 - b1), f32(b2), f32(1.0 - b2), f32(eps)
    hi, lo = f32(max_coeff), f32(min_coeff)
    for s in range(STEPS):
        t = s + 1
        for q, (p, m, v) in enumerate(zip(ps, ms, vs)):
            glr, gwd = group(q, lr, wd)
            step_size = f32(glr * math.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t))
            wd32 = f32(gwd)
            g = grad(s, q)
            m1, v1, u = [], [], []
            for i in range(len(p)):
                mi = f32(f32(beta1 * m[i]) + f32(omb1 * g[i]))
                vi = f32(f32(beta2 * v[i]) + f32(f32(omb2 * g[i]) * g[i]))
                u.append(f32(f32(mi / f32(f32(math.sqrt(vi)) + eps32)) + f32(wd32 * p[i])))
                m1.append(mi)
                v1.append(vi)
            w2 = math.fsum(x * x for x in p)
            u2 = math.fsum(x * x for x in u)
            trust = 1.0
            if w2 != 0.0 and u2 != 0.0:
                trust = min(max(f32(math.sqrt(w2) / math.sqrt(u2)), lo), hi)
            rate = f32(step_size * trust)
            for i in range(len(p)):
                p[i] = f32(p[i] - f32(rate * u[i]))
            m[:], v[:] = m1, v1
    return ps


def fma(a, b, c):
    """fmaf: a * b is exact in double (two 24-bit mantissas); the sum is rounded to double and
    then to fp32, which differs from one rounding only on an exact fp32 tie (not met here)."""
    return f32(a * b + c)


def adamw_element(p, m, v, g, decay, w, b2, omb2, bc2_sqrt, eps, neg_step):
    """kernels/adamw_math.hpp's adam_element_in<adamw>, |1 - beta1| < 0.5."""
    p = f32(p * decay)
    m = fma(w, f32(g - m), m)
    v = fma(f32(omb2 * g), g, f32(v * b2))
    d = f32(f32(f32(math.sqrt(v)) / bc2_sqrt) + eps)
    return f32(p + f32(f32(neg_step * m) / d)), m, v


def matmul(a, b):
    """kernels/cpu/optimizers.cpp's matmul: each element's terms added in index order."""
    out = []
    for row in a:
        acc = [0.0] * len(b[0])
        for ail, bl in zip(row, b):
            acc = [f32(x + f32(ail * y)) for x, y in zip(acc, bl)]
        out.append(acc)
    return out


def transpose(x):
    return [list(r) for r in zip(*x)]


def newton_schulz(x):
    """kernels/cpu/optimizers.cpp's newton_schulz on k x n (k <= n): Keller Jordan's quintic."""
    a, b, c = f32(3.4445), f32(-4.7750), f32(2.0315)
    sq = 0.0
    for r in x:
        for e in r:
            sq += e * e  # in double, in order (each square exact)
    denom = f32(math.sqrt(sq) + 1e-7)
    x = [[f32(e / denom) for e in r] for r in x]
    for _ in range(5):
        am = matmul(x, transpose(x))
        aa = matmul(am, am)
        bm = [[f32(f32(b * e) + f32(c * f)) for e, f in zip(r, s)] for r, s in zip(am, aa)]
        y = matmul(bm, x)
        x = [[f32(f32(a * e) + f) for e, f in zip(r, s)] for r, s in zip(x, y)]
    return x


def muon(muon_lr, lr, wd, momentum, nesterov, match_rms_adamw, b1, b2, eps):
    """Muon (kernels/muon_math.hpp, after torch.optim.Muon) on the 2-D params, AdamW on the rest
    (the biases, in the no-decay, half-lr group)."""
    ps = [init(q) for q in range(len(PARAMS))]
    ms = [[0.0] * len(p) for p in ps]
    vs = [[0.0] * len(p) for p in ps]
    beta, omb = f32(momentum), f32(1.0 - momentum)
    for s in range(STEPS):
        t = s + 1
        for q, (p, m, v) in enumerate(zip(ps, ms, vs)):
            g = grad(s, q)
            shape = PARAMS[q][2]
            if len(shape) != 2:
                glr, gwd = group(q, lr, wd)
                step_size = f32(glr / (1.0 - b1 ** t))
                args = (f32(1.0 - glr * gwd), f32(1.0 - b1), f32(b2), f32(1.0 - b2),
                        f32(math.sqrt(1.0 - b2 ** t)), f32(eps), -step_size)
                for i in range(len(p)):
                    p[i], m[i], v[i] = adamw_element(p[i], m[i], v[i], g[i], *args)
                continue
            rows, cols = shape
            m1 = [f32(f32(beta * m[i]) + f32(omb * g[i])) for i in range(len(p))]
            u = [f32(f32(omb * g[i]) + f32(beta * m1[i])) if nesterov else m1[i]
                 for i in range(len(p))]
            x = [u[r * cols:(r + 1) * cols] for r in range(rows)]
            tall = rows > cols
            o = newton_schulz(transpose(x) if tall else x)
            o = transpose(o) if tall else o
            scale = (0.2 * math.sqrt(max(rows, cols)) if match_rms_adamw
                     else math.sqrt(max(1.0, rows / cols)))
            rate, decay = f32(muon_lr * scale), f32(1.0 - muon_lr * wd)
            flat = [e for r in o for e in r]
            for i in range(len(p)):
                p[i] = f32(f32(p[i] * decay) - f32(rate * flat[i]))
            m[:] = m1
    return ps


def emit(name, ps):
    print(f"// {name}: every param's master weights after {STEPS} steps, as fp32 bit patterns.")
    print(f"inline const std::vector<std::vector<std::uint32_t>> {name} = {{")
    for p in ps:
        words = [f"0x{bits(x):08x}u" for x in p]
        lines = [", ".join(words[k:k + 6]) for k in range(0, len(words), 6)]
        print("    {" + (",\n     ".join(lines)) + "},")
    print("};")


def main():
    print("// Made by tests/zero/make_optimizer_reference.py; do not edit. The single-rank fp32")
    print("// references of Lion, LAMB and Muon that tests/zero/test_optimizer*.cpp compare with.")
    print("#pragma once\n\n#include <cstdint>\n#include <vector>\n")
    print("namespace zero::testing::optimizer_reference {\n")
    emit("kLion", lion(lr=1e-3, wd=0.1, b1=0.9, b2=0.99))
    print()
    emit("kLamb", lamb(lr=1e-2, wd=0.01, b1=0.9, b2=0.999, eps=1e-6, max_coeff=0.3,
                       min_coeff=0.01))
    print()
    emit("kMuon", muon(muon_lr=0.02, lr=1e-3, wd=0.1, momentum=0.95, nesterov=True,
                       match_rms_adamw=False, b1=0.9, b2=0.95, eps=1e-8))
    print()
    emit("kMuonMoonshot", muon(muon_lr=0.01, lr=1e-3, wd=0.0, momentum=0.9, nesterov=False,
                               match_rms_adamw=True, b1=0.9, b2=0.95, eps=1e-8))
    print("\n}  // namespace zero::testing::optimizer_reference")


if __name__ == "__main__":
    main()
