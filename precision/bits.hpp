// Bit-level helpers for the float formats: a float's bit pattern and back, and the shifts and
// leading-zero count the conversions need, all usable on host and device (ZERO_HD).
#pragma once

#include <cstdint>
#include <cstring>

#include "precision/hd.hpp"

#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

namespace zero {

// memcpy on the host (compiled to a register move); the intrinsic on the device, where a
// memcpy of a register would go through local memory.
ZERO_HD std::uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

ZERO_HD float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// x >> s and x << s with s >= 32 giving 0, as the x86 variable shifts (vpsrlvd, vpsllvd) do.
// The vector paths rely on that; the scalar code uses these so that both compute one formula.
ZERO_HD std::uint32_t shr32(std::uint32_t x, std::uint32_t s) {
  return s >= 32u ? 0u : x >> s;
}
ZERO_HD std::uint32_t shl32(std::uint32_t x, std::uint32_t s) {
  return s >= 32u ? 0u : x << s;
}

// Number of leading zero bits of a non-zero x.
ZERO_HD int leading_zeros(std::uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __clz(static_cast<int>(x));
#else
  return std::countl_zero(x);
#endif
}

}  // namespace zero
