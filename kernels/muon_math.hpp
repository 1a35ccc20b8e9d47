// Muon's math (docs/optimizers.md): the per-element momentum and update, the one definition the
// CPU loop (kernels/cpu/optimizers.cpp) and any device port call, the per-matrix scalars
// (MuonStep) the host computes once per step, and the quintic Newton-Schulz iteration's sizes.
// The source followed is torch.optim.Muon (PyTorch 2.9), itself Keller Jordan's Muon
// (github.com/KellerJordan/Muon): EMA momentum, Nesterov blend, 5 quintic steps with
// (a, b, c) = (3.4445, -4.7750, 2.0315) on X / (||X||_F + 1e-7), decoupled weight decay with the
// unscaled lr, and the update scaled by max(1, rows/cols)^0.5 ("original") or by Moonshot's
// 0.2 sqrt(max(rows, cols)) ("match_rms_adamw", "Muon is Scalable for LLM Training", 2025).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "base/error.hpp"
#include "kernels/elementwise_math.hpp"
#include "precision/hd.hpp"

namespace zero::kernels {

// The update's shape scale: Keller Jordan's (torch.optim.Muon's default) or Moonshot's.
enum class MuonScale { original, match_rms_adamw };

// Keller Jordan's quintic coefficients and step count (torch.optim.Muon's defaults).
inline constexpr float kMuonA = 3.4445f, kMuonB = -4.7750f, kMuonC = 2.0315f;
inline constexpr int kMuonSteps = 5;
inline constexpr double kMuonEps = 1e-7;  // X / (||X||_F + eps)

struct MuonHyper {
  double momentum = 0.95;      // the EMA's decay (torch.optim.Muon's default)
  bool nesterov = true;        // the update blends the gradient into the new momentum
  double weight_decay = 0.0;   // decoupled: p <- p * (1 - lr * wd), lr before the shape scale
  MuonScale scale = MuonScale::original;
};

// One matrix's per-step scalars, computed in double and rounded once to float.
struct MuonStep {
  float grad_scale = 1.0f;           // g <- g_raw * grad_scale (1/loss scale x mean x clip)
  float beta = 0.95f, one_minus_beta = 0.05f;
  bool nesterov = true;
  float decay = 1.0f;                // 1 - lr * wd
  float rate = 0.0f;                 // lr x the shape scale
};

// The shape scale of a rows x cols matrix.
inline double muon_shape_scale(MuonScale s, std::int64_t rows, std::int64_t cols) {
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  return s == MuonScale::original ? std::sqrt(std::max(1.0, r / c)) : 0.2 * std::sqrt(std::max(r, c));
}

inline MuonStep make_muon_step(const MuonHyper& h, double lr, std::int64_t rows, std::int64_t cols,
                               float grad_scale = 1.0f) {
  if (!(h.momentum >= 0.0 && h.momentum < 1.0))
    throw Error(cat("Muon momentum must lie in [0, 1), got ", h.momentum),
                {std::nullopt, std::nullopt, "optimizer.params.momentum"});
  if (!std::isfinite(lr) || !std::isfinite(grad_scale))
    throw Error(cat("Muon: lr (", lr, ") and grad_scale (", grad_scale, ") must be finite"));
  MuonStep s;
  s.grad_scale = grad_scale;
  s.beta = static_cast<float>(h.momentum);
  s.one_minus_beta = static_cast<float>(1.0 - h.momentum);
  s.nesterov = h.nesterov;
  s.decay = static_cast<float>(1.0 - lr * h.weight_decay);
  s.rate = static_cast<float>(lr * muon_shape_scale(h.scale, rows, cols));
  return s;
}

// The momentum of one element and the direction Newton-Schulz orthogonalises, every operation
// one IEEE float operation (no FMA):
//
//   g = g_raw * grad_scale
//   m' = beta * m + (1 - beta) * g            (torch: buf.lerp_(g, 1 - beta))
//   u = nesterov ? (1 - beta) * g + beta * m' : m'     (torch: g.lerp_(buf, beta))
//
// torch's lerp rounds differently in the last bit; zero writes the blend out as above.
ZERO_HD float muon_momentum(float m, float g_raw, const MuonStep& s, float& u) {
  const float g = g_raw * s.grad_scale;
  const float m1 = s.beta * m + s.one_minus_beta * g;
  u = s.nesterov ? s.one_minus_beta * g + s.beta * m1 : m1;
  return m1;
}

// The update of one element by its orthogonalised direction o, kept only if the new p and m are
// finite; otherwise the element keeps both and this returns true (the step is then refused).
ZERO_HD bool muon_apply_guarded(float& p, float& m, float m_new, float o, const MuonStep& s) {
  const float p1 = p * s.decay - s.rate * o;
  const bool bad = !is_finite(p1) | !is_finite(m_new);
  p = bad ? p : p1;
  m = bad ? m : m_new;
  return bad;
}

// Floats of scratch muon_step needs for a rows x cols matrix (n = rows x cols, k = min):
// the new momentum, the direction, X, X^T and the next X (5n), and X X^T, its square and
// b A + c A A (3k^2).
inline std::int64_t muon_scratch_floats(std::int64_t rows, std::int64_t cols) {
  const std::int64_t k = std::min(rows, cols);
  return 5 * rows * cols + 3 * k * k;
}

// Newton-Schulz's FLOPs on a rows x cols matrix, m = min, n = max: per step X X^T (2 m^2 n),
// A A (2 m^3), B X (2 m^2 n), and 3 element-wise passes; the time model counts these.
inline double muon_ns_flops(std::int64_t rows, std::int64_t cols) {
  const double m = static_cast<double>(std::min(rows, cols));
  const double n = static_cast<double>(std::max(rows, cols));
  return kMuonSteps * (4.0 * m * m * n + 2.0 * m * m * m + 3.0 * m * n);
}

}  // namespace zero::kernels
