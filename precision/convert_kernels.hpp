// Internal to precision/: the table of bulk conversion loops that each SIMD path provides
// (convert.cpp: scalar, convert_avx2.cpp, convert_avx512.cpp) and convert.cpp dispatches to.
#pragma once

#include <cstddef>
#include <cstdint>

#include "precision/bf16.hpp"
#include "precision/fp16.hpp"

namespace zero::detail {

struct ConvertKernels {
  void (*f32_to_bf16)(const float* src, bf16* dst, std::size_t n);
  void (*f32_to_fp16)(const float* src, fp16* dst, std::size_t n);
  void (*bf16_to_f32)(const bf16* src, float* dst, std::size_t n);
  void (*fp16_to_f32)(const fp16* src, float* dst, std::size_t n);
  void (*f32_to_bf16_sr)(const float* src, bf16* dst, std::size_t n, std::uint64_t seed,
                         std::uint64_t offset);
  void (*f32_to_fp16_sr)(const float* src, fp16* dst, std::size_t n, std::uint64_t seed,
                         std::uint64_t offset);
};

// nullptr where the path is not compiled in (non-x86 builds). Whether the CPU can run it is
// simd.hpp's available(); these tables must only be used after that says yes.
const ConvertKernels* avx2_kernels();
// AVX-512's, with float to bf16 through AVX512_BF16's vcvtneps2bf16 where the CPU has it (and
// AVX512VL); the explicit choice is for the tests, which compare both on such a CPU.
const ConvertKernels* avx512_kernels();
const ConvertKernels* avx512_kernels(bool use_cvtneps2bf16);

}  // namespace zero::detail

#if defined(__x86_64__)
#include <xmmintrin.h>

namespace zero::detail {

// The hardware fp16 conversions (vcvtps2ph, vcvtph2ps) read MXCSR: DAZ could flush denormal
// inputs and unmasked exceptions would trap, where the integer scalar code does neither. The
// vector paths run those loops under the power-on MXCSR (all exceptions masked, round to
// nearest, no FTZ/DAZ) and restore the caller's afterwards, flags included, so the caller's
// environment changes nothing and learns nothing. The loop runs in a separate, non-inlined
// function, so that no conversion can be scheduled across the MXCSR writes.
class DefaultMxcsr {
 public:
  DefaultMxcsr() : saved_(_mm_getcsr()) { _mm_setcsr(0x1f80u); }
  ~DefaultMxcsr() { _mm_setcsr(saved_); }
  DefaultMxcsr(const DefaultMxcsr&) = delete;
  DefaultMxcsr& operator=(const DefaultMxcsr&) = delete;

 private:
  unsigned saved_;
};

}  // namespace zero::detail
#endif
