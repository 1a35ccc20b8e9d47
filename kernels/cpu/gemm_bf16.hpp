// Row-major BF16 GEMM on the CPU (bf16 inputs, products accumulated in fp32) for the GPT
// trainer, with two backends behind one function: oneDNN's matmul where this CPU has bf16
// instructions, else the inputs widened to fp32 and OpenBLAS's sgemm (docs/blas.md, "BF16 GEMM").
#pragma once

#include <string>
#include <string_view>

#include "precision/bf16.hpp"

namespace zero::kernels::cpu {

// C = alpha · op(A) · op(B) + beta · C with the conventions of gemm (kernels/cpu/gemm.hpp):
// row-major, op(X) = Xᵀ when trans_x, op(A) m×k, op(B) k×n, C m×n, lda/ldb/ldc the row strides
// as stored. A and B are bf16; every product is exact in fp32 and the sums are fp32, so both
// backends compute the same math and differ only in the order of the sums. beta == 0 never reads
// C (a NaN there does not survive). Throws zero::Error on a negative size, a leading dimension too
// small, or a bad ZERO_GEMM_BF16. Splits across the calling thread's pool as gemm does
// (kernels/cpu/gemm.hpp: fixed blocks of rows, one single-threaded call each; the widen
// backend's conversions in fixed blocks too), so the bits never depend on the thread count.
void gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, float* C, int ldc);

// The same with C in bf16: the fp32 result alpha · op(A) · op(B) + beta · C (C widened exactly)
// is rounded to bf16 once, to nearest even; oneDNN fuses the rounding into its output.
void gemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, bf16* C, int ldc);

enum class GemmBf16Backend {
  onednn,  // dnnl::matmul, bf16 × bf16 -> fp32 (or bf16), one cached primitive per shape
  widen,   // A and B widened to fp32 (precision/convert.hpp) into per-thread scratch, then gemm
};

std::string_view name_of(GemmBf16Backend b);

// Which backend this process runs and why, decided once, at the first call of gemm_bf16 or
// gemm_bf16_info. ZERO_GEMM_BF16=onednn|widen forces one; unset or empty, the rule
// (choose_gemm_bf16) decides.
struct GemmBf16Info {
  GemmBf16Backend backend = GemmBf16Backend::widen;
  std::string name;            // "oneDNN brg:avx512_core_bf16" or "fp32 widen + OpenBLAS Zen"
  std::string reason;          // one sentence: why this backend
  std::string onednn_version;  // e.g. "2.6.3"
  std::string onednn_isa;      // the ISA oneDNN dispatches to here, e.g. "avx2"
  std::string onednn_impl;     // oneDNN's bf16 matmul implementation here; empty when it has none
};

// The threads one oneDNN matmul call runs its parallel regions on, as its runtime reports them
// inside the scope the oneDNN backend sets around each call (OpenBLAS's count, 1 unless a
// program called set_blas_threads), and the runtime's name ("OpenMP" for Debian's oneDNN).
// threads is -1 for a runtime this cannot ask.
struct OnednnThreads {
  int threads = 1;
  std::string runtime;
};
OnednnThreads onednn_threads();

// Throws zero::Error (one sentence) when ZERO_GEMM_BF16 names no backend, or names onednn where
// oneDNN has no bf16 matmul; then gemm_bf16 throws the same.
GemmBf16Info gemm_bf16_info();

// The rule, as a pure function of what the process sees, for tests:
struct OnednnBf16Probe {
  std::string version;       // "2.6.3"
  std::string isa;           // oneDNN's effective ISA, e.g. "avx2", "avx512_core_bf16"
  bool native_bf16 = false;  // that ISA has bf16 dot-product instructions (AVX512-BF16 or AMX)
  std::string impl;          // impl_info_str() of a bf16 matmul; empty when oneDNN creates none
  std::string error;         // why it creates none (oneDNN's words), else empty
};
// oneDNN when `env` is "onednn", or when it is empty and oneDNN runs a bf16 matmul on native bf16
// instructions (not its reference code, which is scalar); the widen backend otherwise. Where the
// ISA has no bf16 instructions oneDNN 2.x either has no bf16 matmul (below AVX-512) or emulates
// one, widening in registers what the widen backend widens once per call (docs/benchmarks.md,
// "BF16 GEMM", measures the choice). `blas_core` names OpenBLAS's kernels in the widen name.
// Throws zero::Error for an unknown `env`, or "onednn" with no oneDNN bf16 matmul.
GemmBf16Info choose_gemm_bf16(std::string_view env, const OnednnBf16Probe& probe,
                              std::string_view blas_core);

// What oneDNN offers on this machine (creates a 128×128×128 bf16 matmul descriptor once).
const OnednnBf16Probe& onednn_bf16_probe();

// Each backend on its own, whatever the process chose, for tests and gemm_bench. Same
// contract as gemm_bf16; gemm_bf16_onednn throws zero::Error where oneDNN has no bf16 matmul,
// and returns the implementation oneDNN ran (impl_info_str(), e.g. "brg:avx512_core_bf16"; empty
// when the shape needed no primitive: m, n or k is 0).
void gemm_bf16_widen(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* A,
                     int lda, const bf16* B, int ldb, float beta, float* C, int ldc);
void gemm_bf16_widen(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const bf16* A,
                     int lda, const bf16* B, int ldb, float beta, bf16* C, int ldc);
std::string gemm_bf16_onednn(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                             const bf16* A, int lda, const bf16* B, int ldb, float beta, float* C,
                             int ldc);
std::string gemm_bf16_onednn(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                             const bf16* A, int lda, const bf16* B, int ldb, float beta, bf16* C,
                             int ldc);
// The oneDNN backend's own code (descriptors, strides, output scale, sum post-op, the cache)
// with fp32 sources: A and B widened as stored, strides kept. It lets a CPU on which oneDNN has
// no bf16 matmul test that code, and measures oneDNN's fp32 kernel. Returns oneDNN's impl, as
// gemm_bf16_onednn does.
std::string gemm_bf16_onednn_f32(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                                 const bf16* A, int lda, const bf16* B, int ldb, float beta,
                                 float* C, int ldc);

}  // namespace zero::kernels::cpu
