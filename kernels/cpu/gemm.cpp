// OpenBLAS wrapper (kernels/cpu/gemm.hpp).
#include "kernels/cpu/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "kernels/cpu/blas_core.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "base/error.hpp"

namespace zero::kernels::cpu {
namespace {

// The thread count is OpenBLAS's own process-wide setting; this flag only makes sure the
// single-thread default is applied once, before the first GEMM, and never over a user's choice.
std::once_flag& threads_once() {
  static std::once_flag flag;
  return flag;
}

// Once per process, before the first GEMM: a program that did not call fix_blas_coretype (or
// whose fix did not take) learns that OpenBLAS runs weaker kernels than the CPU has. Silent when
// the user chose the core (OPENBLAS_CORETYPE) or turned the fix off (ZERO_NO_BLAS_FIX).
void warn_weak_kernels() {
  const BlasCoreStatus s = blas_core_status();
  if (s.warning.empty() || s.source == CoretypeSource::user || s.fix_disabled) return;
  // Every rank of a job runs the same kernels: the first one says it for all.
  for (const char* rank_var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* r = std::getenv(rank_var); r != nullptr && std::strcmp(r, "0") != 0) return;
  const std::string line = "zero: warning: " + s.warning + '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

// rows x cols floats of a matrix with row stride ld set to +0.
void zero_rows(float* c, std::size_t rows, std::size_t cols, int ld) {
  const auto stride = static_cast<std::size_t>(ld);
  if (stride == cols) {
    std::memset(c, 0, sizeof(float) * rows * cols);
    return;
  }
  for (std::size_t r = 0; r < rows; ++r) std::memset(c + r * stride, 0, sizeof(float) * cols);
}

void default_threads() {
  std::call_once(threads_once(), [] {
    openblas_set_num_threads(1);
    warn_weak_kernels();
  });
}

}  // namespace

void set_blas_threads(int threads) {
  if (threads < 1) throw Error(cat("set_blas_threads: need at least 1 thread, got ", threads));
  default_threads();
  openblas_set_num_threads(threads);
}

int blas_threads() {
  default_threads();
  return openblas_get_num_threads();
}

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  if (m < 0 || n < 0 || k < 0) throw Error(cat("gemm: negative size m=", m, " n=", n, " k=", k));
  // Row-major: a stored row holds the columns of the stored matrix.
  const int a_cols = trans_a ? m : k;
  const int b_cols = trans_b ? k : n;
  if (lda < (a_cols > 1 ? a_cols : 1) || ldb < (b_cols > 1 ? b_cols : 1) || ldc < (n > 1 ? n : 1))
    throw Error(cat("gemm: leading dimension too small (lda=", lda, " for ", a_cols,
                    " columns, ldb=", ldb, " for ", b_cols, ", ldc=", ldc, " for ", n, ")"));
  if (m == 0 || n == 0) return;
  default_threads();
  // Inside a task (attention's per-head GEMMs) the pieces would run in order on one thread.
  const GemmRowCuts cuts = gemm_row_cuts(m, in_task() ? 1 : current_threads());
  for_blocks(cuts.pieces, 1, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p) {
      const std::size_t r0 = cuts.begin(p), r1 = cuts.begin(p + 1);
      const float* a = trans_a ? A + r0 : A + r0 * static_cast<std::size_t>(lda);
      float* c = C + r0 * static_cast<std::size_t>(ldc);
      // beta = 0: the piece's rows zeroed here and beta = 1 given, the same sums (OpenBLAS zeroes
      // C, then adds alpha·op(A)·op(B) to it either way), without OpenBLAS's scalar beta pass,
      // which cost 3-5% of a GPT step; the rows are zeroed just before the kernel reads them.
      if (beta == 0.0f) zero_rows(c, r1 - r0, static_cast<std::size_t>(n), ldc);
      cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                  trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(r1 - r0), n, k, alpha, a,
                  lda, B, ldb, beta == 0.0f ? 1.0f : beta, c, ldc);
    }
  });
}

std::size_t gemm_block_rows(int m) {
  constexpr std::size_t kUnit = 96;  // a multiple of GemmRowCuts::kUnit
  const std::size_t units = (static_cast<std::size_t>(m) + kUnit * 16 - 1) / (kUnit * 16);
  return kUnit * std::max<std::size_t>(units, 1);
}

GemmRowCuts gemm_row_cuts(int m, int threads) {
  GemmRowCuts c;
  c.m = static_cast<std::size_t>(std::max(m, 0));
  c.units = std::max<std::size_t>((c.m + GemmRowCuts::kUnit - 1) / GemmRowCuts::kUnit, 1);
  // One piece a thread: each piece packs all of B again (OpenBLAS packs op(B) once per call),
  // which with pieces of 96-128 rows was 6-7% of a gpt-nano step; the pool's threads claim the
  // pieces, so equal pieces give them equal shares.
  c.pieces = std::min(static_cast<std::size_t>(std::max(threads, 1)), c.units);
  return c;
}

std::size_t GemmRowCuts::begin(std::size_t p) const {
  if (p >= pieces) return m;
  return std::min(m, kUnit * ((p * units + pieces / 2) / pieces));
}

}  // namespace zero::kernels::cpu
