// CUDA kernels of the reference MLP's element-wise operations (kernels/cuda/model_ops.hpp); the
// per-element math is kernels/model_math.hpp, the functions the CPU tests check.
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/model_ops.hpp"
#include "kernels/model_math.hpp"

namespace zero::kernels::cuda {
namespace {

constexpr int kVec = 4;  // a float4 per array per vector step
using detail::load_pack;
using detail::Pack;
using detail::store_pack;

struct TanhOp {
  float* x;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    x[i] = tanh_element(x[i]);
    return false;
  }
  __device__ bool vector(std::size_t i) const {
    Pack<float, kVec> X = load_pack<float, kVec>(x + i);
#pragma unroll
    for (int k = 0; k < kVec; ++k) X.v[k] = tanh_element(X.v[k]);
    store_pack(x + i, X);
    return false;
  }
};

struct TanhBackwardOp {
  const float* dprev;
  const float* a;
  float* dz;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    dz[i] = tanh_backward_element(dprev[i], a[i]);
    return false;
  }
  __device__ bool vector(std::size_t i) const {
    const Pack<float, kVec> D = load_pack<float, kVec>(dprev + i);
    const Pack<float, kVec> A = load_pack<float, kVec>(a + i);
    Pack<float, kVec> Z;
#pragma unroll
    for (int k = 0; k < kVec; ++k) Z.v[k] = tanh_backward_element(D.v[k], A.v[k]);
    store_pack(dz + i, Z);
    return false;
  }
};

// dz = out - target (the loss's d, kept in dz until the loss has been summed).
struct DiffOp {
  const float* out;
  const float* target;
  float* dz;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    dz[i] = mse_diff_element(out[i], target[i]);
    return false;
  }
  __device__ bool vector(std::size_t i) const {
    const Pack<float, kVec> O = load_pack<float, kVec>(out + i);
    const Pack<float, kVec> T = load_pack<float, kVec>(target + i);
    Pack<float, kVec> Z;
#pragma unroll
    for (int k = 0; k < kVec; ++k) Z.v[k] = mse_diff_element(O.v[k], T.v[k]);
    store_pack(dz + i, Z);
    return false;
  }
};

// dz = d · grad_scale, in place.
struct GradScaleOp {
  float* dz;
  float scale;
  int* flag = nullptr;
  __device__ bool scalar(std::size_t i) const {
    dz[i] = mse_grad_element(dz[i], scale);
    return false;
  }
  __device__ bool vector(std::size_t i) const {
    Pack<float, kVec> Z = load_pack<float, kVec>(dz + i);
#pragma unroll
    for (int k = 0; k < kVec; ++k) Z.v[k] = mse_grad_element(Z.v[k], scale);
    store_pack(dz + i, Z);
    return false;
  }
};

// The sum of d² becomes the sum of 0.5·d²: exact (model_math.hpp, mse_loss_term).
__global__ void halve_kernel(double* x) {
  *x = 0.5 * *x;
}

// One thread per column, walking the rows in order: the CPU's summation order, and coalesced,
// since neighbouring threads read neighbouring columns of each row. (Parallel only over columns:
// fine for a linear layer's width; a handful of columns over very many rows would be slow.)
__global__ void column_sums_kernel(const float* x, int rows, int cols, float* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const auto c = static_cast<std::size_t>(cols);
  for (std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; j < c;
       j += stride) {
    float s = 0.0f;
    for (int i = 0; i < rows; ++i) s = s + x[static_cast<std::size_t>(i) * c + j];
    out[j] = s;
  }
}

__global__ void broadcast_rows_kernel(const float* row, std::size_t total, std::size_t cols,
                                      float* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += stride)
    out[e] = row[e % cols];
}

