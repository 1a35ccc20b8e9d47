// Narrowing float to bf16/fp16 with round-to-nearest-even: against the independent table
// reference (reference.hpp) on every tie, boundary and special value and on 10 million random
// floats, on the scalar function and on every SIMD path this CPU has.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "precision/convert.hpp"
#include "precision/convert_kernels.hpp"
#include "precision/simd.hpp"
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

// Values where something special happens, beyond the ties: zeros, infinities, NaNs with assorted
// payloads (signalling and quiet), float's own extremes, and both formats' edges.
std::vector<float> special_inputs() {
  std::vector<std::uint32_t> patterns = {
      0x00000000, 0x7f800000,  // 0, inf
      0x7fc00000, 0x7f800001,
      0x7fbfffff, 0x7fffffff,  // NaNs: quiet, smallest sNaN, largest sNaN, all ones
      0x7f802000, 0x7fa00000,
      0x7fc0ffff, 0x7f80ffff,  // payloads only in dropped bits, or partly
      0x00000001, 0x007fffff,
      0x00800000, 0x7f7fffff,  // float subnormals, FLT_MIN, FLT_MAX
      0x7f7f0000, 0x7f7f7fff,
      0x7f7f8000, 0x7f7f8001,  // bf16 max, below/at/above its overflow tie
      0x477fe000, 0x477fefff,
      0x477ff000, 0x477ff001,  // fp16 max 65504, its overflow tie 65520
      0x47800000, 0x33800000,
      0x33000000, 0x33000001,  // 65536, fp16 min subnormal 2^-24, 2^-25
      0x32ffffff, 0x387fc000,
      0x387fe000, 0x387ff000,  // fp16 max subnormal and the normal boundary
      0x38800000, 0x3f800000,
      0x3f808000, 0x3f818000,  // 2^-14, 1, bf16 ties at 1
      0x3f800fff, 0x3f801000,
      0x3f803000, 0x00008000,  // fp16 ties at 1, a bf16-subnormal tie
  };
  std::vector<float> out;
  for (std::uint32_t p : patterns) {
    out.push_back(from_bits(p));
    out.push_back(from_bits(p | 0x80000000u));
  }
  return out;
}

// 10 million uniformly random bit patterns (every exponent equally likely, NaNs included), and
// 2 million more with the exponent drawn from where fp16 and bf16 results are finite, so that
// the interesting ranges are densely covered too.
const std::vector<float>& random_inputs() {
  static const std::vector<float> v = [] {
    std::mt19937 gen(20240601);
    std::vector<float> out(12'000'000);
    for (std::size_t i = 0; i < 10'000'000; ++i)
      out[i] = from_bits(static_cast<std::uint32_t>(gen()));
    std::uniform_int_distribution<std::uint32_t> exp(97, 145);  // 2^-30 .. 2^18
    for (std::size_t i = 10'000'000; i < out.size(); ++i) {
      const std::uint32_t u = static_cast<std::uint32_t>(gen());
      out[i] = from_bits((u & 0x807fffffu) | (exp(gen) << 23));
    }
    return out;
  }();
  return v;
}

// Scalar results against the reference; NaN inputs must give a NaN of the same sign.
template <class T, class F>
int count_mismatches(const std::vector<float>& in, const RoundingReference& ref, F narrow,
                     const char* what) {
  int wrong = 0;
  for (float x : in) {
    const std::uint16_t got = narrow(x).bits;
    const std::uint32_t want = ref.round(x);
    const bool ok = want == RoundingReference::nan_marker
                        ? is_nan(T{got}) && ((got >> 15) == (bits(x) >> 31))
                        : got == want;
    if (!ok && wrong++ == 0)
      FAIL_CHECK(what << ": float bits 0x" << std::hex << bits(x) << " gave 0x" << got
                      << ", the reference says 0x" << want);
  }
  return wrong;
}

int count_bf16(const std::vector<float>& in) {
  return count_mismatches<bf16>(
      in, bf16_ref(), [](float x) { return to_bf16(x); }, "to_bf16");
}
int count_fp16(const std::vector<float>& in) {
  return count_mismatches<fp16>(
      in, fp16_ref(), [](float x) { return to_fp16(x); }, "to_fp16");
}

