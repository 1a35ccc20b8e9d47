// Bulk conversions between float and the 16-bit storage types: round-to-nearest-even and
// stochastic rounding over spans, vectorised with AVX2/AVX-512 and chosen at run time.
#pragma once

#include <cstdint>
#include <span>

#include "precision/bf16.hpp"
#include "precision/fp16.hpp"
#include "precision/simd.hpp"

namespace zero {

// Every function below returns, element for element, the same bits as the scalar function it
// names (to_bf16, to_fp16, to_float, to_bf16_sr, to_fp16_sr) on every path, whatever the
// caller's floating-point environment (MXCSR's FTZ/DAZ, rounding mode, exception masks).
// The spans must have equal sizes and must not overlap; a mismatch, or a path this machine
// cannot run, throws zero::Error. With no path named, the widest available one runs.

// Round to nearest, ties to even.
void convert(std::span<const float> src, std::span<bf16> dst);
void convert(std::span<const float> src, std::span<fp16> dst);
void convert(std::span<const float> src, std::span<bf16> dst, SimdPath path);
void convert(std::span<const float> src, std::span<fp16> dst, SimdPath path);

// Exact widening.
void convert(std::span<const bf16> src, std::span<float> dst);
void convert(std::span<const fp16> src, std::span<float> dst);
void convert(std::span<const bf16> src, std::span<float> dst, SimdPath path);
void convert(std::span<const fp16> src, std::span<float> dst, SimdPath path);

// Stochastic rounding: dst[i] = to_*_sr(src[i], random_bits(seed, offset + i)). `offset` is the
// index of src[0] in the whole tensor, so that a tensor converted in pieces, or sharded across
// ranks, gets the same result as converted at once.
void convert_sr(std::span<const float> src, std::span<bf16> dst, std::uint64_t seed,
                std::uint64_t offset);
void convert_sr(std::span<const float> src, std::span<fp16> dst, std::uint64_t seed,
                std::uint64_t offset);
void convert_sr(std::span<const float> src, std::span<bf16> dst, std::uint64_t seed,
                std::uint64_t offset, SimdPath path);
void convert_sr(std::span<const float> src, std::span<fp16> dst, std::uint64_t seed,
                std::uint64_t offset, SimdPath path);

}  // namespace zero
