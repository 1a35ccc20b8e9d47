// fp16: IEEE 754 binary16 storage (1 sign, 5 exponent, 10 mantissa bits) as a uint16_t bit
// pattern, and its exact widening to float, round-to-nearest-even and stochastic narrowing.
#pragma once

#include <cstdint>

#include "precision/bits.hpp"
#include "precision/hd.hpp"

namespace zero {

struct fp16 {
  std::uint16_t bits = 0;
};

// Patterns worth naming (positive; OR in 0x8000 for the negative ones).
inline constexpr std::uint16_t fp16_max_bits = 0x7bff;            // 65504, largest finite
inline constexpr std::uint16_t fp16_min_normal_bits = 0x0400;     // 2^-14
inline constexpr std::uint16_t fp16_min_subnormal_bits = 0x0001;  // 2^-24
inline constexpr std::uint16_t fp16_inf_bits = 0x7c00;
inline constexpr std::uint16_t fp16_nan_bits = 0x7e00;

ZERO_HD bool is_nan(fp16 x) {
  return (x.bits & 0x7fffu) > 0x7c00u;
}
ZERO_HD bool is_inf(fp16 x) {
  return (x.bits & 0x7fffu) == 0x7c00u;
}
ZERO_HD bool is_finite(fp16 x) {
  return (x.bits & 0x7c00u) != 0x7c00u;
}

// Exact. Subnormals are normalised with a leading-zero count; a NaN keeps its sign and payload
// and is made quiet, as IEEE's conversion (and x86's vcvtph2ps) does.
ZERO_HD float to_float(fp16 x) {
  const std::uint32_t sign = static_cast<std::uint32_t>(x.bits & 0x8000u) << 16;
  const std::uint32_t exp = (x.bits >> 10) & 0x1fu;
  std::uint32_t mant = x.bits & 0x3ffu;
  if (exp == 0x1fu) return float_of(sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u));
  if (exp != 0) return float_of(sign | ((exp + 112u) << 23) | (mant << 13));  // rebias 15 -> 127
  if (mant == 0) return float_of(sign);
  // mant * 2^-24 with mant < 2^10: shift the leading one up to bit 10, the implicit bit.
  const std::uint32_t shift = static_cast<std::uint32_t>(leading_zeros(mant)) - 21u;
  mant = (mant << shift) & 0x3ffu;
  return float_of(sign | ((113u - shift) << 23) | (mant << 13));
}

namespace detail {
// Quiet bit set and the top 9 payload bits kept, as x86's vcvtps2ph does; never an infinity.
ZERO_HD std::uint16_t fp16_nan_of(std::uint32_t u) {
  return static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
}
}  // namespace detail

// Round to nearest, ties to even, following IEEE 754 exactly: |x| >= 65520 (the largest finite
// value plus half an ulp; the tie goes to the even side, which is infinity) overflows to
// infinity, results below 2^-14 are fp16 subnormals rounded on their fixed 2^-24 grid, and a
// NaN stays a NaN of the same sign.
ZERO_HD fp16 to_fp16(float x) {
  const std::uint32_t u = bits_of(x);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return fp16{detail::fp16_nan_of(u)};
  if (a >= 0x477ff000u) return fp16{static_cast<std::uint16_t>(sign | 0x7c00u)};  // 65520, inf
  if (a >= 0x38800000u) {  // 2^-14: normal. Rebias the exponent, then round off 13 bits.
    const std::uint32_t r = a - 0x38000000u;
    return fp16{static_cast<std::uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13))};
  }
  // At most 2^-25, half the smallest subnormal: zero (the tie goes to the even side, zero).
  if (a <= 0x33000000u) return fp16{static_cast<std::uint16_t>(sign)};
  // Subnormal: |x| = mant * 2^(e-150); in units of 2^-24 that is mant >> s with s = 126 - e,
  // here 14..24. Round the dropped bits to nearest even; 0x400 (a carry) is 2^-14, correctly.
  const std::uint32_t e = a >> 23;
  const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t s = 126u - e;
  const std::uint32_t kept = mant >> s;
  const std::uint32_t rest = mant & ((1u << s) - 1u);
  const std::uint32_t half = 1u << (s - 1u);
  const std::uint32_t up = (rest > half || (rest == half && (kept & 1u))) ? 1u : 0u;
  return fp16{static_cast<std::uint16_t>(sign | (kept + up))};
}

// Stochastic rounding: the magnitude rounds up with probability (dropped part) / ulp, so that
// E[to_float(result)] == x for uniform random bits and |x| <= 65504; past that, infinity plays
// the next value (65536), as in to_bf16_sr. Normal results use the low 13 random bits. A
// subnormal result drops s = 126 - e bits (14 and up): for s <= 32 the low s random bits decide
// exactly; below 2^-33 only the top 32 dropped bits take part, so those tiny values are biased
// towards zero by less than 2^-32 of an fp16 ulp (2^-56 absolute). Infinities and NaNs stay.
// The vector paths (precision/convert_avx*.cpp) compute the same formula lane by lane.
ZERO_HD fp16 to_fp16_sr(float x, std::uint32_t random_bits) {
  const std::uint32_t u = bits_of(x);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return fp16{detail::fp16_nan_of(u)};
  if (a >= 0x47800000u) return fp16{static_cast<std::uint16_t>(sign | 0x7c00u)};  // >= 65536
  if (a >= 0x38800000u) {
    // A carry past 65504 reaches 0x7c00, infinity, which is the intended successor.
    const std::uint32_t r = a - 0x38000000u;
    return fp16{static_cast<std::uint16_t>(sign | ((r + (random_bits & 0x1fffu)) >> 13))};
  }
  const std::uint32_t e = a >> 23;
  const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;  // float subnormals end up 0 anyway
  const std::uint32_t s = 126u - e;                        // 14..126
  const std::uint32_t kept = shr32(mant, s);
  const std::uint32_t t = s > 32u ? s - 32u : 0u;  // keep at most 32 dropped bits
  const std::uint32_t mask = shl32(1u, s) - 1u;    // all ones from s = 32 on
  const std::uint32_t rest = shr32(mant, t) & mask;
  // Round up iff rest + (random & mask) carries out of the mask: a probability of rest / 2^s.
  const std::uint32_t up = (random_bits & mask) > mask - rest ? 1u : 0u;
  return fp16{static_cast<std::uint16_t>(sign | (kept + up))};
}

}  // namespace zero
