// CPU loops of the compressed wire encodings (kernels/cpu/quant.hpp).
#include "kernels/cpu/quant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.hpp"
#include "kernels/quant_math.hpp"

namespace zero::kernels::cpu {

namespace {

std::int64_t blocks_of(std::int64_t n, std::int64_t block) {
  return (n + block - 1) / block;
}
std::int64_t code_bytes(std::int64_t n, int bits) {
  return bits == 8 ? n : (n + 1) / 2;
}
int qmax_of(int bits) {
  if (bits != 8 && bits != 4) throw Error(cat("quantisation to ", bits, " bits: expected 8 or 4"));
  return bits == 8 ? kInt8Max : kInt4Max;
}
void check_payload(std::int64_t n, std::int64_t block, int bits, std::size_t have) {
  if (block < 1) throw Error(cat("quantisation block of ", block, " elements: expected >= 1"));
  const std::int64_t want = quant_payload_bytes(n, block, bits);
  if (static_cast<std::int64_t>(have) != want)
    throw Error(cat("a quantised payload of ", have, " bytes for ", n, " values: expected ", want));
}

// Calls f(i, value) for every element of a payload, in index order.
template <class F>
void for_each_value(std::span<const std::byte> payload, std::int64_t n, std::int64_t block,
                    int bits, F f) {
  check_payload(n, block, bits, payload.size());
  const std::int64_t nb = blocks_of(n, block);
  const std::byte* codes = payload.data() + 4 * nb;
  for (std::int64_t b = 0; b < nb; ++b) {
    float s;
    std::memcpy(&s, payload.data() + 4 * b, 4);
    const std::int64_t end = std::min(n, (b + 1) * block);
    for (std::int64_t i = b * block; i < end; ++i) {
      const auto c = static_cast<std::uint8_t>(codes[bits == 8 ? i : i / 2]);
      const int q = bits == 8 ? static_cast<int>(static_cast<std::int8_t>(c))
                              : from_nibble(i % 2 == 0 ? c : static_cast<std::uint8_t>(c >> 4));
      f(i, dequantize_element(q, s));
    }
  }
}

}  // namespace

std::int64_t quant_payload_bytes(std::int64_t n, std::int64_t block, int bits) {
  qmax_of(bits);
  return (4 * blocks_of(n, block) + code_bytes(n, bits) + 3) / 4 * 4;
}

void quantize_blocks(std::span<const float> x, std::int64_t block, int bits,
                     std::span<std::byte> payload) {
  const auto n = static_cast<std::int64_t>(x.size());
  check_payload(n, block, bits, payload.size());
  const int qmax = qmax_of(bits);
  std::fill(payload.begin(), payload.end(), std::byte{0});
  const std::int64_t nb = blocks_of(n, block);
  std::byte* codes = payload.data() + 4 * nb;
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int64_t begin = b * block, end = std::min(n, begin + block);
    float m = 0.0f;
    for (std::int64_t i = begin; i < end; ++i) m = absmax_step(m, x[i]);
    const float s = quant_scale(m, qmax);
    std::memcpy(payload.data() + 4 * b, &s, 4);
    for (std::int64_t i = begin; i < end; ++i) {
      const int q = quantize_element(x[i], s, qmax);
      if (bits == 8)
        codes[i] = static_cast<std::byte>(static_cast<std::uint8_t>(static_cast<std::int8_t>(q)));
      else
        codes[i / 2] |= static_cast<std::byte>(nibble_of(q) << (i % 2 == 0 ? 0 : 4));
    }
  }
}

void dequantize_add(std::span<const std::byte> payload, std::int64_t block, int bits,
                    std::span<float> acc) {
  for_each_value(payload, static_cast<std::int64_t>(acc.size()), block, bits,
                 [&](std::int64_t i, float v) { acc[i] += v; });
}

void dequantize(std::span<const std::byte> payload, std::int64_t block, int bits,
                std::span<float> out) {
  for_each_value(payload, static_cast<std::int64_t>(out.size()), block, bits,
                 [&](std::int64_t i, float v) { out[i] = v; });
}

std::int64_t topk_count(std::int64_t n, double ratio) {
  if (n <= 0) return 0;
  const auto k = static_cast<std::int64_t>(std::ceil(ratio * static_cast<double>(n)));
  return std::clamp<std::int64_t>(k, 1, n);
}

void topk_select(std::span<float> v, std::int64_t k, std::span<std::uint32_t> scratch,
                 std::span<std::byte> payload) {
  const auto n = static_cast<std::int64_t>(v.size());
  if (k < 0 || k > n || static_cast<std::int64_t>(scratch.size()) < n ||
      static_cast<std::int64_t>(payload.size()) != topk_payload_bytes(k))
    throw Error(cat("TopK of ", k, " from ", n, " values with ", scratch.size(),
                    " scratch indices and a ", payload.size(), "-byte payload: sizes disagree"));
  std::span<std::uint32_t> idx = scratch.first(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) idx[i] = static_cast<std::uint32_t>(i);
  // A strict total order (key, then index): the kept set is the same whatever the algorithm.
  auto before = [&](std::uint32_t a, std::uint32_t b) {
    const std::uint32_t ka = topk_key(v[a]), kb = topk_key(v[b]);
    return ka != kb ? ka > kb : a < b;
  };
  if (k < n) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), before);
  std::sort(idx.begin(), idx.begin() + k);
  std::byte* vals = payload.data() + 4 * k;
  for (std::int64_t j = 0; j < k; ++j) {
    std::memcpy(payload.data() + 4 * j, &idx[j], 4);
    std::memcpy(vals + 4 * j, &v[idx[j]], 4);
    v[idx[j]] = 0.0f;
  }
}

void topk_add(std::span<const std::byte> payload, std::int64_t k, std::span<float> acc) {
  if (static_cast<std::int64_t>(payload.size()) != topk_payload_bytes(k))
    throw Error(cat("a TopK payload of ", payload.size(), " bytes for ", k, " pairs: expected ",
                    topk_payload_bytes(k)));
  const std::byte* vals = payload.data() + 4 * k;
  for (std::int64_t j = 0; j < k; ++j) {
    std::uint32_t i;
    float x;
    std::memcpy(&i, payload.data() + 4 * j, 4);
    std::memcpy(&x, vals + 4 * j, 4);
    if (i >= acc.size()) throw Error(cat("a TopK index ", i, " past a segment of ", acc.size()));
    acc[i] += x;
  }
}

}  // namespace zero::kernels::cpu
