// Tests of the CPU element-wise kernels: casts, accumulate, unscale, finite checks, fill
// (kernels/elementwise_math.hpp, kernels/cpu/elementwise.hpp).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/elementwise_math.hpp"
#include "precision/simd.hpp"
#include "test_data.hpp"
#include "base/error.hpp"

using namespace zero;
using namespace zero::kernels;
using zero::kernels::test::mixed_values;
using zero::kernels::test::same;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <class T>
std::vector<T> narrowed(const std::vector<float>& x) {
  std::vector<T> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = narrow<T>(x[i]);
  return out;
}

}  // namespace

TEST_CASE(
    "cast rounds float to bf16 and fp16 to nearest even and widens back exactly on every path") {
  const std::size_t n = 2051;  // odd: every vector path has a remainder
  const std::vector<float> x = mixed_values(n, 21, false, 1e4f);  // some beyond fp16's range
  for (SimdPath path : available_paths()) {
    INFO("path " << name_of(path));
    std::vector<bf16> b(n);
    std::vector<fp16> h(n);
    std::vector<float> wb(n), wh(n);
    cpu::cast(x, b, path);
    cpu::cast(x, h, path);
    cpu::cast(std::span<const bf16>(b), wb, path);
    cpu::cast(std::span<const fp16>(h), wh, path);
    for (std::size_t i = 0; i < n; ++i) {
      INFO("element " << i << " = " << x[i]);
      REQUIRE(b[i].bits == to_bf16(x[i]).bits);
      REQUIRE(h[i].bits == to_fp16(x[i]).bits);
      // Widening is exact: back to the 16-bit type gives the same pattern.
      REQUIRE(to_bf16(wb[i]).bits == b[i].bits);
      REQUIRE(to_fp16(wh[i]).bits == h[i].bits);
    }
  }
  // One hand-checked tie each way: 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7.
  std::vector<float> tie = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f};
  std::vector<bf16> tb(2);
  cpu::cast(tie, tb);
  CHECK(tb[0].bits == 0x3f80);
  CHECK(tb[1].bits == 0x3f82);
}

TEST_CASE("cast rejects spans of different lengths") {
  std::vector<float> x(5);
  std::vector<bf16> b(4);
  CHECK_THROWS_AS(cpu::cast(x, b), Error);
}

TEST_CASE("accumulate adds exactly widened bf16, fp16 and fp32 gradients with one fp32 add each") {
  const std::size_t n = 1029;
  const std::vector<float> acc0 = mixed_values(n, 31);
  const std::vector<float> g = mixed_values(n, 32, false, 100.0f);
  const std::vector<bf16> gb = narrowed<bf16>(g);
  const std::vector<fp16> gh = narrowed<fp16>(g);
  for (SimdPath path : available_paths()) {
    INFO("path " << name_of(path));
    std::vector<float> a = acc0, b = acc0, c = acc0;
    cpu::accumulate(a, g, path);
    cpu::accumulate(b, gb, path);
    cpu::accumulate(c, gh, path);
    for (std::size_t i = 0; i < n; ++i) {
      INFO("element " << i);
      REQUIRE(same(a[i], acc0[i] + g[i]));
      REQUIRE(same(b[i], acc0[i] + to_float(gb[i])));
      REQUIRE(same(c[i], acc0[i] + to_float(gh[i])));
    }
  }
}

TEST_CASE(
    "accumulating bf16 micro-batch gradients in fp32 is exact where the sum is representable") {
  // 1000 micro-batches of bf16 values that are small integers: every partial sum is an integer
  // below 2^24, so fp32 holds it exactly; a bf16 accumulator (8 bits) would have rounded.
  const std::size_t n = 37;
  std::vector<float> acc(n, 0.0f);
  std::vector<double> want(n, 0.0);
  for (int mb = 0; mb < 1000; ++mb) {
    std::vector<bf16> g(n);
    for (std::size_t i = 0; i < n; ++i) {
      const float x = static_cast<float>((mb * 7 + static_cast<int>(i) * 13) % 255 - 127);
      g[i] = to_bf16(x);
      want[i] += x;
    }
    cpu::accumulate(acc, g);
  }
  for (std::size_t i = 0; i < n; ++i) CHECK(static_cast<double>(acc[i]) == want[i]);
}

