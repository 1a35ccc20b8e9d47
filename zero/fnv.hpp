// FNV-1a, 64 bits: the digest the engine compares across ranks (the layout, the order of
// reduce_grads calls) and prints (master_checksum). Internal to zero/.
#pragma once

#include <cstdint>

namespace zero {

struct Fnv1a {
  std::uint64_t value = 1469598103934665603ull;  // the offset basis
  // Mixes the low `bytes` bytes of x, least significant first.
  void add(std::uint64_t x, int bytes = 8) {
    for (int i = 0; i < bytes; ++i) value = (value ^ ((x >> (8 * i)) & 0xff)) * 1099511628211ull;
  }
};

}  // namespace zero
