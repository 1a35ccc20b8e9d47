// CUDA kernels of the GPT's embeddings, LayerNorm and linear layers (kernels/cuda/gpt_ops.hpp;
// the reduction orders: gpt_common.cuh). The per-element math is kernels/gpt_math.hpp's.
#include "kernels/cuda/gpt_common.cuh"

namespace zero::kernels::cuda::gpt {
namespace {

// ---- embeddings ----

template <class T>
__global__ void embedding_forward_kernel(T* out, const std::int32_t* tokens, const T* wte,
                                         const T* wpe, std::size_t total, int seq, int C) {
  const auto c1 = static_cast<std::size_t>(C);
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t n = e / c1, c = e % c1;
    const auto tok = static_cast<std::size_t>(tokens[n]);
    const std::size_t pos = n % static_cast<std::size_t>(seq);
    out[e] = narrow<T>(widen(wte[tok * c1 + c]) + widen(wpe[pos * c1 + c]));
  }
}

__global__ void iota_kernel(std::int32_t* x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = i;
}

// keys: the tokens sorted, rows: their row indices (ascending within a token: the sort is
// stable). A warp at the first position of a token's run owns that token's dwte row and walks
// the run in order, lane l taking channels l, l+32, ...; the other warps have nothing to do.
__global__ void wte_grad_kernel(float* dwte, const float* dout, const std::int32_t* keys,
                                const std::int32_t* rows, int N, int C) {
  const int lane = threadIdx.x % 32;
  const auto c1 = static_cast<std::size_t>(C);
  for (std::size_t i = first_warp(); i < static_cast<std::size_t>(N); i += warp_stride()) {
    const std::int32_t tok = keys[i];
    if (i > 0 && keys[i - 1] == tok) continue;
    std::size_t end = i + 1;
    while (end < static_cast<std::size_t>(N) && keys[end] == tok) ++end;
    float* e = dwte + static_cast<std::size_t>(tok) * c1;
    for (std::size_t c = lane; c < c1; c += 32) {
      float acc = e[c];
      for (std::size_t j = i; j < end; ++j)
        acc = acc + dout[static_cast<std::size_t>(rows[j]) * c1 + c];
      e[c] = acc;
    }
  }
}

// dwpe[p, c] receives rows p, p + seq, p + 2·seq, ... in order: one thread per (p, c).
__global__ void wpe_grad_kernel(float* dwpe, const float* dout, int N, int seq, int C) {
  const std::size_t c1 = static_cast<std::size_t>(C), total = static_cast<std::size_t>(seq) * c1;
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float acc = dwpe[e];
    for (std::size_t n = e / c1; n < static_cast<std::size_t>(N);
         n += static_cast<std::size_t>(seq))
      acc = acc + dout[n * c1 + e % c1];
    dwpe[e] = acc;
  }
}

std::size_t sort_temp_bytes(int N) {
  std::size_t bytes = 0;
  ZERO_CUDA_CHECK_NAMED(
      cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const std::int32_t*>(nullptr),
                                      static_cast<std::int32_t*>(nullptr),
                                      static_cast<const std::int32_t*>(nullptr),
                                      static_cast<std::int32_t*>(nullptr), N),
      "cuda::gpt::embedding_backward: CUB's sort size query");
  return bytes;
}

struct EmbeddingScratch {
  std::int32_t *keys, *rows_in, *rows;
  void* temp;
  std::size_t temp_bytes;
};
EmbeddingScratch embedding_layout(Carver& c, int N) {
  EmbeddingScratch s{};
  const auto n = static_cast<std::size_t>(N);
  s.keys = c.take<std::int32_t>(n);
  s.rows_in = c.take<std::int32_t>(n);
  s.rows = c.take<std::int32_t>(n);
  s.temp_bytes = N > 0 ? sort_temp_bytes(N) : 0;
  s.temp = c.take<char>(s.temp_bytes);
  return s;
}


// ---- column sums in chunks (the note in gpt_common.cuh) ----

__global__ void column_partials_kernel(const float* x, int rows, int cols, float* partial) {
  const auto c1 = static_cast<std::size_t>(cols);
  const std::size_t total = static_cast<std::size_t>(row_chunks(rows)) * c1;
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t k = e / c1, j = e % c1;
    const std::size_t end = min(static_cast<std::size_t>(rows), (k + 1) * kRowChunk);
    float s = 0.0f;
    for (std::size_t i = k * kRowChunk; i < end; ++i) s = s + x[i * c1 + j];
    partial[e] = s;
  }
}

