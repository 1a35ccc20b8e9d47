// The GPT's CPU operations (kernels/cpu/gpt_ops.hpp). GEMMs go to the BLAS (fp32) or to the bf16
// GEMM (bf16 x bf16 -> fp32); the rest are plain loops over kernels/gpt_math.hpp.
#include "kernels/cpu/gpt_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_bf16.hpp"
#include "kernels/cpu/rows.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/gpt_math.hpp"
#include "precision/convert.hpp"

namespace zero::kernels::cpu::gpt {
namespace {

float ld(float x) {
  return x;
}
float ld(bf16 x) {
  return to_float(x);
}
template <class T>
T st(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return to_bf16(x);
}

// The fixed partitions of the rank's threads (kernels/cpu/thread_pool.hpp). Each op below is
// either independent per element, per row or per column, and is split that way: a row's (or
// column's) arithmetic runs on one thread in the order one thread would run it, so the split
// changes no bit. kElems: elements per task, about 64 KiB of fp32.
constexpr std::size_t kElems = 16384;

// Rows [n0, n1) of an N x C op, in blocks of rows that depend on C only.
template <class F>
void for_rows(int N, int C, F&& body) {
  const std::size_t rows = std::max<std::size_t>(1, kElems / static_cast<std::size_t>(std::max(C, 1)));
  for_blocks(static_cast<std::size_t>(N), rows, [&](std::size_t n0, std::size_t n1) {
    body(static_cast<int>(n0), static_cast<int>(n1));
  });
}

// Columns [c0, c1) of an op that sums over rows into C columns: each column's sum runs over the
// rows in order, on one thread. Blocks of 256 columns (a 1 KiB run of each row).
template <class F>
void for_columns(int C, F&& body) {
  for_blocks(static_cast<std::size_t>(C), 256, [&](std::size_t c0, std::size_t c1) {
    body(static_cast<int>(c0), static_cast<int>(c1));
  });
}

// C = alpha · op(A) · op(B) + beta · C on either storage type (fp32 accumulation both ways).
void gemm_t(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) {
  gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm_t(bool ta, bool tb, int m, int n, int k, float alpha, const bf16* a, int lda,
            const bf16* b, int ldb, float beta, float* c, int ldc) {
  gemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// An fp32 gradient as a GEMM operand of type T: itself, or rounded to bf16 in scratch.
template <class T>
const T* as_operand(const float* x, std::size_t n, Scratch& scratch) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    bf16* h = scratch.h(n);
    // precision/'s bulk conversion: bitwise to_bf16, vectorised.
    for_blocks(n, kElems, [&](std::size_t b, std::size_t e) {
      convert(std::span<const float>(x + b, e - b), std::span<bf16>(h + b, e - b));
    });
    return h;
  }
}

}  // namespace

float* Scratch::f(std::size_t n) {
  if (floats.size() < n) floats.resize(n);
  return floats.data();
}
bf16* Scratch::h(std::size_t n) {
  if (halves.size() < n) halves.resize(n);
  return halves.data();
}

template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int N,
                       int seq, int C) {
  for_rows(N, C, [&](int n0, int n1) {
    detail::dispatch(best_path(), [&]() ZERO_LOOP {
      for (int n = n0; n < n1; ++n) {
        const T* e = wte + static_cast<std::int64_t>(tokens[n]) * C;
        const T* p = wpe + static_cast<std::int64_t>(n % seq) * C;
        T* o = out + static_cast<std::int64_t>(n) * C;
        for (int c = 0; c < C; ++c) o[c] = st<T>(ld(e[c]) + ld(p[c]));
      }
    });
  });
}

// Split by columns: rows that share a token (or a position) add into the same row of dwte
// (dwpe), in row order.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                        int N, int seq, int C) {
  for_columns(C, [&](int c0, int c1) {
    detail::dispatch(best_path(), [&]() ZERO_LOOP {
      for (int n = 0; n < N; ++n) {
        const float* __restrict d = dout + static_cast<std::int64_t>(n) * C;
        float* e = dwte + static_cast<std::int64_t>(tokens[n]) * C;
        float* p = dwpe + static_cast<std::int64_t>(n % seq) * C;
        for (int c = c0; c < c1; ++c) e[c] += d[c];
        for (int c = c0; c < c1; ++c) p[c] += d[c];
      }
    });
  });
}

// Per row. The sums are fp32 in column order (GCC keeps an fp32 reduction in order: no
// -ffast-math), so only the element-wise loops vectorise.
template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const float* w,
                       const float* b, int N, int C) {
  for_rows(N, C, [&](int n0, int n1) {
    detail::dispatch(best_path(), [&]() ZERO_LOOP {
      for (int n = n0; n < n1; ++n) {
        const T* x = inp + static_cast<std::int64_t>(n) * C;
        float m = 0;
        for (int c = 0; c < C; ++c) m += ld(x[c]);
        m /= static_cast<float>(C);
        float v = 0;
        for (int c = 0; c < C; ++c) {
          const float d = ld(x[c]) - m;
          v += d * d;
        }
        v /= static_cast<float>(C);
        const float r = 1.0f / std::sqrt(v + kLayerNormEps);
        T* o = out + static_cast<std::int64_t>(n) * C;
        for (int c = 0; c < C; ++c)
          o[c] = st<T>(layernorm_affine(layernorm_normalized(ld(x[c]), m, r), w[c], b[c]));
        mean[n] = m;
        rstd[n] = r;
      }
    });
  });
}