// Every path's bulk result against the scalar function, element by element.
template <class T>
int count_path_mismatches(const std::vector<float>& in, SimdPath path, T (*narrow)(float)) {
  std::vector<T> out(in.size());
  convert(std::span<const float>(in), std::span<T>(out), path);
  int wrong = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint16_t want = narrow(in[i]).bits;
    if (out[i].bits != want && wrong++ == 0)
      FAIL_CHECK(name_of(path) << ": float bits 0x" << std::hex << bits(in[i]) << " gave 0x"
                               << out[i].bits << ", the scalar function 0x" << want);
  }
  return wrong;
}

}  // namespace

TEST_CASE("the reference's tie inputs are exact floats, so every tie is really tested", "[rne]") {
  for (const RoundingReference* ref : {&bf16_ref(), &fp16_ref()}) {
    const auto& v = ref->values();
    int inexact = 0;
    for (std::size_t k = 0; k + 1 < v.size(); ++k) {
      const double mid = (v[k] + v[k + 1]) / 2;
      inexact += static_cast<double>(static_cast<float>(mid)) != mid;
    }
    CHECK(inexact == 0);
    CHECK(static_cast<double>(static_cast<float>(ref->overflow_threshold())) ==
          ref->overflow_threshold());
  }
  CHECK(fp16_ref().overflow_threshold() == 65520.0);
}

TEST_CASE("float to bf16 rounds every tie and boundary as IEEE round-to-nearest-even does",
          "[rne][bf16]") {
  CHECK(count_bf16(bf16_ref().tie_and_boundary_inputs()) == 0);
  CHECK(count_bf16(special_inputs()) == 0);
}

TEST_CASE("float to fp16 rounds every tie and boundary as IEEE round-to-nearest-even does",
          "[rne][fp16]") {
  CHECK(count_fp16(fp16_ref().tie_and_boundary_inputs()) == 0);
  CHECK(count_fp16(special_inputs()) == 0);
}

TEST_CASE("float to bf16 and fp16 agree with the reference on 12 million random floats", "[rne]") {
  CHECK(count_bf16(random_inputs()) == 0);
  CHECK(count_fp16(random_inputs()) == 0);
}

TEST_CASE("overflow goes to infinity exactly at the largest finite value plus half an ulp",
          "[rne]") {
  CHECK(to_fp16(65519.996f).bits == fp16_max_bits);
  CHECK(to_fp16(65520.0f).bits == fp16_inf_bits);  // the tie goes to the even side: infinity
  CHECK(to_fp16(-65520.0f).bits == (0x8000 | fp16_inf_bits));
  CHECK(to_fp16(std::numeric_limits<float>::max()).bits == fp16_inf_bits);
  CHECK(to_bf16(from_bits(0x7f7f7fffu)).bits == bf16_max_bits);
  CHECK(to_bf16(from_bits(0x7f7f8000u)).bits == bf16_inf_bits);
  CHECK(to_bf16(std::numeric_limits<float>::max()).bits == bf16_inf_bits);
}

TEST_CASE("fp16 subnormals round on their 2^-24 grid and half the smallest one rounds to zero",
          "[rne][fp16]") {
  const float tiny = std::ldexp(1.0f, -24);
  CHECK(to_fp16(tiny).bits == 0x0001);
  CHECK(to_fp16(tiny / 2).bits == 0x0000);                                // tie: to even, zero
  CHECK(to_fp16(std::nextafter(tiny / 2, 1.0f)).bits == 0x0001);          // just above the tie
  CHECK(to_fp16(-tiny / 2).bits == 0x8000);                               // sign kept
  CHECK(to_fp16(tiny * 1.5f).bits == 0x0002);                             // tie 1.5: to even, 2
  CHECK(to_fp16(tiny * 2.5f).bits == 0x0002);                             // tie 2.5: to even, 2
  CHECK(to_fp16(std::ldexp(1023.5f, -24)).bits == fp16_min_normal_bits);  // tie into 2^-14
  CHECK(to_fp16(std::numeric_limits<float>::denorm_min()).bits == 0x0000);
}

