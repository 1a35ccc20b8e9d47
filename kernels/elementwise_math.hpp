// Per-element math of the casts, accumulate, unscale and finite checks, shared by the CPU loops
// (kernels/cpu/elementwise.cpp) and the CUDA kernels (kernels/cuda/elementwise.cu).
#pragma once

#include <cstdint>

#include "precision/bf16.hpp"
#include "precision/bits.hpp"
#include "precision/fp16.hpp"
#include "precision/hd.hpp"

namespace zero::kernels {

// Finite means the exponent field is not all ones. Tested on the bits, not with std::isfinite,
// so that the answer never depends on -ffinite-math-only or on which compiler built the caller.
// (precision/ supplies is_finite for bf16 and fp16; argument-dependent lookup finds those.)
ZERO_HD bool is_finite(float x) {
  return (bits_of(x) & 0x7f800000u) != 0x7f800000u;
}

// Widening to float is exact for all three storage types.
ZERO_HD float widen(float x) {
  return x;
}
ZERO_HD float widen(bf16 x) {
  return to_float(x);
}
ZERO_HD float widen(fp16 x) {
  return to_float(x);
}

// Narrowing from float rounds to nearest, ties to even (precision/'s to_bf16 / to_fp16).
template <class T>
ZERO_HD T narrow(float x);
template <>
ZERO_HD float narrow<float>(float x) {
  return x;
}
template <>
ZERO_HD bf16 narrow<bf16>(float x) {
  return to_bf16(x);
}
template <>
ZERO_HD fp16 narrow<fp16>(float x) {
  return to_fp16(x);
}

// acc + g with g widened exactly: the only rounding is the one float add, so accumulating
// bf16 micro-batch gradients in fp32 loses nothing beyond what fp32 summation loses.
template <class T>
ZERO_HD float accumulate_element(float acc, T g) {
  return acc + widen(g);
}

// Unscale: y = x·scale, and the overflow test is !is_finite(y), made AFTER scaling: a non-finite
// x stays non-finite under any finite scale (inf·0 is NaN), and a finite x that overflows under
// a scale > 1 is caught too, so checking after catches a superset of checking before. Loops
// OR the test into an unsigned (not a bool&: GCC vectorises only the former as a reduction).
ZERO_HD float unscale_element(float x, float scale) {
  return x * scale;
}

}  // namespace zero::kernels
