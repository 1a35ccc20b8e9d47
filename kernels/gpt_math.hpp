// Per-element math of the reference GPT (models/gpt.cpp): GELU, LayerNorm's affine step, the
// attention scale and the softmax exponent, shared by the CPU loops (kernels/cpu/gpt_ops.cpp)
// and the CUDA kernels, so that the CPU tests check the arithmetic the GPU runs.
#pragma once

#include <cmath>

#include "precision/hd.hpp"

namespace zero::kernels {

// GELU, tanh approximation (GPT-2's, torch's approximate='tanh'):
//   0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
// Not bitwise portable: tanhf is the C library's on the host, CUDA's on the device.
inline constexpr float kGeluScale = 0.7978845608028654f;  // √(2/π)
inline constexpr float kGeluCubic = 0.044715f;

ZERO_HD float gelu_element(float x) {
  const float inner = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

// d gelu(x) / dx times the upstream gradient:
//   0.5·(1 + t) + 0.5·x·(1 - t²)·√(2/π)·(1 + 3·0.044715·x²),  t = tanh(√(2/π)·(x + 0.044715·x³)).
ZERO_HD float gelu_backward_element(float x, float dout) {
  const float inner = kGeluScale * (x + kGeluCubic * x * x * x);
  const float t = tanhf(inner);
  const float sech2 = 1.0f - t * t;
  const float local = 0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale *
                                              (1.0f + 3.0f * kGeluCubic * x * x);
  return local * dout;
}

// LayerNorm of one element given its row's mean and reciprocal standard deviation
// rstd = 1 / √(biased variance + eps): the normalised value, then the affine step.
inline constexpr float kLayerNormEps = 1e-5f;
ZERO_HD float layernorm_normalized(float x, float mean, float rstd) { return (x - mean) * rstd; }
ZERO_HD float layernorm_affine(float norm, float weight, float bias) { return norm * weight + bias; }

// LayerNorm's input gradient for one element (the row's two sums precomputed):
//   dx = rstd·(dnorm - mean(dnorm) - norm·mean(dnorm·norm)),  dnorm = weight·dout.
ZERO_HD float layernorm_input_grad(float dnorm, float norm, float rstd, float mean_dnorm,
                                   float mean_dnorm_norm) {
  return rstd * (dnorm - mean_dnorm - norm * mean_dnorm_norm);
}

// Softmax's gradient for one element of a row: p·(dp - Σ_j p_j·dp_j).
ZERO_HD float softmax_input_grad(float p, float dp, float dot) { return p * (dp - dot); }

}  // namespace zero::kernels
