// The fused Adam/AdamW update of one fp32 shard on the CPU (math: kernels/adamw_math.hpp).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/adamw_math.hpp"
#include "precision/bf16.hpp"
#include "precision/fp16.hpp"
#include "precision/simd.hpp"

namespace zero::kernels::cpu {

// `path` picks the compiled variant of the loop (zero::SimdPath, precision/simd.hpp); every path
// returns the same bits, so it matters only for speed and for tests that compare the paths.

// One pass over the shard: for every i, adam_element_guarded(p[i], m[i], v[i], g[i], step), and,
// in the overloads with `out`, out[i] = RNE(new p[i]): the 16-bit copy that the all-gather sends,
// never a second pass over memory (bf16: in the same vectorised loop; fp16: chunk by chunk while
// the new p is still in L1). The bits equal torch.optim.AdamW/Adam(fused=True) on the CPU
// (kernels/adamw_math.hpp says how; tests/kernels/test_adamw.cpp checks it against a fixture).
// Returns the index of the first element whose update was non-finite, or -1; every such element
// kept its old p, m, v.
// All spans must have the same length (zero::Error otherwise) and must not overlap.
std::int64_t adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                        std::span<const float> g, const AdamStep& step,
                        SimdPath path = best_path());
std::int64_t adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                        std::span<const float> g, const AdamStep& step, std::span<bf16> out,
                        SimdPath path = best_path());
std::int64_t adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                        std::span<const float> g, const AdamStep& step, std::span<fp16> out,
                        SimdPath path = best_path());

}  // namespace zero::kernels::cpu
