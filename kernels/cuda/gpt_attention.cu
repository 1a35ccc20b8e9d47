// CUDA kernels of the GPT's attention, element-wise ops, output head and cross-entropy
// (kernels/cuda/gpt_ops.hpp; the reduction orders: gpt_common.cuh). The per-element math is
// kernels/gpt_math.hpp's.
#include "kernels/cuda/gpt_common.cuh"

namespace zero::kernels::cuda::gpt {
namespace {

// ---- attention ----

// Causal softmax over rows of `seq` probabilities; row r is query t = r % seq (rows of one
// sequence's heads are consecutive). The exponent is gpt_math.hpp's exp_element, bitwise the
// CPU's; only the sum's order differs.
__global__ void __launch_bounds__(kThreads)
    softmax_forward_kernel(float* att, std::size_t rows, int seq) {
  const int lane = threadIdx.x % 32;
  for (std::size_t r = first_warp(); r < rows; r += warp_stride()) {
    float* row = att + r * static_cast<std::size_t>(seq);
    const int t = static_cast<int>(r % static_cast<std::size_t>(seq));
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, row[j]);
    mx = warp_max(mx);
    float s = 0.0f;
    for (int j = lane; j <= t; j += 32) {
      const float e = exp_element(row[j] - mx);
      row[j] = e;
      s = s + e;
    }
    const float inv = 1.0f / warp_sum(s);
    for (int j = lane; j < seq; j += 32) row[j] = j <= t ? row[j] * inv : 0.0f;
  }
}

// datt = softmax_input_grad(p, datt, Σ_j p·datt) on the causal part, 0 above it.
__global__ void __launch_bounds__(kThreads)
    softmax_backward_kernel(const float* att, float* datt, std::size_t rows, int seq) {
  const int lane = threadIdx.x % 32;
  for (std::size_t r = first_warp(); r < rows; r += warp_stride()) {
    const float* p = att + r * static_cast<std::size_t>(seq);
    float* d = datt + r * static_cast<std::size_t>(seq);
    const int t = static_cast<int>(r % static_cast<std::size_t>(seq));
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32) dot = dot + p[j] * d[j];
    dot = warp_sum(dot);
    for (int j = lane; j < seq; j += 32) d[j] = j <= t ? softmax_input_grad(p[j], d[j], dot) : 0.0f;
  }
}

struct AttentionScratch {
  float* widened;  // one sequence's q, k, v as fp32 (bf16 mode), else null
  float* y;        // forward: one sequence's output in fp32 (bf16 mode); backward: unused
  float* datt;     // backward: one sequence's datt for every head [NH, T, T]
};
template <class T>
AttentionScratch attention_layout(Carver& c, int seq, int C, int NH, bool backward) {
  AttentionScratch s{};
  s.widened = kHalf<T> ? c.take<float>(count({seq, 3, C})) : nullptr;
  if (!backward) s.y = kHalf<T> ? c.take<float>(count({seq, C})) : nullptr;
  if (backward) s.datt = c.take<float>(count({NH, seq, seq}));
  return s;
}

// One sequence's q, k, v as fp32: the stored values, or widened (exactly) into scratch, so that
// attention's GEMMs are fp32 GEMMs of the same products, as on the CPU.
template <class T>
const float* sequence_qkv(const T* qkv, int seq, int C, float* widened, StreamRef stream) {
  if constexpr (kHalf<T>) {
    const std::size_t n = count({seq, 3, C});
    cast(std::span<const bf16>(qkv, n), std::span<float>(widened, n), stream);
    return widened;
  } else {
    (void)seq, (void)C, (void)widened, (void)stream;
    return qkv;
  }
}

void check_heads(const char* op, int C, int NH) {
  if (NH <= 0 || C % NH != 0)
    throw Error(cat("cuda::gpt::", op, ": ", C, " channels do not split into ", NH, " heads"));
}

// ---- cross-entropy ----

constexpr int kRowThreads = 256;  // one block per row of V logits

__global__ void __launch_bounds__(kRowThreads)
    crossentropy_kernel(float* logits, const std::int32_t* targets, int N, int V, float grad_scale,
                        double* terms) {
  __shared__ float red[32];
  for (std::size_t n = blockIdx.x; n < static_cast<std::size_t>(N); n += gridDim.x) {
    float* row = logits + n * static_cast<std::size_t>(V);
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, row[v]);
    mx = block_max(mx, red);
    float s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s = s + exp_element(row[v] - mx);
    s = block_sum(s, red);
    const int y = targets[n];
    // The CPU's term: log(sum) + mx - logit[y], in double from the float log (CUDA's logf, not
    // the C library's: the one function here that is not bitwise the host's).
    if (threadIdx.x == 0)
      terms[n] =
          static_cast<double>(logf(s)) + static_cast<double>(mx) - static_cast<double>(row[y]);
    __syncthreads();  // row[y] is read above before any thread overwrites it below
    const float inv = 1.0f / s;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
      const float p = exp_element(row[v] - mx) * inv * grad_scale;
      row[v] = v == y ? p - grad_scale : p;
    }
  }
}

