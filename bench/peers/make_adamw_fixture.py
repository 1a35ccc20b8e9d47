#!/usr/bin/env python3
"""Writes tests/kernels/fixtures/torch_adamw.hpp: what PyTorch's CPU Adam/AdamW leave in p, m, v.

For each case below, a few thousand parameters start from deterministic values and take several
steps with deterministic gradients; the fixture holds the case's hyperparameters and torch's
p, exp_avg and exp_avg_sq after the last step, as float bit patterns. tests/kernels/test_adamw.cpp
rebuilds the same inputs (the generator below is written twice, here and there, in integers only,
so both sides make the same floats exactly), runs zero's kernel and compares bitwise. The test
suite never needs torch: only this script does. Run it with the peers venv's python:

    .venv-peers/bin/python bench/peers/make_adamw_fixture.py          # rewrites the fixture
    .venv-peers/bin/python bench/peers/make_adamw_fixture.py --check  # compares, writes nothing

What is recorded is torch.optim.AdamW / Adam with fused=True (ATen's FusedAdamKernel.cpp). The
script also runs the default single-tensor path (fused=False, foreach=False) and reports how many
elements differ from fused=True: that path takes sqrt through torch.sqrt, which on the CPU goes to
MKL's vsSqrt and is not correctly rounded, so it differs from the fused kernel (and from zero) in
the last bit for some elements. The length of each case is a multiple of 16, so every element goes
through the fused kernel's vector loop: its scalar remainder loop (the last numel % 16 elements)
computes exp_avg_sq in another order.
"""
import argparse
import os
import sys

import numpy as np
import torch

MASK64 = (1 << 64) - 1

# name, optimizer, lr, beta1, beta2, eps, weight_decay, steps, n. Betas (0.3, 0.99): lerp weight
# 1 - beta1 = 0.7 >= 0.5, ATen's other lerp formula; eps 1e-3 is comparable to sqrt(v).
CASES = [
    ("adamw", "AdamW", 1e-2, 0.9, 0.999, 1e-8, 0.1, 6, 1024),
    ("adamw_low_beta1", "AdamW", 3e-3, 0.3, 0.99, 1e-3, 0.05, 6, 1024),
    ("adam_l2", "Adam", 1e-2, 0.9, 0.999, 1e-8, 0.1, 6, 1024),
]


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def values(seed, n, e_lo, e_hi):
    """n floats: a 24-bit signed integer times 2^(e - 23), e in [e_lo, e_hi], so every value is
    exact in float32 (|x| < 2^e); about 1 in 85 is an exact zero."""
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        h = splitmix64((seed << 32) ^ i)
        if (h & 0xFF) < 3:
            out[i] = 0.0
            continue
        k = (h >> 40) - (1 << 23)
        e = e_lo + ((h >> 8) & 0xFF) % (e_hi - e_lo + 1)
        out[i] = np.float32(k * 2.0 ** (e - 23))
    return out


def run(case, fused):
    name, opt, lr, b1, b2, eps, wd, steps, n = case
    idx = CASES.index(case)
    p = torch.nn.Parameter(torch.from_numpy(values(1000 + idx, n, -2, 1)))
    kw = dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    kw.update(dict(fused=True) if fused else dict(fused=False, foreach=False))
    o = getattr(torch.optim, opt)([p], **kw)
    for t in range(1, steps + 1):
        p.grad = torch.from_numpy(values(2000 + 100 * idx + t, n, -14, 0))
        o.step()
    st = o.state[p]
    return [x.detach().numpy().copy() for x in (p, st["exp_avg"], st["exp_avg_sq"])]


def hex_words(a):
    words = a.view(np.uint32)
    lines = []
    for i in range(0, len(words), 16):
        lines.append('    "' + "".join("%08x" % w for w in words[i:i + 16]) + '"')
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests",
                                                  "kernels", "fixtures", "torch_adamw.hpp"))
    ap.add_argument("--check", action="store_true",
                    help="compare with the fixture on disk instead of writing it")
    a = ap.parse_args()
    torch.set_num_threads(1)
    report, blocks = [], []
    for case in CASES:
        assert case[8] % 16 == 0, "a case's length must be a multiple of 16 (see the docstring)"
        fused = run(case, True)
        single = run(case, False)
        diff = [int((x.view(np.uint32) != y.view(np.uint32)).sum()) for x, y in zip(fused, single)]
        report.append("%s: single-tensor path differs from fused=True in p %d, m %d, v %d of %d"
                      % (case[0], diff[0], diff[1], diff[2], case[8]))
        name, opt, lr, b1, b2, eps, wd, steps, n = case
        blocks.append(
            "    {\"%s\", %s, %r, %r, %r, %r, %r, %d, %d,\n" % (
                name, "zero::kernels::AdamMode::adam_l2" if opt == "Adam"
                else "zero::kernels::AdamMode::adamw", lr, b1, b2, eps, wd, steps, n)
            + "     // p\n" + hex_words(fused[0]) + ",\n"
            + "     // exp_avg\n" + hex_words(fused[1]) + ",\n"
            + "     // exp_avg_sq\n" + hex_words(fused[2]) + "},\n")
    print("\n".join(report))
    text = (
        "// Generated by bench/peers/make_adamw_fixture.py with torch %s: do not edit.\n"
        "// torch.optim.<optimizer>(fused=True) on the CPU, %d thread; p, exp_avg, exp_avg_sq\n"
        "// after the last step as float bit patterns (hex, 8 digits each). Inputs: the script's\n"
        "// values().\n"
        % (torch.__version__, torch.get_num_threads())
        + "".join("// %s\n" % r for r in report)
        + "#pragma once\n\n#include \"kernels/adamw_math.hpp\"\n\n"
        "namespace zero::kernels::test::torch_fixture {\n\n"
        "struct Case {\n"
        "  const char* name;\n"
        "  AdamMode mode;  // adamw: torch.optim.AdamW; adam_l2: torch.optim.Adam\n"
        "  double lr, beta1, beta2, eps, weight_decay;\n"
        "  int steps, n;\n"
        "  const char *p, *m, *v;  // n float bit patterns each\n"
        "};\n\n"
        "inline const Case cases[] = {\n" + "".join(blocks) + "};\n\n"
        "}  // namespace zero::kernels::test::torch_fixture\n")
    if a.check:
        try:
            with open(a.out) as f:
                same = f.read() == text
        except OSError:
            same = False
        print(os.path.normpath(a.out), "matches torch" if same else "DIFFERS from torch's results")
        return 0 if same else 1
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    print("wrote", os.path.normpath(a.out), len(text), "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