// out[j] = (accumulate ? out[j] : +0) + partial[0][j] + partial[1][j] + ..., in chunk order.
__global__ void finish_columns_kernel(const float* partial, int chunks, int cols, float* out,
                                      bool accumulate) {
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x) {
    float s = accumulate ? out[j] : 0.0f;
    for (int k = 0; k < chunks; ++k) s = s + partial[static_cast<std::size_t>(k) * cols + j];
    out[j] = s;
  }
}

void launch_finish(const float* partial, int rows, int cols, float* out, bool accumulate,
                   StreamRef stream) {
  finish_columns_kernel<<<grid_for(static_cast<std::size_t>(cols)), kThreads, 0, native(stream)>>>(
      partial, row_chunks(rows), cols, out, accumulate);
  detail::check_launch("cuda::gpt column sums kernel");
}

// ---- LayerNorm ----

template <class T>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const float* w,
                             const float* b, int N, int C) {
  const int lane = threadIdx.x % 32;
  const auto c1 = static_cast<std::size_t>(C);
  for (std::size_t n = first_warp(); n < static_cast<std::size_t>(N); n += warp_stride()) {
    const T* x = inp + n * c1;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s = s + widen(x[c]);
    const float m = warp_sum(s) / static_cast<float>(C);
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
      const float d = widen(x[c]) - m;
      v = v + d * d;
    }
    const float r = 1.0f / sqrtf(warp_sum(v) / static_cast<float>(C) + kLayerNormEps);
    T* o = out + n * c1;
    for (int c = lane; c < C; c += 32)
      o[c] = narrow<T>(layernorm_affine(layernorm_normalized(widen(x[c]), m, r), w[c], b[c]));
    if (lane == 0) {
      mean[n] = m;
      rstd[n] = r;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    layernorm_input_grad_kernel(float* dinp, const float* dout, const T* inp, const float* w,
                                const float* mean, const float* rstd, int N, int C) {
  const int lane = threadIdx.x % 32;
  const auto c1 = static_cast<std::size_t>(C);
  for (std::size_t n = first_warp(); n < static_cast<std::size_t>(N); n += warp_stride()) {
    const T* x = inp + n * c1;
    const float* d = dout + n * c1;
    float s1 = 0.0f, s2 = 0.0f;
    for (int c = lane; c < C; c += 32) {
      const float norm = layernorm_normalized(widen(x[c]), mean[n], rstd[n]);
      const float dnorm = w[c] * d[c];
      s1 = s1 + dnorm;
      s2 = s2 + dnorm * norm;
    }
    const float mean_dnorm = warp_sum(s1) / static_cast<float>(C);
    const float mean_dnorm_norm = warp_sum(s2) / static_cast<float>(C);
    float* dx = dinp + n * c1;
    for (int c = lane; c < C; c += 32) {
      const float norm = layernorm_normalized(widen(x[c]), mean[n], rstd[n]);
      dx[c] = dx[c] + layernorm_input_grad(w[c] * d[c], norm, rstd[n], mean_dnorm, mean_dnorm_norm);
    }
  }
}

// Per (row chunk, channel): the chunk's Σ norm·dout and Σ dout, rows in order.
template <class T>
__global__ void layernorm_param_partials_kernel(const float* dout, const T* inp, const float* mean,
                                                const float* rstd, int N, int C, float* pw,
                                                float* pb) {
  const auto c1 = static_cast<std::size_t>(C);
  const std::size_t total = static_cast<std::size_t>(row_chunks(N)) * c1;
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t k = e / c1, c = e % c1;
    const std::size_t end = min(static_cast<std::size_t>(N), (k + 1) * kRowChunk);
    float sw = 0.0f, sb = 0.0f;
    for (std::size_t i = k * kRowChunk; i < end; ++i) {
      const float norm = layernorm_normalized(widen(inp[i * c1 + c]), mean[i], rstd[i]);
      const float d = dout[i * c1 + c];
      sw = sw + norm * d;
      sb = sb + d;
    }
    pw[e] = sw;
    pb[e] = sb;
  }
}

// ---- linear layers ----

// out = bias + acc, rounded once to T (the CPU's bf16 path: the GEMM into fp32, then this).
template <class T>
__global__ void bias_round_kernel(T* out, const float* acc, const float* bias, std::size_t total,
                                  int OC) {
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[e] = narrow<T>(bias != nullptr ? bias[e % static_cast<std::size_t>(OC)] + acc[e] : acc[e]);
}

}  // namespace

