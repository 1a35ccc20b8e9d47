// CPU loops of the element-wise kernels (kernels/cpu/elementwise.hpp); the per-element math is
// kernels/elementwise_math.hpp, shared with the CUDA kernels.
#include "kernels/cpu/elementwise.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include <atomic>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/elementwise_math.hpp"
#include "precision/convert.hpp"

#include "base/error.hpp"

namespace zero::kernels::cpu {
namespace {

// Elements per block of the fixed partition (kernels/cpu/thread_pool.hpp): 128 KiB of fp32, long
// enough that a block's loop runs at memory speed, short enough that a rank's shard splits.
// Every loop here is element-wise or an order-free reduction (OR, first index), so the blocks
// only decide who computes what, never the result.
constexpr std::size_t kBlock = 32768;

void check_same(const char* what, std::size_t a, std::size_t b) {
  if (a != b) throw Error(cat(what, ": spans differ in length (", a, " and ", b, ")"));
}

// fp16 -> float is branchy (subnormals), so GCC will not vectorise it inside the loop: for fp16
// a chunk is first widened with precision/'s bulk convert (bitwise to_float on every path), then
// added. Either way each element gets exactly accumulate_element(acc, g).
constexpr std::size_t kWidenChunk = 2048;

template <class T>
void accumulate_block(std::span<float> acc_, std::span<const T> g_, SimdPath path) {
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

template <class T>
void accumulate_impl(std::span<float> acc, std::span<const T> g, SimdPath path) {
  check_same("accumulate", acc.size(), g.size());
  for_blocks(acc.size(), kBlock, [&](std::size_t b, std::size_t e) {
    accumulate_block(acc.subspan(b, e - b), g.subspan(b, e - b), path);
  });
}

// Chunked so the inner loop has no exit and vectorises, while a non-finite value near the start
// of a large buffer still ends the scan early.
constexpr std::size_t kFiniteChunk = 4096;

template <class T>
bool all_finite_block(std::span<const T> x_, SimdPath path) {
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

// A block that finds a bad value ends the others' scans at their next block.
template <class T>
bool all_finite_impl(std::span<const T> x, SimdPath path) {
  std::atomic<bool> ok{true};
  for_blocks(x.size(), kBlock, [&](std::size_t b, std::size_t e) {
    if (ok.load(std::memory_order_relaxed) && !all_finite_block(x.subspan(b, e - b), path))
      ok.store(false, std::memory_order_relaxed);
  });
  return ok.load();
}

template <class S, class D>
void cast_impl(std::span<const S> src, std::span<D> dst, SimdPath path) {
  if (src.size() != dst.size()) return convert(src, dst, path);  // which throws its sentence
  for_blocks(src.size(), kBlock, [&](std::size_t b, std::size_t e) {
    convert(src.subspan(b, e - b), dst.subspan(b, e - b), path);
  });
}

bool unscale_block(std::span<float> x_, float scale, SimdPath path) {
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

}  // namespace

// Casts are precision/'s bulk conversions (vectorised, bitwise the scalar to_bf16 / to_fp16 /
// to_float that the CUDA kernels call), split across the rank's threads; kept here so kernels/
// offers the full set per backend.
void cast(std::span<const float> src, std::span<bf16> dst, SimdPath path) {
  cast_impl(src, dst, path);
}
void cast(std::span<const float> src, std::span<fp16> dst, SimdPath path) {
  cast_impl(src, dst, path);
}
void cast(std::span<const bf16> src, std::span<float> dst, SimdPath path) {
  cast_impl(src, dst, path);
}
void cast(std::span<const fp16> src, std::span<float> dst, SimdPath path) {
  cast_impl(src, dst, path);
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

bool unscale(std::span<float> x, float scale, SimdPath path) {
  std::atomic<bool> bad{false};
  for_blocks(x.size(), kBlock, [&](std::size_t b, std::size_t e) {
    if (unscale_block(x.subspan(b, e - b), scale, path)) bad.store(true, std::memory_order_relaxed);
  });
  return bad.load();
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
  for_blocks(x.size(), kBlock, [&](std::size_t b, std::size_t e) {
    std::fill(x.begin() + b, x.begin() + e, value);
  });
}
void zero(std::span<float> x) {
  zero_bytes(x.data(), x.size_bytes());
}
void zero(std::span<bf16> x) {
  zero_bytes(x.data(), x.size_bytes());
}
void zero(std::span<fp16> x) {
  zero_bytes(x.data(), x.size_bytes());
}

// Blocks of kBlock fp32 elements' bytes: a copy is a copy whoever makes which part of it.
void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (dst == src || bytes == 0) return;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for_blocks(bytes, kBlock * sizeof(float), [&](std::size_t b, std::size_t e) {
    std::memcpy(d + b, s + b, e - b);
  });
}
void zero_bytes(void* dst, std::size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  for_blocks(bytes, kBlock * sizeof(float), [&](std::size_t b, std::size_t e) {
    std::memset(d + b, 0, e - b);
  });
}

}  // namespace zero::kernels::cpu