TEST_CASE("a NaN narrows to a quiet NaN that keeps its sign and leading payload bits", "[rne]") {
  // Signalling NaN with payload only in bits that bf16/fp16 drop: must not become infinity.
  CHECK(to_bf16(from_bits(0x7f800001u)).bits == 0x7fc0);
  CHECK(to_fp16(from_bits(0x7f800001u)).bits == 0x7e00);
  CHECK(to_bf16(from_bits(0xff800001u)).bits == 0xffc0);
  CHECK(to_fp16(from_bits(0xff800001u)).bits == 0xfe00);
  CHECK(to_bf16(from_bits(0x7fa50000u)).bits == 0x7fe5);  // payload 0x25 kept, quiet bit set
  CHECK(to_fp16(from_bits(0x7fa52000u)).bits == 0x7f29);  // payload 0x129 kept, quiet bit set
  CHECK(to_bf16(from_bits(0x7fffffffu)).bits == 0x7fff);
  CHECK(to_fp16(from_bits(0x7fffffffu)).bits == 0x7fff);
}

TEST_CASE(
    "every SIMD path narrows ties, boundaries, specials and random floats as the scalar "
    "functions do",
    "[rne][paths]") {
  std::vector<float> in = bf16_ref().tie_and_boundary_inputs();
  const auto fp = fp16_ref().tie_and_boundary_inputs();
  in.insert(in.end(), fp.begin(), fp.end());
  const auto sp = special_inputs();
  in.insert(in.end(), sp.begin(), sp.end());
  in.insert(in.end(), random_inputs().begin(), random_inputs().end());
  in.push_back(1.0f);  // an odd length, so that the scalar tail of every path runs
  for (SimdPath path : available_paths()) {
    INFO("path " << name_of(path));
    CHECK(count_path_mismatches<bf16>(in, path, to_bf16) == 0);
    CHECK(count_path_mismatches<fp16>(in, path, to_fp16) == 0);
  }
}

TEST_CASE(
    "AVX-512's float to bf16 gives the same bits with vcvtneps2bf16 and its denormal fix-up as "
    "with the integer rounding",
    "[rne][paths]") {
  if (!cpu_features().avx512bf16 || !cpu_features().avx512vl) {
    WARN("no AVX512_BF16 on this CPU: the vcvtneps2bf16 path did not run");
    return;
  }
  std::vector<float> in = bf16_ref().tie_and_boundary_inputs();
  const auto sp = special_inputs();
  in.insert(in.end(), sp.begin(), sp.end());
  in.insert(in.end(), random_inputs().begin(), random_inputs().end());
  // Denormals (both signs, tiny to largest) alone, among normals and zeros, in every lane.
  std::mt19937 rng(7);
  for (int k = 0; k < 4096; ++k) {
    const std::uint32_t mantissa = 1 + rng() % 0x7fffff, sign = (rng() & 1u) << 31;
    const std::uint32_t pattern = k % 3 == 0 ? (rng() & 0x807fffffu) : sign | mantissa;
    in.push_back(from_bits(k % 5 == 4 ? 0x3f800000u | (rng() & 0xffffu) : pattern));
  }
  in.push_back(from_bits(0x00000001u));  // a denormal in the scalar tail
  for (const bool cvtne : {false, true}) {
    INFO((cvtne ? "vcvtneps2bf16" : "integer rounding"));
    std::vector<bf16> out(in.size());
    zero::detail::avx512_kernels(cvtne)->f32_to_bf16(in.data(), out.data(), in.size());
    int wrong = 0;
    for (std::size_t i = 0; i < in.size(); ++i)
      if (out[i].bits != to_bf16(in[i]).bits && wrong++ == 0)
        FAIL_CHECK("float bits 0x" << std::hex << bits(in[i]) << " gave 0x" << out[i].bits
                                   << ", to_bf16 0x" << to_bf16(in[i]).bits);
    CHECK(wrong == 0);
  }
  CHECK(zero::detail::avx512_kernels() == zero::detail::avx512_kernels(true));
}

#if defined(__x86_64__)
namespace {
__attribute__((target("f16c"))) std::uint16_t f16c_round(float x) {
  return static_cast<std::uint16_t>(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT), 0));
}
}  // namespace

TEST_CASE("the reference agrees with the F16C hardware conversion, where the CPU has one",
          "[rne][fp16]") {
  if (!cpu_features().f16c) {
    WARN("no F16C on this CPU: the hardware cross-check of the reference did not run");
    return;
  }
  const int wrong = count_mismatches<fp16>(
      fp16_ref().tie_and_boundary_inputs(), fp16_ref(), [](float x) { return fp16{f16c_round(x)}; },
      "F16C");
  CHECK(wrong == 0);
  CHECK(count_mismatches<fp16>(
            random_inputs(), fp16_ref(), [](float x) { return fp16{f16c_round(x)}; }, "F16C") == 0);
}