// *loss = terms[0] + terms[1] + ... in order, from 0.0 (the CPU's loop). One warp: each round
// loads 32 terms at once and lane j's term is added j-th.
__global__ void loss_sum_kernel(const double* terms, int N, double* loss) {
  const int lane = threadIdx.x;
  double acc = 0.0;
  for (int base = 0; base < N; base += 32) {
    const double t = base + lane < N ? terms[base + lane] : 0.0;
    for (int j = 0; j < 32; ++j) {
      const double tj = __shfl_sync(kFull, t, j);
      if (base + j < N) acc = acc + tj;
    }
  }
  if (lane == 0) *loss = acc;
}

// ---- element-wise ----

template <class T>
struct GeluOp {
  T* out;
  const T* inp;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    out[i] = narrow<T>(gelu_element(widen(inp[i])));
    return false;
  }
  __device__ bool vector(std::size_t i) const {
    const Pack<T, kVec> x = load_pack<T, kVec>(inp + i);
    Pack<T, kVec> y;
#pragma unroll
    for (int k = 0; k < kVec; ++k) y.v[k] = narrow<T>(gelu_element(widen(x.v[k])));
    store_pack(out + i, y);
    return false;
  }
};

template <class T>
struct GeluBackwardOp {
  float* dinp;
  const T* inp;
  const float* dout;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    dinp[i] = gelu_backward_element(widen(inp[i]), dout[i]);
    return false;
  }
  __device__ bool vector(std::size_t i) const {
    const Pack<T, kVec> x = load_pack<T, kVec>(inp + i);
    Pack<float, kVec> d = load_pack<float, kVec>(dout + i);
#pragma unroll
    for (int k = 0; k < kVec; ++k) d.v[k] = gelu_backward_element(widen(x.v[k]), d.v[k]);
    store_pack(dinp + i, d);
    return false;
  }
};

template <class T>
struct ResidualOp {
  T* out;
  const T* a;
  const T* b;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    out[i] = narrow<T>(widen(a[i]) + widen(b[i]));
    return false;
  }
  __device__ bool vector(std::size_t i) const {
    const Pack<T, kVec> x = load_pack<T, kVec>(a + i), y = load_pack<T, kVec>(b + i);
    Pack<T, kVec> z;
#pragma unroll
    for (int k = 0; k < kVec; ++k) z.v[k] = narrow<T>(widen(x.v[k]) + widen(y.v[k]));
    store_pack(out + i, z);
    return false;
  }
};
std::size_t elements(const char* op, std::int64_t n) {
  if (n < 0) throw Error(cat("cuda::gpt::", op, ": negative element count ", n));
  return static_cast<std::size_t>(n);
}

}  // namespace

// ---- scratch sizes ----

template <class T>
std::size_t attention_forward_scratch_bytes(int seq, int C) {
  Carver c;
  attention_layout<T>(c, seq, C, 1, false);
  return c.used();
}
template <class T>
std::size_t attention_backward_scratch_bytes(int seq, int C, int NH) {
  Carver c;
  attention_layout<T>(c, seq, C, NH, true);
  return c.used();
}
template <class T>
std::size_t logits_backward_scratch_bytes(int N, int V) {
  Carver c;
  if (kHalf<T>) c.take<bf16>(count({N, V}));
  return c.used();
}
std::size_t crossentropy_scratch_bytes(int N) {
  Carver c;
  c.take<double>(static_cast<std::size_t>(N));
  return c.used();
}

// ---- the ops ----

