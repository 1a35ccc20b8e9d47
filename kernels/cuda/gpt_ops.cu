// CUDA kernels of the GPT's operations (kernels/cuda/gpt_ops.hpp). The per-element math is
// kernels/gpt_math.hpp's (the CPU tests check it); GEMMs go to cuBLASLt (kernels/cuda/gemm.hpp).
//
// Note: reduction orders. Every reduction has one fixed order, independent of scheduling (no
// float atomics), so a second run gives the same bits. Where it differs from the CPU loop's:
//  - a row (LayerNorm statistics and its backward's two sums, attention's softmax and its
//    backward's dot product): one warp per row; lane l adds elements l, l+32, l+64, ... in turn,
//    then the 32 lane sums meet in a butterfly (offsets 16, 8, 4, 2, 1). The CPU adds left to
//    right. Cross-entropy's rows (V wide) take a block: the same per thread, then a butterfly
//    within each warp and one over the warps' sums.
//  - columns (the bias gradient Σ_n dout[n, :], LayerNorm's dw and db): rows cut into chunks of
//    kRowChunk; each chunk summed in row order from +0, then the chunk sums added in chunk order
//    onto the old value (LayerNorm's, which accumulates) or onto +0 (the bias's). The CPU adds
//    every row in order. Chunks give N/kRowChunk-fold parallelism where one thread per column
//    (model_ops' column_sums, the CPU's order) would walk all N rows alone.
//  - the loss: each row's term as the CPU forms it, summed in double in row order, as the CPU.
// Maxima are exact in any order. FMA contraction is off for every .cu file (-fmad=false, root
// meson.build), so a·b + c rounds twice here as it does in the CPU loops.
#include <cub/device/device_radix_sort.cuh>

#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/gpt_ops.hpp"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/elementwise_math.hpp"
#include "kernels/gpt_math.hpp"

namespace zero::kernels::cuda::gpt {
namespace {

using detail::grid_for;
using detail::kThreads;
using detail::load_pack;
using detail::native;
using detail::Pack;
using detail::store_pack;

constexpr int kVec = 4;        // elements per vector step of the element-wise ops
constexpr int kRowChunk = 32;  // rows per partial sum of a column reduction
constexpr unsigned kFull = 0xffffffffu;
constexpr std::size_t kScratchAlign = 256;

template <class T>
constexpr bool kHalf = std::is_same_v<T, bf16>;

__host__ __device__ constexpr int row_chunks(int rows) {
  return (rows + kRowChunk - 1) / kRowChunk;
}

std::size_t count(std::initializer_list<int> dims) {
  std::size_t n = 1;
  for (int d : dims) n *= static_cast<std::size_t>(d);
  return n;
}

// One op's scratch as consecutive 256-byte-aligned pieces. Without a base it only counts: the
// *_scratch_bytes functions run the very layout the op runs, so the two cannot disagree.
class Carver {
 public:
  explicit Carver(void* base = nullptr) : base_(static_cast<char*>(base)) {}
  template <class U>
  U* take(std::size_t n) {
    const std::size_t at = used_;
    used_ += (n * sizeof(U) + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
    return base_ != nullptr ? reinterpret_cast<U*>(base_ + at) : nullptr;
  }
  std::size_t used() const { return used_; }

 private:
  char* base_;
  std::size_t used_ = 0;
};

void require_scratch(const Workspace& ws, const Carver& c, const char* op, const char* fn) {
  if (c.used() > ws.scratch_bytes || (c.used() > 0 && ws.scratch == nullptr))
    throw Error(cat("cuda::gpt::", op, ": the workspace holds ", ws.scratch_bytes,
                    " scratch bytes; this call needs ", c.used(), " (", fn, ")"));
  if (c.used() > 0 && reinterpret_cast<std::uintptr_t>(ws.scratch) % kScratchAlign != 0)
    throw Error(cat("cuda::gpt::", op, ": the workspace's scratch is not 256-byte aligned"));
}

GemmContext& gemm_of(const Workspace& ws, const char* op) {
  if (ws.gemm == nullptr) throw Error(cat("cuda::gpt::", op, ": the workspace has no GemmContext"));
  return *ws.gemm;
}

void check_dims(const char* op, std::initializer_list<long long> dims) {
  for (long long d : dims)
    if (d < 0) throw Error(cat("cuda::gpt::", op, ": negative size ", d));
}

// C (fp32) = alpha·op(A)·op(B) + beta·C (+ bias) on either storage type, as the CPU's gemm_t.
void gemm_t(GemmContext& g, bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
            int lda, const float* b, int ldb, float beta, float* c, int ldc, const float* bias,
            StreamRef s) {
  cuda::gemm(g, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias, s);
}
void gemm_t(GemmContext& g, bool ta, bool tb, int m, int n, int k, float alpha, const bf16* a,
            int lda, const bf16* b, int ldb, float beta, float* c, int ldc, const float* bias,
            StreamRef s) {
  cuda::gemm(g, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, GemmOut::f32, ldc, bias, s);
}

// The sum (or max) of one value per lane, every lane getting the same bits: at each step lanes
// i and i^o add the same two values (fp32 addition commutes exactly).
__device__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) v = v + __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o >= 1; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
// Over a block (a multiple of 32 threads, at most 1024): each warp's butterfly, then one over
// the warp sums, computed by every warp alike. `red` is 32 floats of shared memory.
__device__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = warp_sum(lane < static_cast<int>(blockDim.x / 32) ? red[lane] : 0.0f);
  __syncthreads();  // red is rewritten by the next reduction
  return v;
}
__device__ float block_max(float v, float* red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_max(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = warp_max(lane < static_cast<int>(blockDim.x / 32) ? red[lane] : -INFINITY);
  __syncthreads();
  return v;
}

// Warp-per-row kernels iterate rows r = this warp, + all warps of the grid, ...; r is the same
// on every lane, so full-mask shuffles inside the loop are safe.
__device__ std::size_t first_warp() {
  return (blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x) / 32;
}
__device__ std::size_t warp_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x / 32;
}
int warp_grid(std::size_t rows) {
  return grid_for(rows * 32);
}

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

// ---- column sums in chunks (see the note at the top) ----

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

// An fp32 gradient as a GEMM operand of type T: itself, or rounded (RNE) into `half`.
template <class T>
const T* as_operand(const float* x, std::size_t n, bf16* half, StreamRef stream) {
  if constexpr (kHalf<T>) {
    cast(std::span<const float>(x, n), std::span<bf16>(half, n), stream);
    return half;
  } else {
    (void)n, (void)half, (void)stream;
    return x;
  }
}

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
std::size_t crossentropy_scratch_bytes(int N) {
  Carver c;
  c.take<double>(static_cast<std::size_t>(N));
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

#define ZERO_GPT_CUDA_OPS(T)                                                                       \
  template std::size_t matmul_forward_scratch_bytes<T>(int, int);                                  \
  template std::size_t matmul_backward_scratch_bytes<T>(int, int);                                 \
  template std::size_t attention_forward_scratch_bytes<T>(int, int);                               \
  template std::size_t attention_backward_scratch_bytes<T>(int, int, int);                         \
  template std::size_t logits_backward_scratch_bytes<T>(int, int);                                 \
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
                                   int, int, int, Workspace&, StreamRef);                          \
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
ZERO_GPT_CUDA_OPS(float)
ZERO_GPT_CUDA_OPS(bf16)
#undef ZERO_GPT_CUDA_OPS

}  // namespace zero::kernels::cuda::gpt
