// Widening bf16/fp16 to float: every one of the 65,536 patterns of each type, on every path.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "precision/bf16.hpp"
#include "precision/convert.hpp"
#include "precision/fp16.hpp"
#include "reference.hpp"

using namespace zero;
using zero::test::bits;
using zero::test::decode;

namespace {

template <class T>
std::vector<T> all_patterns() {
  std::vector<T> v(65536);
  for (std::uint32_t h = 0; h < 65536; ++h) v[h] = T{static_cast<std::uint16_t>(h)};
  return v;
}

// Compares to_float(pattern) with IEEE's value from the reference decoder; counts disagreements
// rather than asserting 65,536 times, and describes the first.
template <class T>
void check_all_patterns(zero::test::Format f, std::uint32_t (*expected_nan_bits)(std::uint16_t)) {
  int wrong = 0;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float got = to_float(T{static_cast<std::uint16_t>(h)});
    const double want = decode(f, static_cast<std::uint16_t>(h));
    bool ok;
    if (std::isnan(want))
      ok = bits(got) == expected_nan_bits(static_cast<std::uint16_t>(h));
    else
      ok = static_cast<double>(got) == want && std::signbit(got) == std::signbit(want);
    if (!ok && wrong++ == 0)
      FAIL_CHECK("pattern 0x" << std::hex << h << " gave float bits 0x" << bits(got)
                              << ", IEEE value " << want);
  }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("every bf16 pattern widens to the float IEEE 754 assigns it", "[widening][bf16]") {
  // A bf16 NaN widens bit for bit: sign and payload kept, a signalling NaN stays signalling.
  check_all_patterns<bf16>(zero::test::bf16_format,
                           [](std::uint16_t h) { return static_cast<std::uint32_t>(h) << 16; });
}

TEST_CASE("every fp16 pattern widens to the float IEEE 754 assigns it", "[widening][fp16]") {
  // An fp16 NaN keeps its sign and payload and is made quiet, as IEEE's conversion does.
  check_all_patterns<fp16>(zero::test::fp16_format, [](std::uint16_t h) {
    return (static_cast<std::uint32_t>(h & 0x8000u) << 16) | 0x7fc00000u |
           (static_cast<std::uint32_t>(h & 0x3ffu) << 13);
  });
}

TEST_CASE("the widening of named fp16 and bf16 patterns gives the textbook values", "[widening]") {
  CHECK(to_float(fp16{fp16_max_bits}) == 65504.0f);
  CHECK(to_float(fp16{fp16_min_normal_bits}) == std::ldexp(1.0f, -14));
  CHECK(to_float(fp16{fp16_min_subnormal_bits}) == std::ldexp(1.0f, -24));
  CHECK(to_float(fp16{0x3c00}) == 1.0f);
  CHECK(to_float(fp16{0xc000}) == -2.0f);
  CHECK(to_float(fp16{0x03ff}) == std::ldexp(1023.0f, -24));
  CHECK(bits(to_float(fp16{0x8000})) == 0x80000000u);
  CHECK(std::isinf(to_float(fp16{fp16_inf_bits})));
  CHECK(to_float(bf16{bf16_max_bits}) == std::ldexp(255.0f, 120));
  CHECK(to_float(bf16{bf16_min_normal_bits}) == std::ldexp(1.0f, -126));
  CHECK(to_float(bf16{0x0001}) == std::ldexp(1.0f, -133));
  CHECK(to_float(bf16{0x3f80}) == 1.0f);
  CHECK(bits(to_float(bf16{0x8000})) == 0x80000000u);
}

TEST_CASE("every path widens all 65,536 patterns to the same bits as the scalar function",
          "[widening][paths]") {
  const auto b = all_patterns<bf16>();
  const auto h = all_patterns<fp16>();
  for (SimdPath path : available_paths()) {
    INFO("path " << name_of(path));
    // Odd sub-ranges as well, so that every path's vector body and scalar tail both run.
    for (std::size_t start : {std::size_t{0}, std::size_t{3}}) {
      for (std::size_t n : {std::size_t{65536} - start, std::size_t{37}, std::size_t{0}}) {
        std::vector<float> fb(n), fh(n);
        convert(std::span<const bf16>(b).subspan(start, n), std::span<float>(fb), path);
        convert(std::span<const fp16>(h).subspan(start, n), std::span<float>(fh), path);
        int wrong = 0;
        for (std::size_t i = 0; i < n; ++i) {
          wrong += bits(fb[i]) != bits(to_float(b[start + i]));
          wrong += bits(fh[i]) != bits(to_float(h[start + i]));
        }
        CHECK(wrong == 0);
      }
    }
  }
}
