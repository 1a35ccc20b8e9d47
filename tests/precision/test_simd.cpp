// CPU feature detection, the path list, and the bulk API's argument checks.
#include <catch2/catch.hpp>
#include <vector>

#include "precision/convert.hpp"
#include "precision/simd.hpp"
#include "base/error.hpp"

using namespace zero;

TEST_CASE("detected CPU features are consistent with each other", "[simd]") {
  const CpuFeatures& f = cpu_features();
  INFO("this CPU: " << describe(f));
  if (f.avx2 || f.fma || f.f16c) CHECK(f.avx);
  if (f.avx512cd || f.avx512bw || f.avx512dq || f.avx512vl || f.avx512bf16 || f.avx512fp16)
    CHECK(f.avx512f);
  if (f.avx512f) CHECK(f.avx2);
  CHECK(&cpu_features() == &f);  // detected once
}

TEST_CASE("describe names every feature, found or absent", "[simd]") {
  CpuFeatures f;
  f.avx = f.avx2 = true;
  const std::string d = describe(f);
  CHECK(d == "avx avx2 (absent: sse4.2 fma f16c avx512f avx512cd avx512bw avx512dq avx512vl avx512bf16 "
          "avx512fp16)");
  CHECK(describe(CpuFeatures{}).rfind("none (absent: sse4.2", 0) == 0);
}

TEST_CASE("the available paths run widest first, end with scalar, and the best one is first",
          "[simd]") {
  const auto paths = available_paths();
  REQUIRE_FALSE(paths.empty());
  CHECK(paths.back() == SimdPath::scalar);
  CHECK(paths.front() == best_path());
  for (SimdPath p : paths) CHECK(available(p));
  CpuFeatures none;
  CHECK(available_paths(none) == std::vector<SimdPath>{SimdPath::scalar});
  CpuFeatures avx2_only;
  avx2_only.avx = avx2_only.avx2 = true;
  CHECK_FALSE(available(SimdPath::avx2, avx2_only));  // the avx2 path needs F16C as well
  WARN("SIMD paths on this CPU: " << [&] {
    std::string s;
    for (SimdPath p : paths) s += std::string(name_of(p)) + " ";
    return s;
  }());
}

TEST_CASE("a conversion refuses spans of different sizes and paths this CPU lacks", "[simd]") {
  std::vector<float> f(10);
  std::vector<bf16> b(9);
  CHECK_THROWS_AS(convert(std::span<const float>(f), std::span<bf16>(b)), Error);
  CHECK_THROWS_AS(convert_sr(std::span<const float>(f), std::span<bf16>(b), 1, 0), Error);
  for (SimdPath p : {SimdPath::avx2, SimdPath::avx512}) {
    if (available(p)) continue;
    std::vector<bf16> ok(10);
    CHECK_THROWS_WITH(convert(std::span<const float>(f), std::span<bf16>(ok), p),
                      Catch::Contains("needs CPU features this machine lacks"));
  }
}
