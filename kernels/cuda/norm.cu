// CUDA kernels of the deterministic squared norm (kernels/cuda/kernels.hpp). They walk exactly
// the tree that kernels/norm_order.hpp defines and kernels/cpu/norm.cpp walks, so the result is
// bitwise the CPU's. No float atomics: an atomicAdd order depends on scheduling, a tree does not.
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/norm_order.hpp"

namespace zero::kernels::cuda {
namespace {

// One CUDA block of 256 threads reduces one 1024-element norm block at a time: each thread owns
// leaves t, t+256, t+512, t+768 (coalesced loads), forms the h = 512 and h = 256 levels in
// registers, and the block finishes the tree in shared memory (h = 128 .. 32) and with warp
// shuffles (h = 16 .. 1; lane t adds lane t+h, the same pair as a[i] + a[i+h]).
constexpr int kNormThreads = static_cast<int>(kNormBlock / 4);
static_assert(kNormThreads == 256, "the register levels below assume 1024 = 4 x 256");

__global__ void __launch_bounds__(kNormThreads)
    norm_blocks_kernel(const float* x, std::size_t n, std::size_t nb, double* sums) {
  __shared__ double a[kNormThreads];
  const int t = static_cast<int>(threadIdx.x);
  for (std::size_t b = blockIdx.x; b < nb; b += gridDim.x) {
    const float* xb = x + b * kNormBlock;
    const std::size_t have = n - b * kNormBlock;  // elements present in this block (>= 1)
    // Absent elements are the zero padding; norm_leaf(0) = +0.0, as on the CPU.
    auto leaf = [&](int i) { return static_cast<std::size_t>(i) < have ? norm_leaf(xb[i]) : 0.0; };
    const double lo = leaf(t) + leaf(t + 512);        // a[t]       after h = 512
    const double hi = leaf(t + 256) + leaf(t + 768);  // a[t + 256] after h = 512
    a[t] = lo + hi;                                   // a[t]       after h = 256
    __syncthreads();
#pragma unroll
    for (int h = 128; h >= 32; h /= 2) {
      if (t < h) a[t] = a[t] + a[t + h];
      __syncthreads();
    }
    if (t < 32) {
      double s = a[t];
#pragma unroll
      for (int h = 16; h >= 1; h /= 2) s = s + __shfl_down_sync(0xffffffffu, s, h);
      if (t == 0) sums[b] = s;
    }
    __syncthreads();  // a[] is rewritten by the next norm block
  }
}

// Step 3 of the order, one level over the whole grid: sums[i] += sums[i + h] for i < c - h.
// Used while the live count is large, so the big early levels run at full memory bandwidth.
__global__ void norm_level_kernel(double* sums, std::size_t count, std::size_t h) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
       i + h < count; i += stride)
    sums[i] = sums[i] + sums[i + h];
}

// The remaining levels (live count <= kTailCount) in one block, in shared memory.
constexpr int kTailThreads = 1024;
constexpr std::size_t kTailCount = 4096;  // 32 KiB of doubles: within the default shared limit

__global__ void __launch_bounds__(kTailThreads)
    norm_tail_kernel(const double* sums, std::size_t count, std::size_t width, double* result) {
  __shared__ double a[kTailCount];
  for (std::size_t i = threadIdx.x; i < count; i += blockDim.x) a[i] = sums[i];
  __syncthreads();
  std::size_t c = count;
  for (std::size_t h = width / 2; h >= 1; h /= 2) {
    for (std::size_t i = threadIdx.x; i + h < c; i += blockDim.x) a[i] = a[i] + a[i + h];
    c = c < h ? c : h;
    __syncthreads();
  }
  if (threadIdx.x == 0) *result = count == 0 ? 0.0 : a[0];
}

}  // namespace

std::size_t squared_norm_scratch(std::size_t n) {
  return norm_block_count(n);
}

void squared_norm(std::span<const float> x, double* result, std::span<double> scratch,
                  StreamRef stream) {
  if (result == nullptr) throw Error("cuda::squared_norm: the result pointer is null");
  const std::size_t nb = norm_block_count(x.size());
  if (scratch.size() < nb)
    throw Error(cat("cuda::squared_norm: scratch holds ", scratch.size(), " doubles, ", x.size(),
                    " elements need ", nb, " (squared_norm_scratch)"));
  const cudaStream_t s = detail::native(stream);
  if (nb > 0) {
    int blocks = detail::grid_for(nb * kNormThreads);  // one CUDA block per norm block, capped
    norm_blocks_kernel<<<blocks, kNormThreads, 0, s>>>(x.data(), x.size(), nb, scratch.data());
    detail::check_launch("squared_norm block kernel");
  }
  // Walk the levels of the order exactly as the CPU does; the first ones grid-wide.
  std::size_t c = nb;
  std::size_t h = norm_tree_width(nb) / 2;
  for (; h >= 1 && c > kTailCount; h /= 2) {
    norm_level_kernel<<<detail::grid_for(c - h), detail::kThreads, 0, s>>>(scratch.data(), c, h);
    detail::check_launch("squared_norm level kernel");
    c = c < h ? c : h;
  }
  // Here c <= kTailCount and the remaining tree has width 2h (c <= 2h), or nb was tiny.
  norm_tail_kernel<<<1, kTailThreads, 0, s>>>(scratch.data(), c, nb == 0 ? 1 : 2 * h, result);
  detail::check_launch("squared_norm tail kernel");
}

}  // namespace zero::kernels::cuda
