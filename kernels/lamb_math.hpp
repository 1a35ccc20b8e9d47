// The LAMB update (You et al. 2020, "Large Batch Optimization for Deep Learning"), as DeepSpeed's
// FusedLamb computes it (csrc/lamb/fused_lamb_cuda_kernel.cu): the per-element math the CPU loops
// and the CUDA kernels both call, the per-parameter trust ratio, and the per-step scalars.
//
// Two passes over a parameter's elements. The first computes the Adam-style direction u of each
// element (moments updated on copies, nothing stored) for the squared norms of the parameter and
// of u; the caller sums those over every shard holding a piece of the parameter. The second
// recomputes the same u (the same inputs, the same operations, so the same bits), stores the new
// moments and applies p <- p - (step_size * trust) * u, where trust = ||p|| / ||u|| clamped to
// [min_coeff, max_coeff] (1 when either norm is 0).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#include "base/error.hpp"
#include "kernels/elementwise_math.hpp"
#include "precision/hd.hpp"

namespace zero::kernels {

// Run-wide hyperparameters (DeepSpeed's FusedLamb defaults).
struct LambHyper {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;           // outside the square root (FusedLamb's eps_inside_sqrt=False)
  double weight_decay = 0.0;   // added to the direction: u = m / (sqrt(v) + eps) + wd * p
  bool bias_correction = true; // step_size = lr * sqrt(1 - beta2^t) / (1 - beta1^t), else lr
  double max_coeff = 10.0;     // the trust ratio's clamp
  double min_coeff = 0.01;
};

// Per-step scalars in float, computed once on the host (double, rounded once).
struct LambStep {
  float grad_scale = 1.0f;
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.999f, one_minus_beta2 = 0.001f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float step_size = 0.0f;
  float max_coeff = 10.0f, min_coeff = 0.01f;
};

inline LambStep make_lamb_step(const LambHyper& h, double lr, std::int64_t step,
                               float grad_scale = 1.0f) {
  if (step < 1) throw Error(cat("LAMB step must count from 1, got ", step));
  if (!(h.beta1 >= 0.0 && h.beta1 < 1.0) || !(h.beta2 >= 0.0 && h.beta2 < 1.0))
    throw Error(cat("LAMB betas must lie in [0, 1), got (", h.beta1, ", ", h.beta2, ")"),
                {std::nullopt, std::nullopt, "optimizer.params.betas"});
  if (!(h.eps > 0.0))
    throw Error(cat("LAMB eps must be > 0, got ", h.eps),
                {std::nullopt, std::nullopt, "optimizer.params.eps"});
  if (!std::isfinite(lr) || !std::isfinite(grad_scale))
    throw Error(cat("LAMB step ", step, ": lr (", lr, ") and grad_scale (", grad_scale,
                    ") must be finite"));
  const double t = static_cast<double>(step);
  LambStep s;
  s.grad_scale = grad_scale;
  s.beta1 = static_cast<float>(h.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  s.eps = static_cast<float>(h.eps);
  s.weight_decay = static_cast<float>(h.weight_decay);
  s.step_size = static_cast<float>(
      h.bias_correction ? lr * std::sqrt(1.0 - std::pow(h.beta2, t)) / (1.0 - std::pow(h.beta1, t))
                        : lr);
  s.max_coeff = static_cast<float>(h.max_coeff);
  s.min_coeff = static_cast<float>(h.min_coeff);
  return s;
}

// The direction of one element and its new moments, every operation an IEEE float operation
// rounded once (no FMA), in FusedLamb's order:
//
//   g = g_raw * grad_scale
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + ((1 - beta2) * g) * g
//   u = m / (sqrt(v) + eps) + wd * p
ZERO_HD float lamb_direction(float p, float& m, float& v, float g_raw, const LambStep& s) {
  const float g = g_raw * s.grad_scale;
  m = s.beta1 * m + s.one_minus_beta1 * g;
  v = s.beta2 * v + (s.one_minus_beta2 * g) * g;
  return m / (sqrtf(v) + s.eps) + s.weight_decay * p;
}

// The trust ratio of one parameter from its squared norms (summed in double over its pieces, in
// rank order): sqrt in double, the ratio rounded once to float, then clamped in float. 1 when
// either norm is 0 (FusedLamb's rule). Host only.
inline float lamb_trust(double p_squared, double u_squared, const LambStep& s) {
  if (p_squared == 0.0 || u_squared == 0.0) return 1.0f;
  float t = static_cast<float>(std::sqrt(p_squared) / std::sqrt(u_squared));
  if (t > s.max_coeff) t = s.max_coeff;
  if (t < s.min_coeff) t = s.min_coeff;
  return t;  // NaN (a non-finite norm) stays NaN: the guarded update below then refuses it
}

// The second pass over one element: rate = step_size * trust (one float product, per parameter).
// Kept only if the new p, m and v are all finite; else the element keeps its values and this
// returns true (as adam_element_guarded).
ZERO_HD bool lamb_element_guarded(float& p, float& m, float& v, float g_raw, float rate,
                                  const LambStep& s) {
  float m1 = m, v1 = v;
  const float u = lamb_direction(p, m1, v1, g_raw, s);
  const float p1 = p - rate * u;
  const bool bad = !is_finite(p1) | !is_finite(m1) | !is_finite(v1);
  p = bad ? p : p1;
  m = bad ? m : m1;
  v = bad ? v : v1;
  return bad;
}

}  // namespace zero::kernels