void check_matrix(const char* op, const void* in, int rows, int cols, const void* out) {
  if (rows < 0 || cols < 0) throw Error(cat("cuda::", op, ": negative shape ", rows, " x ", cols));
  if (static_cast<long long>(rows) * cols > 0 && (in == nullptr || out == nullptr))
    throw Error(cat("cuda::", op, ": null pointer for a ", rows, " x ", cols, " matrix"));
}

}  // namespace

void tanh_forward(std::span<float> x, StreamRef stream) {
  detail::launch_elementwise<kVec>("tanh_forward kernel", x.size(), {{x.data(), 4}},
                                   TanhOp{x.data()}, stream);
}

void tanh_backward(std::span<const float> dprev, std::span<const float> a, std::span<float> dz,
                   StreamRef stream) {
  if (a.size() != dprev.size() || dz.size() != dprev.size())
    throw Error(cat("cuda::tanh_backward: spans differ in length (dprev ", dprev.size(), ", a ",
                    a.size(), ", dz ", dz.size(), ")"));
  detail::launch_elementwise<kVec>("tanh_backward kernel", dz.size(),
                                   {{dprev.data(), 4}, {a.data(), 4}, {dz.data(), 4}},
                                   TanhBackwardOp{dprev.data(), a.data(), dz.data()}, stream);
}

std::size_t mse_loss_scratch(std::size_t n) {
  return squared_norm_scratch(n);
}

void mse_loss_grad(std::span<const float> out, std::span<const float> target, float grad_scale,
                   std::span<float> dz, double* loss_sum, std::span<double> scratch,
                   StreamRef stream) {
  const std::size_t n = out.size();
  if (target.size() != n || dz.size() != n)
    throw Error(cat("cuda::mse_loss_grad: spans differ in length (out ", n, ", target ",
                    target.size(), ", dz ", dz.size(), ")"));
  if (loss_sum == nullptr) throw Error("cuda::mse_loss_grad: the loss pointer is null");
  if (scratch.size() < mse_loss_scratch(n))
    throw Error(cat("cuda::mse_loss_grad: scratch holds ", scratch.size(), " doubles, ", n,
                    " elements need ", mse_loss_scratch(n), " (mse_loss_scratch)"));
  // Three passes instead of one fused kernel, so that the loss is the deterministic norm tree
  // itself (norm.cu) rather than a second copy of it: d into dz, the fixed-order sum of d², then
  // dz scaled in place. d·grad_scale from the stored float d is what the CPU computes.
  detail::launch_elementwise<kVec>("mse_loss_grad difference kernel", n,
                                   {{out.data(), 4}, {target.data(), 4}, {dz.data(), 4}},
                                   DiffOp{out.data(), target.data(), dz.data()}, stream);
  squared_norm(dz, loss_sum, scratch, stream);
  detail::launch_elementwise<kVec>("mse_loss_grad scale kernel", n, {{dz.data(), 4}},
                                   GradScaleOp{dz.data(), grad_scale}, stream);
  halve_kernel<<<1, 1, 0, detail::native(stream)>>>(loss_sum);
  detail::check_launch("mse_loss_grad halve kernel");
}

void column_sums(const float* x, int rows, int cols, float* out, StreamRef stream) {
  check_matrix("column_sums", x, rows, cols, out);
  if (cols == 0) return;
  if (out == nullptr) throw Error("cuda::column_sums: out is null");
  column_sums_kernel<<<detail::grid_for(static_cast<std::size_t>(cols)), detail::kThreads, 0,
                       detail::native(stream)>>>(x, rows, cols, out);
  detail::check_launch("column_sums kernel");
}

void broadcast_rows(const float* row, int rows, int cols, float* out, StreamRef stream) {
  check_matrix("broadcast_rows", row, rows, cols, out);
  const std::size_t total = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  if (total == 0) return;
  broadcast_rows_kernel<<<detail::grid_for(total), detail::kThreads, 0, detail::native(stream)>>>(
      row, total, static_cast<std::size_t>(cols), out);
  detail::check_launch("broadcast_rows kernel");
}

}  // namespace zero::kernels::cuda
