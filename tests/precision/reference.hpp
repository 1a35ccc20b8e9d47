// An independent reference for the 16-bit float formats, sharing no code with precision/: values
// are decoded by arithmetic (std::ldexp in double) and floats are rounded by searching the
// sorted table of every finite value, so a bit trick in precision/ cannot be checked by itself.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace zero::test {

struct Format {
  int exp_bits;
  int mant_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int exp_max() const { return (1 << exp_bits) - 1; }
  std::uint16_t inf_bits() const { return static_cast<std::uint16_t>(exp_max() << mant_bits); }
};
inline constexpr Format bf16_format{8, 7};
inline constexpr Format fp16_format{5, 10};

// IEEE 754's value of pattern h: (-1)^s * 2^(e - bias) * 1.m, or 2^(1 - bias) * 0.m when e == 0.
inline double decode(Format f, std::uint16_t h) {
  const bool negative = (h >> 15) & 1;
  const int e = (h >> f.mant_bits) & f.exp_max();
  const int m = h & ((1 << f.mant_bits) - 1);
  double v;
  if (e == f.exp_max())
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  else if (e == 0)
    v = std::ldexp(m, 1 - f.bias() - f.mant_bits);
  else
    v = std::ldexp((1 << f.mant_bits) + m, e - f.bias() - f.mant_bits);
  return negative ? -v : v;
}

inline std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Round to nearest, ties to even, by table: the non-negative finite values in increasing order,
// where the index of a value is its bit pattern, so an even index is an even mantissa.
class RoundingReference {
 public:
  explicit RoundingReference(Format f) : f_(f) {
    const int count = f.inf_bits();  // patterns 0 .. inf-1 are the non-negative finite values
    values_.reserve(count);
    for (int h = 0; h < count; ++h) values_.push_back(decode(f, static_cast<std::uint16_t>(h)));
  }

  const std::vector<double>& values() const { return values_; }

  // IEEE's overflow rule: round as if the exponent were unbounded. The value after the largest
  // finite one would then be max + ulp, whose mantissa is even (it is a power of two); whatever
  // rounds to it is infinity.
  double overflow_threshold() const {
    const double max = values_.back(), ulp = max - values_[values_.size() - 2];
    return max + ulp / 2;
  }

  // The rounded pattern, or nan_marker for a NaN input (the caller checks NaN-ness itself).
  static constexpr std::uint32_t nan_marker = 0x10000;
  std::uint32_t round(float x) const {
    if (std::isnan(x)) return nan_marker;
    const std::uint32_t sign = std::signbit(x) ? 0x8000u : 0u;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= overflow_threshold()) return sign | f_.inf_bits();
    // k: the largest value <= a. values_[0] is 0 <= a, so k >= 0.
    const std::size_t k = std::upper_bound(values_.begin(), values_.end(), a) - values_.begin() - 1;
    if (values_[k] == a) return sign | static_cast<std::uint32_t>(k);
    const double below = values_[k];
    const double above = k + 1 < values_.size() ? values_[k + 1] : 2 * overflow_threshold() - below;
    const double mid = (below + above) / 2;  // at most 13 significant bits: exact in double
    std::size_t r;
    if (a < mid)
      r = k;
    else if (a > mid)
      r = k + 1;
    else
      r = k % 2 == 0 ? k : k + 1;
    return sign | static_cast<std::uint32_t>(r);  // r == inf index past the largest finite value
  }

  // Every float where rounding decides something: each midpoint between neighbours (the max and
  // its virtual successor included), the floats just either side of it, and the values
  // themselves, in both signs.
  std::vector<float> tie_and_boundary_inputs() const {
    std::vector<float> out;
    const float inf = std::numeric_limits<float>::infinity();
    auto add = [&](double v) {
      const float f = static_cast<float>(v);
      for (float g : {f, std::nextafter(f, 0.0f), std::nextafter(f, inf)}) {
        out.push_back(g);
        out.push_back(-g);
      }
    };
    for (std::size_t k = 0; k < values_.size(); ++k) {
      add(values_[k]);
      const double next =
          k + 1 < values_.size() ? values_[k + 1] : 2 * overflow_threshold() - values_[k];
      add((values_[k] + next) / 2);
    }
    return out;
  }

 private:
  Format f_;
  std::vector<double> values_;
};

}  // namespace zero::test
