// Tests of the deterministic squared L2 norm (kernels/norm_order.hpp, kernels/cpu/norm.hpp).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/norm.hpp"
#include "kernels/norm_order.hpp"
#include "precision/simd.hpp"
#include "test_data.hpp"

using namespace zero;
using namespace zero::kernels;
using zero::kernels::test::mixed_values;
using zero::kernels::test::same;
using zero::kernels::test::uniform_values;

namespace {

// The order of norm_order.hpp written out literally, one add at a time, from its text: leaves,
// zero-padded 1024-element blocks, halving trees. No vectorisation (scalar_barrier).
double literal_tree(const std::vector<float>& x) {
  const std::size_t nb = (x.size() + 1023) / 1024;
  if (nb == 0) return 0.0;
  std::vector<double> sums(nb);
  for (std::size_t b = 0; b < nb; ++b) {
    std::vector<double> a(1024, 0.0);
    for (std::size_t i = 0; i < 1024; ++i) {
      const std::size_t k = b * 1024 + i;
      const double d = k < x.size() ? static_cast<double>(x[k]) : 0.0;
      a[i] = d * d;
    }
    for (std::size_t h = 512; h >= 1; h /= 2)
      for (std::size_t i = 0; i < h; ++i) {
        a[i] = a[i] + a[i + h];
        test::scalar_barrier();
      }
    sums[b] = a[0];
  }
  std::size_t width = 1;
  while (width < nb) width *= 2;
  std::size_t c = nb;
  for (std::size_t h = width / 2; h >= 1; h /= 2) {
    for (std::size_t i = 0; i + h < c; ++i) {
      sums[i] = sums[i] + sums[i + h];
      test::scalar_barrier();
    }
    c = std::min(c, h);
  }
  return sums[0];
}

long double long_double_sum(const std::vector<float>& x) {
  long double s = 0;
  for (float e : x) s += static_cast<long double>(e) * static_cast<long double>(e);
  return s;
}

}  // namespace

TEST_CASE("squared_norm matches a long double reference to a relative 1e-13") {
  // Leaves are exact and every add of nonnegative terms has relative error <= 2^-53; a tree of
  // depth d = log2(n) bounds the relative error by about d·2^-53 (3e-15 for n = 10^6, d = 20).
  // 1e-13 leaves slack for the long double reference's own rounding, and fails an order that
  // drops or double-counts even one element among a million (relative ~1e-6).
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{1024}, std::size_t{1025},
                        std::size_t{1000003}}) {
    const std::vector<float> x = uniform_values(n, static_cast<std::uint32_t>(n), 3.0f);
    const long double want = long_double_sum(x);
    INFO("n = " << n);
    CHECK(std::abs(static_cast<long double>(cpu::squared_norm(x)) - want) <= 1e-13L * want);
  }
}

TEST_CASE("squared_norm is bitwise identical across repeated calls") {
  const std::vector<float> x = mixed_values(300007, 61, false, 2.0f);
  const double first = cpu::squared_norm(x);
  for (int r = 0; r < 5; ++r) REQUIRE(same(cpu::squared_norm(x), first));
}

TEST_CASE("squared_norm gives the bits of the documented tree on every SIMD path") {
  // Lengths around the block size, and enough blocks for a non-power-of-two outer tree; data
  // with subnormals (their squares are far below fp32 but exact in double) and huge values.
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{511}, std::size_t{1023}, std::size_t{1024},
        std::size_t{1025}, std::size_t{5 * 1024 + 17}, std::size_t{37 * 1024 + 1}}) {
    const std::vector<float> x = mixed_values(n, static_cast<std::uint32_t>(n) + 62);
    const double want = literal_tree(x);
    for (SimdPath path : available_paths()) {
      INFO("n = " << n << ", path " << name_of(path));
      REQUIRE(same(cpu::squared_norm(x, path), want));
    }
  }
}

TEST_CASE("squared_norm sums squares exactly in double: no fp32 underflow or overflow") {
  // 1e-30² underflows fp32 and 1e30² overflows it; in double both are exact leaves.
  const std::vector<float> tiny(3, 1e-30f), huge(2, 1e30f);
  const double t = static_cast<double>(1e-30f) * static_cast<double>(1e-30f);
  CHECK(cpu::squared_norm(tiny) == (t + t) + t);  // block tree of 3: a0+a2 (h=2), then + a1
  const double h = static_cast<double>(1e30f) * static_cast<double>(1e30f);
  CHECK(cpu::squared_norm(huge) == h + h);
  CHECK(cpu::squared_norm(std::vector<float>{}) == 0.0);
}

TEST_CASE("squared_norm is inf for an infinite element and NaN for a NaN element") {
  std::vector<float> x = uniform_values(2049, 63);
  x[2048] = std::numeric_limits<float>::infinity();
  CHECK(std::isinf(cpu::squared_norm(x)));
  x[7] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(cpu::squared_norm(x)));
}
