// Host-callable CUDA kernels over spans of DEVICE memory. Each call only queues work on `stream`
// and returns; none synchronises the host, so a step stays one uninterrupted stream of work.
// The per-element math is the same header code the CPU loops run (kernels/*_math.hpp), so for
// every finite input the results are bitwise those of kernels::cpu (NaN payloads may differ).
#pragma once

#include <cstddef>
#include <span>

#include "kernels/adamw_math.hpp"
#include "kernels/cuda/device.hpp"
#include "precision/bf16.hpp"
#include "precision/fp16.hpp"

namespace zero::kernels::cuda {

// Fused Adam/AdamW update of a shard, as kernels::cpu::adamw_step: one pass reading p, m, v, g
// and writing p, m, v and (in the `out` overloads) the 16-bit RNE copy of the new p.
// An element whose update is non-finite keeps its old p, m, v (adam_element_guarded) and its
// index i is folded into *first_bad (a device u64, may be null) by atomicMin; it is never reset
// here: the caller sets it to ULLONG_MAX (all bits one) for "none".
// Spans must be equally long and must not overlap (zero::Error otherwise for the lengths).
void adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, const AdamStep& step, StreamRef stream,
                unsigned long long* first_bad = nullptr);
void adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, const AdamStep& step, std::span<bf16> out,
                StreamRef stream, unsigned long long* first_bad = nullptr);
void adamw_step(std::span<float> p, std::span<float> m, std::span<float> v,
                std::span<const float> g, const AdamStep& step, std::span<fp16> out,
                StreamRef stream, unsigned long long* first_bad = nullptr);

// dst[i] = src[i] converted (16-bit: round to nearest even; to fp32: exact).
void cast(std::span<const float> src, std::span<bf16> dst, StreamRef stream);
void cast(std::span<const float> src, std::span<fp16> dst, StreamRef stream);
void cast(std::span<const bf16> src, std::span<float> dst, StreamRef stream);
void cast(std::span<const fp16> src, std::span<float> dst, StreamRef stream);

// acc[i] += float(g[i]) (exact widening, one fp32 add).
void accumulate(std::span<float> acc, std::span<const float> g, StreamRef stream);
void accumulate(std::span<float> acc, std::span<const bf16> g, StreamRef stream);
void accumulate(std::span<float> acc, std::span<const fp16> g, StreamRef stream);

// x[i] *= scale; sets *overflow (a device int) to 1 if any scaled value is inf or NaN. It never
// clears the flag: the caller zeroes it once per step (zero_flag), and every buffer unscaled in
// that step ORs into it, so one flag and one small copy answer "skip this step?" without any
// host synchronisation inside the step.
void unscale(std::span<float> x, float scale, int* overflow, StreamRef stream);

// Sets *nonfinite (a device int) to 1 if any element is inf or NaN; never clears it.
void check_finite(std::span<const float> x, int* nonfinite, StreamRef stream);
void check_finite(std::span<const bf16> x, int* nonfinite, StreamRef stream);
void check_finite(std::span<const fp16> x, int* nonfinite, StreamRef stream);

// *flag = 0 on the device, in stream order.
void zero_flag(int* flag, StreamRef stream);

// x[i] = value; zero(): all bits zero (+0.0).
void fill(std::span<float> x, float value, StreamRef stream);
void zero(std::span<float> x, StreamRef stream);
void zero(std::span<bf16> x, StreamRef stream);
void zero(std::span<fp16> x, StreamRef stream);

// Doubles of device scratch that squared_norm needs for n elements (one per 1024-element block).
std::size_t squared_norm_scratch(std::size_t n);

// *result (a device double) = the sum of x[i]² in the fixed order of kernels/norm_order.hpp,
// bitwise equal to kernels::cpu::squared_norm(x). Two passes and no float atomics: block sums
// into `scratch`, then the fixed tree over them. scratch.size() >= squared_norm_scratch(x.size())
// (zero::Error otherwise); its contents are overwritten.
void squared_norm(std::span<const float> x, double* result, std::span<double> scratch,
                  StreamRef stream);

}  // namespace zero::kernels::cuda
