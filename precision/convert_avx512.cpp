// The AVX-512 (F + BW) path of the bulk conversions: 16 elements a step, the same formulas as
// convert_avx2.cpp with opmask registers in place of blend masks. Where the CPU has AVX512_BF16,
// float to bf16 uses its vcvtneps2bf16, which rounds to nearest even and quiets NaNs as to_bf16
// does but treats denormal inputs as zero: the vectors that hold one take the integer rounding
// for those lanes.
#include "precision/convert_kernels.hpp"

#if defined(__x86_64__)

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which it then reports as
// (maybe-)uninitialised wherever they inline (GCC bug 105593, fixed in GCC 13). Nothing here is.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <immintrin.h>

#include "precision/random.hpp"
#include "precision/simd.hpp"

// Per function rather than per file, for the reason given in convert_avx2.cpp.
#define ZERO_AVX512 __attribute__((target("avx512f,avx512bw")))

namespace zero::detail {
namespace {

ZERO_AVX512 inline __m512i set1(std::uint32_t x) {
  return _mm512_set1_epi32(static_cast<int>(x));
}

ZERO_AVX512 inline __m512i load16(const float* p) {
  return _mm512_loadu_si512(p);
}

// Sixteen u32 lanes (each <= 0xffff) to sixteen u16, by truncation.
ZERO_AVX512 inline void store16(void* p, __m512i v) {
  _mm256_storeu_si256(static_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
}

// ---- round to nearest even (bf16.hpp: to_bf16) ----

ZERO_AVX512 inline __m512i bf16_rne(__m512i u) {
  const __mmask16 nan =
      _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, set1(0x7fffffffu)), set1(0x7f800000u));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), set1(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, set1(0x7fffu)), lsb), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), set1(0x40u));
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

ZERO_AVX512 void f32_to_bf16(const float* src, bf16* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) store16(dst + i, bf16_rne(load16(src + i)));
  for (; i < n; ++i) dst[i] = to_bf16(src[i]);
}

// One instruction for bf16_rne's eleven: 64M elements from L1 in 4.2 ms instead of 6.3 (Zen 4),
// which the AdamW step's bf16 copy pays on top of its memory traffic (docs/benchmarks.md).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void f32_to_bf16_cvtne(
    const float* src, bf16* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(src + i);
    __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_castsi512_ps(u)));
    // Denormal lanes: exponent bits all zero, mantissa not.
    const __mmask16 denormal = _mm512_mask_test_epi32_mask(
        _mm512_testn_epi32_mask(u, set1(0x7f800000u)), u, set1(0x007fffffu));
    if (denormal != 0) h = _mm256_mask_blend_epi16(denormal, h, _mm512_cvtepi32_epi16(bf16_rne(u)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = to_bf16(src[i]);
}

ZERO_AVX512 __attribute__((noinline)) void f32_to_fp16_loop(const float* src, fp16* dst,
                                                            std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = to_fp16(src[i]);
}

void f32_to_fp16(const float* src, fp16* dst, std::size_t n) {
  DefaultMxcsr env;
  f32_to_fp16_loop(src, dst, n);
}

// ---- exact widening ----

ZERO_AVX512 void bf16_to_f32(const bf16* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

ZERO_AVX512 __attribute__((noinline)) void fp16_to_f32_loop(const fp16* src, float* dst,
                                                            std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

void fp16_to_f32(const fp16* src, float* dst, std::size_t n) {
  DefaultMxcsr env;
  fp16_to_f32_loop(src, dst, n);
}

// ---- Philox4x32-10 on 16 counters (random.hpp: random_bits) ----

ZERO_AVX512 inline void mulhilo(__m512i a, __m512i m, __m512i& lo, __m512i& hi) {
  const __m512i even = _mm512_mul_epu32(a, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  lo = _mm512_mask_blend_epi32(0xaaaa, even, _mm512_slli_epi64(odd, 32));
  hi = _mm512_mask_blend_epi32(0xaaaa, _mm512_srli_epi64(even, 32), odd);
}

ZERO_AVX512 inline __m512i random16(std::uint64_t seed, std::uint64_t index) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512i c0 = _mm512_add_epi32(set1(static_cast<std::uint32_t>(index)), lane);
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, lane);  // the low word wrapped
  const __m512i hi = set1(static_cast<std::uint32_t>(index >> 32));
  __m512i c1 = _mm512_mask_add_epi32(hi, carry, hi, set1(1u));
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  const __m512i m0 = set1(philox_m0), m1 = set1(philox_m1);
  for (int round = 0; round < 10; ++round) {
    __m512i lo0, hi0, lo1, hi1;
    mulhilo(c0, m0, lo0, hi0);
    mulhilo(c2, m1, lo1, hi1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), set1(k0));
    c1 = lo1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), set1(k1));
    c3 = lo0;
    k0 += philox_w0;
    k1 += philox_w1;
  }
  return c0;
}