// ---- scratch sizes ----

template <class T>
std::size_t matmul_forward_scratch_bytes(int N, int OC) {
  Carver c;
  if (kHalf<T>) c.take<float>(count({N, OC}));
  return c.used();
}
template <class T>
std::size_t matmul_backward_scratch_bytes(int N, int OC) {
  Carver c;
  if (kHalf<T>) c.take<bf16>(count({N, OC}));
  c.take<float>(count({row_chunks(N), OC}));
  return c.used();
}
std::size_t layernorm_backward_scratch_bytes(int N, int C) {
  Carver c;
  c.take<float>(count({row_chunks(N), C}));
  c.take<float>(count({row_chunks(N), C}));
  return c.used();
}
std::size_t embedding_backward_scratch_bytes(int N) {
  Carver c;
  embedding_layout(c, N);
  return c.used();
}

// ---- the ops ----

template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int N,
                       int seq, int C, StreamRef stream) {
  check_dims("embedding_forward", {N, seq, C});
  const std::size_t total = count({N, C});
  if (total == 0) return;
  embedding_forward_kernel<T>
      <<<grid_for(total), kThreads, 0, native(stream)>>>(out, tokens, wte, wpe, total, seq, C);
  detail::check_launch("cuda::gpt::embedding_forward kernel");
}

// Deterministic without float atomics: a stable radix sort of (token, row) (CUB; a few passes
// over 8·N bytes), then one warp per distinct token adding its rows in order, which is the
// CPU's order, so the result is bitwise the CPU's. Cost: the sort, plus the CPU's N·C adds
// spread over (distinct tokens × channels) lanes; the most frequent token's run is the longest
// walk (for a byte-level vocabulary, a few percent of N).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                        int N, int seq, int C, Workspace& ws, StreamRef stream) {
  check_dims("embedding_backward", {N, seq, C});
  if (N == 0 || C == 0) return;
  Carver c(ws.scratch);
  const EmbeddingScratch s = embedding_layout(c, N);
  require_scratch(ws, c, "embedding_backward", "embedding_backward_scratch_bytes");
  const cudaStream_t st = native(stream);
  iota_kernel<<<grid_for(static_cast<std::size_t>(N)), kThreads, 0, st>>>(s.rows_in, N);
  detail::check_launch("cuda::gpt::embedding_backward iota kernel");
  std::size_t temp_bytes = s.temp_bytes;
  ZERO_CUDA_CHECK_NAMED(cub::DeviceRadixSort::SortPairs(s.temp, temp_bytes, tokens, s.keys,
                                                        s.rows_in, s.rows, N, 0, 32, st),
                        "cuda::gpt::embedding_backward sort");
  wte_grad_kernel<<<warp_grid(static_cast<std::size_t>(N)), kThreads, 0, st>>>(dwte, dout, s.keys,
                                                                               s.rows, N, C);
  detail::check_launch("cuda::gpt::embedding_backward wte kernel");
  wpe_grad_kernel<<<grid_for(count({seq, C})), kThreads, 0, st>>>(dwpe, dout, N, seq, C);
  detail::check_launch("cuda::gpt::embedding_backward wpe kernel");
}

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const float* w,
                       const float* b, int N, int C, StreamRef stream) {
  check_dims("layernorm_forward", {N, C});
  if (N == 0) return;
  layernorm_forward_kernel<T>
      <<<warp_grid(static_cast<std::size_t>(N)), kThreads, 0, native(stream)>>>(out, mean, rstd,
                                                                                inp, w, b, N, C);
  detail::check_launch("cuda::gpt::layernorm_forward kernel");
}

