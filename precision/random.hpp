// Counter-based random numbers for stochastic rounding: Philox4x32-10 (Salmon et al., SC'11, the
// generator behind cuRAND's and PyTorch's default), a pure function of (key, counter), so that
// element i of a tensor gets the same random bits on every path, CPU or GPU, in any order.
#pragma once

#include <cstdint>

#include "precision/hd.hpp"

namespace zero {

struct Philox4x32Counter {
  std::uint32_t v[4];
};

namespace detail {
inline constexpr std::uint32_t philox_m0 = 0xd2511f53u;
inline constexpr std::uint32_t philox_m1 = 0xcd9e8d57u;
inline constexpr std::uint32_t philox_w0 = 0x9e3779b9u;  // golden ratio
inline constexpr std::uint32_t philox_w1 = 0xbb67ae85u;  // sqrt(3) - 1

ZERO_HD std::uint32_t mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi) {
#if defined(__CUDA_ARCH__)
  hi = __umulhi(a, b);
  return a * b;
#else
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  return static_cast<std::uint32_t>(p);
#endif
}
}  // namespace detail

// Ten rounds of Philox4x32 on `ctr` with key (k0, k1). Checked against the Random123 known-answer
// vectors in tests/precision/test_random.cpp.
ZERO_HD Philox4x32Counter philox4x32_10(Philox4x32Counter ctr, std::uint32_t k0, std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, hi1;
    const std::uint32_t lo0 = detail::mulhilo(detail::philox_m0, ctr.v[0], hi0);
    const std::uint32_t lo1 = detail::mulhilo(detail::philox_m1, ctr.v[2], hi1);
    ctr = Philox4x32Counter{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += detail::philox_w0;
    k1 += detail::philox_w1;
  }
  return ctr;
}

// The 32 random bits of element `index` under `seed`: the first word of Philox4x32-10 with the
// seed as key and the index as counter. The other three words are left unused so that every
// element costs one call and no path has to agree on how elements share a call.
ZERO_HD std::uint32_t random_bits(std::uint64_t seed, std::uint64_t index) {
  const Philox4x32Counter ctr{
      {static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0u, 0u}};
  return philox4x32_10(ctr, static_cast<std::uint32_t>(seed),
                       static_cast<std::uint32_t>(seed >> 32))
      .v[0];
}

}  // namespace zero
