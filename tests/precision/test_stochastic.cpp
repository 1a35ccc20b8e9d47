// Stochastic rounding to bf16/fp16: unbiased (exactly, over all random inputs; and within
// statistics, with the Philox stream), always one of the two neighbours, reproducible from
// (seed, index), and the same bits on every SIMD path as the scalar functions.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "precision/convert.hpp"
#include "precision/random.hpp"
#include "reference.hpp"

using namespace zero;
using zero::test::bits;
using zero::test::from_bits;
using zero::test::RoundingReference;

namespace {

const RoundingReference& bf16_ref() {
  static const RoundingReference r(zero::test::bf16_format);
  return r;
}
const RoundingReference& fp16_ref() {
  static const RoundingReference r(zero::test::fp16_format);
  return r;
}

// The representable values either side of x (equal when x is representable), from the table.
struct Neighbours {
  double below, above;
};
Neighbours neighbours(const RoundingReference& ref, float x) {
  const auto& v = ref.values();
  const double a = std::fabs(static_cast<double>(x));
  const std::size_t k = std::upper_bound(v.begin(), v.end(), a) - v.begin() - 1;
  const double lo = v[k];
  const double hi =
      lo == a ? a : (k + 1 < v.size() ? v[k + 1] : std::numeric_limits<double>::infinity());
  return x < 0 ? Neighbours{-lo, -hi} : Neighbours{lo, hi};
}

// Floats with the given exponent range (biased, float's), random mantissas and signs.
std::vector<float> floats_with_exponents(std::uint32_t lo, std::uint32_t hi, int count,
                                         std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::uint32_t> exp(lo, hi);
  std::vector<float> out;
  for (int i = 0; i < count; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(gen());
    out.push_back(from_bits((u & 0x807fffffu) | (exp(gen) << 23)));
  }
  return out;
}

// Only the x with |x| <= the largest finite value: beyond it one neighbour is infinity.
std::vector<float> finite_range(const RoundingReference& ref, std::vector<float> xs) {
  std::erase_if(xs,
                [&](float x) { return std::fabs(static_cast<double>(x)) > ref.values().back(); });
  return xs;
}

// For every x, sum the results over all 2^bits values of the random input that the rounding
// looks at, and require the mean to be x exactly (sums of at most 2^16 values on one grid are
// exact in double), and every result to be one of x's two neighbours.
template <class T>
void check_exact_mean(const std::vector<float>& xs, const RoundingReference& ref,
                      int random_bits_used, T (*round)(float, std::uint32_t)) {
  int biased = 0, strays = 0;
  const std::uint32_t n = 1u << random_bits_used;
  for (float x : xs) {
    const Neighbours nb = neighbours(ref, x);
    double sum = 0;
    for (std::uint32_t r = 0; r < n; ++r) {
      const double y = to_float(round(x, r));
      sum += y;
      strays += y != nb.below && y != nb.above;
    }
    if (sum != static_cast<double>(x) * n && biased++ == 0)
      FAIL_CHECK("x = " << x << " (bits 0x" << std::hex << bits(x) << std::dec << "): mean "
                        << sum / n << " over all " << n << " random inputs");
  }
  CHECK(biased == 0);
  CHECK(strays == 0);
}

}  // namespace

TEST_CASE("bf16 stochastic rounding averages to x exactly over all 2^16 random inputs",
          "[sr][bf16]") {
  auto xs = floats_with_exponents(1, 254, 300, 1);  // normal floats of every binade
  auto sub = floats_with_exponents(0, 0, 50, 2);    // float (and bf16) subnormals
  xs.insert(xs.end(), sub.begin(), sub.end());
  for (float x :
       {1.0f, std::nextafter(2.0f, 0.0f), -std::nextafter(1.0f, 0.0f),
        std::numeric_limits<float>::min(), from_bits(0x7f7f0000u), from_bits(0x7f7e0001u)})
    xs.push_back(x);  // binade tops (a carry into the exponent), the largest finite bf16
  check_exact_mean<bf16>(finite_range(bf16_ref(), xs), bf16_ref(), 16, to_bf16_sr);
}

TEST_CASE("fp16 stochastic rounding averages to x exactly over all random inputs it uses",
          "[sr][fp16]") {
  // Normal results look at 13 random bits; subnormal results at s = 126 - exponent of them,
  // enumerable here for s <= 16 (|x| >= 2^-17).
  auto normal = floats_with_exponents(113, 142, 400, 3);  // 2^-14 .. 65504
  normal.push_back(from_bits(0x477fe000u));               // 65504 itself
  normal.push_back(from_bits(0x477fdfffu));               // just below it
  check_exact_mean<fp16>(finite_range(fp16_ref(), normal), fp16_ref(), 13, to_fp16_sr);
  for (std::uint32_t e : {112u, 111u, 110u}) {
    const auto sub = floats_with_exponents(e, e, 20, e);
    check_exact_mean<fp16>(sub, fp16_ref(), static_cast<int>(126 - e), to_fp16_sr);
  }
}

