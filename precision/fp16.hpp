// fp16: IEEE 754 binary16 storage as a uint16_t bit pattern.
#pragma once
#include <cstdint>
namespace zero {
struct fp16 {
  std::uint16_t bits = 0;
};
}  // namespace zero
