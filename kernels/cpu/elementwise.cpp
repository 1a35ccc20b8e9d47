// CPU loops of the element-wise kernels (kernels/cpu/elementwise.hpp); the per-element math is
// kernels/elementwise_math.hpp, shared with the CUDA kernels.
#include "kernels/cpu/elementwise.hpp"

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/elementwise_math.hpp"
#include "precision/convert.hpp"
#include "base/error.hpp"

namespace zero::kernels::cpu {
namespace {

void check_same(const char* what, std::size_t a, std::size_t b) {
  if (a != b) throw Error(cat(what, ": spans differ in length (", a, " and ", b, ")"));
}

// fp16 -> float is branchy (subnormals), so GCC will not vectorise it inside the loop: for fp16
// a chunk is first widened with precision/'s bulk convert (bitwise to_float on every path), then
// added. Either way each element gets exactly accumulate_element(acc, g).
constexpr std::size_t kWidenChunk = 2048;

template <class T>
void accumulate_impl(std::span<float> acc_, std::span<const T> g_, SimdPath path) {
  check_same("accumulate", acc_.size(), g_.size());
  const std::size_t n = acc_.size();
  detail::dispatch(path, [&]() ZERO_LOOP {
    float* __restrict acc = acc_.data();
    if constexpr (std::is_same_v<T, fp16>) {
      alignas(64) float wide[kWidenChunk];
      for (std::size_t b = 0; b < n; b += kWidenChunk) {
        const std::size_t len = std::min(n - b, kWidenChunk);
        convert(g_.subspan(b, len), std::span<float>(wide, len), path);
        for (std::size_t i = 0; i < len; ++i) acc[b + i] = accumulate_element(acc[b + i], wide[i]);
      }
    } else {
      const T* __restrict g = g_.data();
      for (std::size_t i = 0; i < n; ++i) acc[i] = accumulate_element(acc[i], g[i]);
    }
  });
}

// Chunked so the inner loop has no exit and vectorises, while a non-finite value near the start
// of a large buffer still ends the scan early.
constexpr std::size_t kFiniteChunk = 4096;

template <class T>
bool all_finite_impl(std::span<const T> x_, SimdPath path) {
  const std::size_t n = x_.size();
  bool ok = true;
  detail::dispatch(path, [&]() ZERO_LOOP {
    const T* __restrict x = x_.data();
    for (std::size_t b = 0; b < n && ok; b += kFiniteChunk) {
      const std::size_t e = std::min(n, b + kFiniteChunk);
      unsigned bad = 0;
      for (std::size_t i = b; i < e; ++i) bad |= !is_finite(x[i]);
      ok = bad == 0;
    }
  });
  return ok;
}

}  // namespace

// Casts are precision/'s bulk conversions (vectorised, bitwise the scalar to_bf16 / to_fp16 /
// to_float that the CUDA kernels call); kept here so kernels/ offers the full set per backend.
void cast(std::span<const float> src, std::span<bf16> dst, SimdPath path) {
  convert(src, dst, path);
}
void cast(std::span<const float> src, std::span<fp16> dst, SimdPath path) {
  convert(src, dst, path);
}
void cast(std::span<const bf16> src, std::span<float> dst, SimdPath path) {
  convert(src, dst, path);
}
void cast(std::span<const fp16> src, std::span<float> dst, SimdPath path) {
  convert(src, dst, path);
}

void accumulate(std::span<float> acc, std::span<const float> g, SimdPath path) {
  accumulate_impl(acc, g, path);
}
void accumulate(std::span<float> acc, std::span<const bf16> g, SimdPath path) {
  accumulate_impl(acc, g, path);
}
void accumulate(std::span<float> acc, std::span<const fp16> g, SimdPath path) {
  accumulate_impl(acc, g, path);
}

bool unscale(std::span<float> x_, float scale, SimdPath path) {
  const std::size_t n = x_.size();
  unsigned bad = 0;
  detail::dispatch(path, [&]() ZERO_LOOP {
    float* __restrict x = x_.data();
    unsigned b = 0;  // a local unsigned, so the vectoriser sees a plain OR-reduction
    for (std::size_t i = 0; i < n; ++i) {
      const float y = unscale_element(x[i], scale);
      x[i] = y;
      b |= !is_finite(y);
    }
    bad = b;
  });
  return bad != 0;
}

bool all_finite(std::span<const float> x, SimdPath path) {
  return all_finite_impl(x, path);
}
bool all_finite(std::span<const bf16> x, SimdPath path) {
  return all_finite_impl(x, path);
}
bool all_finite(std::span<const fp16> x, SimdPath path) {
  return all_finite_impl(x, path);
}

void fill(std::span<float> x, float value) {
  std::fill(x.begin(), x.end(), value);
}
void zero(std::span<float> x) {
  std::fill(x.begin(), x.end(), 0.0f);
}
void zero(std::span<bf16> x) {
  std::fill(x.begin(), x.end(), bf16{});
}
void zero(std::span<fp16> x) {
  std::fill(x.begin(), x.end(), fp16{});
}

}  // namespace zero::kernels::cpu