TEST_CASE(
    "past the largest finite value, stochastic rounding reaches infinity in proportion "
    "to the excess",
    "[sr]") {
  // fp16: 65504 + 8 is a quarter of the way to 65536, the value infinity stands for.
  int inf = 0;
  for (std::uint32_t r = 0; r < 8192; ++r) inf += is_inf(to_fp16_sr(65512.0f, r));
  CHECK(inf == 8192 / 4);
  inf = 0;
  for (std::uint32_t r = 0; r < 8192; ++r) inf += is_inf(to_fp16_sr(65504.0f, r));
  CHECK(inf == 0);
  CHECK(is_inf(to_fp16_sr(65536.0f, 0)));
  // bf16: three quarters of the way from the largest finite value to 2^128.
  inf = 0;
  for (std::uint32_t r = 0; r < 65536; ++r) inf += is_inf(to_bf16_sr(from_bits(0x7f7fc000u), r));
  CHECK(inf == 65536 * 3 / 4);
}

TEST_CASE("stochastic rounding keeps infinities, zeros and NaNs", "[sr]") {
  const float inf = std::numeric_limits<float>::infinity();
  for (std::uint32_t r : {0u, 1u, 0x1fffu, 0xffffu, 0xffffffffu, 0x12345678u}) {
    CHECK(to_bf16_sr(inf, r).bits == bf16_inf_bits);
    CHECK(to_bf16_sr(-inf, r).bits == (0x8000 | bf16_inf_bits));
    CHECK(to_fp16_sr(inf, r).bits == fp16_inf_bits);
    CHECK(to_fp16_sr(-inf, r).bits == (0x8000 | fp16_inf_bits));
    CHECK(to_bf16_sr(0.0f, r).bits == 0x0000);
    CHECK(to_bf16_sr(-0.0f, r).bits == 0x8000);
    CHECK(to_fp16_sr(0.0f, r).bits == 0x0000);
    CHECK(to_fp16_sr(-0.0f, r).bits == 0x8000);
    for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0xff80ffffu}) {
      CHECK(to_bf16_sr(from_bits(nan), r).bits == to_bf16(from_bits(nan)).bits);
      CHECK(to_fp16_sr(from_bits(nan), r).bits == to_fp16(from_bits(nan)).bits);
    }
  }
}

// The Philox stream, through the bulk API: for each x, n draws; the mean error must lie within
// 5 standard errors of zero. One result is below with probability 1-p and above with p =
// (|x| - below) / ulp, so the error's standard deviation is ulp * sqrt(p (1 - p)) and the mean
// of n has ulp * sqrt(p (1 - p) / n). Over all x the z-scores must also look standard normal:
// their mean within 5/sqrt(K) of 0 and their squares' sum within 5 sqrt(2K) of K, which catches
// a small bias common to many x that a per-x bound would miss. The seed is fixed, so this is
// deterministic; a correct implementation fails it with probability below 1e-5.
TEST_CASE(
    "stochastic rounding with the Philox stream has zero mean error within statistics, "
    "for bf16 and fp16, fp16 subnormals included",
    "[sr][statistics]") {
  constexpr std::size_t n = 8192;
  struct Range {
    const char* name;
    bool fp16;
    std::uint32_t exp_lo, exp_hi;
  };
  const Range ranges[] = {
      {"bf16 normal", false, 1, 254},
      {"bf16 subnormal", false, 0, 0},
      {"fp16 normal", true, 113, 142},
      {"fp16 subnormal, s <= 24", true, 102, 112},
      {"fp16 subnormal, 24 < s <= 32", true, 94, 101},
  };
  for (SimdPath path : available_paths()) {
    double z_sum = 0, z2_sum = 0;
    int k = 0, outliers = 0, strays = 0;
    std::uint64_t offset = 0;
    for (const Range& range : ranges) {
      INFO("path " << name_of(path) << ", " << range.name);
      const RoundingReference& ref = range.fp16 ? fp16_ref() : bf16_ref();
      const auto xs = finite_range(
          ref, floats_with_exponents(range.exp_lo, range.exp_hi, 150, range.exp_lo * 7 + 1));
      std::vector<float> in(n);
      std::vector<bf16> b(n);
      std::vector<fp16> h(n);
      for (float x : xs) {
        std::fill(in.begin(), in.end(), x);
        const Neighbours nb = neighbours(ref, x);
        double sum = 0;
        if (range.fp16) {
          convert_sr(std::span<const float>(in), std::span<fp16>(h), 42, offset, path);
          for (fp16 y : h)
            sum += to_float(y), strays += to_float(y) != nb.below && to_float(y) != nb.above;
        } else {
          convert_sr(std::span<const float>(in), std::span<bf16>(b), 42, offset, path);
          for (bf16 y : b)
            sum += to_float(y), strays += to_float(y) != nb.below && to_float(y) != nb.above;
        }
        offset += n;
        const double err = sum / n - x;
        const double ulp = std::fabs(nb.above - nb.below);
        const double p = ulp == 0 ? 0 : std::fabs(x - nb.below) / ulp;
        const double se = ulp * std::sqrt(p * (1 - p) / n);
        if (se == 0) {
          outliers += err != 0;
          continue;
        }
        const double z = err / se;
        outliers += std::fabs(z) > 5;
        z_sum += z;
        z2_sum += z * z;
        ++k;
      }
    }
    INFO("path " << name_of(path) << ": " << k << " values, mean z " << z_sum / k << ", sum of z^2 "
                 << z2_sum);
    CHECK(outliers == 0);
    CHECK(strays == 0);
    CHECK(std::fabs(z_sum / k) < 5 / std::sqrt(k));
    CHECK(std::fabs(z2_sum - k) < 5 * std::sqrt(2.0 * k));
  }
}