// Per sequence: the heads' q·kᵀ GEMMs straight into att, one softmax launch over the
// sequence's NH·T rows, the heads' p·v GEMMs. 2·NH GEMM calls per sequence, each T×T×hs: a
// strided-batched GEMM would make them one call (a wrapper extension, not needed for
// correctness).
template <class T>
void attention_forward(T* out, float* att, const T* qkv, int B, int seq, int C, int NH,
                       Workspace& ws, StreamRef stream) {
  check_dims("attention_forward", {B, seq, C, NH});
  check_heads("attention_forward", C, NH);
  Carver c(ws.scratch);
  const AttentionScratch s = attention_layout<T>(c, seq, C, NH, false);
  require_scratch(ws, c, "attention_forward", "attention_forward_scratch_bytes");
  GemmContext& g = gemm_of(ws, "attention_forward");
  if (seq == 0 || C == 0) return;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const std::size_t tt = count({seq, seq});
  for (int b = 0; b < B; ++b) {
    const float* q = sequence_qkv(qkv + count({b, seq, C3}), seq, C, s.widened, stream);
    float* a = att + count({b, NH}) * tt;
    float* y;
    if constexpr (kHalf<T>)
      y = s.y;
    else
      y = out + count({b, seq, C});
    for (int h = 0; h < NH; ++h)
      gemm_t(g, false, true, seq, seq, hs, scale, q + h * hs, C3, q + C + h * hs, C3, 0.0f,
             a + h * tt, seq, nullptr, stream);
    const std::size_t rows = count({NH, seq});
    softmax_forward_kernel<<<warp_grid(rows), kThreads, 0, native(stream)>>>(a, rows, seq);
    detail::check_launch("cuda::gpt::attention_forward softmax kernel");
    for (int h = 0; h < NH; ++h)
      gemm_t(g, false, false, seq, hs, seq, 1.0f, a + h * tt, seq, q + 2 * C + h * hs, C3, 0.0f,
             y + h * hs, C, nullptr, stream);
    if constexpr (kHalf<T>)
      cast(std::span<const float>(y, count({seq, C})),
           std::span<bf16>(out + count({b, seq, C}), count({seq, C})), stream);
  }
}

template <class T>
void attention_backward(float* dqkv, const float* dout, const T* qkv, const float* att, int B,
                        int seq, int C, int NH, Workspace& ws, StreamRef stream) {
  check_dims("attention_backward", {B, seq, C, NH});
  check_heads("attention_backward", C, NH);
  Carver c(ws.scratch);
  const AttentionScratch s = attention_layout<T>(c, seq, C, NH, true);
  require_scratch(ws, c, "attention_backward", "attention_backward_scratch_bytes");
  GemmContext& g = gemm_of(ws, "attention_backward");
  if (seq == 0 || C == 0) return;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const std::size_t tt = count({seq, seq});
  for (int b = 0; b < B; ++b) {
    const float* q = sequence_qkv(qkv + count({b, seq, C3}), seq, C, s.widened, stream);
    const float* k = q + C;
    const float* v = q + 2 * C;
    const float* a = att + count({b, NH}) * tt;
    const float* dy = dout + count({b, seq, C});
    float* dseq = dqkv + count({b, seq, C3});
    for (int h = 0; h < NH; ++h) {  // datt = dy vᵀ; dv = attᵀ dy
      gemm_t(g, false, true, seq, seq, hs, 1.0f, dy + h * hs, C, v + h * hs, C3, 0.0f,
             s.datt + h * tt, seq, nullptr, stream);
      gemm_t(g, true, false, seq, hs, seq, 1.0f, a + h * tt, seq, dy + h * hs, C, 0.0f,
             dseq + 2 * C + h * hs, C3, nullptr, stream);
    }
    const std::size_t rows = count({NH, seq});
    softmax_backward_kernel<<<warp_grid(rows), kThreads, 0, native(stream)>>>(a, s.datt, rows, seq);
    detail::check_launch("cuda::gpt::attention_backward softmax kernel");
    for (int h = 0; h < NH; ++h) {  // dq = dpre k · scale; dk = dpreᵀ q · scale
      gemm_t(g, false, false, seq, hs, seq, scale, s.datt + h * tt, seq, k + h * hs, C3, 0.0f,
             dseq + h * hs, C3, nullptr, stream);
      gemm_t(g, true, false, seq, hs, seq, scale, s.datt + h * tt, seq, q + h * hs, C3, 0.0f,
             dseq + C + h * hs, C3, nullptr, stream);
    }
  }
}

template <class T>
void gelu_forward(T* out, const T* inp, std::int64_t n, StreamRef stream) {
  detail::launch_elementwise<kVec>("cuda::gpt::gelu_forward kernel", elements("gelu_forward", n),
                                   {{out, sizeof(T)}, {inp, sizeof(T)}}, GeluOp<T>{out, inp},
                                   stream);
}