template <class T>
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const T* inp,
                        const float* w, const float* mean, const float* rstd, int N, int C,
                        Workspace& ws, StreamRef stream) {
  check_dims("layernorm_backward", {N, C});
  if (N == 0 || C == 0) return;
  Carver c(ws.scratch);
  float* pw = c.take<float>(count({row_chunks(N), C}));
  float* pb = c.take<float>(count({row_chunks(N), C}));
  require_scratch(ws, c, "layernorm_backward", "layernorm_backward_scratch_bytes");
  const cudaStream_t st = native(stream);
  layernorm_input_grad_kernel<T><<<warp_grid(static_cast<std::size_t>(N)), kThreads, 0, st>>>(
      dinp, dout, inp, w, mean, rstd, N, C);
  detail::check_launch("cuda::gpt::layernorm_backward input kernel");
  layernorm_param_partials_kernel<T><<<grid_for(count({row_chunks(N), C})), kThreads, 0, st>>>(
      dout, inp, mean, rstd, N, C, pw, pb);
  detail::check_launch("cuda::gpt::layernorm_backward parameter kernel");
  launch_finish(pw, N, C, dw, true, stream);
  launch_finish(pb, N, C, db, true, stream);
}

template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const float* bias, int N, int C, int OC,
                    Workspace& ws, StreamRef stream) {
  check_dims("matmul_forward", {N, C, OC});
  Carver c(ws.scratch);
  float* acc = kHalf<T> ? c.take<float>(count({N, OC})) : nullptr;
  require_scratch(ws, c, "matmul_forward", "matmul_forward_scratch_bytes");
  GemmContext& g = gemm_of(ws, "matmul_forward");
  if constexpr (kHalf<T>) {
    // Into fp32 and then rounded once with the bias added, as the CPU: cuBLASLt's bf16 output
    // with the bias would round twice wherever the epilogue does not fuse.
    gemm_t(g, false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, acc, OC, nullptr, stream);
    const std::size_t total = count({N, OC});
    if (total == 0) return;
    bias_round_kernel<T>
        <<<grid_for(total), kThreads, 0, native(stream)>>>(out, acc, bias, total, OC);
    detail::check_launch("cuda::gpt::matmul_forward bias kernel");
  } else {
    (void)acc;
    gemm_t(g, false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC, bias, stream);
  }
}

template <class T>
void matmul_backward(float* dinp, bool accumulate, float* dweight, float* dbias, const float* dout,
                     const T* inp, const T* weight, int N, int C, int OC, Workspace& ws,
                     StreamRef stream) {
  check_dims("matmul_backward", {N, C, OC});
  Carver c(ws.scratch);
  bf16* half = kHalf<T> ? c.take<bf16>(count({N, OC})) : nullptr;
  float* partial = c.take<float>(count({row_chunks(N), OC}));
  require_scratch(ws, c, "matmul_backward", "matmul_backward_scratch_bytes");
  GemmContext& g = gemm_of(ws, "matmul_backward");
  const T* d = as_operand<T>(dout, count({N, OC}), half, stream);
  gemm_t(g, false, false, N, C, OC, 1.0f, d, OC, weight, C, accumulate ? 1.0f : 0.0f, dinp, C,
         nullptr, stream);
  gemm_t(g, true, false, OC, C, N, 1.0f, d, OC, inp, C, 0.0f, dweight, C, nullptr, stream);
  if (dbias == nullptr || OC == 0) return;
  if (N > 0) {
    column_partials_kernel<<<grid_for(count({row_chunks(N), OC})), kThreads, 0, native(stream)>>>(
        dout, N, OC, partial);
    detail::check_launch("cuda::gpt::matmul_backward bias kernel");
  }
  launch_finish(partial, N, OC, dbias, false, stream);
}

#define ZERO_GPT_CUDA_LAYER_OPS(T)                                                                 \
  template std::size_t matmul_forward_scratch_bytes<T>(int, int);                                  \
  template std::size_t matmul_backward_scratch_bytes<T>(int, int);                                 \
  template void embedding_forward<T>(T*, const std::int32_t*, const T*, const T*, int, int, int,   \
                                     StreamRef);                                                   \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const float*, const float*,     \
                                     int, int, StreamRef);                                         \
  template void layernorm_backward<T>(float*, float*, float*, const float*, const T*,              \
                                      const float*, const float*, const float*, int, int,          \
                                      Workspace&, StreamRef);                                      \
  template void matmul_forward<T>(T*, const T*, const T*, const float*, int, int, int, Workspace&, \
                                  StreamRef);                                                      \
  template void matmul_backward<T>(float*, bool, float*, float*, const float*, const T*, const T*, \
                                   int, int, int, Workspace&, StreamRef);
ZERO_GPT_CUDA_LAYER_OPS(float)
ZERO_GPT_CUDA_LAYER_OPS(bf16)
#undef ZERO_GPT_CUDA_LAYER_OPS

}  // namespace zero::kernels::cuda::gpt
