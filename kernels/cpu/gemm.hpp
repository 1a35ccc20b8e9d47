// Row-major single-precision GEMM on the CPU, a thin wrapper over OpenBLAS, for the reference
// models' linear layers.
#pragma once

#include "kernels/cpu/blas_core.hpp"  // fix_blas_coretype: OpenBLAS's kernels for this CPU

namespace zero::kernels::cpu {

// C = alpha · op(A) · op(B) + beta · C, all row-major; op(X) = Xᵀ when trans_x. op(A) is m×k,
// op(B) is k×n, C is m×n; lda, ldb, ldc are the row strides of A, B, C as stored.
// Throws zero::Error on a negative size or a leading dimension too small for the shape.
// Not bitwise reproducible across BLAS builds or CPU kernels (OpenBLAS picks its micro-kernel
// per CPU); it is used for model math, never for optimizer state.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// The first call also prints one line on stderr when OpenBLAS runs weaker kernels than this CPU
// can (kernels/cpu/blas_core.hpp), unless OPENBLAS_CORETYPE or ZERO_NO_BLAS_FIX was set.

// Threads OpenBLAS may use in this process. gemm() sets 1 on first use unless this was called
// first: ranks are processes sharing the cores, and a BLAS thread pool per rank oversubscribes.
void set_blas_threads(int threads);

}  // namespace zero::kernels::cpu
