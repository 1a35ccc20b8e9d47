// bf16: bfloat16 storage (1 sign, 8 exponent, 7 mantissa bits) as a uint16_t bit pattern.
#pragma once
#include <cstdint>
namespace zero {
struct bf16 {
  std::uint16_t bits = 0;
};
}  // namespace zero
