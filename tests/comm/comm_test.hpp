// Helpers of the comm tests: communicators with a test-sized timeout, per-rank inputs that every
// rank can regenerate from a seed, and reference arithmetic written independently of comm/
// (rank-order folds in plain C++, fp16 through the compiler's _Float16, bf16 through frexp).
#pragma once

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "base/error.hpp"

namespace zero::comm::test {

// Long enough for an oversubscribed 4-rank run; short, so that a test failing on some ranks only
// (which then skip collectives the others wait in) costs 20 s, not a hang.
inline Options test_options() {
  Options o;
  o.timeout_seconds = 20;
  return o;
}
// 64-byte chunks: a 1000-element block becomes dozens of pipeline steps.
inline Options tiny_chunks() {
  Options o = test_options();
  o.chunk_bytes = 64;
  return o;
}
inline std::unique_ptr<Communicator> world(Options o = test_options()) {
  return make_mpi_communicator(MPI_COMM_WORLD, o);
}

inline std::uint64_t mix(std::uint64_t seed, int rank, std::size_t i) {  // splitmix64
  std::uint64_t z = seed * 0x9e3779b97f4a7c15ull +
                    static_cast<std::uint64_t>(rank) * 0xbf58476d1ce4e5b9ull +
                    static_cast<std::uint64_t>(i) * 0x94d049bb133111ebull + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Reference 16-bit rounding, round-to-nearest-even, by a route other than comm/'s bit tricks.
inline std::uint16_t ref_to_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  if (std::isinf(f) || f == 0.0f)
    return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(f) >> 16);
  int e = 0;
  const double m = std::frexp(static_cast<double>(f), &e);      // f = m 2^e, 0.5 <= |m| < 1
  const double kept = std::nearbyint(std::ldexp(m, 8));         // 8 significant bits, ties even
  const float v = static_cast<float>(std::ldexp(kept, e - 8));  // exact, or inf past the top
  return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16);
}
inline float ref_from_bf16(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}
inline std::uint16_t ref_to_fp16(float f) {
  return std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
}
inline float ref_from_fp16(std::uint16_t h) {
  return static_cast<float>(std::bit_cast<_Float16>(h));
}

// A float with a random 24-bit mantissa and an exponent in [-8, 8): sums of such values depend
// on their order, which is what the rank-order tests need to see.
inline float gen_float(std::uint64_t seed, int rank, std::size_t i) {
  const std::uint64_t h = mix(seed, rank, i);
  const float m = static_cast<float>(h & 0xffffff) * 0x1p-24f;
  const int e = static_cast<int>((h >> 24) % 16) - 8;
  return std::ldexp((h >> 40) & 1 ? -m : m, e);
}

// Rank `rank`'s element i of a test input of type t, as bits.
inline std::uint64_t input_bits(DType t, std::uint64_t seed, int rank, std::size_t i) {
  const std::uint64_t h = mix(seed, rank, i);
  switch (t) {
    case DType::f32:
      return std::bit_cast<std::uint32_t>(gen_float(seed, rank, i));
    case DType::bf16:
      return ref_to_bf16(gen_float(seed, rank, i));
    case DType::f16:
      return ref_to_fp16(gen_float(seed, rank, i));
    case DType::f64: {
      const double m = static_cast<double>(h >> 11) * 0x1p-53;
      return std::bit_cast<std::uint64_t>(std::ldexp(h & 1 ? -m : m, static_cast<int>(h % 16) - 8));
    }
    case DType::i32:
      return static_cast<std::uint32_t>(h);  // full range: sums wrap
    case DType::i64:
      return h;
    case DType::u8:
      return h & 0xff;
  }
  return 0;
}

// A typed buffer of raw bits.
struct Buf {
  DType type = DType::f32;
  std::size_t count = 0;
  std::vector<std::uint64_t> words;  // 8-byte aligned storage
  Buf(DType t, std::size_t n) : type(t), count(n), words((n * size_of(t) + 7) / 8 + 1, 0) {}
  void* data() { return words.data(); }
  const void* data() const { return words.data(); }
  View view() { return View{data(), count, type}; }
  ConstView cview() const { return ConstView{data(), count, type}; }
  std::uint64_t get(std::size_t i) const {
    std::uint64_t v = 0;
    std::memcpy(&v, reinterpret_cast<const std::byte*>(data()) + i * size_of(type), size_of(type));
    return v;
  }
  void set(std::size_t i, std::uint64_t v) {
    std::memcpy(reinterpret_cast<std::byte*>(data()) + i * size_of(type), &v, size_of(type));
  }
  bool operator==(const Buf& o) const {
    return type == o.type && count == o.count &&
           std::memcmp(data(), o.data(), count * size_of(type)) == 0;
  }
};

