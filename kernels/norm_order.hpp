// The fixed summation order of the squared L2 norm, which the CPU loop (kernels/cpu/norm.cpp)
// and the CUDA kernels (kernels/cuda/norm.cu) both implement, so they agree bit for bit.
//
// squared_norm(x[0..n)) is defined as follows; every '+' is one IEEE double add, rounded to
// nearest even:
//
//  1. Leaves. Each element becomes sq(x) = double(x)·double(x). This is EXACT: a float has a
//     24-bit significand, its square needs at most 48 bits, a double holds 53, and the float
//     exponent range squared fits in the double's. So the leaves carry no rounding at all.
//  2. Blocks. x is cut into blocks of kNormBlock = 1024 consecutive elements; the last block is
//     padded with zeros (x + 0 = x exactly, so padding changes nothing). Within a block the
//     1024 leaves a[0..1024) are summed by a halving tree:
//         for h = 512, 256, ..., 1:   a[i] = a[i] + a[i + h]   for every i < h
//     and the block sum is a[0]. (Halving, not adjacent pairs, because both a SIMD loop and a
//     CUDA block reduction walk it with unit stride.)
//  3. Blocks combined. The nb = ceil(n / 1024) block sums B[0..nb) are summed by the same
//     halving tree over the next power of two P >= nb, where absent entries are skipped (not
//     added as zeros; the result is the same, and this is the loop both sides run):
//         c = nb
//         for h = P/2, P/4, ..., 1:
//           for every i < c - h (when c > h):   B[i] = B[i] + B[i + h]
//           c = min(c, h)
//     and the norm is B[0] (0 when n = 0).
//
// Any non-finite input makes the result non-finite (inf, or NaN for a NaN input). The CPU and
// the GPU agree bit for bit on every finite result and on inf; a NaN result is NaN on both, but
// its payload may differ (NVIDIA GPUs return the canonical NaN from arithmetic).
#pragma once

#include <cstddef>

#include "precision/hd.hpp"

namespace zero::kernels {

inline constexpr std::size_t kNormBlock = 1024;

// Number of block sums for n elements: the scratch the two-pass GPU norm needs.
constexpr std::size_t norm_block_count(std::size_t n) {
  return (n + kNormBlock - 1) / kNormBlock;
}

// A leaf of the tree: exact in double (see step 1 above).
ZERO_HD double norm_leaf(float x) {
  const double d = x;
  return d * d;
}

// Smallest power of two >= c (1 for c <= 1): the width of the step-3 tree.
constexpr std::size_t norm_tree_width(std::size_t c) {
  std::size_t p = 1;
  while (p < c) p <<= 1;
  return p;
}

}  // namespace zero::kernels
