#!/usr/bin/env python3
"""Writes tests/zero/fixtures/optimizer_reference.hpp: the fp32 master weights that Lion and LAMB
leave after a few steps on one rank, computed here from the published definitions in plain Python
(no numpy, no torch), for tests/zero/test_optimizers.cpp to compare the sharded engine with.

Every fp32 operation is done in Python's double and rounded once to fp32 (f32 below). For +, -,
*, / and sqrt that is the correctly rounded fp32 result (a double has more than 2 x 24 + 2 bits,
so the double rounding never differs), which is what the engine's kernels compute one IEEE
operation at a time (no FMA). The formulas and their order are those of kernels/lion_math.hpp
(Chen et al. 2023, Algorithm 2; DeepSpeed's FusedLion but sign(0) = 0) and kernels/lamb_math.hpp
(DeepSpeed's FusedLamb, csrc/lamb/fused_lamb_cuda_kernel.cu). LAMB's per-parameter norms are
math.fsum of the exact double squares (the correctly rounded sum); the engine sums the same
squares in another order, which may change the last bits of the double sum and, rarely, the fp32
trust ratio by one ulp: the test says where it allows that.

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
    print("// references of Lion and LAMB that tests/zero/test_optimizers.cpp compares with.")
    print("#pragma once\n\n#include <cstdint>\n#include <vector>\n")
    print("namespace zero::testing::optimizer_reference {\n")
    emit("kLion", lion(lr=1e-3, wd=0.1, b1=0.9, b2=0.99))
    print()
    emit("kLamb", lamb(lr=1e-2, wd=0.01, b1=0.9, b2=0.999, eps=1e-6, max_coeff=0.3,
                       min_coeff=0.01))
    print("\n}  // namespace zero::testing::optimizer_reference")


if __name__ == "__main__":
    main()