template <class T>
void gelu_backward(float* dinp, const T* inp, const float* dout, std::int64_t n, StreamRef stream) {
  detail::launch_elementwise<kVec>("cuda::gpt::gelu_backward kernel", elements("gelu_backward", n),
                                   {{dinp, 4}, {inp, sizeof(T)}, {dout, 4}},
                                   GeluBackwardOp<T>{dinp, inp, dout}, stream);
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, std::int64_t n, StreamRef stream) {
  detail::launch_elementwise<kVec>(
      "cuda::gpt::residual_forward kernel", elements("residual_forward", n),
      {{out, sizeof(T)}, {a, sizeof(T)}, {b, sizeof(T)}}, ResidualOp<T>{out, a, b}, stream);
}

template <class T>
void logits_forward(float* logits, const T* inp, const T* wte, int N, int C, int V, Workspace& ws,
                    StreamRef stream) {
  check_dims("logits_forward", {N, C, V});
  gemm_t(gemm_of(ws, "logits_forward"), false, true, N, V, C, 1.0f, inp, C, wte, C, 0.0f, logits, V,
         nullptr, stream);
}

template <class T>
void logits_backward(float* dinp, float* dwte, const float* dlogits, const T* inp, const T* wte,
                     int N, int C, int V, Workspace& ws, StreamRef stream) {
  check_dims("logits_backward", {N, C, V});
  Carver c(ws.scratch);
  bf16* half = kHalf<T> ? c.take<bf16>(count({N, V})) : nullptr;
  require_scratch(ws, c, "logits_backward", "logits_backward_scratch_bytes");
  GemmContext& g = gemm_of(ws, "logits_backward");
  const T* d = as_operand<T>(dlogits, count({N, V}), half, stream);
  gemm_t(g, false, false, N, C, V, 1.0f, d, V, wte, C, 0.0f, dinp, C, nullptr, stream);
  gemm_t(g, true, false, V, C, N, 1.0f, d, V, inp, C, 0.0f, dwte, C, nullptr, stream);
}

void crossentropy_forward_backward(float* logits, const std::int32_t* targets, int N, int V,
                                   float grad_scale, double* loss_sum, Workspace& ws,
                                   StreamRef stream) {
  check_dims("crossentropy_forward_backward", {N, V});
  if (loss_sum == nullptr)
    throw Error("cuda::gpt::crossentropy_forward_backward: loss_sum is null");
  if (N > 0 && V == 0)
    throw Error("cuda::gpt::crossentropy_forward_backward: a row of zero logits has no softmax");
  Carver c(ws.scratch);
  double* terms = c.take<double>(static_cast<std::size_t>(N));
  require_scratch(ws, c, "crossentropy_forward_backward", "crossentropy_scratch_bytes");
  const cudaStream_t st = native(stream);
  if (N > 0) {
    crossentropy_kernel<<<grid_for(count({N, kRowThreads})), kRowThreads, 0, st>>>(
        logits, targets, N, V, grad_scale, terms);
    detail::check_launch("cuda::gpt::crossentropy kernel");
  }
  loss_sum_kernel<<<1, 32, 0, st>>>(terms, N, loss_sum);
  detail::check_launch("cuda::gpt::crossentropy loss kernel");
}

#define ZERO_GPT_CUDA_HEAD_OPS(T)                                                                  \
  template std::size_t attention_forward_scratch_bytes<T>(int, int);                               \
  template std::size_t attention_backward_scratch_bytes<T>(int, int, int);                         \
  template std::size_t logits_backward_scratch_bytes<T>(int, int);                                 \
  template void attention_forward<T>(T*, float*, const T*, int, int, int, int, Workspace&,         \
                                     StreamRef);                                                   \
  template void attention_backward<T>(float*, const float*, const T*, const float*, int, int, int, \
                                      int, Workspace&, StreamRef);                                 \
  template void gelu_forward<T>(T*, const T*, std::int64_t, StreamRef);                            \
  template void gelu_backward<T>(float*, const T*, const float*, std::int64_t, StreamRef);         \
  template void residual_forward<T>(T*, const T*, const T*, std::int64_t, StreamRef);              \
  template void logits_forward<T>(float*, const T*, const T*, int, int, int, Workspace&,           \
                                  StreamRef);                                                      \
  template void logits_backward<T>(float*, float*, const float*, const T*, const T*, int, int,     \
                                   int, Workspace&, StreamRef);
ZERO_GPT_CUDA_HEAD_OPS(float)
ZERO_GPT_CUDA_HEAD_OPS(bf16)
#undef ZERO_GPT_CUDA_HEAD_OPS

}  // namespace zero::kernels::cuda::gpt
