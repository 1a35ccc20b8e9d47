// What the GPT's CUDA operations (kernels/cuda/gpt_ops.hpp, defined in gpt_ops.cu and
// gpt_attention.cu) share: the scratch carver, the workspace checks, the GEMM on either storage
// type and the warp and block reductions. Internal to kernels/cuda. The per-element math is
// kernels/gpt_math.hpp's (the CPU tests check it); GEMMs go to cuBLASLt (kernels/cuda/gemm.hpp).
//
// Note: reduction orders. Every reduction has one fixed order, independent of scheduling (no
// float atomics), so a second run gives the same bits. Where it differs from the CPU loop's:
//  - a row (LayerNorm statistics and its backward's two sums, attention's softmax and its
//    backward's dot product): one warp per row; lane l adds elements l, l+32, l+64, ... in turn,
//    then the 32 lane sums meet in a butterfly (offsets 16, 8, 4, 2, 1). The CPU adds left to
//    right. Cross-entropy's rows (V wide) take a block: the same per thread, then a butterfly
//    within each warp and one over the warps' sums.
//  - columns (the bias gradient Σ_n dout[n, :], LayerNorm's dw and db): rows cut into chunks of
//    kRowChunk; each chunk summed in row order from +0, then the chunk sums added in chunk order
//    onto the old value (LayerNorm's, which accumulates) or onto +0 (the bias's). The CPU adds
//    every row in order. Chunks give N/kRowChunk-fold parallelism where one thread per column
//    (model_ops' column_sums, the CPU's order) would walk all N rows alone.
//  - the loss: each row's term as the CPU forms it, summed in double in row order, as the CPU.
// Maxima are exact in any order. FMA contraction is off for every .cu file (-fmad=false, root
// meson.build), so a·b + c rounds twice here as it does in the CPU loops.
#pragma once

#include <cub/device/device_radix_sort.cuh>

#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/gpt_ops.hpp"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise_math.hpp"
#include "kernels/gpt_math.hpp"

namespace zero::kernels::cuda::gpt {
namespace {

using detail::grid_for;
using detail::kThreads;
using detail::load_pack;
using detail::native;
using detail::Pack;
using detail::store_pack;

constexpr int kVec = 4;        // elements per vector step of the element-wise ops
constexpr int kRowChunk = 32;  // rows per partial sum of a column reduction
constexpr unsigned kFull = 0xffffffffu;
constexpr std::size_t kScratchAlign = 256;

template <class T>
constexpr bool kHalf = std::is_same_v<T, bf16>;

__host__ __device__ constexpr int row_chunks(int rows) {
  return (rows + kRowChunk - 1) / kRowChunk;
}

inline std::size_t count(std::initializer_list<int> dims) {
  std::size_t n = 1;
  for (int d : dims) n *= static_cast<std::size_t>(d);
  return n;
}

// One op's scratch as consecutive 256-byte-aligned pieces. Without a base it only counts: the
// *_scratch_bytes functions run the very layout the op runs, so the two cannot disagree.
class Carver {
 public:
  explicit Carver(void* base = nullptr) : base_(static_cast<char*>(base)) {}
  template <class U>
  U* take(std::size_t n) {
    const std::size_t at = used_;
    used_ += (n * sizeof(U) + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
    return base_ != nullptr ? reinterpret_cast<U*>(base_ + at) : nullptr;
  }
  std::size_t used() const { return used_; }

 private:
  char* base_;
  std::size_t used_ = 0;
};

inline void require_scratch(const Workspace& ws, const Carver& c, const char* op, const char* fn) {
  if (c.used() > ws.scratch_bytes || (c.used() > 0 && ws.scratch == nullptr))
    throw Error(cat("cuda::gpt::", op, ": the workspace holds ", ws.scratch_bytes,
                    " scratch bytes; this call needs ", c.used(), " (", fn, ")"));
  if (c.used() > 0 && reinterpret_cast<std::uintptr_t>(ws.scratch) % kScratchAlign != 0)
    throw Error(cat("cuda::gpt::", op, ": the workspace's scratch is not 256-byte aligned"));
}

inline GemmContext& gemm_of(const Workspace& ws, const char* op) {
  if (ws.gemm == nullptr) throw Error(cat("cuda::gpt::", op, ": the workspace has no GemmContext"));
  return *ws.gemm;
}

inline void check_dims(const char* op, std::initializer_list<long long> dims) {
  for (long long d : dims)
    if (d < 0) throw Error(cat("cuda::gpt::", op, ": negative size ", d));
}

// C (fp32) = alpha·op(A)·op(B) + beta·C (+ bias) on either storage type, as the CPU's gemm_t.
inline void gemm_t(GemmContext& g, bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
            int lda, const float* b, int ldb, float beta, float* c, int ldc, const float* bias,
            StreamRef s) {
  cuda::gemm(g, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias, s);
}
inline void gemm_t(GemmContext& g, bool ta, bool tb, int m, int n, int k, float alpha, const bf16* a,
            int lda, const bf16* b, int ldb, float beta, float* c, int ldc, const float* bias,
            StreamRef s) {
  cuda::gemm(g, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, GemmOut::f32, ldc, bias, s);
}

// The sum (or max) of one value per lane, every lane getting the same bits: at each step lanes
// i and i^o add the same two values (fp32 addition commutes exactly).
__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) v = v + __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
// Over a block (a multiple of 32 threads, at most 1024): each warp's butterfly, then one over
// the warp sums, computed by every warp alike. `red` is 32 floats of shared memory.
__device__ inline float block_sum(float v, float* red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = warp_sum(lane < static_cast<int>(blockDim.x / 32) ? red[lane] : 0.0f);
  __syncthreads();  // red is rewritten by the next reduction
  return v;
}
__device__ inline float block_max(float v, float* red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_max(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = warp_max(lane < static_cast<int>(blockDim.x / 32) ? red[lane] : -INFINITY);
  __syncthreads();
  return v;
}

// Warp-per-row kernels iterate rows r = this warp, + all warps of the grid, ...; r is the same
// on every lane, so full-mask shuffles inside the loop are safe.
__device__ inline std::size_t first_warp() {
  return (blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x) / 32;
}
__device__ inline std::size_t warp_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x / 32;
}
inline int warp_grid(std::size_t rows) {
  return grid_for(rows * 32);
}

// An fp32 gradient as a GEMM operand of type T: itself, or rounded (RNE) into `half`.
template <class T>
const T* as_operand(const float* x, std::size_t n, bf16* half, StreamRef stream) {
  if constexpr (kHalf<T>) {
    cast(std::span<const float>(x, n), std::span<bf16>(half, n), stream);
    return half;
  } else {
    (void)n, (void)half, (void)stream;
    return x;
  }
}

}  // namespace
}  // namespace zero::kernels::cuda::gpt
