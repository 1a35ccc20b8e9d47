// The element arithmetic of the reductions: 16-bit conversions against independent references
// (every bit pattern decoded; edge cases and a million random floats encoded), and the fold.
#include "comm/reduce_math.hpp"
#include "comm_test.hpp"

namespace zero::comm::test {
namespace {

using detail::bf16_to_float;
using detail::float_to_bf16;
using detail::float_to_fp16;
using detail::fp16_to_float;

bool same_bits_or_both_nan(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

TEST_CASE("every bf16 and fp16 bit pattern decodes to the float the reference gives") {
  int wrong_bf16 = 0, wrong_fp16 = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    wrong_bf16 += !same_bits_or_both_nan(bf16_to_float(h), ref_from_bf16(h));
    wrong_fp16 += !same_bits_or_both_nan(fp16_to_float(h), ref_from_fp16(h));
  }
  CHECK(wrong_bf16 == 0);
  CHECK(wrong_fp16 == 0);
}

TEST_CASE("floats round to bf16 and fp16 to nearest, ties to even, like the reference") {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.0f,
                           65504.0f,
                           65519.99f,
                           65520.0f,
                           1e6f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           0x1p-14f,
                           0x1p-24f,
                           0x1p-25f,
                           0x1.8p-25f,
                           0x1p-26f,
                           5.9604645e-8f,
                           1.00390625f /* bf16 tie, even below */,
                           1.01171875f /* tie, even above */,
                           1.00048828125f /* fp16 tie */,
                           3.3895314e38f,
                           3.4028235e38f};
  for (std::uint64_t i = 0; i < 1'000'000; ++i) {
    const std::uint64_t h = mix(7, 0, i);
    // Random bits, restricted to normal floats for bf16's frexp reference; ties appear often.
    std::uint32_t u = static_cast<std::uint32_t>(h);
    if (i % 4 == 0) u &= 0xffff8000u;  // bf16 exact values and ties
    if (i % 4 == 1) u &= 0xfffff000u;  // fp16 ties (for normal fp16 values)
    xs.push_back(std::bit_cast<float>(u));
  }
  std::string first_wrong;  // one REQUIRE at the end: a million CAPTUREs would dominate the run
  for (float x : xs) {
    const auto bits = std::bit_cast<std::uint32_t>(x);
    if (std::isnan(x)) {
      if (!std::isnan(bf16_to_float(float_to_bf16(x))) ||
          !std::isnan(fp16_to_float(float_to_fp16(x))))
        first_wrong = cat("NaN 0x", std::hex, bits, " lost its NaN-ness");
    } else if (float_to_fp16(x) != ref_to_fp16(x)) {
      first_wrong =
          cat("fp16 of 0x", std::hex, bits, ": 0x", float_to_fp16(x), " vs 0x", ref_to_fp16(x));
    } else if ((std::fpclassify(x) == FP_NORMAL || x == 0 || std::isinf(x)) &&
               float_to_bf16(x) != ref_to_bf16(x)) {
      first_wrong =
          cat("bf16 of 0x", std::hex, bits, ": 0x", float_to_bf16(x), " vs 0x", ref_to_bf16(x));
    }
    if (!first_wrong.empty()) break;
  }
  REQUIRE(first_wrong == "");
}

TEST_CASE("a chunk folds its contributions left to right in rank order") {
  // With 1e8 first, adding 1 then -1e8 loses the 1; any other order keeps it.
  const float a[] = {1e8f}, b[] = {1.0f}, c[] = {-1e8f}, d[] = {1.0f};
  const void* x[] = {a, b, c, d};
  float out = -7;
  float acc = 0;
  detail::reduce_fn(DType::f32, DType::f32, ReduceOp::sum)(x, 4, &out, &acc, 1);
  CHECK(out == ((1e8f + 1.0f) + -1e8f) + 1.0f);
  CHECK(out == 1.0f);
  const void* y[] = {b, c, d, a};  // 1 - 1e8 + 1 + 1e8
  detail::reduce_fn(DType::f32, DType::f32, ReduceOp::sum)(y, 4, &out, nullptr, 1);
  CHECK(out == ((1.0f + -1e8f) + 1.0f) + 1e8f);
}

}  // namespace
}  // namespace zero::comm::test
