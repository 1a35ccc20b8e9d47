// Row-major GEMM on the GPU through cuBLASLt, with the semantics of kernels::cpu::gemm: bf16
// inputs with fp32 accumulation (the linear layers of bf16 training) and pedantic fp32.
// Includable by host-compiled code: no CUDA header leaks out (the context is behind a pointer).
#pragma once

#include <cstddef>
#include <memory>

#include "kernels/cuda/device.hpp"
#include "precision/bf16.hpp"

namespace zero::kernels::cuda {

// Owns a cuBLASLt handle, the caller-sized workspace (device memory, on the device current at
// construction) and a cache of the algorithm cuBLASLt's heuristic chose for each (shape,
// transposes, leading dimensions, dtypes, bias, pointer alignments) key: the heuristic runs once
// per key, never on the hot path again.
// Not thread-safe, and one workspace: calls that share a context must be issued on one stream
// (or ordered between streams with Events), or two GEMMs would write the workspace at once.
class GemmContext {
 public:
  explicit GemmContext(std::size_t workspace_bytes = 32u << 20);
  ~GemmContext();
  GemmContext(GemmContext&&) noexcept;
  GemmContext& operator=(GemmContext&&) noexcept;
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  std::size_t workspace_bytes() const;
  std::size_t cached_algorithms() const;  // for tests: how many keys have been planned

  struct Impl;  // opaque (gemm.cu): the handle, the workspace and the plans

 private:
  std::unique_ptr<Impl> impl_;
  friend Impl& impl_of(GemmContext& ctx);  // throws on a moved-from context
};

enum class GemmOut { f32, bf16 };

// Row-major, exactly the semantics of kernels::cpu::gemm: C = alpha·op(A)·op(B) + beta·C,
// op(X) = Xᵀ when trans_x; op(A) m×k, op(B) k×n, C m×n; lda/ldb/ldc row strides as stored.
// bias (nullable, n floats, device) is added to every row of C (the linear layer's bias), fused
// through cuBLASLt's BIAS epilogue when cuBLASLt offers an algorithm for it, else by a separate
// kernel (for a bf16 C that rounds twice: once after the product, once after the bias).
// beta = 0 ignores C's old contents (the BLAS convention). k = 0 gives C = beta·C + bias.
// A, B bf16; fp32 accumulation (CUBLAS_COMPUTE_32F, split-K partial sums kept in fp32 too);
// C either fp32 or bf16 (round to nearest even). All pointers are device memory.
// Only queues work on `stream`; never synchronises the host. Throws zero::Error naming the shape
// on a negative size, a leading dimension too small, a null pointer, or a cuBLASLt failure.
void gemm(GemmContext& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const bf16* A, int lda, const bf16* B, int ldb, float beta, void* C, GemmOut c_type,
          int ldc, const float* bias, StreamRef stream);

// The same with fp32 A, B, C (CUBLAS_COMPUTE_32F, which never uses TF32: only the _FAST_TF32
// compute types do), for fp32 training.
void gemm(GemmContext& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc,
          const float* bias, StreamRef stream);

}  // namespace zero::kernels::cuda
