// The Adam/AdamW update of one element: the one definition that the CPU loop and the CUDA kernel
// both call, plus the per-step scalars (AdamStep) that the host computes once per step.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

#include "kernels/elementwise_math.hpp"
#include "precision/bits.hpp"
#include "precision/hd.hpp"
#include "base/error.hpp"

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
  float grad_scale = 1.0f;    // g <- g*grad_scale first (1/loss_scale * clip coefficient)
  float weight_decay = 0.0f;  // adam_l2: wd in g + wd*p
  float decay = 1.0f;         // adamw: 1 - lr*wd; 1 for adam_l2
  // m.lerp_(g, w), w = 1 - beta1, as ATen's lerp_vec computes it: fma(w, g - m, m) for
  // |w| < 0.5, else fma(w - 1, g - m, g) (the value of g - (g - m)*(1 - w), rounded once).
  float lerp_weight = 0.1f;       // w
  float lerp_coeff = 0.1f;        // w, or w - 1 (exact) for |w| >= 0.5
  std::uint32_t lerp_on_m = ~0u;  // all ones: the fma adds to m (|w| < 0.5); 0: to g
  float beta2 = 0.999f;
  float one_minus_beta2 = 0.001f;
  float bc2_sqrt = 1.0f;  // sqrt(1 - beta2^t); 1 without bias correction
  float eps = 1e-8f;
  float step_size = 0.0f;       // lr / (1 - beta1^t); lr without bias correction
  float neg_step_size = -0.0f;  // -step_size: addcdiv's value
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
  s.lerp_weight = static_cast<float>(1.0 - h.beta1);
  const bool small = std::fabs(s.lerp_weight) < 0.5f;
  s.lerp_coeff = small ? s.lerp_weight : s.lerp_weight - 1.0f;
  s.lerp_on_m = small ? ~0u : 0u;
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.eps = static_cast<float>(h.eps);
  s.step_size = static_cast<float>(lr / bc1);
  s.neg_step_size = -s.step_size;
  return s;
}

// One element of the update, in PyTorch's order of IEEE float operations: the order of ATen's
// CPU kernels for torch.optim.AdamW(fused=True) (aten/src/ATen/native/cpu/FusedAdamKernel.cpp)
// and, but for its sqrt, of the default single-tensor path (torch/optim/adam.py,
// _single_tensor_adam). Each operation rounds to nearest even once; fma(a, b, c) is a*b + c
// rounded once. The build keeps the compilers from contracting anything else into an FMA
// (-ffp-contract=off for g++, -fmad=false for nvcc), so every FMA is the explicit fmaf below,
// which both sides compute exactly ('/' and sqrtf are correctly rounded on both as well): host
// and device produce the same bits.
//
//   g  = g_raw * grad_scale
//   adam_l2: g = fma(wd, p, g)               grad.add(param, alpha=wd): ATen's vector add is an fma
//   adamw:   p = p * decay                   param.mul_(1 - lr*wd)
//   m  = fma(w, g - m, m)                    exp_avg.lerp_(grad, w = 1 - beta1), |w| < 0.5
//        fma(w - 1, g - m, g)                the same for |w| >= 0.5 (ATen's lerp_vec)
//   v  = fma((1 - beta2) * g, g, v * beta2)  exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
//   d  = sqrt(v) / sqrt(bc2) + eps           denom
//   p  = p + (-step_size * m) / d            param.addcdiv_(exp_avg, denom, value=-step_size)
//
// ATen has no explicit FMA in its addcmul: GCC forms it there (its default -ffp-contract=fast),
// in the fused kernel's vector loop and in the single-tensor ops alike. The order above was
// measured against torch 2.15 (x86-64 wheel, AVX-512 kernels): tests/kernels/test_adamw.cpp
// compares with a committed fixture of torch's results (bench/peers/make_adamw_fixture.py).
// Where zero and torch differ:
// - grad_scale multiplies; the fused kernel divides by its grad_scale (the same bits for a
//   power of two, no under- or overflow);
// - the single-tensor path (the default on the CPU) takes sqrt through torch.sqrt, which ATen
//   sends to MKL's vsSqrt: it returned a value 1 ulp from the correctly rounded sqrt for about
//   15% of inputs, so that path's p differs from fused=True's (and zero's) in some elements;
// - the fused kernel's scalar remainder loop (the last numel % 16 elements of a tensor, with
//   torch's AVX-512 kernels)
//   computes exp_avg_sq otherwise, now and then 1 ulp from its own vector loop.
//
// The mode is a template parameter so that a CPU loop can choose it once, outside the loop:
// tested per element, GCC 12 sinks the fmaf into the adam_l2 branch, cannot if-convert the call
// and leaves the loop scalar. adam_element below tests it per element, for callers (the CUDA
// kernel) that do not mind. adamw never computes wd*p, whose 0*p would be NaN for an infinite p.
// The lerp's two forms differ only in the fma's coefficient and addend; the addend is chosen by
// a bit mask (lerp_on_m, uniform across a launch), as a select `small ? m : g` keeps GCC 12 from
// vectorising the loop.
template <AdamMode Mode>
ZERO_HD void adam_element_in(float& p, float& m, float& v, float g_raw, const AdamStep& s) {
  float g = g_raw * s.grad_scale;
  if constexpr (Mode == AdamMode::adam_l2) {
    g = fmaf(s.weight_decay, p, g);
  } else {
    p = p * s.decay;
  }
  const float base = float_of((bits_of(m) & s.lerp_on_m) | (bits_of(g) & ~s.lerp_on_m));
  m = fmaf(s.lerp_coeff, g - m, base);
  v = fmaf(s.one_minus_beta2 * g, g, v * s.beta2);
  const float d = sqrtf(v) / s.bc2_sqrt + s.eps;
  p = p + (s.neg_step_size * m) / d;
}

ZERO_HD void adam_element(float& p, float& m, float& v, float g_raw, const AdamStep& s) {
  if (s.mode == AdamMode::adam_l2)
    adam_element_in<AdamMode::adam_l2>(p, m, v, g_raw, s);
  else
    adam_element_in<AdamMode::adamw>(p, m, v, g_raw, s);
}

// The update the CPU loop and the CUDA kernel run: adam_element on copies, kept only if the new
// p, m and v are all finite. Otherwise the element keeps its values from before the step and
// this returns true, so a non-finite value never enters the master weights or the moments, and
// the caller can refuse the step (zero/optimizer_step.cpp). The test is three bit masks and three
// selects on values already in registers: no extra memory traffic, so the check is free in a
// loop bound by memory bandwidth.
// adam_element_guarded_in<Mode> is the same for a mode the caller fixed outside its loop.
template <AdamMode Mode>
ZERO_HD bool adam_element_guarded_in(float& p, float& m, float& v, float g_raw, const AdamStep& s) {
  float p1 = p, m1 = m, v1 = v;
  adam_element_in<Mode>(p1, m1, v1, g_raw, s);
  const bool bad = !is_finite(p1) | !is_finite(m1) | !is_finite(v1);
  p = bad ? p : p1;
  m = bad ? m : m1;
  v = bad ? v : v1;
  return bad;
}

ZERO_HD bool adam_element_guarded(float& p, float& m, float& v, float g_raw, const AdamStep& s) {
  return s.mode == AdamMode::adam_l2 ? adam_element_guarded_in<AdamMode::adam_l2>(p, m, v, g_raw, s)
                                     : adam_element_guarded_in<AdamMode::adamw>(p, m, v, g_raw, s);
}

}  // namespace zero::kernels
