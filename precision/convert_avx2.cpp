// The AVX2 + F16C path of the bulk conversions: 16 elements a step, the same formulas as the
// scalar functions in bf16.hpp/fp16.hpp lane by lane, with F16C doing the fp16 round-to-nearest
// (IEEE-exact, so equal to to_fp16) and Philox4x32-10 run on 8 counters at once.
#include "precision/convert_kernels.hpp"

#if defined(__x86_64__)

#include <immintrin.h>

#include "precision/random.hpp"

// Per function rather than per file: inline functions from the headers above must stay
// compiled for baseline x86-64, or the linker could keep an AVX2 copy for the scalar path.
#define ZERO_AVX2 __attribute__((target("avx2,f16c")))

namespace zero::detail {
namespace {

ZERO_AVX2 inline __m256i set1(std::uint32_t x) {
  return _mm256_set1_epi32(static_cast<int>(x));
}

// Eight u32 lanes (each <= 0xffff) and eight more, to sixteen u16 in order. packus works within
// 128-bit halves, so the permute puts the quarters back in order.
ZERO_AVX2 inline __m256i pack16(__m256i lo, __m256i hi) {
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
}

ZERO_AVX2 inline __m256i load8(const float* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// x > y on unsigned lanes (AVX2 compares only signed ones).
ZERO_AVX2 inline __m256i cmpgt_u32(__m256i x, __m256i y) {
  const __m256i bias = set1(0x80000000u);
  return _mm256_cmpgt_epi32(_mm256_xor_si256(x, bias), _mm256_xor_si256(y, bias));
}

// ---- round to nearest even (bf16.hpp: to_bf16) ----

ZERO_AVX2 inline __m256i bf16_rne(__m256i u) {
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, set1(0x7fffffffu)), set1(0x7f800000u));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), set1(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, set1(0x7fffu)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), set1(0x40u));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

ZERO_AVX2 void f32_to_bf16(const float* src, bf16* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i out = pack16(bf16_rne(load8(src + i)), bf16_rne(load8(src + i + 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), out);
  }
  for (; i < n; ++i) dst[i] = to_bf16(src[i]);
}

ZERO_AVX2 __attribute__((noinline)) void f32_to_fp16_loop(const float* src, fp16* dst,
                                                          std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = to_fp16(src[i]);
}

void f32_to_fp16(const float* src, fp16* dst, std::size_t n) {
  DefaultMxcsr env;
  f32_to_fp16_loop(src, dst, n);
}

// ---- exact widening ----

ZERO_AVX2 void bf16_to_f32(const bf16* src, float* dst, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i f = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), f);
  }
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

ZERO_AVX2 __attribute__((noinline)) void fp16_to_f32_loop(const fp16* src, float* dst,
                                                          std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

void fp16_to_f32(const fp16* src, float* dst, std::size_t n) {
  DefaultMxcsr env;
  fp16_to_f32_loop(src, dst, n);
}

// ---- Philox4x32-10 on 8 counters (random.hpp: random_bits) ----

// 32x32 -> 64-bit products of all 8 lanes: mul_epu32 multiplies the even lanes, so the odd
// lanes are shifted down for a second multiply and the halves are blended back.
ZERO_AVX2 inline void mulhilo(__m256i a, __m256i m, __m256i& lo, __m256i& hi) {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xaa);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xaa);
}

// random_bits(seed, index + lane) for lanes 0..7.
ZERO_AVX2 inline __m256i random8(std::uint64_t seed, std::uint64_t index) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i c0 = _mm256_add_epi32(set1(static_cast<std::uint32_t>(index)), lane);
  // A lane whose low word wrapped carries into the high word.
  const __m256i no_carry = _mm256_cmpeq_epi32(_mm256_max_epu32(c0, lane), c0);
  __m256i c1 = _mm256_add_epi32(set1(static_cast<std::uint32_t>(index >> 32) + 1u), no_carry);
  __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  const __m256i m0 = set1(philox_m0), m1 = set1(philox_m1);
  for (int round = 0; round < 10; ++round) {
    __m256i lo0, hi0, lo1, hi1;
    mulhilo(c0, m0, lo0, hi0);
    mulhilo(c2, m1, lo1, hi1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), set1(k0));
    c1 = lo1;
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), set1(k1));
    c3 = lo0;
    k0 += philox_w0;
    k1 += philox_w1;
  }
  return c0;
}