// Rank `rank`'s input: element i is input_bits(t, seed, rank, first + i).
inline Buf make_input(DType t, std::size_t n, std::uint64_t seed, int rank, std::size_t first = 0) {
  Buf b(t, n);
  for (std::size_t i = 0; i < n; ++i) b.set(i, input_bits(t, seed, rank, first + i));
  return b;
}

inline float ref_load(DType t, std::uint64_t bits) {
  if (t == DType::bf16) return ref_from_bf16(static_cast<std::uint16_t>(bits));
  if (t == DType::f16) return ref_from_fp16(static_cast<std::uint16_t>(bits));
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
}
template <class T>
T ref_max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return a < b ? b : a;
}

// The expected result, as bits of type `out`, of reducing element i of every rank's input over
// ranks 0..N-1 in order: fp32 folds for fp32/bf16/fp16 (fp64 for fp64), one rounding at the end.
inline std::uint64_t expected_bits(DType in, DType out, ReduceOp op, int N, std::uint64_t seed,
                                   std::size_t i) {
  switch (in) {
    case DType::f32:
    case DType::bf16:
    case DType::f16: {
      float acc = ref_load(in, input_bits(in, seed, 0, i));
      for (int k = 1; k < N; ++k) {
        const float x = ref_load(in, input_bits(in, seed, k, i));
        acc = op == ReduceOp::max ? ref_max(acc, x) : acc + x;
      }
      if (op == ReduceOp::avg) acc = acc / static_cast<float>(N);
      if (out == DType::bf16) return ref_to_bf16(acc);
      if (out == DType::f16) return ref_to_fp16(acc);
      return std::bit_cast<std::uint32_t>(acc);
    }
    case DType::f64: {
      double acc = std::bit_cast<double>(input_bits(in, seed, 0, i));
      for (int k = 1; k < N; ++k) {
        const double x = std::bit_cast<double>(input_bits(in, seed, k, i));
        acc = op == ReduceOp::max ? ref_max(acc, x) : acc + x;
      }
      if (op == ReduceOp::avg) acc = acc / N;
      return std::bit_cast<std::uint64_t>(acc);
    }
    case DType::i32: {
      std::uint32_t acc = static_cast<std::uint32_t>(input_bits(in, seed, 0, i));
      for (int k = 1; k < N; ++k) {
        const std::uint32_t x = static_cast<std::uint32_t>(input_bits(in, seed, k, i));
        acc = op == ReduceOp::max
                  ? static_cast<std::uint32_t>(
                        ref_max(static_cast<std::int32_t>(acc), static_cast<std::int32_t>(x)))
                  : acc + x;
      }
      return acc;
    }
    case DType::i64: {
      std::uint64_t acc = input_bits(in, seed, 0, i);
      for (int k = 1; k < N; ++k) {
        const std::uint64_t x = input_bits(in, seed, k, i);
        acc = op == ReduceOp::max
                  ? static_cast<std::uint64_t>(
                        ref_max(static_cast<std::int64_t>(acc), static_cast<std::int64_t>(x)))
                  : acc + x;
      }
      return acc;
    }
    case DType::u8: {
      std::uint8_t acc = static_cast<std::uint8_t>(input_bits(in, seed, 0, i));
      for (int k = 1; k < N; ++k) {
        const auto x = static_cast<std::uint8_t>(input_bits(in, seed, k, i));
        acc = op == ReduceOp::max ? ref_max(acc, x) : static_cast<std::uint8_t>(acc + x);
      }
      return acc;
    }
  }
  return 0;
}

// "" when got[i] == expected_bits(..., first + i) for every i, else the first difference.
inline std::string check_reduced(const Buf& got, DType in, ReduceOp op, int N, std::uint64_t seed,
                                 std::size_t first) {
  for (std::size_t i = 0; i < got.count; ++i) {
    const std::uint64_t want = expected_bits(in, got.type, op, N, seed, first + i);
    if (got.get(i) != want)
      return cat("element ", first + i, ": got bits 0x", std::hex, got.get(i), ", expected 0x",
                 want);
  }
  return {};
}

// The float types and the integer types the reduction tests sweep; (in, out) pairs.
struct Types {
  DType in, out;
};
inline const std::vector<Types>& reduce_types() {
  static const std::vector<Types> t = {{DType::f32, DType::f32}, {DType::bf16, DType::bf16},
                                       {DType::f16, DType::f16}, {DType::bf16, DType::f32},
                                       {DType::f16, DType::f32}, {DType::f64, DType::f64},
                                       {DType::i32, DType::i32}, {DType::i64, DType::i64}};
  return t;
}

}  // namespace zero::comm::test
