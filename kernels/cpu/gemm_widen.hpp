// The widen backend of the BF16 GEMM: bf16 operands widened to fp32 in panels, multiplied by
// OpenBLAS's sgemm (kernels/cpu/gemm.hpp), a bf16 C rounded once per panel. Chosen by
// kernels/cpu/gemm_bf16.cpp where the CPU has no bf16 instructions or oneDNN is absent.
#pragma once

#include <cstddef>
#include <vector>

#include "precision/bf16.hpp"

namespace zero::kernels::cpu::detail {

// Per thread, kept between calls: the trainer calls the same shapes every step. Each operand's
// panel holds at most 16 MiB: a GPT's vocabulary projection (50,257 × 768 weights, 154 MiB
// widened) goes through in panels instead of a copy of the whole matrix. oneDNN's fp32-output
// call widens into the same scratch.
// The buffers only grow: a vector resized down and up again would zero its tail on every
// call (value-initialised floats), a memset on the calling thread alone for bytes that the
// widening overwrites anyway.
struct WidenScratch {
  std::vector<float> a, b, c;
  // The first n floats of v, which holds at least n after the call.
  static float* at_least(std::vector<float>& v, std::size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};
WidenScratch& widen_scratch();

// C = alpha·op(A)·op(B) + beta·C (row-major, as gemm); Out is float or bf16. The arguments are
// checked by the caller.
template <class Out>
void widen_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* A, int lda,
                const bf16* B, int ldb, float beta, Out* C, int ldc);

}  // namespace zero::kernels::cpu::detail
