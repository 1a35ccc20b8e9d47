// The Lion update of one element (Chen et al. 2023, "Symbolic Discovery of Optimization
// Algorithms", Algorithm 2; DeepSpeed's FusedLion): the one definition the CPU loop and the
// CUDA kernel both call, plus the per-step scalars (LionStep) the host computes once per step.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#include "base/error.hpp"
#include "kernels/elementwise_math.hpp"
#include "precision/hd.hpp"

namespace zero::kernels {

// Run-wide hyperparameters (doubles, as a config file holds them). DeepSpeed's FusedLion
// defaults: betas (0.9, 0.999), weight_decay 0.
struct LionHyper {
  double beta1 = 0.9;   // interpolation of momentum and gradient whose sign is the update
  double beta2 = 0.999; // momentum decay
  double weight_decay = 0.0;  // decoupled: p <- p * (1 - lr * wd)
};

// Per-step scalars in the float form lion_element uses, computed once on the host in double
// and rounded once to float, so the CPU and the GPU see the same bits.
struct LionStep {
  float grad_scale = 1.0f;  // g <- g * grad_scale first (1/loss_scale * clip coefficient)
  float decay = 1.0f;       // 1 - lr * wd
  float lr = 0.0f;
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.999f, one_minus_beta2 = 0.001f;
};

inline LionStep make_lion_step(const LionHyper& h, double lr, float grad_scale = 1.0f) {
  if (!(h.beta1 >= 0.0 && h.beta1 < 1.0) || !(h.beta2 >= 0.0 && h.beta2 < 1.0))
    throw Error(cat("Lion betas must lie in [0, 1), got (", h.beta1, ", ", h.beta2, ")"),
                {std::nullopt, std::nullopt, "optimizer.params.betas"});
  if (!std::isfinite(lr) || !std::isfinite(grad_scale))
    throw Error(cat("Lion: lr (", lr, ") and grad_scale (", grad_scale, ") must be finite"));
  LionStep s;
  s.grad_scale = grad_scale;
  s.decay = static_cast<float>(1.0 - lr * h.weight_decay);
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(h.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  return s;
}

// One element, every operation an IEEE float operation rounded once (no FMA: the build keeps
// compilers from contracting, and none is written here), so host and device agree bit for bit:
//
//   g = g_raw * grad_scale
//   c = beta1 * m + (1 - beta1) * g          the interpolation whose sign is the step
//   p = p * decay + (c > 0 ? -lr : c < 0 ? lr : 0)
//   m = beta2 * m + (1 - beta2) * g
//
// sign(0) = 0, as the paper and torch.sign: an element with c exactly 0 (a zero gradient on a
// zero momentum, such as the layout's padding) does not move. DeepSpeed's FusedLion steps such
// an element by +lr (its `c > 0 ? -lr : lr`), which would move the padding off zero.
ZERO_HD void lion_element(float& p, float& m, float g_raw, const LionStep& s) {
  const float g = g_raw * s.grad_scale;
  const float c = s.beta1 * m + s.one_minus_beta1 * g;
  const float step = c > 0.0f ? -s.lr : (c < 0.0f ? s.lr : 0.0f);
  p = p * s.decay + step;
  m = s.beta2 * m + s.one_minus_beta2 * g;
}

// lion_element on copies, kept only if the new p and m are finite; else the element keeps its
// values and this returns true (as adam_element_guarded: the step is then refused).
ZERO_HD bool lion_element_guarded(float& p, float& m, float g_raw, const LionStep& s) {
  float p1 = p, m1 = m;
  lion_element(p1, m1, g_raw, s);
  const bool bad = !is_finite(p1) | !is_finite(m1);
  p = bad ? p : p1;
  m = bad ? m : m1;
  return bad;
}

}  // namespace zero::kernels
