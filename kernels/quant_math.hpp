// Per-element math of the compressed wire encodings (zero/wire_compress.cpp): blockwise symmetric
// int8/int4 quantisation with one fp32 scale per block, and the key TopK selects by. Shared by
// the CPU loops (kernels/cpu/quant.cpp) and any device kernel written later.
//
// A block of B values x with m = max|x| has scale s = m / qmax (qmax 127 for int8, 7 for int4;
// one fp32 division). Each value is sent as q = rne(clamp(x / s, -qmax, qmax)), round to nearest,
// ties to even, and comes back as q * s. For a finite block whose scale is a normal float the
// error per element is at most s/2 plus the two fp32 roundings: |x - q*s| <= s * (0.5 + 2^-22).
// A block of zeros (s = 0) comes back as zeros; a block holding inf or NaN has a non-finite
// scale and comes back as NaN everywhere, so that the step's overflow check still sees it.
#pragma once

#include <cstdint>

#include "precision/bits.hpp"
#include "precision/hd.hpp"

namespace zero::kernels {

inline constexpr int kInt8Max = 127;
inline constexpr int kInt4Max = 7;

// max(m, |x|), NaN-propagating (a NaN anywhere makes the block's scale NaN).
ZERO_HD float absmax_step(float m, float x) {
  const float a = float_of(bits_of(x) & 0x7fffffffu);
  return (a > m || a != a) ? a : m;
}

ZERO_HD float quant_scale(float absmax, int qmax) {
  return absmax / static_cast<float>(qmax);
}

ZERO_HD bool scale_is_finite(float s) {
  return (bits_of(s) & 0x7f800000u) != 0x7f800000u;
}

// q = rne(clamp(x / s)). 1.5 * 2^23 added and taken away rounds a float below 2^22 in magnitude
// to an integer, ties to even, in the default rounding mode and without FMA (-ffp-contract=off).
ZERO_HD int quantize_element(float x, float s, int qmax) {
  if (s == 0.0f || !scale_is_finite(s)) return 0;
  float y = x / s;
  const float lim = static_cast<float>(qmax);
  y = y > lim ? lim : (y < -lim ? -lim : y);
  constexpr float kMagic = 12582912.0f;
  return static_cast<int>((y + kMagic) - kMagic);
}

ZERO_HD float dequantize_element(int q, float s) {
  if (!scale_is_finite(s)) return float_of(0x7fc00000u);
  return static_cast<float>(q) * s;
}

// int4 codes travel two to a byte, element 2i in the low nibble, as q + 8 (1..15).
ZERO_HD std::uint8_t nibble_of(int q) {
  return static_cast<std::uint8_t>((q + 8) & 0xf);
}
ZERO_HD int from_nibble(std::uint8_t b) {
  return static_cast<int>(b & 0xf) - 8;
}

// TopK's order: the magnitude as the integer its bits make (a non-negative float's bits sort as
// the float does; NaN sorts above inf, so a NaN is always sent and the overflow check sees it).
// Equal keys go by the lower index.
ZERO_HD std::uint32_t topk_key(float v) {
  return bits_of(v) & 0x7fffffffu;
}

}  // namespace zero::kernels
