// Instantiates reduce_chunk for every supported (input, output, op) combination.
#include "comm/reduce_math.hpp"

namespace zero::comm::detail {
namespace {

template <DType In, DType Out>
ReduceFn pick(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return &reduce_chunk<In, Out, ReduceOp::sum>;
    case ReduceOp::max:
      return &reduce_chunk<In, Out, ReduceOp::max>;
    case ReduceOp::avg:
      if constexpr (is_floating(In)) return &reduce_chunk<In, Out, ReduceOp::avg>;
      return nullptr;  // an integer average would have to round; say so instead
  }
  return nullptr;
}

}  // namespace

ReduceFn reduce_fn(DType in, DType out, ReduceOp op) {
  if (in == out) {
    switch (in) {
      case DType::f32:
        return pick<DType::f32, DType::f32>(op);
      case DType::f64:
        return pick<DType::f64, DType::f64>(op);
      case DType::bf16:
        return pick<DType::bf16, DType::bf16>(op);
      case DType::f16:
        return pick<DType::f16, DType::f16>(op);
      case DType::i32:
        return pick<DType::i32, DType::i32>(op);
      case DType::i64:
        return pick<DType::i64, DType::i64>(op);
      case DType::u8:
        return pick<DType::u8, DType::u8>(op);
    }
    return nullptr;
  }
  // Widening: 16-bit gradients reduced into an fp32 shard keep the fp32 sum unrounded.
  if (out == DType::f32 && in == DType::bf16) return pick<DType::bf16, DType::f32>(op);
  if (out == DType::f32 && in == DType::f16) return pick<DType::f16, DType::f32>(op);
  return nullptr;
}

std::size_t acc_bytes(DType in) {
  return (in == DType::bf16 || in == DType::f16) ? sizeof(float) : size_of(in);
}

bool out_holds_acc(DType in, DType out) {
  return in == out ? (in != DType::bf16 && in != DType::f16) : out == DType::f32;
}

}  // namespace zero::comm::detail
