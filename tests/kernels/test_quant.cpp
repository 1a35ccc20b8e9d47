// The compressed encodings' loops (kernels/cpu/quant.hpp): the quantisation error bound per
// block, TopK's selection against a plain reference, and its residual's conservation.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/quant.hpp"
#include "kernels/quant_math.hpp"

namespace {

using namespace zero::kernels;

std::vector<float> random_values(std::size_t n, unsigned seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng) * std::exp2(spread * d(rng));
  return v;
}

float scale_of(std::span<const std::byte> payload, std::int64_t b) {
  float s;
  std::memcpy(&s, payload.data() + 4 * b, 4);
  return s;
}

}  // namespace

TEST_CASE("int8 and int4 blocks come back within half a scale step of each value", "[quant]") {
  for (int bits : {8, 4}) {
    for (std::int64_t block : {1, 7, 64, 2048}) {
      const std::vector<float> x = random_values(5000, 17 + static_cast<unsigned>(block), 3.0f);
      std::vector<std::byte> p(
          static_cast<std::size_t>(cpu::quant_payload_bytes(5000, block, bits)));
      cpu::quantize_blocks(x, block, bits, p);
      std::vector<float> y(x.size());
      cpu::dequantize(p, block, bits, y);
      const int qmax = bits == 8 ? kInt8Max : kInt4Max;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const auto b = static_cast<std::int64_t>(i) / block;
        float m = 0;
        for (std::int64_t j = b * block; j < std::min<std::int64_t>(5000, (b + 1) * block); ++j)
          m = std::max(m, std::fabs(x[static_cast<std::size_t>(j)]));
        const float s = scale_of(p, b);
        REQUIRE(s == m / static_cast<float>(qmax));
        REQUIRE(std::fabs(x[i] - y[i]) <= s * (0.5f + std::exp2(-22.0f)));
      }
    }
  }
}

TEST_CASE("quantisation rounds ties to even and keeps the block's extremes exact", "[quant]") {
  CHECK(quantize_element(2.5f, 1.0f, kInt8Max) == 2);
  CHECK(quantize_element(3.5f, 1.0f, kInt8Max) == 4);
  CHECK(quantize_element(-2.5f, 1.0f, kInt8Max) == -2);
  CHECK(quantize_element(9.0f, 1.0f, kInt4Max) == 7);  // clamped
  const std::vector<float> x{-7.0f, 1.0f, 3.5f, 0.0f};
  std::vector<std::byte> p(static_cast<std::size_t>(cpu::quant_payload_bytes(4, 4, 4)));
  cpu::quantize_blocks(x, 4, 4, p);
  std::vector<float> y(4);
  cpu::dequantize(p, 4, 4, y);
  CHECK(y == std::vector<float>{-7.0f, 1.0f, 4.0f, 0.0f});
}

TEST_CASE("a block of zeros comes back as zeros, one holding a NaN or inf as NaN", "[quant]") {
  std::vector<float> x(8, 0.0f);
  std::vector<std::byte> p(static_cast<std::size_t>(cpu::quant_payload_bytes(8, 4, 8)));
  cpu::quantize_blocks(x, 4, 8, p);
  std::vector<float> y(8, 1.0f);
  cpu::dequantize(p, 4, 8, y);
  CHECK(y == std::vector<float>(8, 0.0f));
  x[5] = INFINITY;
  cpu::quantize_blocks(x, 4, 8, p);
  cpu::dequantize(p, 4, 8, y);
  for (int i = 0; i < 4; ++i) CHECK(y[i] == 0.0f);
  for (int i = 4; i < 8; ++i) CHECK(std::isnan(y[i]));
}

TEST_CASE("dequantize_add adds the decoded values to what is there", "[quant]") {
  const std::vector<float> x = random_values(100, 3, 1.0f);
  std::vector<std::byte> p(static_cast<std::size_t>(cpu::quant_payload_bytes(100, 16, 8)));
  cpu::quantize_blocks(x, 16, 8, p);
  std::vector<float> y(100), acc(100, 0.25f);
  cpu::dequantize(p, 16, 8, y);
  cpu::dequantize_add(p, 16, 8, acc);
  for (std::size_t i = 0; i < 100; ++i) CHECK(acc[i] == 0.25f + y[i]);
}

TEST_CASE("TopK keeps the k largest magnitudes, ties to the lower index, as a sort does",
          "[quant][topk]") {
  for (double ratio : {0.01, 0.1, 0.5, 1.0}) {
    std::vector<float> v = random_values(1000, 5, 0.0f);
    for (std::size_t i = 0; i < v.size(); i += 10) v[i] = std::round(v[i]);  // many ties
    const std::vector<float> input = v;
    const std::int64_t k = cpu::topk_count(1000, ratio);
    CHECK(k == static_cast<std::int64_t>(std::ceil(ratio * 1000)));
    // The reference: a stable sort by magnitude, descending.
    std::vector<std::uint32_t> order(1000);
    for (std::uint32_t i = 0; i < 1000; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](auto a, auto b) { return std::fabs(input[a]) > std::fabs(input[b]); });
    std::vector<std::uint32_t> want(order.begin(), order.begin() + k);
    std::sort(want.begin(), want.end());

    std::vector<std::uint32_t> scratch(1000);
    std::vector<std::byte> p(static_cast<std::size_t>(cpu::topk_payload_bytes(k)));
    cpu::topk_select(v, k, scratch, p);
    std::vector<std::uint32_t> got(static_cast<std::size_t>(k));
    std::memcpy(got.data(), p.data(), got.size() * 4);
    REQUIRE(got == want);
    // Conservation: each element is either sent (its exact bits) or left, never both.
    std::vector<float> sent(1000, 0.0f);  // the payload's values, bit for bit
    for (std::int64_t j = 0; j < k; ++j) std::memcpy(&sent[got[j]], p.data() + 4 * (k + j), 4);
    std::vector<float> added(1000, 0.0f);
    cpu::topk_add(p, k, added);
    for (std::size_t i = 0; i < 1000; ++i) REQUIRE(added[i] == sent[i]);
    for (std::size_t i = 0; i < 1000; ++i) {
      const bool chosen = std::binary_search(want.begin(), want.end(), i);
      std::uint32_t a, b;
      const float kept = chosen ? sent[i] : v[i];
      std::memcpy(&a, &kept, 4);
      std::memcpy(&b, &input[i], 4);
      REQUIRE(a == b);
      REQUIRE((chosen ? v[i] : sent[i]) == 0.0f);
    }
  }
}

TEST_CASE("TopK counts: at least one, at most all, none of nothing", "[quant][topk]") {
  CHECK(cpu::topk_count(0, 0.01) == 0);
  CHECK(cpu::topk_count(10, 0.01) == 1);
  CHECK(cpu::topk_count(10, 1.0) == 10);
  CHECK(cpu::topk_count(1001, 0.01) == 11);
}
