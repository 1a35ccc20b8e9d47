// What the reference models share (internal to models/): a counter-based hash for weights and
// data that every rank computes alike, and the copies between an engine view and fp32.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "kernels/cpu/elementwise.hpp"
#include "zero/zero.hpp"

namespace zero::models::detail {

// splitmix64's finaliser: the value depends only on x, so (seed, stream, index) hashed through
// it gives every rank and every rank count the same weights and samples.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline std::uint64_t hash(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return mix(mix(seed * 0x100000001b3ull + stream) ^ index);
}

// A param or gradient view (fp32, bf16 or fp16) widened into `out`, and `in` narrowed into one
// (round to nearest even). `what` names the model in the error for another dtype.
inline void view_to_f32(const TensorView& t, float* out, const char* what) {
  switch (t.dtype) {
    case DType::f32:
      kernels::cpu::copy_bytes(out, t.data, static_cast<std::size_t>(t.numel) * 4);
      break;
    case DType::bf16:
      kernels::cpu::cast(t.as<const bf16>(), std::span(out, t.numel));
      break;
    case DType::f16:
      kernels::cpu::cast(t.as<const fp16>(), std::span(out, t.numel));
      break;
    default:
      throw Error(cat(what, " parameters must be fp32, bf16 or fp16"));
  }
}
inline void f32_to_view(const float* in, const TensorView& t, const char* what) {
  switch (t.dtype) {
    case DType::f32:
      kernels::cpu::copy_bytes(t.data, in, static_cast<std::size_t>(t.numel) * 4);
      break;
    case DType::bf16:
      kernels::cpu::cast(std::span(in, t.numel), t.as<bf16>());
      break;
    case DType::f16:
      kernels::cpu::cast(std::span(in, t.numel), t.as<fp16>());
      break;
    default:
      throw Error(cat(what, " gradients must be fp32, bf16 or fp16"));
  }
}

}  // namespace zero::models::detail
