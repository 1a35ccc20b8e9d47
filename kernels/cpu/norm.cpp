// CPU implementation of the fixed-order squared norm (kernels/norm_order.hpp defines the tree).
#include "kernels/cpu/norm.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/norm_order.hpp"

namespace zero::kernels::cpu {
namespace {

constexpr std::size_t kHalf = kNormBlock / 2;

// One level of the step-2 tree, h known at compile time so each loop is a fixed-length run of
// packed double adds with no alias checks or remainder tests.
template <std::size_t H>
ZERO_LOOP inline void halve(double* __restrict a) {
  for (std::size_t i = 0; i < H; ++i) a[i] = a[i] + a[i + H];
  if constexpr (H > 1) halve<H / 2>(a);
}

// Step 2 of the order: one full block of 1024 floats. The first tree level (h = 512) is fused
// with the leaves; every later level is a unit-stride loop the vectoriser turns into packed
// double adds, which are the same adds in the same pairs.
ZERO_LOOP inline double block_sum(const float* __restrict x, double* __restrict a) {
  for (std::size_t i = 0; i < kHalf; ++i) a[i] = norm_leaf(x[i]) + norm_leaf(x[i + kHalf]);
  halve<kHalf / 2>(a);
  return a[0];
}

// Norm blocks per task of the rank's threads (kernels/cpu/thread_pool.hpp): each block's sum
// is computed alone whichever thread runs it, so the split changes no bit.
constexpr std::size_t kBlocksPerTask = 32;

}  // namespace

double squared_norm(std::span<const float> x, SimdPath path) {
  const std::size_t n = x.size();
  const std::size_t nb = norm_block_count(n);
  if (nb == 0) return 0.0;
  std::vector<double> sums(nb);
  const std::size_t full = n / kNormBlock;
  for_blocks(full, kBlocksPerTask, [&](std::size_t b0, std::size_t b1) {
    detail::dispatch(path, [&]() ZERO_LOOP {
      alignas(64) std::array<double, kHalf> a;
      for (std::size_t b = b0; b < b1; ++b)
        sums[b] = block_sum(x.data() + b * kNormBlock, a.data());
    });
  });
  detail::dispatch(path, [&]() ZERO_LOOP {
    alignas(64) std::array<double, kHalf> a;
    if (full < nb) {  // the last, partial block, zero-padded as the order prescribes
      alignas(64) std::array<float, kNormBlock> tail{};
      std::copy(x.begin() + static_cast<std::ptrdiff_t>(full * kNormBlock), x.end(), tail.begin());
      sums[full] = block_sum(tail.data(), a.data());
    }
    // Step 3: the halving tree over the block sums, skipping absent entries.
    double* __restrict s = sums.data();
    std::size_t c = nb;
    for (std::size_t h = norm_tree_width(nb) / 2; h >= 1; h /= 2) {
      for (std::size_t i = 0; i + h < c; ++i) s[i] = s[i] + s[i + h];
      c = std::min(c, h);
    }
  });
  return sums[0];
}

}  // namespace zero::kernels::cpu
