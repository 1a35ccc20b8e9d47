// The counter-based generator behind stochastic rounding: Philox4x32-10 as published.
#include <bit>
#include <catch2/catch.hpp>

#include "precision/random.hpp"

using namespace zero;

TEST_CASE("Philox4x32-10 reproduces the Random123 known-answer vectors", "[random]") {
  // Random123's kat_vectors, "philox4x32 10" lines: counter (4 words), key (2 words), result.
  struct Kat {
    Philox4x32Counter ctr;
    std::uint32_t k0, k1;
    std::uint32_t out[4];
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const Philox4x32Counter r = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) CHECK(r.v[i] == k.out[i]);
  }
}

TEST_CASE("random_bits(seed, index) is the first Philox word for counter (index, 0) and key seed",
          "[random]") {
  const std::uint64_t seed = 0xa4093822299f31d0ull, index = 0x85a308d3243f6a88ull;
  const Philox4x32Counter r =
      philox4x32_10({{0x243f6a88, 0x85a308d3, 0, 0}}, 0x299f31d0, 0xa4093822);
  CHECK(random_bits(seed, index) == r.v[0]);
  CHECK(random_bits(0, 0) != random_bits(0, 1));
  CHECK(random_bits(0, 0) != random_bits(1, 0));
  CHECK(random_bits(0, 1) != random_bits(0, 1ull << 32));  // the index's high word counts
  CHECK(random_bits(1, 0) != random_bits(1ull << 32, 0));  // so does the seed's
}

TEST_CASE("random_bits over consecutive indices has every bit set about half the time",
          "[random]") {
  // 2^20 draws: each bit's count is Binomial(n, 1/2), standard deviation 512; 5 of them is 2560.
  constexpr int n = 1 << 20;
  int ones[32] = {};
  long long popcount = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint32_t r = random_bits(12345, static_cast<std::uint64_t>(i));
    for (int b = 0; b < 32; ++b) ones[b] += (r >> b) & 1;
    popcount += std::popcount(r);
  }
  for (int b = 0; b < 32; ++b) {
    INFO("bit " << b);
    CHECK(std::abs(ones[b] - n / 2) < 2560);
  }
  CHECK(popcount == Approx(16.0 * n).epsilon(0.001));
}
