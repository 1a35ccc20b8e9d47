// The widen backend of the BF16 GEMM (kernels/cpu/gemm_widen.hpp).
#include "kernels/cpu/gemm_widen.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "precision/convert.hpp"

namespace zero::kernels::cpu::detail {

WidenScratch& widen_scratch() {
  thread_local WidenScratch s;
  return s;
}

namespace {

constexpr std::size_t kPanelFloats = std::size_t{1} << 22;

// Converts a rows×cols matrix (row strides ld_src, ld_dst) between bf16 and fp32 on the rank's
// threads, widening or rounding a panel: about 64 Ki elements a task, each row converted alone
// (exactly), so the split changes nothing; rows stored back to back go as one run.
template <class From, class To>
void convert_rows(const From* src, int ld_src, To* dst, int ld_dst, int rows, int cols) {
  const std::size_t per_task = std::max<std::size_t>(1, (std::size_t{1} << 16) / cols);
  for_blocks(static_cast<std::size_t>(rows), per_task, [&](std::size_t r0, std::size_t r1) {
    if (ld_src == cols && ld_dst == cols) {
      const std::size_t b = r0 * cols, len = (r1 - r0) * cols;
      convert(std::span(src + b, len), std::span(dst + b, len));
      return;
    }
    for (std::size_t r = r0; r < r1; ++r)
      convert(std::span(src + r * ld_src, cols), std::span(dst + r * ld_dst, cols));
  });
}

// Widens a stored rows×cols bf16 matrix (row stride ld) into dst, packed (row stride cols).
void widen_packed(const bf16* src, int rows, int cols, int ld, std::vector<float>& dst) {
  float* d = WidenScratch::at_least(dst, static_cast<std::size_t>(rows) * cols);
  convert_rows(src, ld, d, cols, rows, cols);
}

// Panel sizes: k whole up to 8,192 (every GPT-2 shape but the vocabulary's gradient), so each
// element is one sgemm's sum as often as possible; then as many rows and columns as fit. Panels
// are at least 512 wide, well above OpenBLAS's own blocking, so sgemm runs as fast on them.
// With a bf16 C the fp32 C panel (mb×nb) must fit too.
struct Panels {
  int mb, nb, kb;
};
Panels panels(int m, int n, int k, bool c_panel) {
  const auto cap = static_cast<std::int64_t>(kPanelFloats);
  const int kb = static_cast<int>(std::min<std::int64_t>(k, cap / 512));
  const int mb = static_cast<int>(std::min<std::int64_t>(m, cap / kb));
  int nb = static_cast<int>(std::min<std::int64_t>(n, cap / kb));
  if (c_panel) nb = static_cast<int>(std::min<std::int64_t>(nb, cap / mb));
  return {mb, nb, kb};
}

}  // namespace

// C = alpha·op(A)·op(B) + beta·C by panels of C (mb×nb) and of k: each panel of A and B widened
// once per panel of C it meets (once in all when it is the only one), the k-panels after the
// first added with beta = 1. A bf16 C is computed in fp32 panel by panel and rounded once.
template <class Out>
void widen_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* A, int lda,
                const bf16* B, int ldb, float beta, Out* C, int ldc) {
  constexpr bool bf16_out = std::is_same_v<Out, bf16>;
  WidenScratch& s = widen_scratch();
  const Panels p = panels(m, n, k, bf16_out);
  int a_m0 = -1, a_k0 = -1, b_k0 = -1, b_n0 = -1;  // the panels the scratch holds now
  for (int m0 = 0; m0 < m; m0 += p.mb) {
    const int mb = std::min(p.mb, m - m0);
    for (int n0 = 0; n0 < n; n0 += p.nb) {
      const int nb = std::min(p.nb, n - n0);
      Out* c_out = C + static_cast<std::size_t>(m0) * ldc + n0;
      float* c = nullptr;
      int ldc_f = ldc;
      if constexpr (bf16_out) {
        // C's panel in fp32, read only when beta needs it.
        if (beta != 0)
          widen_packed(c_out, mb, nb, ldc, s.c);
        else
          WidenScratch::at_least(s.c, static_cast<std::size_t>(mb) * nb);
        c = s.c.data();
        ldc_f = nb;
      } else {
        c = c_out;
      }
      for (int k0 = 0; k0 < k; k0 += p.kb) {
        const int kb = std::min(p.kb, k - k0);
        // op(A)[m0.., k0..] and op(B)[k0.., n0..] as stored; packed, their row strides are the
        // stored panels' widths.
        if (a_m0 != m0 || a_k0 != k0) {
          if (ta)
            widen_packed(A + static_cast<std::size_t>(k0) * lda + m0, kb, mb, lda, s.a);
          else
            widen_packed(A + static_cast<std::size_t>(m0) * lda + k0, mb, kb, lda, s.a);
          a_m0 = m0;
          a_k0 = k0;
        }
        if (b_k0 != k0 || b_n0 != n0) {
          if (tb)
            widen_packed(B + static_cast<std::size_t>(n0) * ldb + k0, nb, kb, ldb, s.b);
          else
            widen_packed(B + static_cast<std::size_t>(k0) * ldb + n0, kb, nb, ldb, s.b);
          b_k0 = k0;
          b_n0 = n0;
        }
        gemm(ta, tb, mb, nb, kb, alpha, s.a.data(), ta ? mb : kb, s.b.data(), tb ? kb : nb,
             k0 == 0 ? beta : 1.0f, c, ldc_f);
      }
      if constexpr (bf16_out) convert_rows(s.c.data(), nb, c_out, ldc, mb, nb);
    }
  }
}

template void widen_gemm<float>(bool, bool, int, int, int, float, const bf16*, int, const bf16*, int,
                                 float, float*, int);
template void widen_gemm<bf16>(bool, bool, int, int, int, float, const bf16*, int, const bf16*, int,
                                float, bf16*, int);

}  // namespace zero::kernels::cpu::detail
