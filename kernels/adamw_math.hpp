// The Adam/AdamW update of one element: the one definition that the CPU loop and the CUDA kernel
// both call, plus the per-step scalars (AdamStep) that the host computes once per step.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#include "kernels/elementwise_math.hpp"
#include "precision/hd.hpp"
#include "zero/error.hpp"

namespace zero::kernels {

// How weight decay enters the update.
enum class AdamMode : std::uint8_t {
  adamw,  // decoupled (Loshchilov & Hutter; torch.optim.AdamW): p ← p·(1 − lr·wd) before the step
  adam_l2,  // L2 penalty (torch.optim.Adam): g ← g + wd·p before the moments
};

// Run-wide hyperparameters (doubles, as a config file or PyTorch holds them).
struct AdamHyper {
  double beta1 = 0.9;         // first-moment decay
  double beta2 = 0.999;       // second-moment decay
  double eps = 1e-8;          // added to the bias-corrected sqrt(v)
  double weight_decay = 0.0;  // meaning depends on mode
  AdamMode mode = AdamMode::adamw;
  // Divide m by 1 − beta1^t and v by 1 − beta2^t (Kingma & Ba). false: DeepSpeed FusedAdam's
  // bias_correction=False, p ← p − lr·m/(sqrt(v) + eps) with lr unscaled.
  bool bias_correction = true;
};

// Per-step scalars, already in the float form in which adam_element uses them. Computed once on
// the host (in double, then rounded once to float, as PyTorch does with its Python-float scalars)
// and passed by value to every CPU loop and CUDA kernel, so both see the same bits.
struct AdamStep {
  float grad_scale = 1.0f;    // g ← g·grad_scale first (1/loss_scale · clip coefficient)
  float weight_decay = 0.0f;  // adam_l2: wd in g + wd·p
  float decay = 1.0f;         // adamw: 1 − lr·wd; 1 for adam_l2
  float beta1 = 0.9f;
  float one_minus_beta1 = 0.1f;
  float beta2 = 0.999f;
  float one_minus_beta2 = 0.001f;
  float bc2_sqrt = 1.0f;  // sqrt(1 − beta2^t); 1 without bias correction
  float eps = 1e-8f;
  float step_size = 0.0f;  // lr / (1 − beta1^t); lr without bias correction
  AdamMode mode = AdamMode::adamw;
};

// Builds the step-t scalars (t counts from 1). Throws zero::Error on a value that would make the
// update meaningless (t < 1, a beta outside [0, 1), eps <= 0, a non-finite lr or grad_scale).
inline AdamStep make_adam_step(const AdamHyper& h, double lr, std::int64_t step,
                               float grad_scale = 1.0f) {
  if (step < 1) throw Error(cat("Adam step must count from 1, got ", step));
  if (!(h.beta1 >= 0.0 && h.beta1 < 1.0) || !(h.beta2 >= 0.0 && h.beta2 < 1.0))
    throw Error(cat("Adam betas must lie in [0, 1), got (", h.beta1, ", ", h.beta2, ")"),
                {std::nullopt, std::nullopt, "optimizer.params.betas"});
  if (!(h.eps > 0.0))
    throw Error(cat("Adam eps must be > 0, got ", h.eps),
                {std::nullopt, std::nullopt, "optimizer.params.eps"});
  if (!std::isfinite(lr) || !std::isfinite(grad_scale))
    throw Error(cat("Adam step ", step, ": lr (", lr, ") and grad_scale (", grad_scale,
                    ") must be finite"));
  const double t = static_cast<double>(step);
  // Without bias correction both factors are exactly 1, and dividing by 1.0f changes no bit, so
  // the per-element code below is one code path for both settings (CPU and CUDA alike).
  const double bc1 = h.bias_correction ? 1.0 - std::pow(h.beta1, t) : 1.0;
  const double bc2 = h.bias_correction ? 1.0 - std::pow(h.beta2, t) : 1.0;
  AdamStep s;
  s.grad_scale = grad_scale;
  s.mode = h.mode;
  s.weight_decay = h.mode == AdamMode::adam_l2 ? static_cast<float>(h.weight_decay) : 0.0f;
  s.decay = h.mode == AdamMode::adamw ? static_cast<float>(1.0 - lr * h.weight_decay) : 1.0f;
  s.beta1 = static_cast<float>(h.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.eps = static_cast<float>(h.eps);
  s.step_size = static_cast<float>(lr / bc1);
  return s;
}

// One element of the update, in this exact order of IEEE float operations (each one rounded to
// nearest even; no FMA: the build passes -ffp-contract=off to g++ and -fmad=false to nvcc, and
// '/' and sqrtf are correctly rounded on both sides, so host and device produce the same bits):
//
//   g  = g_raw · grad_scale
//   adam_l2: g = g + wd · p            adamw: p = p · decay
//   m  = beta1 · m + (1 − beta1) · g
//   v  = beta2 · v + ((1 − beta2) · g) · g            (PyTorch's addcmul order)
//   d  = sqrt(v) / sqrt(bc2) + eps                     (PyTorch's denom)
//   p  = p − step_size · (m / d)                       (PyTorch's addcdiv order)
//
// The mode test is uniform across a launch, so it costs a predictable branch, and it keeps
// adamw from computing 0·p (NaN for an infinite p) where no L2 term exists.
ZERO_HD void adam_element(float& p, float& m, float& v, float g_raw, const AdamStep& s) {
  float g = g_raw * s.grad_scale;
  if (s.mode == AdamMode::adam_l2) {
    g = g + s.weight_decay * p;
  } else {
    p = p * s.decay;
  }
  m = s.beta1 * m + s.one_minus_beta1 * g;
  v = s.beta2 * v + (s.one_minus_beta2 * g) * g;
  const float d = sqrtf(v) / s.bc2_sqrt + s.eps;
  p = p - s.step_size * (m / d);
}

// The update the CPU loop and the CUDA kernel run: adam_element on copies, kept only if the new
// p, m and v are all finite. Otherwise the element keeps its values from before the step and
// this returns true, so a non-finite value never enters the master weights or the moments, and
// the caller can refuse the step (zero/engine_step.cpp). The test is three bit masks and three
// selects on values already in registers: no extra memory traffic, so the check is free in a
// loop bound by memory bandwidth.
ZERO_HD bool adam_element_guarded(float& p, float& m, float& v, float g_raw, const AdamStep& s) {
  float p1 = p, m1 = m, v1 = v;
  adam_element(p1, m1, v1, g_raw, s);
  const bool bad = !is_finite(p1) | !is_finite(m1) | !is_finite(v1);
  p = bad ? p : p1;
  m = bad ? m : m1;
  v = bad ? v : v1;
  return bad;
}

}  // namespace zero::kernels
