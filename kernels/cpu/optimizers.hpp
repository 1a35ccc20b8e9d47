// The Lion, LAMB and Muon updates of one fp32 shard on the CPU (math: kernels/lion_math.hpp,
// kernels/lamb_math.hpp, kernels/muon_math.hpp). Adam's loop is kernels/cpu/adamw.hpp.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/lamb_math.hpp"
#include "kernels/lion_math.hpp"
#include "kernels/muon_math.hpp"
#include "precision/bf16.hpp"
#include "precision/fp16.hpp"

namespace zero::kernels::cpu {

// For every i, lion_element_guarded(p[i], m[i], g[i], step), and in the overloads with `out`,
// out[i] = RNE(new p[i]) (the 16-bit copy the all-gather sends). Returns the index of the first
// element whose update was non-finite (it kept its old p and m), or -1. Spans must have the same
// length (zero::Error otherwise) and must not overlap.
std::int64_t lion_step(std::span<float> p, std::span<float> m, std::span<const float> g,
                       const LionStep& step);
std::int64_t lion_step(std::span<float> p, std::span<float> m, std::span<const float> g,
                       const LionStep& step, std::span<bf16> out);
std::int64_t lion_step(std::span<float> p, std::span<float> m, std::span<const float> g,
                       const LionStep& step, std::span<fp16> out);

// LAMB's first pass: u[i] = lamb_direction(p[i], copies of m[i] and v[i], g[i]); nothing else is
// written. The caller takes the squared norms of p's and u's pieces (kernels/cpu/norm.hpp).
void lamb_direction(std::span<const float> p, std::span<const float> m, std::span<const float> v,
                    std::span<const float> g, const LambStep& step, std::span<float> u);

// LAMB's second pass over one parameter's piece (one trust ratio): for every i,
// lamb_element_guarded(p[i], m[i], v[i], g[i], rate, step), rate = step_size * trust, and the
// 16-bit copy as lion_step. Returns the first non-finite element's index, or -1.
std::int64_t lamb_apply(std::span<float> p, std::span<float> m, std::span<float> v,
                        std::span<const float> g, float rate, const LambStep& step);
std::int64_t lamb_apply(std::span<float> p, std::span<float> m, std::span<float> v,
                        std::span<const float> g, float rate, const LambStep& step,
                        std::span<bf16> out);
std::int64_t lamb_apply(std::span<float> p, std::span<float> m, std::span<float> v,
                        std::span<const float> g, float rate, const LambStep& step,
                        std::span<fp16> out);

// Muon on one whole rows x cols matrix (row-major): the momentum of every element
// (muon_momentum), Newton-Schulz on the direction (newton_schulz), then muon_apply_guarded of
// every element, and the 16-bit copy as lion_step. `scratch` holds muon_scratch_floats(rows,
// cols) floats. Returns the first non-finite element's index (it kept its p and m), or -1.
std::int64_t muon_step(std::span<float> p, std::span<float> m, std::span<const float> g,
                       std::int64_t rows, std::int64_t cols, const MuonStep& step,
                       std::span<float> scratch);
std::int64_t muon_step(std::span<float> p, std::span<float> m, std::span<const float> g,
                       std::int64_t rows, std::int64_t cols, const MuonStep& step,
                       std::span<float> scratch, std::span<bf16> out);
std::int64_t muon_step(std::span<float> p, std::span<float> m, std::span<const float> g,
                       std::int64_t rows, std::int64_t cols, const MuonStep& step,
                       std::span<float> scratch, std::span<fp16> out);

// Keller Jordan's quintic Newton-Schulz iteration, in fp32, on x (k x n, k <= n, row-major),
// in place: x <- x / f32(||x||_F + 1e-7) (the norm's squares summed in double, in order), then
// kMuonSteps times A = x x^T, B = b A + c A A, x = a x + B x. Every product sums its terms in
// index order, one float multiply and one float add at a time (no FMA, no reassociation): the
// same bits on every run and any rank that computes it, and what the Python reference
// (tests/zero/make_optimizer_reference.py) reproduces exactly. `work` holds n k + 3 k^2 + n k
// floats.
void newton_schulz(float* x, std::int64_t k, std::int64_t n, float* work);

}  // namespace zero::kernels::cpu
