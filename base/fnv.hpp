// FNV-1a, 64 bits: the digest the engine compares across ranks (the layout, the order of
// reduce_grads calls) and prints (master_checksum). On the ground floor (base/) with the error type, so that every layer may digest with it..
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace zero {

struct Fnv1a {
  std::uint64_t value = 1469598103934665603ull;  // the offset basis
  // Mixes the low `bytes` bytes of x, least significant first.
  void add(std::uint64_t x, int bytes = 8) {
    for (int i = 0; i < bytes; ++i) value = (value ^ ((x >> (8 * i)) & 0xff)) * 1099511628211ull;
  }
  // Mixes `bytes` bytes of memory 8 at a time (the last few one by one): the same step on 64-bit
  // words, 8x fewer of them than add(), for a digest of a large buffer compared between ranks
  // and never printed (init_params' per-param digests).
  void add_words(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      std::uint64_t word;
      std::memcpy(&word, p + i, sizeof word);
      value = (value ^ word) * 1099511628211ull;
    }
    for (; i < bytes; ++i) add(p[i], 1);
  }
};

}  // namespace zero
