// CPU element-wise kernels over flat spans: casts, accumulate, unscale, finite check, fill. Each
// splits across the calling thread's pool (kernels/cpu/thread_pool.hpp) in fixed blocks, with
// results bitwise independent of the thread count.
#pragma once

#include <cstddef>
#include <span>

#include "precision/bf16.hpp"
#include "precision/fp16.hpp"
#include "precision/simd.hpp"

namespace zero::kernels::cpu {

// `path` picks the compiled variant of the loop (zero::SimdPath, precision/simd.hpp); every path
// returns the same bits, so it matters only for speed and for tests that compare the paths.

// dst[i] = src[i] converted: to 16 bits by round-to-nearest-even, to fp32 exactly.
// Lengths must match (zero::Error otherwise).
void cast(std::span<const float> src, std::span<bf16> dst, SimdPath path = best_path());
void cast(std::span<const float> src, std::span<fp16> dst, SimdPath path = best_path());
void cast(std::span<const bf16> src, std::span<float> dst, SimdPath path = best_path());
void cast(std::span<const fp16> src, std::span<float> dst, SimdPath path = best_path());

// acc[i] += float(g[i]): the gradient is widened exactly, then one fp32 add (the micro-batch
// accumulation buffer stays fp32 whatever the gradient dtype; see anchors: bf16 accumulation
// diverges). Lengths must match.
void accumulate(std::span<float> acc, std::span<const float> g, SimdPath path = best_path());
void accumulate(std::span<float> acc, std::span<const bf16> g, SimdPath path = best_path());
void accumulate(std::span<float> acc, std::span<const fp16> g, SimdPath path = best_path());

// x[i] *= scale for every i (the whole span, even after a non-finite value, so that the work and
// the result never depend on where an overflow sits). Returns true if any scaled value is inf or
// NaN; the check is made after scaling (kernels/elementwise_math.hpp says why).
bool unscale(std::span<float> x, float scale, SimdPath path = best_path());

// True if no element is inf or NaN. Stops early (per chunk of 4096 elements) once one is found.
bool all_finite(std::span<const float> x, SimdPath path = best_path());
bool all_finite(std::span<const bf16> x, SimdPath path = best_path());
bool all_finite(std::span<const fp16> x, SimdPath path = best_path());

// x[i] = value.
void fill(std::span<float> x, float value);
// All bits zero (+0.0 in every dtype).
void zero(std::span<float> x);
void zero(std::span<bf16> x);
void zero(std::span<fp16> x);

// memcpy(dst, src, bytes) and memset(dst, 0, bytes), split across the pool: the copies the
// engine makes between its buffers (gradients into buckets, params into the model) are as large
// as the model. Overlapping ranges other than dst == src are not allowed (as for memcpy).
void copy_bytes(void* dst, const void* src, std::size_t bytes);
void zero_bytes(void* dst, std::size_t bytes);

}  // namespace zero::kernels::cpu
