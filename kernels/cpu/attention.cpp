// Tiled causal attention on the CPU (kernels/cpu/attention.hpp).
//
// Per (sequence, head), forward walks tiles of query rows [r0, r1): the scores against keys
// 0..r1-1 only (the keys past the tile's last row are masked for every row of it), the softmax of
// each row over its keys 0..t with its exact max, then y = P·v over those keys. Backward first
// takes each row's D_t = Σ_j p·dp as dy_t·o_t, then makes one pass (FlashAttention-2's) over
// tiles of key columns [c0, c1) against query rows c0..T-1 (the rows before c0 see none of these
// keys): the probabilities again from the saved max and 1/sum, dP = dy·vᵀ, dS, then dv and dk
// with each key's sum over its query rows in one GEMM, and dq's share from these keys. The
// GEMMs' shapes differ from the whole-matrix attention's [T, T] ones, and OpenBLAS's kernels give
// the last columns of a call and the chunks of a long sum their own rounding, so results differ
// from it in the last bits; D_t is another order of the same sum, and in bf16 storage reads o
// rounded (bounds: tests/kernels/test_attention.cpp, docs/gpt.md).
#include "kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/rows.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/gpt_math.hpp"

namespace zero::kernels::cpu::gpt {
namespace {

using I = std::int64_t;

// The calling thread's tile scratch, grown to the largest request and kept: the pool's threads
// live as long as the rank, and each pair runs on one thread at a time.
float* thread_scratch(std::size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// d[j] = softmax_input_grad(p[j], d[j], dot) for j < n, vectorised likewise.
void softmax_grad_row(float* d, const float* p, int n, float dot) {
  detail::dispatch(best_path(), [&]() ZERO_LOOP {
    for (int j = 0; j < n; ++j) d[j] = softmax_input_grad(p[j], d[j], dot);
  });
}

// The recomputed probabilities of one row: e^(s - max) · (1/sum) for its n unmasked keys.
void probabilities(float* row, int n, float mx, float inv) {
  row_ops::exp_shifted(row, n, mx);
  row_ops::scale(row, n, inv);
}

// One head of one sequence as fp32 rows: q, k, v with row stride ld.
struct Head {
  const float* q;
  const float* k;
  const float* v;
  int ld;
};

// The stored values themselves (fp32), or this head's columns widened from bf16 (exact) into
// `widened` [T, 3·hs].
template <class T>
Head head_view(const T* seq_qkv, int h, int seq, int C, int hs, float* widened) {
  const int C3 = 3 * C;
  if constexpr (std::is_same_v<T, float>) {
    (void)seq, (void)widened;
    return {seq_qkv + h * hs, seq_qkv + C + h * hs, seq_qkv + 2 * C + h * hs, C3};
  } else {
    for (int t = 0; t < seq; ++t)
      for (int part = 0; part < 3; ++part) {
        const T* src = seq_qkv + static_cast<I>(t) * C3 + part * C + h * hs;
        float* dst = widened + static_cast<I>(t) * 3 * hs + part * hs;
        for (int i = 0; i < hs; ++i) dst[i] = to_float(src[i]);
      }
    return {widened, widened + hs, widened + 2 * hs, 3 * hs};
  }
}

template <class T>
constexpr std::size_t widened_floats(int seq, int hs) {
  return std::is_same_v<T, float> ? 0 : static_cast<std::size_t>(seq) * 3 * hs;
}

// The (sequence, head) pairs as the pool's tasks, one pair per task.
template <class F>
void for_pairs(int B, int NH, F&& body) {
  for_blocks(static_cast<std::size_t>(B) * NH, 1, [&](std::size_t p, std::size_t) {
    body(static_cast<int>(p / NH), static_cast<int>(p % NH));
  });
}

template <class T>
void forward_pair(T* out, float* saved, const T* qkv, int b, int h, int seq, int C, int NH) {
  const int hs = C / NH, R = kAttentionTile;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::size_t wide = widened_floats<T>(seq, hs);
  float* buf = thread_scratch(wide + static_cast<std::size_t>(R) * (seq + hs));
  const Head hd = head_view(qkv + static_cast<I>(b) * seq * 3 * C, h, seq, C, hs, buf);
  float* S = buf + wide;                             // [rows, r1]: scores, then probabilities
  float* y = S + static_cast<std::size_t>(R) * seq;  // [rows, hs] (bf16 storage only)
  float* st = saved + (static_cast<I>(b) * NH + h) * seq * 2;
  for (int r0 = 0; r0 < seq; r0 += R) {
    const int r1 = std::min(seq, r0 + R), rows = r1 - r0;
    gemm(false, true, rows, r1, hs, scale, hd.q + static_cast<I>(r0) * hd.ld, hd.ld, hd.k, hd.ld,
         0.0f, S, r1);
    // Causal softmax of each row t over keys 0..t, rows in groups whose sums run interleaved.
    for (int i0 = 0; i0 < rows; i0 += row_ops::RowSums::kRows) {
      const int count = std::min(row_ops::RowSums::kRows, rows - i0);
      float* row[row_ops::RowSums::kRows];
      for (int i = 0; i < count; ++i) {
        const int t = r0 + i0 + i;
        row[i] = S + static_cast<I>(i0 + i) * r1;
        st[2 * t] = row_ops::max(row[i], t + 1);
        row_ops::exp_shifted(row[i], t + 1, st[2 * t]);
      }
      row_ops::RowSums sum(count, row);
      sum.add(0, r0 + i0 + 1);  // the keys every row of the group has; then each row's own
      for (int i = 1; i < count; ++i) sum.add_row(i, r0 + i0 + 1, r0 + i0 + i + 1);
      for (int i = 0; i < count; ++i) {
        const int t = r0 + i0 + i;
        st[2 * t + 1] = 1.0f / sum[i];
        row_ops::scale(row[i], t + 1, st[2 * t + 1]);
        std::fill(row[i] + t + 1, row[i] + r1, 0.0f);
      }
    }
    T* o = out + (static_cast<I>(b) * seq + r0) * C + h * hs;
    if constexpr (std::is_same_v<T, float>) {
      gemm(false, false, rows, hs, r1, 1.0f, S, r1, hd.v, hd.ld, 0.0f, o, C);
    } else {
      gemm(false, false, rows, hs, r1, 1.0f, S, r1, hd.v, hd.ld, 0.0f, y, hs);
      for (int i = 0; i < rows; ++i)
        for (int c = 0; c < hs; ++c)
          o[static_cast<I>(i) * C + c] = to_bf16(y[static_cast<I>(i) * hs + c]);
    }
  }
}

// Each row's D_t = Σ_j p_tj·dp_tj, taken as dy_t·o_t (the same sum: o_t = Σ_j p_tj·v_j), over the
// head's hs columns in order, eight rows' sums interleaved. o is the forward's output as stored
// (bf16 widened exactly).
template <class T>
void row_dots(float* dots, const float* dy, const T* o, int seq, int hs, int ld, float* widened) {
  constexpr int kRows = row_ops::RowSums::kRows;
  for (int t0 = 0; t0 < seq; t0 += kRows) {
    const int count = std::min(kRows, seq - t0);
    const float* x[kRows];
    const float* y[kRows];
    for (int i = 0; i < count; ++i) {
      const I t = t0 + i;
      x[i] = dy + t * ld;
      if constexpr (std::is_same_v<T, float>) {
        y[i] = o + t * ld;
      } else {
        float* w = widened + static_cast<I>(i) * hs;
        for (int c = 0; c < hs; ++c) w[c] = to_float(o[t * ld + c]);
        y[i] = w;
      }
    }
    row_ops::RowSums dot(count, x, y);
    dot.add_products(0, hs);
    for (int i = 0; i < count; ++i) dots[t0 + i] = dot[i];
  }
}

// Backward in one pass (FlashAttention-2's order), over tiles of key columns [c0, c1) against
// the query rows c0..T-1 that see them: the tile's probabilities from the saved max and 1/sum,
// dP = dy·vᵀ, dS = softmax'(P, dP) with each row's D_t, then dv = Pᵀ·dy and dk = dSᵀ·q·scale
// (each key's sum over its rows in one GEMM), and dq += dS·k·scale, the key tiles added into dq
// in order (the first tile, whose rows are all of them, writes it).
void backward_tiles(float* dq, float* dk, float* dv, const float* dots, const Head& hd,
                    const float* dy, const float* st, int seq, int hs, int ldy, int ldd,
                    float scale, float* P, float* D) {
  const int R = kAttentionTile;
  for (int c0 = 0; c0 < seq; c0 += R) {
    const int c1 = std::min(seq, c0 + R), cols = c1 - c0, rows = seq - c0;
    const float* q = hd.q + static_cast<I>(c0) * hd.ld;
    const float* k = hd.k + static_cast<I>(c0) * hd.ld;
    const float* dyc = dy + static_cast<I>(c0) * ldy;
    gemm(false, true, rows, cols, hs, scale, q, hd.ld, k, hd.ld, 0.0f, P, cols);
    gemm(false, true, rows, cols, hs, 1.0f, dyc, ldy, hd.v + static_cast<I>(c0) * hd.ld, hd.ld,
         0.0f, D, cols);
    for (int i = 0; i < rows; ++i) {
      const int t = c0 + i, n = std::min(cols, i + 1);  // keys c0..t of this tile
      float* p = P + static_cast<I>(i) * cols;
      float* d = D + static_cast<I>(i) * cols;
      probabilities(p, n, st[2 * t], st[2 * t + 1]);
      softmax_grad_row(d, p, n, dots[t]);
      std::fill(p + n, p + cols, 0.0f);
      std::fill(d + n, d + cols, 0.0f);
    }
    gemm(true, false, cols, hs, rows, 1.0f, P, cols, dyc, ldy, 0.0f, dv + static_cast<I>(c0) * ldd,
         ldd);
    gemm(true, false, cols, hs, rows, scale, D, cols, q, hd.ld, 0.0f, dk + static_cast<I>(c0) * ldd,
         ldd);
    gemm(false, false, rows, hs, cols, scale, D, cols, k, hd.ld, c0 == 0 ? 0.0f : 1.0f,
         dq + static_cast<I>(c0) * ldd, ldd);
  }
}

template <class T>
void backward_pair(float* dqkv, const float* dout, const T* qkv, const T* out, const float* saved,
                   int b, int h, int seq, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C, R = kAttentionTile;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::size_t wide = widened_floats<T>(seq, hs), tile = static_cast<std::size_t>(R) * seq;
  const std::size_t rows_wide = std::is_same_v<T, float> ? 0 : row_ops::RowSums::kRows * hs;
  float* buf = thread_scratch(wide + rows_wide + seq + 2 * tile);
  const Head hd = head_view(qkv + static_cast<I>(b) * seq * C3, h, seq, C, hs, buf);
  float* o_rows = buf + wide;  // row_dots' widened rows of o (bf16 storage only)
  float* dots = o_rows + rows_wide;
  float* P = dots + seq;
  float* D = P + tile;
  const I first = static_cast<I>(b) * seq;  // the sequence's first row
  const float* dy = dout + first * C + h * hs;
  const float* st = saved + (static_cast<I>(b) * NH + h) * seq * 2;
  float* d = dqkv + first * C3 + h * hs;
  row_dots(dots, dy, out + first * C + h * hs, seq, hs, C, o_rows);
  backward_tiles(d, d + C, d + 2 * C, dots, hd, dy, st, seq, hs, C, C3, scale, P, D);
}

}  // namespace

std::size_t attention_saved_floats(int B, int NH, int seq) {
  return static_cast<std::size_t>(B) * static_cast<std::size_t>(NH) *
         static_cast<std::size_t>(seq) * 2;
}

template <class T>
void attention_forward(T* out, float* saved, const T* qkv, int B, int seq, int C, int NH) {
  for_pairs(B, NH, [&](int b, int h) { forward_pair(out, saved, qkv, b, h, seq, C, NH); });
}

template <class T>
void attention_backward(float* dqkv, const float* dout, const T* qkv, const T* out,
                        const float* saved, int B, int seq, int C, int NH) {
  for_pairs(B, NH,
            [&](int b, int h) { backward_pair(dqkv, dout, qkv, out, saved, b, h, seq, C, NH); });
}

#define ZERO_ATTENTION(T)                                                                          \
  template void attention_forward<T>(T*, float*, const T*, int, int, int, int);                    \
  template void attention_backward<T>(float*, const float*, const T*, const T*, const float*, int, \
                                      int, int, int);
ZERO_ATTENTION(float)
ZERO_ATTENTION(bf16)
#undef ZERO_ATTENTION

}  // namespace zero::kernels::cpu::gpt