TEST_CASE("unscale detects inf and NaN at the first, a middle and the last element") {
  const std::size_t n = 1031;
  for (float bad : {kInf, -kInf, kNaN}) {
    for (std::size_t pos : {std::size_t{0}, n / 2, n - 1}) {
      for (SimdPath path : available_paths()) {
        INFO("value " << bad << " at " << pos << ", path " << name_of(path));
        std::vector<float> x = mixed_values(n, 41);
        x[pos] = bad;
        CHECK(cpu::unscale(x, 0.5f, path));
      }
    }
  }
}

TEST_CASE("unscale scales finite data exactly and reports no overflow") {
  const std::size_t n = 1031;
  const std::vector<float> x0 = mixed_values(n, 42);
  for (float scale : {0x1p-16f, 0.37f, 1.0f}) {
    for (SimdPath path : available_paths()) {
      INFO("scale " << scale << ", path " << name_of(path));
      std::vector<float> x = x0;
      CHECK_FALSE(cpu::unscale(x, scale, path));
      for (std::size_t i = 0; i < n; ++i) REQUIRE(same(x[i], x0[i] * scale));
    }
  }
}

TEST_CASE("unscale reports a finite value that overflows when scaled, and scales every element") {
  std::vector<float> x = {1.0f, 3e38f, 2.0f};
  CHECK(cpu::unscale(x, 4.0f));
  CHECK(x[0] == 4.0f);
  CHECK(std::isinf(x[1]));
  CHECK(x[2] == 8.0f);  // elements after the overflow are still scaled
}

TEST_CASE("all_finite finds inf or NaN in fp32, bf16 and fp16 at any position") {
  const std::size_t n = 9001;  // three 4096-element chunks, the last partial
  const std::vector<float> clean = mixed_values(n, 51);
  for (SimdPath path : available_paths()) {
    INFO("path " << name_of(path));
    CHECK(cpu::all_finite(clean, path));
    CHECK(cpu::all_finite(std::span<const bf16>(narrowed<bf16>(clean)), path));
    for (std::size_t pos : {std::size_t{0}, std::size_t{4095}, std::size_t{4096}, n - 1}) {
      for (float bad : {kInf, kNaN}) {
        INFO("position " << pos << " value " << bad);
        std::vector<float> x = clean;
        x[pos] = bad;
        CHECK_FALSE(cpu::all_finite(x, path));
        CHECK_FALSE(cpu::all_finite(std::span<const bf16>(narrowed<bf16>(x)), path));
        CHECK_FALSE(cpu::all_finite(std::span<const fp16>(narrowed<fp16>(x)), path));
      }
    }
  }
  // 1e5 is finite in fp32 and bf16 but overflows fp16's range.
  std::vector<float> big = {1e5f};
  CHECK(cpu::all_finite(std::span<const bf16>(narrowed<bf16>(big))));
  CHECK_FALSE(cpu::all_finite(std::span<const fp16>(narrowed<fp16>(big))));
}

TEST_CASE("fill sets every element and zero clears every bit") {
  std::vector<float> x(1001, 3.0f);
  cpu::fill(x, -1.5f);
  for (float e : x) REQUIRE(e == -1.5f);
  cpu::zero(std::span<float>(x));
  for (float e : x) REQUIRE(test::bits(e) == 0u);
  std::vector<bf16> b(77, bf16{0x8000});
  cpu::zero(std::span<bf16>(b));
  for (bf16 e : b) REQUIRE(e.bits == 0);
  std::vector<fp16> h(77, fp16{0x3c00});
  cpu::zero(std::span<fp16>(h));
  for (fp16 e : h) REQUIRE(e.bits == 0);
}
