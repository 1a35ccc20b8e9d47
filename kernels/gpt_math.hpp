// Per-element math of the reference GPT (models/gpt.cpp): GELU, LayerNorm's affine step, the
// attention scale and the softmax exponent, shared by the CPU loops (kernels/cpu/gpt_ops.cpp)
// and the CUDA kernels, so that the CPU tests check the arithmetic the GPU runs.
#pragma once

#include <cmath>
#include <cstdint>

#include "precision/bits.hpp"
#include "precision/hd.hpp"

namespace zero::kernels {

// e^x in plain fp32 arithmetic (Cephes' expf: x = n·ln2 + r, |r| <= ln2/2, a degree-6
// polynomial for e^r, then 2^n by the exponent bits): within 2 ulp of e^x for x in
// [-87.33, 88.37], 0 below, +inf above (where e^x is still finite up to 88.72: no caller here
// gets there), NaN for NaN. Branch-free, so that the CPU loops vectorise (the C library's expf
// and tanhf are a call per element, 15-20 ns each here), and the same bits on the host and the
// device, which expf and tanhf are not.
ZERO_HD float exp_element(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f,
                  kRound = 12582912.0f;                    // 1.5·2^23
  constexpr float kLo = -87.3365478515625f, kHi = 88.37f;  // n in [-126, 127]
  const float c = x < kLo ? kLo : (x > kHi ? kHi : x);
  const float n = (c * kLog2e + kRound) - kRound;  // round to the nearest integer
  const float r = (c - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const float e = p * float_of(static_cast<std::uint32_t>(static_cast<int>(n) + 127) << 23);
  const float out = x < kLo ? 0.0f : (x > kHi ? INFINITY : e);
  return x != x ? x : out;
}

// tanh(u), Cephes' tanhf: an odd polynomial for |u| < 0.625, 1 - 2 / (e^(2u) + 1) above (|u|
// clamped to 9, where tanh is 1 in fp32); within a few ulp. Both sides are computed and one is
// selected, so the loops stay branch-free.
ZERO_HD float tanh_element_fast(float u) {
  const float z = u * u;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * u + u;
  const float c = u < -9.0f ? -9.0f : (u > 9.0f ? 9.0f : u);
  const float large = 1.0f - 2.0f / (exp_element(2.0f * c) + 1.0f);
  return (u < 0.625f && u > -0.625f) ? small : large;
}

// GELU, tanh approximation (GPT-2's, torch's approximate='tanh'):
//   0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
// Plain fp32 arithmetic (tanh_element_fast), so the host and the device agree bit for bit.
inline constexpr float kGeluScale = 0.7978845608028654f;  // √(2/π)
inline constexpr float kGeluCubic = 0.044715f;

ZERO_HD float gelu_element(float x) {
  const float inner = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanh_element_fast(inner));
}

// d gelu(x) / dx times the upstream gradient:
//   0.5·(1 + t) + 0.5·x·(1 - t²)·√(2/π)·(1 + 3·0.044715·x²),  t = tanh(√(2/π)·(x + 0.044715·x³)).
ZERO_HD float gelu_backward_element(float x, float dout) {
  const float inner = kGeluScale * (x + kGeluCubic * x * x * x);
  // sech² from e^(2u) directly where |u| is large: 1 - t² there cancels (t near 1) and would
  // carry tanh's absolute error into a relative one.
  const float t = tanh_element_fast(inner);
  const float c = inner < -9.0f ? -9.0f : (inner > 9.0f ? 9.0f : inner);
  const float e = exp_element(2.0f * c), e1 = e + 1.0f;
  const float sech2 = (inner < 0.625f && inner > -0.625f) ? 1.0f - t * t : 4.0f * e / (e1 * e1);
  const float local =
      0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return local * dout;
}

// LayerNorm of one element given its row's mean and reciprocal standard deviation
// rstd = 1 / √(biased variance + eps): the normalised value, then the affine step.
inline constexpr float kLayerNormEps = 1e-5f;
ZERO_HD float layernorm_normalized(float x, float mean, float rstd) {
  return (x - mean) * rstd;
}
ZERO_HD float layernorm_affine(float norm, float weight, float bias) {
  return norm * weight + bias;
}

// LayerNorm's input gradient for one element (the row's two sums precomputed):
//   dx = rstd·(dnorm - mean(dnorm) - norm·mean(dnorm·norm)),  dnorm = weight·dout.
ZERO_HD float layernorm_input_grad(float dnorm, float norm, float rstd, float mean_dnorm,
                                   float mean_dnorm_norm) {
  return rstd * (dnorm - mean_dnorm - norm * mean_dnorm_norm);
}

// Softmax's gradient for one element of a row: p·(dp - Σ_j p_j·dp_j).
ZERO_HD float softmax_input_grad(float p, float dp, float dot) {
  return p * (dp - dot);
}

}  // namespace zero::kernels
