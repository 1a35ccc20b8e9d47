// Row-major single-precision GEMM on the CPU, a thin wrapper over OpenBLAS, for the reference
// models' linear layers.
#pragma once

#include <cstddef>

#include "kernels/cpu/blas_core.hpp"  // fix_blas_coretype: OpenBLAS's kernels for this CPU

namespace zero::kernels::cpu {

// C = alpha · op(A) · op(B) + beta · C, all row-major; op(X) = Xᵀ when trans_x. op(A) is m×k,
// op(B) is k×n, C is m×n; lda, ldb, ldc are the row strides of A, B, C as stored.
// Throws zero::Error on a negative size or a leading dimension too small for the shape.
// Not bitwise reproducible across BLAS builds or CPU kernels (OpenBLAS picks its micro-kernel
// per CPU); it is used for model math, never for optimizer state.
//
// Threads: the rows of C are cut into the pieces of gemm_row_cuts(m, threads), one a thread of
// the calling thread's pool (kernels/cpu/thread_pool.hpp), and each piece is one
// single-threaded OpenBLAS call. OpenBLAS's own threads would make the bits depend on their
// count; its single-threaded kernels give every block's rows the bits the whole call gives them
// (blocks a multiple of 3 x OpenBLAS's UNROLL_N, which is how it walks the rows itself;
// tests/kernels/test_threads.cpp checks it), so the result is the same at every thread count
// and the same as one call, though the cut depends on the thread count.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// gemm's partition of the m rows of C for `threads` threads: `pieces` pieces (one a thread, fewer
// when m has fewer units), piece p the rows [begin(p), begin(p+1)). Every cut is a multiple of
// kUnit rows (3 x OpenBLAS's UNROLL_N on the x86 cores, 4 or 8), so each piece's rows get the
// bits one whole call gives them; the pieces are as equal as those cuts allow.
struct GemmRowCuts {
  static constexpr std::size_t kUnit = 24;
  std::size_t m = 0, units = 1, pieces = 1;
  std::size_t begin(std::size_t p) const;
};
GemmRowCuts gemm_row_cuts(int m, int threads);

// Rows per block of the bf16 GEMMs' partition through oneDNN (kernels/cpu/gemm_bf16.cpp):
// 96 x ceil(m / 1536), at most 16 blocks. Kept as it is there: whether oneDNN's bits for a
// block equal those of another cut was not measured (no bf16 CPU here).
std::size_t gemm_block_rows(int m);

// The first call also prints one line on stderr when OpenBLAS runs weaker kernels than this CPU
// can (kernels/cpu/blas_core.hpp), unless OPENBLAS_CORETYPE or ZERO_NO_BLAS_FIX was set.

// Threads OpenBLAS may use in this process. gemm() sets 1 on first use unless this was called
// first: ranks are processes sharing the cores, and zero splits its GEMMs across a rank's threads
// itself (above), with OpenBLAS single-threaded in each block.
void set_blas_threads(int threads);

// The threads OpenBLAS's GEMMs run on now, as OpenBLAS answers (openblas_get_num_threads), after
// the one-thread default when nothing was set.
int blas_threads();

}  // namespace zero::kernels::cpu