// Two passes with the arithmetic of one: dinp per row (its row sums first), then dw and db per
// column, each column summed over the rows in order.
template <class T>
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const T* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C) {
  for_rows(N, C, [&](int n0, int n1) {
    detail::dispatch(best_path(), [&]() ZERO_LOOP {
      for (int n = n0; n < n1; ++n) {
        const std::int64_t row = static_cast<std::int64_t>(n) * C;
        const T* x = inp + row;
        const float* d = dout + row;
        float sum_dnorm = 0, sum_dnorm_norm = 0;
        for (int c = 0; c < C; ++c) {
          const float norm = layernorm_normalized(ld(x[c]), mean[n], rstd[n]);
          const float dnorm = w[c] * d[c];
          sum_dnorm += dnorm;
          sum_dnorm_norm += dnorm * norm;
        }
        const float mean_dnorm = sum_dnorm / static_cast<float>(C);
        const float mean_dnorm_norm = sum_dnorm_norm / static_cast<float>(C);
        float* __restrict dx = dinp + row;
        for (int c = 0; c < C; ++c) {
          const float norm = layernorm_normalized(ld(x[c]), mean[n], rstd[n]);
          dx[c] += layernorm_input_grad(w[c] * d[c], norm, rstd[n], mean_dnorm, mean_dnorm_norm);
        }
      }
    });
  });
  for_columns(C, [&](int c0, int c1) {
    detail::dispatch(best_path(), [&]() ZERO_LOOP {
      for (int n = 0; n < N; ++n) {
        const std::int64_t row = static_cast<std::int64_t>(n) * C;
        const T* x = inp + row;
        const float* d = dout + row;
        const float mn = mean[n], rs = rstd[n];
        float* __restrict dbp = db;
        float* __restrict dwp = dw;
        for (int c = c0; c < c1; ++c) {
          const float norm = layernorm_normalized(ld(x[c]), mn, rs);
          dbp[c] += d[c];
          dwp[c] += norm * d[c];
        }
      }
    });
  });
}

template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const float* bias, int N, int C, int OC,
                    Scratch& scratch) {
  const std::int64_t count = static_cast<std::int64_t>(N) * OC;
  if constexpr (std::is_same_v<T, float>) {
    for_rows(N, OC, [&](int n0, int n1) {
      for (int n = n0; n < n1; ++n)
        std::memcpy(out + static_cast<std::int64_t>(n) * OC, bias, sizeof(float) * OC);
    });
    gemm_t(false, true, N, OC, C, 1.0f, inp, C, weight, C, 1.0f, out, OC);
  } else {
    float* acc = scratch.f(static_cast<std::size_t>(count));
    gemm_t(false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, acc, OC);
    for_rows(N, OC, [&](int n0, int n1) {
      detail::dispatch(best_path(), [&]() ZERO_LOOP {
        for (int n = n0; n < n1; ++n) {
          const float* __restrict a = acc + static_cast<std::int64_t>(n) * OC;
          T* __restrict o = out + static_cast<std::int64_t>(n) * OC;
          for (int j = 0; j < OC; ++j) o[j] = st<T>(bias[j] + a[j]);
        }
      });
    });
  }
}

template <class T>
void matmul_backward(float* dinp, bool accumulate, float* dweight, float* dbias, const float* dout,
                     const T* inp, const T* weight, int N, int C, int OC, Scratch& scratch) {
  const T* d = as_operand<T>(dout, static_cast<std::size_t>(N) * OC, scratch);
  gemm_t(false, false, N, C, OC, 1.0f, d, OC, weight, C, accumulate ? 1.0f : 0.0f, dinp, C);
  gemm_t(true, false, OC, C, N, 1.0f, d, OC, inp, C, 0.0f, dweight, C);
  std::fill(dbias, dbias + OC, 0.0f);
  for_columns(OC, [&](int o0, int o1) {
    detail::dispatch(best_path(), [&]() ZERO_LOOP {
      float* __restrict db = dbias;
      for (int n = 0; n < N; ++n) {
        const float* __restrict row = dout + static_cast<std::int64_t>(n) * OC;
        for (int o = o0; o < o1; ++o) db[o] += row[o];
      }
    });
  });
}

// The element-wise loops run on the widest SIMD path (kernels/cpu/dispatch.hpp): the same
// source and the same bits on each, since vectorising reorders nothing.
// Element-wise: split in blocks of kElems.
template <class T>
void gelu_forward(T* out, const T* inp, std::int64_t n) {
  for_blocks(static_cast<std::size_t>(n), kElems, [&](std::size_t b, std::size_t e) {
    detail::dispatch(best_path(), [&]() ZERO_LOOP {
      for (std::size_t i = b; i < e; ++i) out[i] = st<T>(gelu_element(ld(inp[i])));
    });
  });
}

