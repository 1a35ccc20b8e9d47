// The deterministic squared L2 norm of an fp32 shard on the CPU (order: kernels/norm_order.hpp).
#pragma once

#include <span>

#include "precision/simd.hpp"

namespace zero::kernels::cpu {

// `path` picks the compiled variant of the loop (zero::SimdPath, precision/simd.hpp); every path
// returns the same bits, so it matters only for speed and for tests that compare the paths.

// Sum of x[i]² in double, in the fixed tree of kernels/norm_order.hpp: bitwise the same on every
// call, on every SimdPath, and as kernels::cuda::squared_norm on the GPU. The global gradient
// norm is then sqrt of the all-reduced sum of the ranks' results.
double squared_norm(std::span<const float> x, SimdPath path = best_path());

}  // namespace zero::kernels::cpu
