// The Lion and LAMB updates of one fp32 shard on the CPU (math: kernels/lion_math.hpp,
// kernels/lamb_math.hpp). Adam's loop is kernels/cpu/adamw.hpp.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/lamb_math.hpp"
#include "kernels/lion_math.hpp"
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

}  // namespace zero::kernels::cpu