// ---- stochastic rounding (bf16.hpp: to_bf16_sr, fp16.hpp: to_fp16_sr) ----

ZERO_AVX2 inline __m256i bf16_sr(__m256i u, __m256i r) {
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, set1(0x7fffffffu)), set1(0x7f800000u));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_and_si256(r, set1(0xffffu))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), set1(0x40u));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

ZERO_AVX2 inline __m256i fp16_sr(__m256i u, __m256i r) {
  const __m256i a = _mm256_and_si256(u, set1(0x7fffffffu));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 16), set1(0x8000u));
  const __m256i nan = _mm256_cmpgt_epi32(a, set1(0x7f800000u));
  const __m256i big = _mm256_cmpgt_epi32(a, set1(0x477fffffu));
  const __m256i normal = _mm256_cmpgt_epi32(a, set1(0x387fffffu));
  const __m256i rn = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_sub_epi32(a, set1(0x38000000u)), _mm256_and_si256(r, set1(0x1fffu))),
      13);
  // Subnormal results; in normal lanes s is negative, the variable shifts give 0, and the lane
  // is blended away.
  const __m256i mant = _mm256_or_si256(_mm256_and_si256(a, set1(0x7fffffu)), set1(0x800000u));
  const __m256i s = _mm256_sub_epi32(set1(126u), _mm256_srli_epi32(a, 23));
  const __m256i kept = _mm256_srlv_epi32(mant, s);
  const __m256i t = _mm256_max_epi32(_mm256_sub_epi32(s, set1(32u)), _mm256_setzero_si256());
  const __m256i mask = _mm256_sub_epi32(_mm256_sllv_epi32(set1(1u), s), set1(1u));
  const __m256i rest = _mm256_and_si256(_mm256_srlv_epi32(mant, t), mask);
  const __m256i up = cmpgt_u32(_mm256_and_si256(r, mask), _mm256_sub_epi32(mask, rest));
  const __m256i rs = _mm256_sub_epi32(kept, up);  // up is all ones (-1) where rounding up
  __m256i res = _mm256_blendv_epi8(rs, rn, normal);
  res = _mm256_blendv_epi8(res, set1(0x7c00u), big);
  const __m256i quiet =
      _mm256_or_si256(set1(0x7e00u), _mm256_and_si256(_mm256_srli_epi32(a, 13), set1(0x3ffu)));
  res = _mm256_blendv_epi8(res, quiet, nan);
  return _mm256_or_si256(res, sign);
}

ZERO_AVX2 void f32_to_bf16_sr(const float* src, bf16* dst, std::size_t n, std::uint64_t seed,
                              std::uint64_t offset) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = bf16_sr(load8(src + i), random8(seed, offset + i));
    const __m256i hi = bf16_sr(load8(src + i + 8), random8(seed, offset + i + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), pack16(lo, hi));
  }
  for (; i < n; ++i) dst[i] = to_bf16_sr(src[i], random_bits(seed, offset + i));
}

ZERO_AVX2 void f32_to_fp16_sr(const float* src, fp16* dst, std::size_t n, std::uint64_t seed,
                              std::uint64_t offset) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = fp16_sr(load8(src + i), random8(seed, offset + i));
    const __m256i hi = fp16_sr(load8(src + i + 8), random8(seed, offset + i + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), pack16(lo, hi));
  }
  for (; i < n; ++i) dst[i] = to_fp16_sr(src[i], random_bits(seed, offset + i));
}

constexpr ConvertKernels kernels{f32_to_bf16, f32_to_fp16,    bf16_to_f32,
                                 fp16_to_f32, f32_to_bf16_sr, f32_to_fp16_sr};

}  // namespace

const ConvertKernels* avx2_kernels() {
  return &kernels;
}

}  // namespace zero::detail

#else

namespace zero::detail {
const ConvertKernels* avx2_kernels() {
  return nullptr;
}
}  // namespace zero::detail

#endif
