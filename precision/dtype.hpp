// DType: the element types that buffers, collectives and checkpoints speak about.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zero {

enum class DType : std::uint8_t { f32, bf16, f16, f64, i32, i64, u8 };

constexpr std::size_t size_of(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

constexpr std::string_view name_of(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    case DType::f64: return "fp64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::f16 || t == DType::f64;
}

}  // namespace zero
