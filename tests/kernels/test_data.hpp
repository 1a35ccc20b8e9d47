// Test inputs for kernels/: values that stress rounding (subnormals, tiny, huge, signed zeros,
// bf16/fp16 rounding ties) and helpers to compare floats bit for bit.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "precision/bits.hpp"

namespace zero::kernels::test {

// The bit views precision/ already defines, under the names these tests use.
inline std::uint32_t bits(float x) { return zero::bits_of(x); }
inline float from_bits(std::uint32_t u) { return zero::float_of(u); }

// Equal bit patterns, or both NaN (a NaN's payload may differ between two correct evaluations
// that commute an operation's operands, so tests do not hold payloads to account).
inline bool same(float a, float b) {
  return bits(a) == bits(b) || (a != a && b != b);
}
inline bool same(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b);
}

// An empty asm statement with a memory clobber: GCC cannot vectorise a loop containing it, so a
// loop that calls this per element really is the literal one-element-at-a-time reference.
inline void scalar_barrier() {
  asm volatile("" ::: "memory");
}

// n finite values: mostly ordinary magnitudes, with subnormals, tiny and huge values, signed
// zeros and bf16 rounding ties mixed in at pseudo-random positions. `nonnegative` gives |x|
// (for Adam's second moment).
inline std::vector<float> mixed_values(std::size_t n, std::uint32_t seed, bool nonnegative = false,
                                       float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 15);
  std::vector<float> x(n);
  for (auto& e : x) {
    switch (kind(rng)) {
      case 0:
        e = uni(rng) * 1e-39f;
        break;  // subnormal
      case 1:
        e = uni(rng) * 1e-30f;
        break;  // tiny normal
      case 2:
        e = uni(rng) * 1e18f;
        break;  // huge (its square overflows fp32)
      case 3:
        e = (rng() & 1) ? 0.0f : -0.0f;
        break;  // signed zero
      case 4:
        e = from_bits((rng() & 0xffff0000u & ~0x40000000u) | 0x8000u);
        break;  // bf16 tie
      default:
        e = uni(rng) * scale;
        break;
    }
    if (nonnegative && e < 0) e = -e;
    if (nonnegative) e = from_bits(bits(e) & 0x7fffffffu);  // -0 too
  }
  return x;
}

// n ordinary values uniform in [-scale, scale).
inline std::vector<float> uniform_values(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-scale, scale);
  std::vector<float> x(n);
  for (auto& e : x) e = uni(rng);
  return x;
}

}  // namespace zero::kernels::test