template <class T>
void gelu_backward(float* dinp, const T* inp, const float* dout, std::int64_t n) {
  for_blocks(static_cast<std::size_t>(n), kElems, [&](std::size_t b, std::size_t e) {
    detail::dispatch(best_path(), [&]() ZERO_LOOP {
      for (std::size_t i = b; i < e; ++i) dinp[i] = gelu_backward_element(ld(inp[i]), dout[i]);
    });
  });
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, std::int64_t n) {
  for_blocks(static_cast<std::size_t>(n), kElems, [&](std::size_t b0, std::size_t e) {
    detail::dispatch(best_path(), [&]() ZERO_LOOP {
      for (std::size_t i = b0; i < e; ++i) out[i] = st<T>(ld(a[i]) + ld(b[i]));
    });
  });
}

template <class T>
void logits_forward(float* logits, const T* inp, const T* wte, int N, int C, int V) {
  gemm_t(false, true, N, V, C, 1.0f, inp, C, wte, C, 0.0f, logits, V);
}

template <class T>
void logits_backward(float* dinp, float* dwte, const float* dlogits, const T* inp, const T* wte,
                     int N, int C, int V, Scratch& scratch) {
  const T* d = as_operand<T>(dlogits, static_cast<std::size_t>(N) * V, scratch);
  gemm_t(false, false, N, C, V, 1.0f, d, V, wte, C, 0.0f, dinp, C);
  gemm_t(true, false, V, C, N, 1.0f, d, V, inp, C, 0.0f, dwte, C);
}

// The loss takes rows in groups of RowSums::kRows, and exponentiates this many elements of each
// before adding them to its sum (8 rows x 8 KiB stay in the L1 and L2 caches between the two).
// The rows' losses are summed in row order after.
constexpr int kLossChunk = 2048;

double crossentropy_forward_backward(float* logits, const std::int32_t* targets, int N, int V,
                                     float grad_scale) {
  std::vector<double> row_loss(static_cast<std::size_t>(std::max(N, 0)));
  constexpr int kGroup = row_ops::RowSums::kRows;
  for_blocks(static_cast<std::size_t>(std::max(N, 0)), kGroup, [&](std::size_t n0, std::size_t n1) {
    const int count = static_cast<int>(n1 - n0);
    float* row[kGroup];
    float mx[kGroup], logit[kGroup];
    for (int r = 0; r < count; ++r) {
      row[r] = logits + static_cast<std::int64_t>(n0 + r) * V;
      mx[r] = row_ops::max(row[r], V);
      logit[r] = row[r][targets[n0 + r]];
    }
    // e^(x - mx) a chunk at a time, then the chunk added to each row's sum.
    row_ops::RowSums sum(count, row);
    for (int j0 = 0; j0 < V; j0 += kLossChunk) {
      const int j1 = std::min(V, j0 + kLossChunk);
      for (int r = 0; r < count; ++r) row_ops::exp_shifted(row[r] + j0, j1 - j0, mx[r]);
      sum.add(j0, j1);
    }
    for (int r = 0; r < count; ++r) {
      row_loss[n0 + r] =
          static_cast<double>(std::log(sum[r])) + static_cast<double>(mx[r]) - logit[r];
      const float inv = 1.0f / sum[r];
      float* x = row[r];
      detail::dispatch(best_path(), [&]() ZERO_LOOP {
        for (int v = 0; v < V; ++v) x[v] = x[v] * inv * grad_scale;
      });
      x[targets[n0 + r]] -= grad_scale;
    }
  });
  double loss = 0;
  for (const double l : row_loss) loss += l;
  return loss;
}

#define ZERO_GPT_OPS(T)                                                                            \
  template void embedding_forward<T>(T*, const std::int32_t*, const T*, const T*, int, int, int);  \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const float*, const float*,     \
                                     int, int);                                                    \
  template void layernorm_backward<T>(float*, float*, float*, const float*, const T*,              \
                                      const float*, const float*, const float*, int, int);         \
  template void matmul_forward<T>(T*, const T*, const T*, const float*, int, int, int, Scratch&);  \
  template void matmul_backward<T>(float*, bool, float*, float*, const float*, const T*, const T*, \
                                   int, int, int, Scratch&);                                       \
  template void gelu_forward<T>(T*, const T*, std::int64_t);                                       \
  template void gelu_backward<T>(float*, const T*, const float*, std::int64_t);                    \
  template void residual_forward<T>(T*, const T*, const T*, std::int64_t);                         \
  template void logits_forward<T>(float*, const T*, const T*, int, int, int);                      \
  template void logits_backward<T>(float*, float*, const float*, const T*, const T*, int, int,     \
                                   int, Scratch&);
ZERO_GPT_OPS(float)
ZERO_GPT_OPS(bf16)
#undef ZERO_GPT_OPS

}  // namespace zero::kernels::cpu::gpt