TEST_CASE(
    "no path depends on the caller's MXCSR (flush-to-zero, denormals-are-zero, rounding "
    "mode, exception masks)",
    "[rne][paths]") {
  std::vector<float> in = fp16_ref().tie_and_boundary_inputs();
  const auto sp = special_inputs();
  in.insert(in.end(), sp.begin(), sp.end());
  std::vector<fp16> h(65536);  // every pattern: subnormals are what DAZ would flush
  std::vector<bf16> b(65536);
  for (std::size_t i = 0; i < 65536; ++i) {
    h[i] = fp16{static_cast<std::uint16_t>(i)};
    b[i] = bf16{static_cast<std::uint16_t>(i)};
  }

  for (SimdPath path : available_paths()) {
    INFO("path " << name_of(path));
    std::vector<bf16> nb(in.size()), nb2(in.size());
    std::vector<fp16> nh(in.size()), nh2(in.size());
    std::vector<float> wh(h.size()), wh2(h.size()), wb(b.size()), wb2(b.size());
    convert(std::span<const float>(in), std::span<bf16>(nb), path);
    convert(std::span<const float>(in), std::span<fp16>(nh), path);
    convert(std::span<const fp16>(h), std::span<float>(wh), path);
    convert(std::span<const bf16>(b), std::span<float>(wb), path);

    const unsigned saved = _mm_getcsr();
    // FTZ | DAZ | round toward zero, with every exception but divide-by-zero unmasked: a
    // hardware conversion left under this MXCSR would flush, round differently, or trap.
    const unsigned hostile = (saved & ~0xffffu) | 0x8000u | 0x6000u | 0x0200u | 0x0040u;
    _mm_setcsr(hostile);
    convert(std::span<const float>(in), std::span<bf16>(nb2), path);
    convert(std::span<const float>(in), std::span<fp16>(nh2), path);
    convert(std::span<const fp16>(h), std::span<float>(wh2), path);
    convert(std::span<const bf16>(b), std::span<float>(wb2), path);
    const unsigned during = _mm_getcsr();
    _mm_setcsr(saved);

    CHECK((during & ~0x3fu) == hostile);  // the caller's MXCSR is back, whatever ran inside
    int wrong = 0;
    for (std::size_t i = 0; i < in.size(); ++i)
      wrong += nb[i].bits != nb2[i].bits || nh[i].bits != nh2[i].bits;
    for (std::size_t i = 0; i < h.size(); ++i) wrong += bits(wh[i]) != bits(wh2[i]);
    for (std::size_t i = 0; i < b.size(); ++i) wrong += bits(wb[i]) != bits(wb2[i]);
    CHECK(wrong == 0);
  }
}
#endif

// Hidden (run with `test_rounding "[.exhaustive]"`): all 2^32 floats, every path against the
// scalar functions, and to_fp16 against F16C. About a minute per path on one core.
TEST_CASE("every path narrows all 2^32 floats as the scalar functions do", "[.exhaustive]") {
  constexpr std::size_t chunk = 1 << 24;
  std::vector<float> in(chunk);
  std::vector<bf16> b(chunk);
  std::vector<fp16> h(chunk);
  long long wrong = 0;
  for (std::uint64_t base = 0; base < (1ull << 32); base += chunk) {
    for (std::size_t i = 0; i < chunk; ++i) in[i] = from_bits(static_cast<std::uint32_t>(base + i));
    for (SimdPath path : available_paths()) {
      convert(std::span<const float>(in), std::span<bf16>(b), path);
      convert(std::span<const float>(in), std::span<fp16>(h), path);
      for (std::size_t i = 0; i < chunk; ++i) {
        wrong += b[i].bits != to_bf16(in[i]).bits;
        wrong += h[i].bits != to_fp16(in[i]).bits;
#if defined(__x86_64__)
        if (path == SimdPath::scalar && cpu_features().f16c)
          wrong += h[i].bits != f16c_round(in[i]);
#endif
      }
    }
  }
  CHECK(wrong == 0);
}
