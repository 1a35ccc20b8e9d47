// The arithmetic of the MPI backend's reductions: how each element type is loaded into its
// accumulator, combined in rank order, finished (avg) and stored back, one chunk at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "comm/communicator.hpp"
#include "precision/bf16.hpp"
#include "precision/fp16.hpp"

namespace zero::comm::detail {

// The 16-bit conversions are precision/'s (round-to-nearest-even, the same functions the GPU
// kernels call); these adapters take and return the raw bit patterns that buffers hold.
inline float bf16_to_float(std::uint16_t b) {
  return to_float(bf16{b});
}
inline std::uint16_t float_to_bf16(float f) {
  return to_bf16(f).bits;
}
inline float fp16_to_float(std::uint16_t h) {
  return to_float(fp16{h});
}
inline std::uint16_t float_to_fp16(float f) {
  return to_fp16(f).bits;
}

// Element type D: its storage T and the accumulator Acc its sums run in (fp32 for the 16-bit
// floats and fp32, fp64 for fp64, the type itself for integers).
template <DType D>
struct Elem;
template <>
struct Elem<DType::f32> {
  using T = float;
  using Acc = float;
  static Acc load(T x) { return x; }
  static T store(Acc a) { return a; }
};
template <>
struct Elem<DType::f64> {
  using T = double;
  using Acc = double;
  static Acc load(T x) { return x; }
  static T store(Acc a) { return a; }
};
template <>
struct Elem<DType::bf16> {
  using T = std::uint16_t;
  using Acc = float;
  static Acc load(T x) { return bf16_to_float(x); }
  static T store(Acc a) { return float_to_bf16(a); }
};
template <>
struct Elem<DType::f16> {
  using T = std::uint16_t;
  using Acc = float;
  static Acc load(T x) { return fp16_to_float(x); }
  static T store(Acc a) { return float_to_fp16(a); }
};
template <class I>
struct IntElem {
  using T = I;
  using Acc = I;
  static Acc load(T x) { return x; }
  static T store(Acc a) { return a; }
};
template <>
struct Elem<DType::i32> : IntElem<std::int32_t> {};
template <>
struct Elem<DType::i64> : IntElem<std::int64_t> {};
template <>
struct Elem<DType::u8> : IntElem<std::uint8_t> {};

// One step of the rank-order fold. Integer sums wrap (computed unsigned: no signed overflow UB);
// max propagates NaN from either side.
template <ReduceOp Op, class A>
inline A combine(A a, A b) {
  if constexpr (Op == ReduceOp::max) {
    if constexpr (std::is_floating_point_v<A>)
      return (a > b || a != a) ? a : b;
    else
      return a > b ? a : b;
  } else if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <ReduceOp Op, class A>
inline A finish(A a, A ranks) {
  if constexpr (Op == ReduceOp::avg) return a / ranks;
  return a;
}

// Reduces one chunk of n elements: out[i] = finish(x[0][i] op x[1][i] op ... op x[N-1][i]),
// folded left to right in rank order and rounded once into Out. x[k] is rank k's contribution.
// acc holds the running fold (n accumulators); it may be nullptr when Out's storage is the
// accumulator type and out aliases no input, and then out itself holds the fold.
template <DType In, DType Out, ReduceOp Op>
void reduce_chunk(const void* const* x, int N, void* out_v, void* acc_v, std::size_t n) {
  using I = Elem<In>;
  using O = Elem<Out>;
  using A = typename I::Acc;
  using T = typename I::T;
  using U = typename O::T;
  static_assert(std::is_same_v<A, typename O::Acc>, "in and out must share the accumulator type");
  U* out = static_cast<U*>(out_v);
  const A ranks = static_cast<A>(N);
  auto in = [x](int k) { return static_cast<const T*>(x[k]); };
  if (N == 1) {
    const T* a = in(0);
    for (std::size_t i = 0; i < n; ++i) out[i] = O::store(finish<Op>(I::load(a[i]), ranks));
    return;
  }
  if (N == 2) {  // one pass, no accumulator
    const T* a = in(0);
    const T* b = in(1);
    for (std::size_t i = 0; i < n; ++i)
      out[i] = O::store(finish<Op>(combine<Op>(I::load(a[i]), I::load(b[i])), ranks));
    return;
  }
  A* acc = static_cast<A*>(acc_v);
  if constexpr (std::is_same_v<U, A>) {
    if (acc == nullptr) acc = out;
  }
  if (acc == nullptr) std::abort();  // broken invariant: the caller owes an accumulator here
  {
    const T* a = in(0);
    const T* b = in(1);
    for (std::size_t i = 0; i < n; ++i) acc[i] = combine<Op>(I::load(a[i]), I::load(b[i]));
  }
  for (int k = 2; k < N - 1; ++k) {
    const T* a = in(k);
    for (std::size_t i = 0; i < n; ++i) acc[i] = combine<Op>(acc[i], I::load(a[i]));
  }
  const T* last = in(N - 1);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = O::store(finish<Op>(combine<Op>(acc[i], I::load(last[i])), ranks));
}

// The reduce_chunk instance for (in, out, op), or nullptr when the combination is not supported.
using ReduceFn = void (*)(const void* const* x, int N, void* out, void* acc, std::size_t n);
ReduceFn reduce_fn(DType in, DType out, ReduceOp op);

// Bytes of one accumulator for input type `in` (4 for the 16-bit floats).
std::size_t acc_bytes(DType in);
// Whether out's storage is the accumulator type of `in` (then out can hold the running fold).
bool out_holds_acc(DType in, DType out);

}  // namespace zero::comm::detail