// ---- stochastic rounding (bf16.hpp: to_bf16_sr, fp16.hpp: to_fp16_sr) ----

ZERO_AVX512 inline __m512i bf16_sr(__m512i u, __m512i r) {
  const __mmask16 nan =
      _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, set1(0x7fffffffu)), set1(0x7f800000u));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_and_si512(r, set1(0xffffu))), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), set1(0x40u));
  return _mm512_mask_blend_epi32(nan, rounded, quiet);
}

ZERO_AVX512 inline __m512i fp16_sr(__m512i u, __m512i r) {
  const __m512i a = _mm512_and_si512(u, set1(0x7fffffffu));
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 16), set1(0x8000u));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(a, set1(0x7f800000u));
  const __mmask16 big = _mm512_cmpgt_epi32_mask(a, set1(0x477fffffu));
  const __mmask16 normal = _mm512_cmpgt_epi32_mask(a, set1(0x387fffffu));
  const __m512i rn = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_sub_epi32(a, set1(0x38000000u)), _mm512_and_si512(r, set1(0x1fffu))),
      13);
  const __m512i mant = _mm512_or_si512(_mm512_and_si512(a, set1(0x7fffffu)), set1(0x800000u));
  const __m512i s = _mm512_sub_epi32(set1(126u), _mm512_srli_epi32(a, 23));
  const __m512i kept = _mm512_srlv_epi32(mant, s);
  const __m512i t = _mm512_max_epi32(_mm512_sub_epi32(s, set1(32u)), _mm512_setzero_si512());
  const __m512i mask = _mm512_sub_epi32(_mm512_sllv_epi32(set1(1u), s), set1(1u));
  const __m512i rest = _mm512_and_si512(_mm512_srlv_epi32(mant, t), mask);
  const __mmask16 up =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(r, mask), _mm512_sub_epi32(mask, rest));
  const __m512i rs = _mm512_mask_add_epi32(kept, up, kept, set1(1u));
  __m512i res = _mm512_mask_blend_epi32(normal, rs, rn);
  res = _mm512_mask_blend_epi32(big, res, set1(0x7c00u));
  const __m512i quiet =
      _mm512_or_si512(set1(0x7e00u), _mm512_and_si512(_mm512_srli_epi32(a, 13), set1(0x3ffu)));
  res = _mm512_mask_blend_epi32(nan, res, quiet);
  return _mm512_or_si512(res, sign);
}

ZERO_AVX512 void f32_to_bf16_sr(const float* src, bf16* dst, std::size_t n, std::uint64_t seed,
                                std::uint64_t offset) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    store16(dst + i, bf16_sr(load16(src + i), random16(seed, offset + i)));
  for (; i < n; ++i) dst[i] = to_bf16_sr(src[i], random_bits(seed, offset + i));
}

ZERO_AVX512 void f32_to_fp16_sr(const float* src, fp16* dst, std::size_t n, std::uint64_t seed,
                                std::uint64_t offset) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    store16(dst + i, fp16_sr(load16(src + i), random16(seed, offset + i)));
  for (; i < n; ++i) dst[i] = to_fp16_sr(src[i], random_bits(seed, offset + i));
}

constexpr ConvertKernels kernels{f32_to_bf16, f32_to_fp16,    bf16_to_f32,
                                 fp16_to_f32, f32_to_bf16_sr, f32_to_fp16_sr};
constexpr ConvertKernels kernels_cvtne{f32_to_bf16_cvtne, f32_to_fp16,    bf16_to_f32,
                                       fp16_to_f32,       f32_to_bf16_sr, f32_to_fp16_sr};

}  // namespace

const ConvertKernels* avx512_kernels(bool use_cvtneps2bf16) {
  return use_cvtneps2bf16 ? &kernels_cvtne : &kernels;
}

const ConvertKernels* avx512_kernels() {
  static const bool cvtne = cpu_features().avx512bf16 && cpu_features().avx512vl;
  return avx512_kernels(cvtne);
}

}  // namespace zero::detail

#else

namespace zero::detail {
const ConvertKernels* avx512_kernels(bool) {
  return nullptr;
}
const ConvertKernels* avx512_kernels() {
  return nullptr;
}
}  // namespace zero::detail

#endif
