// bf16: bfloat16 storage (1 sign, 8 exponent, 7 mantissa bits) as a uint16_t bit pattern, and its
// exact widening to float, round-to-nearest-even and stochastic narrowing, on host and device.
#pragma once

#include <cstdint>

#include "precision/bits.hpp"
#include "precision/hd.hpp"

namespace zero {

struct bf16 {
  std::uint16_t bits = 0;
};

// Patterns worth naming (positive; OR in 0x8000 for the negative ones).
inline constexpr std::uint16_t bf16_max_bits = 0x7f7f;         // 3.3895e38, largest finite
inline constexpr std::uint16_t bf16_min_normal_bits = 0x0080;  // 2^-126
inline constexpr std::uint16_t bf16_inf_bits = 0x7f80;
inline constexpr std::uint16_t bf16_nan_bits = 0x7fc0;  // to_bf16 of a payload-free NaN

ZERO_HD bool is_nan(bf16 x) {
  return (x.bits & 0x7fffu) > 0x7f80u;
}
ZERO_HD bool is_inf(bf16 x) {
  return (x.bits & 0x7fffu) == 0x7f80u;
}
ZERO_HD bool is_finite(bf16 x) {
  return (x.bits & 0x7f80u) != 0x7f80u;
}

// Exact: bf16 is the upper half of a float. A NaN keeps its sign and payload (a signalling NaN
// stays signalling, as a plain widening of the bits must).
ZERO_HD float to_float(bf16 x) {
  return float_of(static_cast<std::uint32_t>(x.bits) << 16);
}

namespace detail {
// A NaN keeps its sign and the top 6 payload bits, with the quiet bit set so that dropping the
// low payload bits can never turn it into an infinity (x86's vcvtneps2bf16 does the same).
ZERO_HD std::uint16_t bf16_nan_of(std::uint32_t u) {
  return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
}
ZERO_HD bool float_bits_nan(std::uint32_t u) {
  return (u & 0x7fffffffu) > 0x7f800000u;
}
}  // namespace detail

// Round to nearest, ties to even. Adding 0x7fff plus the lowest kept bit to the pattern rounds
// the magnitude on the integer line: a carry out of the mantissa steps the exponent, which is
// the next representable value, and past the largest finite value it lands exactly on infinity
// (IEEE's overflow rule). bf16 has float's exponent range, so float subnormals round the same way.
ZERO_HD bf16 to_bf16(float x) {
  const std::uint32_t u = bits_of(x);
  if (detail::float_bits_nan(u)) return bf16{detail::bf16_nan_of(u)};
  const std::uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>(r >> 16)};
}

// Stochastic rounding: round the magnitude up with probability (dropped bits) / 2^16, using the
// low 16 bits of `random_bits`, so E[to_float(result)] == x exactly for uniform random bits and
// |x| <= the largest finite bf16. Above that, infinity plays the next value: x rounds to it with
// probability (|x| - max) / ulp. Infinities stay, NaNs become the same NaN as to_bf16 makes.
ZERO_HD bf16 to_bf16_sr(float x, std::uint32_t random_bits) {
  const std::uint32_t u = bits_of(x);
  if (detail::float_bits_nan(u)) return bf16{detail::bf16_nan_of(u)};
  // The add cannot carry out of the exponent into the sign bit, or out of bit 31: only NaN
  // patterns lie within 0xffff of those boundaries.
  return bf16{static_cast<std::uint16_t>((u + (random_bits & 0xffffu)) >> 16)};
}

}  // namespace zero