TEST_CASE("stochastic rounding is reproducible from the seed and the element index", "[sr]") {
  std::vector<float> in(1000);
  for (std::size_t i = 0; i < in.size(); ++i)
    in[i] = 1.0f + static_cast<float>(i) / 1024;  // off-grid
  std::vector<bf16> a(in.size()), b(in.size()), c(in.size());
  convert_sr(std::span<const float>(in), std::span<bf16>(a), 7, 100);
  convert_sr(std::span<const float>(in), std::span<bf16>(b), 7, 100);
  convert_sr(std::span<const float>(in), std::span<bf16>(c), 8, 100);
  int same = 0, differ = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    same += a[i].bits == b[i].bits;
    differ += a[i].bits != c[i].bits;
  }
  CHECK(same == 1000);
  CHECK(differ > 100);  // another seed is another stream

  // A tensor converted in pieces, each with the index of its first element, equals it
  // converted at once: what lets shards on different ranks agree with one conversion.
  std::vector<bf16> pieces(in.size());
  const std::size_t cuts[] = {0, 13, 500, 517, 1000};
  for (int j = 0; j < 4; ++j) {
    const std::size_t start = cuts[j], count = cuts[j + 1] - cuts[j];
    convert_sr(std::span<const float>(in).subspan(start, count),
               std::span<bf16>(pieces).subspan(start, count), 7, 100 + start);
  }
  int equal = 0;
  for (std::size_t i = 0; i < in.size(); ++i) equal += pieces[i].bits == a[i].bits;
  CHECK(equal == 1000);
  CHECK(a[5].bits == to_bf16_sr(in[5], random_bits(7, 105)).bits);
}

TEST_CASE(
    "every SIMD path rounds stochastically to the same bits as the scalar functions, "
    "across the 2^32 and 2^64 index boundaries",
    "[sr][paths]") {
  std::mt19937 gen(99);
  std::vector<float> in(200'003);
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(gen());
    // Half raw bit patterns (NaNs and infinities included), half within the fp16 range.
    in[i] = from_bits(i % 2 ? u : (u & 0x807fffffu) | ((90 + u % 56) << 23));
  }
  std::vector<bf16> b(in.size());
  std::vector<fp16> h(in.size());
  const std::uint64_t offsets[] = {0, 5, (1ull << 32) - 77'777, ~0ull - 50'000};
  for (SimdPath path : available_paths()) {
    for (std::uint64_t offset : offsets) {
      INFO("path " << name_of(path) << ", offset " << offset);
      const std::uint64_t seed = 0x0123456789abcdefull ^ offset;
      convert_sr(std::span<const float>(in), std::span<bf16>(b), seed, offset, path);
      convert_sr(std::span<const float>(in), std::span<fp16>(h), seed, offset, path);
      int wrong = 0;
      for (std::size_t i = 0; i < in.size(); ++i) {
        const std::uint32_t r = random_bits(seed, offset + i);
        if ((b[i].bits != to_bf16_sr(in[i], r).bits || h[i].bits != to_fp16_sr(in[i], r).bits) &&
            wrong++ == 0)
          FAIL_CHECK("element " << i << " (float bits 0x" << std::hex << bits(in[i])
                                << ") gave bf16 0x" << b[i].bits << ", fp16 0x" << h[i].bits);
      }
      CHECK(wrong == 0);
    }
  }
}
